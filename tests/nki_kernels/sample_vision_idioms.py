"""More idioms of the public NKI kernels (aws-neuron/nki-samples' reference vision and
double-row matmul kernels), in kernels of our own, for trngen's tests against numpy:
nl.finfo, numpy broadcasting in nl arithmetic, nl.where, an iota over a window grid
broadcast across partitions, nisa.tensor_tensor against a [P, 1] tile and the FP8 double
row of nc_matmul."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def lowest_fill(x):
    """A [128, 4] tile of x's format filled with nl.finfo(x.dtype).min, stored."""
    out = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.full((128, 4), fill_value=nl.finfo(x.dtype).min, dtype=x.dtype, buffer=nl.sbuf)
    nl.store(out, t)
    return out


@nki.jit
def first_window_max(x):
    """x [128, 8, 2, 4]: per partition and group g, a one-hot [2, 4] of the first position
    of the group's maximum (row-major order), as int8."""
    out = nl.ndarray(x.shape, dtype=nl.int8, buffer=nl.shared_hbm)
    g = nl.mgrid[0:128, 0:8, 0:2, 0:4]
    t = nl.load(x)
    top = nl.max(t, axis=[2, 3], keepdims=True)            # [128, 8, 1, 1]
    hit = nl.equal(top, t, dtype=nl.int8)                    # broadcast free dims
    pos = nisa.iota(4 * g.y + g.z, dtype=nl.float32)        # [1, 1, 2, 4]
    cand = nl.where(hit, pos, 8)                            # partition broadcast of pos
    first = nl.min(cand, axis=[2, 3], keepdims=True)
    nl.store(out, nl.equal(first, pos, dtype=nl.int8))
    return out


@nki.jit
def select(c, a, b):
    """where(c, a, b), where(c, 2.5, b) and where(c, a, -inf) of [128, 64] tiles, and
    where(c, a, row) with row [128, 1] broadcast along the free dimension."""
    outs = [nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm) for _ in range(4)]
    ct, at, bt = nl.load(c), nl.load(a), nl.load(b)
    nl.store(outs[0], nl.where(ct, at, bt))
    nl.store(outs[1], nl.where(ct, 2.5, bt))
    nl.store(outs[2], nl.where(ct, at, -float("inf")))
    nl.store(outs[3], nl.where(ct, at, bt[:, 0:1]))
    return outs


@nki.jit
def row_scaled(x, s):
    """nisa.tensor_tensor of x [128, 512] and s [128, 1]: x * s, s read along the row."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.tensor_tensor(nl.load(x), nl.load(s), nl.multiply))
    return out


@nki.jit
def double_row_product(a, b):
    """a [128, 2, M] and b [128, 2, N] fp8: sum over the 256 (partition, pair) indices of
    a * b, one double-row nc_matmul, [M, N] fp32."""
    m, n = a.shape[2], b.shape[2]
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    at, bt = nl.load(a), nl.load(b)
    nl.store(out, nisa.nc_matmul(at, bt, perf_mode="double_row_gen3"))
    return out


@nki.jit
def byte_mask(x):
    """(x > 0 written as uint8, that mask times 300 saturated in uint8, x clipped to
    [0, 255] and rounded into uint8 and back into fp32)."""
    outs = [nl.ndarray(x.shape, dtype=dt, buffer=nl.shared_hbm)
            for dt in (nl.uint8, nl.uint8, nl.float32)]
    t = nl.load(x)
    mask = nl.greater(t, 0.0, dtype=nl.uint8)
    nl.store(outs[0], mask)
    nl.store(outs[1], nl.multiply(mask, 300.0, dtype=nl.uint8))
    nl.store(outs[2], nl.copy(nl.copy(t, dtype=nl.uint8), dtype=nl.float32))
    return tuple(outs)
