"""Element-wise and reduction kernels in NKI 0.1, written for trngen's tests."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def scaled_exp_sum(x, y):
    """out = exp(x) * 0.5 + y, rows tiled by 128 with a mask on the last tile; sums of
    each row of out."""
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    sums = nl.ndarray((rows, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:cols]
    for r in nl.affine_range((rows + 127) // 128):
        keep = r * 128 + i_p < rows
        a = nl.load(x[r * 128 + i_p, i_f], mask=keep)
        b = nl.load(y[r * 128 + i_p, i_f], mask=keep)
        e = nl.exp(a, mask=keep)
        z = nl.add(nl.multiply(e, 0.5, mask=keep), b, mask=keep)
        s = nl.sum(z, axis=1, dtype=nl.float32, mask=keep)
        nl.store(out[r * 128 + i_p, i_f], value=z, mask=keep)
        nl.store(sums[r * 128 + i_p, 0], value=s, mask=keep)
    return out, sums


@nki.jit
def row_stats(x):
    """Per row: max, min, mean (nl) and the negated sum (nisa.tensor_reduce)."""
    out = nl.ndarray((x.shape[0], 4), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    res = nl.ndarray((x.shape[0], 4), dtype=nl.float32, buffer=nl.sbuf)
    res[:, 0:1] = nl.max(t, axis=1, keepdims=True)
    res[:, 1:2] = nl.min(t, axis=1, keepdims=True)
    res[:, 2:3] = nl.mean(t, axis=1, keepdims=True)
    res[:, 3:4] = nisa.tensor_reduce(np.add, t, axis=[1], negate=True, keepdims=True)
    nl.store(out, res)
    return out


@nki.jit
def bias_activation(x, bias):
    """out = tanh(x * 2 + bias[p]) (nisa.activation with a bias column) and the row sums
    of it (its reduction), then out - rowsum via tensor_scalar with a column operand."""
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    b = nl.load(bias)
    red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    act = nisa.activation(op=nl.tanh, data=t, bias=b, scale=2.0, reduce_op=np.add,
                          reduce_res=red)
    centred = nisa.tensor_scalar(act, np.subtract, red)
    nl.store(out, centred)
    return out


@nki.jit
def scaled_copies(x, bias):
    """nisa.activation with op nl.copy and np.copy (the scalar engine's copy): x * 0.5 +
    bias[p], and x * 4."""
    out = nl.ndarray((2, *x.shape), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out[0], nisa.activation(op=nl.copy, data=t, bias=nl.load(bias), scale=0.5))
    nl.store(out[1], nisa.activation(np.copy, t, scale=4.0))
    return out


@nki.jit
def transpose_tile(x):
    """out = x.T for a tile of up to 128 x 128 (nl.transpose on the tensor engine)."""
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, nl.copy(nl.transpose(t)))
    return out


@nki.jit
def spmd_add(a, b):
    """c = a + b, one 128-row tile per program of a one-dimensional launch grid."""
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    rows = slice(i * 128, (i + 1) * 128)
    nl.store(c[rows, :], nl.load(a[rows, :]) + nl.load(b[rows, :]))
    return c


@nki.jit
def spmd_grid_add(a, b):
    """c = a + b over a two-dimensional grid: program (i, j) adds the 128 x 128 tile
    (i, j), and checks nl.num_programs against the tensor's shape."""
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    assert nl.num_programs(0) * 128 == a.shape[0] and nl.num_programs(1) * 128 == a.shape[1]
    i, j = nl.program_id(0), nl.program_id(1)
    rows, cols = slice(i * 128, (i + 1) * 128), slice(j * 128, (j + 1) * 128)
    nl.store(c[rows, cols], nl.load(a[rows, cols]) + nl.load(b[rows, cols]))
    return c
