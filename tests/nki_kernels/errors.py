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
    return nl.softmax(nl.load(x), axis=1)  # ERROR unsupported


@nki.jit
def own_assertion(x):
    assert x.shape[0] % 256 == 0, "rows must be a multiple of 256"  # ERROR assertion
    return nl.load(x)
