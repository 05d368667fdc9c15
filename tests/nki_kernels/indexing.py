"""Kernels of index expressions over several axes, reductions along some free axes and
nl.loop_reduce, for trngen's tests against numpy."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def swap_blocks(x, rows, cols):
    """Each partition's [rows, cols] block, stored row-major in x, written column-major."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    p = nl.arange(x.shape[0])[:, None, None]
    r = nl.arange(rows)[None, :, None]
    c = nl.arange(cols)[None, None, :]
    o = nl.ndarray(x.shape, dtype=x.dtype)
    o[p, c * rows + r] = nl.copy(t[p, r * cols + c])
    nl.store(out, o)
    return out


@nki.jit
def window_stats(x, k):
    """Per partition, the sums and the maxima of x's [h, w] plane over k x k windows."""
    c, h, w = x.shape
    sums = nl.ndarray((c, h // k, w // k), dtype=nl.float32, buffer=nl.shared_hbm)
    tops = nl.ndarray((c, h // k, w // k), dtype=x.dtype, buffer=nl.shared_hbm)
    i0, i1, i2, i3, i4 = nl.mgrid[0:c, 0:h // k, 0:k, 0:w // k, 0:k]
    t = nl.load(x)
    win = t[i0, k * i1 + i2, k * i3 + i4]
    nl.store(sums, nl.sum(win, axis=[2, 4], dtype=nl.float32))
    nl.store(tops, nl.max(win, axis=(2, 4)))
    return sums, tops


@nki.jit
def blocked_sum(a, b):
    """a.T @ b over K in blocks of 128, each block's PSUM result folded into an SBUF tile by
    nl.loop_reduce."""
    k, m = a.shape
    _, n = b.shape
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((m, n), dtype=nl.float32)
    for kb in nl.affine_range(k // 128):
        ps = nisa.nc_matmul(nl.load(a[kb * 128:(kb + 1) * 128]),
                            nl.load(b[kb * 128:(kb + 1) * 128]))
        acc[...] = nl.loop_reduce(ps, op=np.add, loop_indices=[kb], dtype=nl.float32)
    nl.store(out, acc)
    return out


@nki.jit
def loop_reduce_unassigned(a):
    t = nl.load(a)
    r = nl.loop_reduce(t, op=np.add, loop_indices=[0])
    return nl.add(r, 1.0)


@nki.jit
def out_of_bound_expression(x):
    t = nl.load(x)
    p = nl.arange(x.shape[0])[:, None, None]
    r = nl.arange(4)[None, :, None]
    c = nl.arange(4)[None, None, :]
    return nl.copy(t[p, r * 5 + c])
