"""Kernels of the nki.isa calls the core's ISA has no single instruction for (and iota,
memset, shared_constant), for trngen's tests against numpy."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import numpy as np


@nki.jit
def iota_grid():
    """[128, 64] of 3 + 2 * p - f (int32), and the same plus 0.5 through fp32."""
    out_i = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.shared_hbm)
    out_f = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    p = nl.arange(128)[:, None]
    f = nl.arange(64)[None, :]
    nl.store(out_i, nisa.iota(3 + p * 2 - f, dtype=nl.int32))
    g = nisa.iota(3 + p * 2 - f, dtype=nl.float32)
    nl.store(out_f, nl.add(g, 0.5))
    return out_i, out_f


@nki.jit
def causal(x, fill):
    """Entries above the diagonal of each 128 x 128 tile replaced by fill (>= keeps the
    diagonal)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:128]
    t = nl.load(x)
    nl.store(out, nisa.affine_select(ip - jf >= 0, t, fill))
    return out


@nki.jit
def memset_tile(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nisa.memset((128, 256), 1.5, dtype=nl.float32)
    nl.store(out, nl.add(t, nl.load(x)))
    return out


@nki.jit
def partition_reduce(x):
    """Sums, maxima and minima over the partitions of x [128, 3, 100]."""
    s = nl.ndarray((1, 3, 100), dtype=x.dtype, buffer=nl.shared_hbm)
    m = nl.ndarray((1, 3, 100), dtype=x.dtype, buffer=nl.shared_hbm)
    n = nl.ndarray((1, 3, 100), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(s, nisa.tensor_partition_reduce(np.add, t))
    nl.store(m, nisa.tensor_partition_reduce(np.maximum, t))
    nl.store(n, nisa.tensor_partition_reduce(nl.minimum, t))
    return s, m, n


@nki.jit
def constant_plus(x):
    """x + a constant matrix the kernel carries (its row index times 0.25)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    c = nl.shared_constant(np.repeat(np.arange(128)[:, None] * 0.25, x.shape[1], axis=1),
                           dtype=nl.float32)
    nl.store(out, nl.add(nl.load(x), nl.load(c)))
    return out


@nki.jit
def stt(x, col, y):
    """(col - x) * y and (x max col) - y, through scalar_tensor_tensor."""
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tx, tc, ty = nl.load(x), nl.load(col), nl.load(y)
    nl.store(a, nisa.scalar_tensor_tensor(data=tx, op0=np.subtract, operand0=tc,
                                          reverse0=True, op1=np.multiply, operand1=ty))
    nl.store(b, nisa.scalar_tensor_tensor(data=tx, op0=np.maximum, operand0=tc,
                                          op1=np.subtract, operand1=ty))
    return a, b


@nki.jit
def scan(a, b, init):
    """r[:, i] = a[:, i] * r[:, i - 1] + b[:, i] from init (a tile), and from 0.5 into a
    bf16 tile."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    ta, tb, ti = nl.load(a), nl.load(b), nl.load(init)
    nl.store(out, nisa.tensor_tensor_scan(ta, tb, ti, np.multiply, np.add))
    r = nl.ndarray(a.shape, dtype=nl.bfloat16)
    r[...] = nisa.tensor_tensor_scan(ta, tb, 0.5, np.multiply, np.add, dtype=nl.bfloat16)
    nl.store(out2, r)
    return out, out2


@nki.jit
def mean_var(x):
    """Per-row mean and variance of x [128, N] through bn_stats on 512-element pieces (the
    last one may be short) and one bn_aggr."""
    out = nl.ndarray((x.shape[0], 2), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    n = x.shape[1]
    pieces = (n + 511) // 512
    stats = nl.ndarray((128, 6 * pieces), dtype=nl.float32)
    for i in nl.affine_range(pieces):
        width = min(512, n - i * 512)
        stats[:, i * 6:(i + 1) * 6] = nisa.bn_stats(t[:, i * 512:i * 512 + width])
    nl.store(out, nisa.bn_aggr(stats))
    return out


@nki.jit
def stats(x):
    """bn_stats of x [128, N <= 512] as it is: (count, mean, variance * count) of the even
    elements, then of the odd ones."""
    out = nl.ndarray((x.shape[0], 6), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nisa.bn_stats(nl.load(x)))
    return out


@nki.jit
def scan_reversed(a, b):
    """r[:, i] = max(r[:, i - 1] - a[:, i], b[:, i]) from 1 (reverse0 of a subtraction),
    and s[:, i] = b[:, i] - a[:, i] * s[:, i - 1] from 0 (reverse1)."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ta, tb = nl.load(a), nl.load(b)
    nl.store(out, nisa.tensor_tensor_scan(ta, tb, 1.0, np.subtract, np.maximum,
                                          reverse0=True))
    nl.store(out2, nisa.tensor_tensor_scan(ta, tb, 0.0, np.multiply, np.subtract,
                                           reverse1=True))
    return out, out2


@nki.jit
def partition_broadcast(row, x):
    """A one-partition row broadcast over x's partitions: the broadcast itself, and
    x * row through tensor_tensor."""
    out = nl.ndarray(x.shape, dtype=row.dtype, buffer=nl.shared_hbm)
    prod = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    r = nl.load(row)
    tx = nl.load(x)
    nl.store(out, r.broadcast_to(x.shape))
    nl.store(prod, nisa.tensor_tensor(tx, r.broadcast_to(x.shape), op=nl.multiply))
    return out, prod


@nki.jit
def to_int8(x):
    """x cast to int8 by the vector engine."""
    out = nl.ndarray(x.shape, dtype=nl.int8, buffer=nl.shared_hbm)
    nl.store(out, nl.copy(nl.load(x), dtype=nl.int8))
    return out


@nki.jit
def transposes(x):
    """x.T by nc_transpose on the vector engine (x at most 32 x 32), as it is and into
    bfloat16 (from a tile of its own, so that the two transposes are not one computed
    once), and on the tensor engine."""
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
    out16 = nl.ndarray((x.shape[1], x.shape[0]), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    tensor = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, nisa.nc_transpose(t, engine=nisa.vector_engine))
    nl.store(out16, nisa.nc_transpose(nl.load(x), engine=nisa.vector_engine,
                                      dtype=nl.bfloat16))
    nl.store(tensor, nl.copy(nisa.nc_transpose(t, engine=nisa.tensor_engine)))
    return out, out16, tensor


@nki.jit
def shuffled(x, keep_half):
    """x's partitions moved within quadrants by ``nisa.nc_stream_shuffle``: quadrant
    partition i takes i - 1 (in place), then (into a tile of -1) each quadrant's partition
    0 broadcast from x's first partition, or with ``keep_half`` its odd partitions left."""
    rotated = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    spread = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.load(x)
    nisa.nc_stream_shuffle(src=a, dst=a, shuffle_mask=[(i - 1) % 32 for i in range(32)])
    nl.store(rotated, a)
    b = nisa.memset(shape=x.shape, value=-1, dtype=x.dtype)
    mask = [255 if keep_half and i % 2 else 0 for i in range(32)]
    first = nl.load(x[0:1, :])
    nisa.nc_stream_shuffle(src=first, dst=b[0:32, :], shuffle_mask=mask)
    nl.store(spread, b)
    return rotated, spread


@nki.jit
def top8(x, imm):
    """max8 of x, where those 8 first occur (nc_find_index8), and x with them replaced by
    imm and their places (nc_match_replace8)."""
    n = x.shape[0]
    top = nl.ndarray((n, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    where = nl.ndarray((n, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    replaced = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    places = nl.ndarray((n, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    t = nl.load(x)
    m = nisa.max8(src=t)
    nl.store(top, m)
    nl.store(where, nisa.nc_find_index8(data=t, vals=m))
    idx = nl.ndarray((n, 8), dtype=nl.uint32, buffer=nl.sbuf)
    nl.store(replaced, nisa.nc_match_replace8(data=t, vals=m, imm=imm, dst_idx=idx))
    nl.store(places, idx)
    return top, where, replaced, places


@nki.jit
def draws(x, prob):
    """Two tiles of nl.rand, and x through nisa.dropout with the number 0.25, with prob
    (one per partition), and with 0 and 1."""
    outs = [nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(6)]
    nl.store(outs[0], nl.rand(x.shape))
    nl.store(outs[1], nl.rand(x.shape))
    t = nl.load(x)
    nl.store(outs[2], nisa.dropout(t, prob=0.25))
    nl.store(outs[3], nisa.dropout(t, prob=nl.load(prob)))
    nl.store(outs[4], nisa.dropout(t, prob=0.0))
    nl.store(outs[5], nisa.dropout(t, prob=1.0))
    return tuple(outs)


@nki.jit
def gathered(x, idx):
    """nl.gather_flattened of x [P, 4, 16] at idx [P, 10] (uint32)."""
    out = nl.ndarray(idx.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.gather_flattened(nl.load(x), nl.load(idx)))
    return out


@nki.jit
def columns_at(x, offsets):
    """x's columns at the run-time offsets (one int32 each in SBUF), one
    nisa.tensor_copy_dynamic_src a column: out[:, j] = x[:, offsets[0, j]]."""
    n = offsets.shape[1]
    out = nl.ndarray((x.shape[0], n), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    o = nl.load(offsets)
    res = nl.ndarray((x.shape[0], n), dtype=x.dtype, buffer=nl.sbuf)
    ix, iy = nl.mgrid[0:x.shape[0], 0:1]
    for j in nl.affine_range(n):
        res[ix, j] = nisa.tensor_copy_dynamic_src(t[ix, o[0, j] + iy])
    nl.store(out, res)
    return out


@nki.jit
def bounds(ids):
    """nisa.sequence_bounds of one partition of segment ids."""
    out = nl.ndarray((1, 2, ids.shape[1]), dtype=ids.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.sequence_bounds(segment_ids=nl.load(ids)))
    return out


@nki.jit(platform_target="trn2")
def ranges(x, lo, hi, start):
    """x kept where its place start + i is in [lo, hi) (one bound a partition), else
    fp32's least (nisa.range_select), its row maxima (reset_reduce); then x + 1 and x + 2
    selected alike, accumulated in the reduction register (reduce), read by the last."""
    n = x.shape[0]
    sel = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    best = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    chained = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t, b0, b1 = nl.load(x), nl.load(lo), nl.load(hi)
    r = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.sbuf)
    c = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.sbuf)
    nl.store(sel, nisa.range_select(on_true_tile=t, comp_op0=np.greater_equal,
                                    comp_op1=np.less, bound0=b0, bound1=b1,
                                    reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=r,
                                    range_start=start))
    nl.store(best, r)
    for i in range(2):
        nisa.range_select(on_true_tile=nl.add(t, float(i + 1)), comp_op0=np.greater_equal,
                          comp_op1=np.less, bound0=b0, bound1=b1,
                          reduce_cmd=nisa.reduce_cmd.reduce,
                          reduce_res=c if i == 1 else None, range_start=start)
    nl.store(chained, c)
    return sel, best, chained


@nki.jit(platform_target="trn2")
def masked_ranges(x, lo, hi):
    """nisa.range_select under a mask on rows 32 .. 63 and the first 150 columns, its row
    maxima into reduce_res: the result of x's whole shape (copied over x where kept) and
    reduce_res, a column of 7s of which the kept rows are written."""
    n, m = x.shape
    sel = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    best = nl.ndarray((n, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:n, 0:m]
    keep = (ip >= 32) & (ip < 64) & (jf < 150)
    t = nl.load(x)
    r = nl.full((n, 1), 7.0, dtype=nl.float32)
    s = nisa.range_select(on_true_tile=t, comp_op0=np.greater_equal, comp_op1=np.less,
                          bound0=nl.load(lo), bound1=nl.load(hi),
                          reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=r, mask=keep)
    o = nl.copy(t)
    o[ip, jf] = nl.copy(s, mask=keep)
    nl.store(sel, o)
    nl.store(best, r)
    return sel, best


@nki.jit
def ranges_on_trn1(x, lo, hi):
    """nisa.range_select where the chip (trn1, NeuronCore-v2) has none."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.range_select(on_true_tile=nl.load(x), comp_op0=np.greater_equal,
                                    comp_op1=np.less, bound0=nl.load(lo), bound1=nl.load(hi)))
    return out


@nki.jit
def cumulative(x, init, scale=None):
    """nisa.tensor_scalar_cumulative: a running sum of x * 2 (reset_reduce); a running
    maximum of x + 1 from init (load_reduce, one per partition); the sum again continued
    from the register (reduce). ``scale``, an HBM tensor when given, is there (true)."""
    outs = [nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm) for _ in range(3)]
    assert scale is None or scale
    scale = 2.0
    t = nl.load(x)
    for out, op0, op1, imm0, imm1, cmd in (
            (outs[0], np.multiply, np.add, scale, None, nisa.reduce_cmd.reset_reduce),
            (outs[1], np.add, np.maximum, 1.0, nl.load(init), nisa.reduce_cmd.load_reduce),
            (outs[2], np.multiply, np.add, scale, None, nisa.reduce_cmd.reduce)):
        d = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(dst=d, src=t, op0=op0, op1=op1, imm0=imm0, imm1=imm1,
                                      reduce_cmd=cmd)
        nl.store(out, d)
    return tuple(outs)


@nki.jit
def transposed_on_chip(x):
    """An SBUF tile transposed by nisa.dma_transpose."""
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.dma_transpose(nl.load(x)))
    return out


@nki.jit
def gathered_locally(x, index, per, valid):
    """nisa.local_gather of x [P, F] by the uint16 index [P, K], stored as [P, valid, per]
    (a tile of one run into a tensor of three dimensions)."""
    out = nl.ndarray((x.shape[0], valid, per), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.local_gather(nl.load(x), nl.load(index), per, valid))
    return out


@nki.jit
def uint16_sum(a, b):
    """Two uint16 tiles added on the vector engine (by value, saturated into uint16)."""
    out = nl.ndarray(a.shape, dtype=nl.uint16, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b), dtype=nl.uint16))
    return out


@nki.jit
def tile_truth(x):
    """``if tile:`` in NKI 0.1, where a tile's truth would be its values': refused."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    if t:
        t = nl.add(t, 1.0)
    nl.store(out, t)
    return out
