"""Kernels that break NKI's rules, one rule each, for trngen's error tests."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def too_many_partitions(x):
    t = nl.load(x)  # ERROR partitions
    return t


@nki.jit
def wide_stationary(a, b):
    sa = nl.load(a)
    sb = nl.load(b)
    return nisa.nc_matmul(sa, sb)  # ERROR stationary


@nki.jit
def wide_moving(a, b):
    sa = nl.load(a)
    sb = nl.load(b)
    return nisa.nc_matmul(sa, sb)  # ERROR moving


@nki.jit
def big_psum(x):
    return nl.zeros((128, 1024), nl.float32, buffer=nl.psum)  # ERROR psum


@nki.jit
def sbuf_full(x):
    """64 tiles of 4 KiB a partition, every one read at the end: all live at once."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    held = []
    for i in nl.affine_range(64):
        t = nl.ndarray((128, 1024), nl.float32, buffer=nl.sbuf)  # ERROR sbuf
        t[...] = i
        held.append(t)
    acc = nl.load(x)
    for t in held:
        acc = nl.add(acc, t[:, 0:1])
    nl.store(out, acc)
    return out


@nki.jit
def sbuf_one_tile(x):
    """One tile of 200,000 bytes a partition: more than the whole SBUF, whatever spills."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 50000), nl.float32, buffer=nl.sbuf)  # ERROR sbuf_one
    t[...] = 1.0
    nl.store(out, t[:, 0:1])
    return out


@nki.jit
def out_of_bounds(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:512]
    for j in nl.affine_range(2):
        t = nl.load(x[i_p, j * 512 + i_f])  # ERROR bounds
        nl.store(out[i_p, j * 512 + i_f], t)
    return out


@nki.jit
def masked_bounds(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:512]
    for j in nl.affine_range(2):
        keep = j * 512 + i_f < x.shape[1]
        t = nl.load(x[i_p, j * 512 + i_f], mask=keep)
        nl.store(out[i_p, j * 512 + i_f], t, mask=keep)
    return out


@nki.jit
def unsupported_call(x):
    return nl.random_seed(nl.load(x))  # ERROR unsupported


@nki.jit
def own_assertion(x):
    assert x.shape[0] % 256 == 0, "rows must be a multiple of 256"  # ERROR assertion
    return nl.load(x)


@nki.jit
def partition_mismatch(x, y):
    a = nl.load(x)
    b = nl.load(y)
    c = nisa.tensor_tensor(a, b, op=nl.add)  # ERROR mismatch
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, c)
    return out


@nki.jit
def load_from_sbuf(x):
    t = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
    t[...] = 1.0
    return nl.load(t)  # ERROR space_load


@nki.jit
def exp_of_hbm(x):
    e = nl.exp(x)  # ERROR space_exp
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, e)
    return out


@nki.jit
def quadrant_rows(x):
    """Rows 32..63 of the tile exponentiated in place: one quadrant, a legal start."""
    t = nl.load(x)
    t[32:64, :] = nl.exp(t[32:64, :])
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, t)
    return out


@nki.jit
def misaligned_rows(x):
    t = nl.load(x)
    e = nl.exp(t[16:48, :])  # ERROR start
    out = nl.ndarray((32, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, e)
    return out


@nki.jit
def half_from_32(x):
    t = nl.load(x)
    e = nl.exp(t[32:96, :])  # ERROR start_half
    out = nl.ndarray((64, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, e)
    return out


@nki.jit
def same_block_every_iteration(x):
    a = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(4):
        a[0] = i  # ERROR affine
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, a[0])
    return out


@nki.jit
def same_block_in_order(x):
    """The same writes as same_block_every_iteration, legal in a sequential_range: the
    last iteration's value stays."""
    a = nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(4):
        a[0] = i
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, a[0])
    return out


@nki.jit
def same_output_rows(x):
    out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    for j in nl.affine_range(2):
        t = nl.load(x[:, j * 512:(j + 1) * 512])
        nl.store(out, t)  # ERROR affine_hbm
    return out


@nki.jit
def interleaved_columns(x):
    """Iteration j writes columns j, j + 4, j + 8, ...: the iterations' column ranges
    overlap, their elements do not."""
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    src = nl.load(x)
    i_p, i_f = nl.mgrid[0:128, 0:128]
    for j in nl.affine_range(4):
        t[i_p, 4 * i_f + j] = nl.multiply(src[i_p, 4 * i_f + j], j + 1)
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, t)
    return out


@nki.jit
def accumulate_in_affine(x):
    """``+=`` into a tile made outside the loop: an associative reduction, legal."""
    acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    for j in nl.affine_range(4):
        acc += nl.load(x[:, j * 512:(j + 1) * 512])
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, acc)
    return out


@nki.jit
def psum_full(x):
    """Nine PSUM tiles of one bank each, every one read at the end: eight banks hold eight."""
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    held = []
    for i in nl.affine_range(9):
        p = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)  # ERROR psum_full
        p[...] = i
        held.append(p)
    acc = nl.load(x)
    for p in held:
        acc = nl.add(acc, p[:, 0:1])
    nl.store(out, acc)
    return out
