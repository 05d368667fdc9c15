"""NKI's direct allocation (``nki.compiler``: tensors the kernel places in SBUF and PSUM
itself) and the calls of the public kernels that use it, in kernels of our own, for trngen's
tests against numpy."""

import functools

import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np
from neuronxcc.nki.language import par_dim


@nki.jit
def doubled_in_two_buffers(x):
    """2 * x, row tile by row tile, each tile a block of one tensor whose blocks take turns
    in two physical tiles (modulo allocation), the last tile masked off where x ends."""
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tiles = (rows + 127) // 128 + 1  # one tile more than x has: masked off
    t = nl.ndarray((tiles, par_dim(128), cols), dtype=x.dtype,
                   buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    ip, jf = nl.mgrid[0:128, 0:cols]
    for i in nl.affine_range(tiles):
        t[i, ip, jf] = nl.load(x[i * 128 + ip, jf], mask=(i * 128 < rows))
        t[i, ip, jf] = nl.multiply(t[i, ip, jf], 2.0, mask=(i * 128 < rows))
        nl.store(out[i * 128 + ip, jf], value=t[i], mask=(i * 128 < rows))
    return out


auto_doubled = ncc.force_auto_alloc(doubled_in_two_buffers)


@nki.jit
def transposed_through_one_bank(x, identity):
    """x [128, 1024] transposed tile by tile (8 tiles of 128 x 128) by matmuls against an
    identity (``is_transpose``), the two halves' PSUM tiles placed in the same bank: the
    second half's first matmul overwrites what the first half left there."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ident = nl.ndarray((par_dim(128), 128), dtype=x.dtype,
                       buffer=ncc.sbuf.alloc(functools.partial(_at_byte, byte=0)))
    ident[...] = nl.load(identity)
    t = nl.ndarray((par_dim(128), 1024), dtype=x.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=512))
    t[...] = nl.load(x)
    halves = nl.ndarray((2, par_dim(128), 512), dtype=nl.float32,
                        buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(1,)))
    ip, jf = nl.mgrid[0:128, 0:128]
    for h in nl.affine_range(2):
        for j in nl.affine_range(4):
            halves[h, ip, j * 128 + jf] = nisa.nc_matmul(t[ip, (h * 4 + j) * 128 + jf], ident,
                                                         is_transpose=True)
        t[:, nl.ds(h * 512, 512)] = nl.copy(halves[h], dtype=x.dtype)
    nl.store(out, t)
    return out


def _at_byte(idx, pdim_size, fdim_size, byte):
    return (0, byte)


def _bank(bank_map, idx, pdim_size, fdim_size):
    return (bank_map[idx], 0, 0)


@nki.jit
def products_in_bank_seven(x, w):
    """x[t].T @ w for each 128-row tile t of x, accumulated (``+=``) over two halves of the
    contraction into a PSUM tensor made anew for each tile in bank 7: its first ``+=``
    overwrites the previous tile's sums."""
    tiles = x.shape[0] // 128
    out = nl.ndarray((tiles * 128, w.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    wt = nl.ndarray((par_dim(128), w.shape[1]), dtype=w.dtype,
                    buffer=ncc.sbuf.mod_alloc(base_addr=4096))
    wt[...] = nl.load(w)
    ip, jf = nl.mgrid[0:64, 0:128]
    iw, jw = nl.mgrid[0:64, 0:w.shape[1]]
    for i in nl.affine_range(tiles):
        xt = nl.ndarray((par_dim(128), 128), dtype=x.dtype,
                        buffer=ncc.sbuf.mod_alloc(base_addr=0))
        xt[...] = nl.load(x[nl.ds(i * 128, 128), :])
        acc = nl.ndarray((1, par_dim(128), w.shape[1]), dtype=nl.float32,
                         buffer=ncc.psum.alloc(functools.partial(_bank, {(0,): 7})))
        for half in nl.affine_range(2):
            acc[0] += nisa.nc_matmul(xt[half * 64 + ip, jf], wt[half * 64 + iw, jw])
        res = nl.ndarray((par_dim(128), w.shape[1]), dtype=nl.float32,
                         buffer=ncc.sbuf.mod_alloc(base_addr=8192))
        res[...] = nl.copy(acc[0])
        nl.store(out[nl.ds(i * 128, 128), :], value=res)
    return out


@nki.jit
def scaled_with_row_max(x):
    """(x * 3, the row maxima of x * 3): ``nisa.tensor_scalar_reduce``."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    best = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    m = nl.ndarray((par_dim(x.shape[0]), 1), dtype=nl.float32, buffer=nl.sbuf)
    y = nisa.tensor_scalar_reduce(data=nl.load(x), op0=np.multiply, operand0=3.0,
                                  reduce_op=np.max, reduce_res=m)
    nl.store(out, y)
    nl.store(best, m)
    return out, best


@nki.jit
def reciprocals(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.reciprocal(nl.load(x)))
    return out


@nki.jit
def placed_past_sbuf(x, base):
    """A tile placed from byte ``base``, past the end of an SBUF partition."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((par_dim(128), 512), dtype=x.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=base))
    t[...] = nl.load(x)
    nl.store(out, t)
    return out


@nki.jit
def placed_in_bank_nine(x):
    """A PSUM tile placed in a bank the core does not have."""
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    p = nl.ndarray((par_dim(128), 128), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=9))
    t = nl.load(x)
    p[...] = nisa.nc_matmul(t, t)
    nl.store(out, nl.copy(p))
    return out


@nki.jit
def products_in_psum_blocks(x, w):
    """x[t].T @ w for each 128-row tile t of x, and its double, through three PSUM tensors
    of a block per tile (zeros accumulated into, and two written): 30 KiB a partition as
    whole tensors, more than PSUM has, a bank or two at a time block by block."""
    tiles = x.shape[0] // 128
    out = nl.ndarray((tiles * 128, 2 * w.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((tiles, par_dim(128), w.shape[1]), dtype=nl.float32, buffer=nl.psum)
    once = nl.ndarray((tiles, par_dim(128), w.shape[1]), dtype=nl.float32, buffer=nl.psum)
    twice = nl.ndarray((tiles, par_dim(128), w.shape[1]), dtype=nl.float32, buffer=nl.psum)
    wt = nl.load(w)
    wt2 = nl.multiply(wt, 2.0)
    ip, jf = nl.mgrid[0:64, 0:128]
    iw, jw = nl.mgrid[0:64, 0:w.shape[1]]
    for i in nl.affine_range(tiles):
        xt = nl.load(x[nl.ds(i * 128, 128), :])
        for half in nl.affine_range(2):
            acc[i] += nisa.nc_matmul(xt[half * 64 + ip, jf], wt[half * 64 + iw, jw])
        once[i] = nisa.nc_matmul(xt, wt)
        twice[i] = nisa.nc_matmul(xt, wt2)
        res = nl.ndarray((par_dim(128), 2 * w.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
        res[:, nl.ds(0, w.shape[1])] = nl.add(acc[i], once[i])
        res[:, nl.ds(w.shape[1], w.shape[1])] = nl.copy(twice[i])
        nl.store(out[nl.ds(i * 128, 128), :], value=res)
    return out


@nki.jit
def mixed_product(x, y):
    """x @ y of an fp32 x and a bf16 y by nl.matmul (x transposed on the way)."""
    out = nl.ndarray((x.shape[0], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.copy(nl.matmul(nl.load(x), nl.load(y)), dtype=nl.float32))
    return out


@nki.jit
def address_advanced_in_a_loop(x):
    """A kernel that adds to its SBUF address in a loop body, which NKI traces once: one
    tensor at byte 0 serves every iteration (run once per iteration, with the address it
    reached, the fourth tile would land past SBUF)."""
    out = nl.ndarray((4, *x.shape), dtype=x.dtype, buffer=nl.shared_hbm)
    base = 0
    for i in nl.sequential_range(4):
        t = nl.ndarray((par_dim(128), 16384), dtype=nl.float32,
                       buffer=ncc.sbuf.mod_alloc(base_addr=base))
        base += 16384 * 4
        t[:, nl.ds(0, 8)] = nl.load(x, name="tile")
        t[:, nl.ds(0, 8)] = nl.add(t[:, nl.ds(0, 8)], i)
        nl.store(out[i], t[:, nl.ds(0, 8)])
    return out


@nki.jit
def a_body_that_changes_its_tensors(x):
    """A loop whose second iteration makes a tensor of another shape than its first."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        t = nl.ndarray((par_dim(128), 8 + i), dtype=nl.float32,
                       buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t[:, nl.ds(0, 8)] = nl.load(x)
        nl.store(out, t[:, nl.ds(0, 8)])
    return out


@nki.jit
def mixed_isa_product(x, y):
    """nisa.nc_matmul of an fp32 stationary and a bf16 moving tile, which the array does
    not multiply."""
    out = nl.ndarray((x.shape[1], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    p = nisa.nc_matmul(nl.load(x), nl.load(y))  # ERROR mixed
    nl.store(out, nl.copy(p))
    return out
