"""Idioms of the public NKI kernels (aws-neuron/nki-samples' reference kernels) that the
tutorials do not use, in kernels of our own, for trngen's tests against numpy: a jit
function called from a kernel, an on-chip tensor indexed by an integer in a free dimension,
affine_select of a matmul's result in PSUM, options that change nothing."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit(mode="trace")
def scale_rows_into(dst, src, column):
    """dst = src * column (a [P, 1] tile): a helper the kernel calls, traced as its own."""
    dst[...] = nl.multiply(src, column)


@nki.jit
def column_scaled(x, s):
    """out[:, j*64:(j+1)*64] = x[:, j*64:(j+1)*64] * s[:, j], the column of s indexed by an
    integer (a [128, 1] tile, as NKI makes it)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    s_t = nl.load(s)
    best = nl.full((nl.par_dim(128), 2), fill_value=nl.fp32.min, dtype=nl.float32,
                   buffer=nl.sbuf, lazy_initialization=False)
    for j in nl.affine_range(x.shape[1] // 64):
        col = s_t[:, j]
        t = nl.load(x[:, nl.ds(j * 64, 64)])
        r = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        scale_rows_into(r, t, col)
        nl.store(out[:, nl.ds(j * 64, 64)], r)
    best[:, 0] = nl.max(s_t, axis=1)
    best[:, 1] = nl.copy(best[:, 0])
    return out, best_out(best)


def best_out(best):
    out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, best)
    return out


@nki.jit
def causal_scores(qT, kT):
    """(q @ k.T) with the entries above the diagonal set to -9984, selected from PSUM."""
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:128]
    scores = nl.matmul(nl.load(qT), nl.load(kT), transpose_x=True)
    nl.store(out, nisa.affine_select(ip - jf >= 0, scores, -9984.0, dtype=nl.float32))
    return out


@nki.jit
def tiles_by_condition(x):
    """Row tile i of out is x + 1 where i is even and x where not: masks that are
    conditions on loop indices alone (True applies the instruction, False drops it), one of
    them joined to an index comparison by &."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:x.shape[1]]
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[nl.ds(i * 128, 128), :])
        r = nl.copy(t)
        r[...] = nl.add(t, 1.0, mask=(i % 2 == 0))
        nl.store(out[nl.ds(i * 128, 128), :], value=r, mask=(i % 2 == 0) | (i % 2 == 1))
        nisa.dma_copy(dst=out[nl.ds(i * 128, 128), :], src=t, mask=(jf >= 0) & (i < 0))
    return out


@nki.jit
def corner_doubled(x, by_keyword):
    """out[:64, :32] = 2 x there, x elsewhere: the corner's mask written with Python's
    ``and`` (as the vendor's examples do), read as ``&``; ``and`` and ``or`` between plain
    values keep Python's meaning, short-circuit included."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:x.shape[1]]
    t = nl.load(x)
    nl.store(out, t)
    if by_keyword and True:
        nl.multiply(t, 3.0, mask=(ip < 64 and jf < 32))  # issued, its result unused
    none = None
    scale = (none and none.missing) or 2.0
    corner = (ip < 64 and True and jf < 32)
    nl.store(out[ip, jf], value=nl.multiply(t, scale, mask=corner), mask=corner)
    return out


@nki.jit
def corner_doubled_by_and(x):
    """corner_doubled's instruction with its mask joined by ``&``."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:x.shape[1]]
    t = nl.load(x)
    nl.store(out, t)
    corner = (ip < 64) & (jf < 32)
    nl.store(out[ip, jf], value=nl.multiply(t, 2.0, mask=corner), mask=corner)
    return out


@nki.jit
def masked_results_are_whole(x):
    """Results of instructions with a mask are tiles of the operand's whole shape, the kept
    positions written: the 8 largest of each row's first half in the first 64 rows,
    replaced by -1 in those halves (nisa.max8 and nisa.nc_match_replace8 under one mask),
    and exp of the last 64 rows (a mask starting at partition 64), each stored whole; the
    rest of each is copied from x first (written over by the kept positions)."""
    p, n = x.shape
    top = nl.ndarray((p, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    replaced = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    exps = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:p, 0:n]
    t = nl.load(x)
    half = (ix < 64) & (iy < n // 2)
    m = nisa.max8(src=t[ix, iy], mask=half)
    r = nisa.nc_match_replace8(data=t[ix, iy], vals=m, imm=-1.0, mask=half)
    e = nl.exp(t, mask=(ix >= 64))
    r2 = nl.copy(t)
    e2 = nl.copy(t)
    r2[ix, iy] = nl.copy(r, mask=half)
    e2[ix, iy] = nl.copy(e, mask=(ix >= 64))
    nl.store(top, m)
    nl.store(replaced, r2)
    nl.store(exps, e2)
    return top, replaced, exps


@nki.jit
def masked_affine_select(x):
    """nisa.affine_select of x where row - 2 * column >= 40, else -9, under a mask on rows
    64.. and columns 8..: a result of x's whole shape whose kept corner is written (copied
    over x)."""
    p, n = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:p, 0:n]
    t = nl.load(x)
    corner = (ip >= 64) & (jf >= 8)
    s = nisa.affine_select(pred=(ip - 2 * jf >= 40), on_true_tile=t, on_false_value=-9.0,
                           mask=corner)
    o = nl.copy(t)
    o[ip, jf] = nl.copy(s, mask=corner)
    nl.store(out, o)
    return out


@nki.jit
def masked_iota(x):
    """nisa.iota of 100 * row + column under a mask on rows 64.. and columns 8..: a tile of
    the whole shape whose kept corner is written (copied over x)."""
    p, n = x.shape
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:p, 0:n]
    corner = (ip >= 64) & (jf >= 8)
    v = nisa.iota(100 * ip + jf, dtype=nl.float32, mask=corner)
    o = nl.copy(nl.load(x))
    o[ip, jf] = nl.copy(v, mask=corner)
    nl.store(out, o)
    return out


@nki.jit
def masked_partial_sum(x):
    """x [P, A, B] summed along B under a mask on P and A: a result of the whole [P, A]
    whose kept corner is written (copied over x[:, :, 0])."""
    p, a, b = x.shape
    out = nl.ndarray((p, a), dtype=nl.float32, buffer=nl.shared_hbm)
    ip, ia, ib = nl.mgrid[0:p, 0:a, 0:b]
    t = nl.load(x)
    s = nl.sum(t[ip, ia, ib], axis=2, mask=(ip < 64) & (ia < 3))
    o = nl.copy(t[:, :, 0])
    o[0:64, 0:3] = nl.copy(s[0:64, 0:3])
    nl.store(out, o)
    return out


@nki.jit
def corner_by_or(x):
    """Two comparisons joined by Python's ``or``: refused as ``|`` is."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:x.shape[1]]
    nl.store(out, nl.exp(nl.load(x), mask=(ip < 64 or jf < 32)))
    return out


@nki.jit
def gram_of_transpose(a):
    """a.T @ a for a [128, 128] tile: the tensor engine's transpose, straight from PSUM, as
    the stationary of the next multiply."""
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    at = nisa.nc_transpose(t)
    nl.store(out, nisa.nc_matmul(at, at))
    return out


@nki.jit
def shifted_row_sums(x, s):
    """sum(x[p, :] * 2) + s[1] per row: one element loaded from HBM as a [1, 1] tile and
    added to a column over every partition; a reduction of a one-value-per-partition tile."""
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    rows = nisa.tensor_reduce(np.add, nl.load(x), axis=(1,))
    twice = nisa.tensor_reduce(np.add, nl.multiply(rows, 2.0), axis=(1,))
    value = nl.load(s[1])
    nl.store(out, nl.add(twice, value))
    return out


@nki.jit
def rows_over_their_sums(x):
    """x / (row sums of x): the sums' reciprocals as ``1.0 / sums`` of the [P] reduction,
    broadcast to the row's width."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    sums = nisa.tensor_reduce(np.add, t, axis=(1,))
    nl.store(out, nl.multiply(t, (1.0 / sums).broadcast_to(x.shape)))
    return out


@nki.jit
def triangle_masked(x):
    """A mask over two index axes at once (not a box): refused."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:128]
    nl.store(out[ip, jf], nl.load(x[ip, jf], mask=(ip * 128 + jf < 1000)))
    return out


@nki.jit
def integer_arithmetic(x, y):
    """(x to int32, (y + 3) * 0.5 in fp32, y & 255, y ^ (x to int32), a copy of y): the
    engines take integers by value, a bitwise operation and a copy between int32 tiles their
    words."""
    outs = [nl.ndarray(x.shape, dtype=dt, buffer=nl.shared_hbm)
            for dt in (nl.int32, nl.float32, nl.int32, nl.int32, nl.int32)]
    xi = nl.copy(nl.load(x), dtype=nl.int32)
    yi = nl.load(y)
    nl.store(outs[0], xi)
    nl.store(outs[1], nl.multiply(nl.add(yi, 3, dtype=nl.int32), 0.5, dtype=nl.float32))
    nl.store(outs[2], nl.bitwise_and(yi, 255))
    nl.store(outs[3], nl.bitwise_xor(yi, xi))
    nl.store(outs[4], nl.copy(yi))
    return tuple(outs)


@nki.trace
def doubled_into(x, out):
    """out = 2 * x, written into the output argument (``nki.trace``'s kernels)."""
    nl.store(out, nl.multiply(nl.load(x), 2.0))


@nki.jit
def predicated(pred, x, y, reverse):
    """y where pred is false, x where true (``reverse``: the other way), by
    ``nisa.tensor_copy_predicated`` into a tile holding y; a bool predicate from the host."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    dst = nl.load(y)
    nisa.tensor_copy_predicated(src=nl.load(x), dst=dst, predicate=nl.load(pred),
                                reverse_pred=reverse)
    nl.store(out, dst)
    return out


@nki.jit
def row_broadcast_and_bits(row, x):
    """(row broadcast over x's partitions by ``nl.broadcast_to``, x's fp32 words as
    uint32 by ``view``, copied by DMA with ``dge_mode``)."""
    wide = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    bits = nl.ndarray(x.shape, dtype=nl.uint32, buffer=nl.shared_hbm)
    nl.store(wide, nl.broadcast_to(nl.load(row), shape=x.shape))
    nisa.dma_copy(dst=bits, src=x.view(nl.uint32), dge_mode=nisa.dge_mode.swdge)
    return wide, bits


@nki.jit
def accumulating_dma(x, y):
    """``x + y`` by a DMA that adds ``y`` into its destination (``dst_rmw_op``)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    nisa.dma_copy(dst=out, src=y, dst_rmw_op=np.add)
    return out


@nki.jit
def multiplying_dma(x):
    """A DMA that multiplies into its destination, which trngen refuses."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x, dst_rmw_op=np.multiply)
    return out


@nki.jit
def transposed_by_dma(x):
    """x [F, P] transposed on its way into SBUF by ``nisa.dma_transpose``."""
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.dma_transpose(x))
    return out


@nki.jit
def transposed_3d_and_4d(x, rows, y):
    """The rows of x [R, A, B] that ``rows`` (uint32, a column) names, gathered and
    transposed by ``nisa.dma_transpose`` to [B, A, len(rows)]; y [A, B, C, D] on-chip to
    [D, B, C, A] (the rule for four dimensions)."""
    i_p = nl.arange(rows.shape[0])[:, None]
    i_a = nl.arange(x.shape[1])[None, :, None]
    i_b = nl.arange(x.shape[2])[None, None, :]
    idx = nl.load(rows)
    out = nl.ndarray((x.shape[2], x.shape[1], rows.shape[0]), dtype=x.dtype,
                     buffer=nl.shared_hbm)
    nl.store(out, nisa.dma_transpose(x[idx[i_p, 0], i_a, i_b], axes=(2, 1, 0)))
    a, b, c, d = y.shape
    out4 = nl.ndarray((d, b, c, a), dtype=y.dtype, buffer=nl.shared_hbm)
    nl.store(out4, nisa.dma_transpose(nl.load(y)))
    return out, out4


@nki.jit
def int_rows(row):
    """An int32 row broadcast over 128 partitions (by DMA: the array multiplies floats)."""
    out = nl.ndarray((128, row.shape[1]), dtype=row.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(row).broadcast_to((128, row.shape[1])))
    return out


@nki.jit
def selected_with_row_max(pred, x, fill):
    """(x where pred else the row's fill value, the row maxima of that), by
    ``nisa.select_reduce``."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    best = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    res = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=dst, predicate=nl.load(pred), on_true=nl.load(x),
                       on_false=nl.load(fill), reduce_cmd=nisa.reduce_cmd.reset_reduce,
                       reduce_res=res, reduce_op=nl.max)
    nl.store(out, dst)
    nl.store(best, res)
    return out, best


@nki.jit
def masked_select_with_row_max(pred, x, fill):
    """``nisa.select_reduce`` into a copy of x under a mask on rows 64.. and the first 40
    columns: the kept positions written, and the kept rows of a column of 7s given the
    maxima of the kept positions."""
    p, n = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    best = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:p, 0:n]
    dst = nl.load(x)
    res = nl.full((p, 1), 7.0, dtype=nl.float32)
    nisa.select_reduce(dst=dst, predicate=nl.load(pred), on_true=nl.load(x),
                       on_false=nl.load(fill), reduce_cmd=nisa.reduce_cmd.reset_reduce,
                       reduce_res=res, reduce_op=nl.max, mask=(ip >= 64) & (jf < 40))
    nl.store(out, dst)
    nl.store(best, res)
    return out, best


@nki.jit
def elements_set_one_by_one(x):
    """``t[i, j] = 10 * i + j`` element by element over a loaded copy of x, for the first
    40 partitions and 3 columns (NKI's gather_flattened example writes its indices so)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    for i in nl.static_range(40):
        for j in nl.static_range(3):
            t[i, j] = 10 * i + j
    nl.store(out, t)
    return out


@nki.jit
def printed_twice(x):
    """x printed, doubled in place, printed again (``nl.device_print``)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.device_print("loaded:", t)
    t[...] = nl.multiply(t, 2.0)
    nl.device_print("doubled:", t)
    nl.store(out, t)
    return out
