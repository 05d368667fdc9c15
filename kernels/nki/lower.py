"""Lowering of NKI's instructions to the core's ISA, one function per ``nki.isa`` call.

Each function checks its operands as NKI documents (address spaces, partition counts, the
tensor engine's tile limits) and returns a pending result (see :mod:`.tracer`), or with
``dst`` writes into it. Engines as the ISA documentation assigns them: ``nc_matmul`` and
``nc_transpose`` on the tensor engine; ``activation`` on the scalar engine;
``tensor_tensor``, ``tensor_scalar``, ``tensor_reduce`` and ``tensor_copy`` on the vector
engine unless ``engine=`` asks for GpSimd (or, where the ISA allows, the scalar engine);
``memset`` on GpSimd in SBUF and the vector engine in PSUM; DMAs round-robin on the queues.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from hdl.core.isa import (
    AP,
    MX_DTYPES,
    SHUFFLE_KEEP,
    SHUFFLE_LANES,
    Activation,
    AffineSelect,
    Dropout,
    FindIndex8,
    GatherFlattened,
    Iota,
    LoadStationary,
    LocalGather,
    MatchReplace8,
    Max8,
    MultiplyMoving,
    NonzeroWithCount,
    QuantizeMx,
    Random,
    RangeSelect,
    SequenceBounds,
    StreamShuffle,
    TensorCopy,
    TensorCopyDynamic,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    TensorTensorScan,
    Transpose,
)
from hdl.vector.ops import BITWISE_OPS, ENGINE_ONLY_OPS, Reduce, VectorOp
from sim.core.rules import matmul_results

from .errors import NkiError, NotSupported
from .tracer import (
    Affine,
    Mask,
    Predicate,
    View,
    current,
    dropped,
    isa_dtype,
    merge_dims,
    numpy_dtype,
    promote,
)

__all__ = ["ACTIVATIONS", "VECTOR_OPS", "activation", "affine_select", "bn_aggr", "bn_stats",
           "check_row_sum", "dma_copy", "exponential", "iota", "memset", "nc_matmul",
           "nc_transpose", "partition_broadcast", "rows_of", "scalar_tensor_tensor",
           "tensor_copy", "tensor_partition_reduce", "tensor_reduce", "tensor_scalar",
           "tensor_tensor", "tensor_tensor_scan"]

#: ALU operators (NKI's ``nl.*`` and numpy's) -> the vector engine's; filled by
#: :mod:`.language` with its own functions.
VECTOR_OPS: dict = {
    np.add: VectorOp.ADD, np.subtract: VectorOp.SUBTRACT, np.multiply: VectorOp.MULTIPLY,
    np.maximum: VectorOp.MAX, np.minimum: VectorOp.MIN, np.equal: VectorOp.IS_EQUAL,
    np.not_equal: VectorOp.NOT_EQUAL, np.greater: VectorOp.GREATER,
    np.greater_equal: VectorOp.GREATER_EQUAL, np.less: VectorOp.LESS,
    np.less_equal: VectorOp.LESS_EQUAL, np.bitwise_and: VectorOp.BITWISE_AND,
    np.bitwise_or: VectorOp.BITWISE_OR, np.bitwise_xor: VectorOp.BITWISE_XOR,
    np.max: VectorOp.MAX, np.amax: VectorOp.MAX, np.min: VectorOp.MIN,
    np.amin: VectorOp.MIN, np.sum: VectorOp.ADD, np.logical_and: VectorOp.LOGICAL_AND,
    np.logical_or: VectorOp.LOGICAL_OR, np.logical_xor: VectorOp.LOGICAL_XOR,
    np.left_shift: VectorOp.LEFT_SHIFT, np.right_shift: VectorOp.RIGHT_SHIFT,
    np.power: VectorOp.POWER,
}
#: NKI's arithmetic unary operators of tensor_scalar (its operand None or 0) [NKI ``nki.isa.
#: tensor_scalar``: "Must be None or 0 when op0 is a unary operator (e.g., nl.abs)"].
UNARY_OPS: dict = {np.abs: VectorOp.ABS, np.square: VectorOp.SQUARE,
                   np.reciprocal: VectorOp.RECIPROCAL}


def bypass(x):
    """NKI's ``nl.bypass``: as ``op0`` or ``op1`` of a tensor-scalar instruction, that stage
    passes its input through."""
    return x

COMMUTATIVE = {VectorOp.ADD, VectorOp.MULTIPLY, VectorOp.MAX, VectorOp.MIN,
                VectorOp.IS_EQUAL, VectorOp.NOT_EQUAL, VectorOp.BITWISE_AND,
                VectorOp.BITWISE_OR, VectorOp.BITWISE_XOR, VectorOp.LOGICAL_AND,
                VectorOp.LOGICAL_OR, VectorOp.LOGICAL_XOR}
#: Activation functions (NKI's ``nl.*`` and numpy's) -> the chip's function names.
ACTIVATIONS: dict = {np.exp: "exp", np.tanh: "tanh", np.log: "log", np.sqrt: "sqrt",
                     np.square: "square", np.abs: "abs", np.sin: "sin", np.cos: "cos",
                     np.arctan: "arctan", np.reciprocal: "reciprocal", np.copy: "identity"}
_ENGINES = {0: None, 1: "tensor", 2: "scalar", 3: "gpsimd", 5: "vector"}


def _engine(engine, allowed: tuple[str, ...], call: str) -> str:
    name = _ENGINES.get(int(engine) if engine is not None else 0, "?")
    if name is None:
        return allowed[0]
    if name not in allowed:
        raise NkiError(f"'{call}' runs on the {' or '.join(allowed)} engine, not {name}")
    return name


def _op(op, call: str) -> VectorOp:
    """The engines' operation of ``op``: an ALU operator (NKI's or numpy's function) or one
    of the engines' own."""
    v = op if isinstance(op, VectorOp) else VECTOR_OPS.get(op)
    if v is None:
        raise NotSupported(f"op {getattr(op, '__name__', op)!r} of '{call}'",
                           "add, subtract, multiply, maximum, minimum, the comparisons, "
                           "bitwise_and/or/xor, left_shift, right_shift, logical_and/or/xor, "
                           "abs_max, abs_min and power (nl.* or np.*)")
    return v


def _func(op, call: str) -> str:
    t = current(call)
    name = ACTIVATIONS.get(op, op if isinstance(op, str) else None)
    names = [f.name for f in t.params.functions]
    if name not in names:
        raise NotSupported(f"activation {getattr(op, '__name__', op)!r} of '{call}'",
                           f"the functions of {t.params.name}: {', '.join(names)}")
    return name


def _tile(x, call: str, operand: str) -> View:
    if not isinstance(x, View):
        raise NkiError(f"operand '{operand}' of '{call}' must be a tile, not "
                       f"{type(x).__name__}")
    return x


def _with_partition(v: View) -> View:
    """``v`` with its partition dimension: a tile of one partition indexed away
    (``a[0, ...]``) is that one partition."""
    if v.dims and v.dims[0][2]:
        return v
    return View(v.buf, v.dt, ((1, 1, True),) + v.dims, v.part, v.off, v.checks)


def _out(t, shape, dt: str, space: str = "sbuf", part: int = 0) -> View:
    return t.tile(shape, dt, space, "tile", part)


def _shape2(view: View, call: str, operand: str) -> tuple[int, int]:
    free = math.prod(view.shape[1:]) if view.ndim > 1 else 1
    return view.shape[0], free


def _limit(view: View, size: int, limit: int, call: str, operand: str) -> None:
    if size > limit:
        raise NkiError(f"size of dimension 1 in '{operand}{list(view.shape)}' of '{call}' "
                       f"exceed architecture limitation of {limit}",
                       "err_size_of_dimension_exceed_arch_limit")


def _same_partitions(a: View, b: View, call: str, na: str, nb: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise NkiError(f"number of partitions (dimension 0 size of a tile) mismatch in "
                       f"parameters ({na}{list(a.shape)}, {nb}{list(b.shape)}) of '{call}'",
                       "err_num_partition_mismatch")


# --- tensor engine ------------------------------------------------------------------------

def _double_row(perf_mode, call: str) -> bool:
    """Whether ``perf_mode`` asks for the tensor engine's FP8 double row (NKI 0.1's
    ``"double_row_gen3"``, later ``nisa.matmul_perf_mode.double_row``)."""
    mode = getattr(perf_mode, "value", perf_mode)
    if mode in (None, 0, "none", ""):
        return False
    if mode in ("double_row", "double_row_gen3"):
        return True
    raise NotSupported(f"nc_matmul(perf_mode={mode!r})", "perf_mode none and double_row")


def _pair_ap(t, v: View, call: str, operand: str):
    """The access pattern of a double-row operand [P, 2, F]: its pair axis kept as the
    outermost free dimension (size 2), the rest merged."""
    from dataclasses import replace

    ap = t.ap(v, call, operand, ("sbuf",))
    pair = v.dims[1][1]
    rest = merge_dims([(d[0], d[1]) for d in v.dims[2:]])
    return replace(ap, dims=((2, pair),) + rest)


def nc_matmul(stationary, moving, *, tile_position=(), tile_size=(), mask: Mask | None = None,
              dst: View | None = None, accumulate=None, perf_mode=None,
              call: str = "nc_matmul", scales: tuple | None = None):
    """``stationary.T @ moving`` into PSUM (fp32): a LoadStationary and a MultiplyMoving.
    MX tiles (the quad types) come with ``scales`` (``nc_matmul_mx``: each operand's E8M0
    scales in SBUF, laid out as the ISA's MX tiles read them, row tiling only).
    With ``perf_mode`` double row (FP8 on NeuronCore-v3 and later) the contraction is split
    between the partitions and a first free dimension of 2: ``stationary`` [P, 2, M] and
    ``moving`` [P, 2, N] contract 2P indices into [M, N], one double-row matmul of the
    ISA. The array reads SBUF only [ISA]; an operand in PSUM (nki-samples' flash_attn_bwd
    multiplies the tensor engine's transpose as it comes out, which NKI's compiler accepts)
    is copied to SBUF by the vector engine first."""
    t = current(call)
    t.commit()
    double = _double_row(perf_mode, call)
    st = _tile(stationary, call, "stationary").cut(mask)
    mv = _tile(moving, call, "moving").cut(mask)
    if st.buf.space == "psum":
        st = tensor_copy(st, mask=_dropping(mask), call=call)
    if mv.buf.space == "psum":
        mv = tensor_copy(mv, mask=_dropping(mask), call=call)
    for v, name in ((st, "stationary"), (mv, "moving")):
        if v.buf.space != "sbuf":
            t.ap(v, call, name, ("sbuf",))
    p = t.params
    if double:
        for v, name in ((st, "stationary"), (mv, "moving")):
            if v.ndim < 2 or v.shape[1] != 2:
                raise NkiError(f"'{call}' with perf_mode double_row: '{name}"
                               f"{list(v.shape)}' must be [partitions, 2, free], the "
                               f"contraction split between the partitions and a first free "
                               f"dimension of 2")
            if v.dt not in p.formats or not p.tensor.is_double(p.array_format(v.dt)):
                doubles = [f for f in p.formats if p.tensor.is_double(p.array_format(f))]
                raise NkiError(f"'{call}' with perf_mode double_row takes "
                               f"{' or '.join(doubles) or 'no format'} on {p.name} "
                               f"(NeuronCore-{p.version}), not {v.dt} ('{name}')")
        if tile_position and int(tile_position[1]):
            raise NkiError(f"'{call}': perf_mode double_row cannot be combined with column "
                           f"tiling (tile_position {tuple(tile_position)})")
    mx = [v.dt in MX_DTYPES for v in (st, mv)]
    if any(mx) != (scales is not None) or any(mx) != all(mx):
        raise NkiError(f"'{call}' multiplies MX tiles (float8_e4m3fn_x4, float8_e5m2_x4, "
                       f"float4_e2m1fn_x4) "
                       f"with their scales (nisa.nc_matmul_mx), other tiles without: "
                       f"stationary {st.dt}, moving {mv.dt}")
    if scales is not None:
        scales = tuple(_tile(v, call, name) for v, name in
                       zip(scales, ("stationary_scale", "moving_scale"), strict=True))
        for v, name in zip(scales, ("stationary_scale", "moving_scale"), strict=True):
            if v.dt != "uint8":
                raise NkiError(f"'{call}': {name} must be float8_e8m0fnu or uint8, not "
                               f"{v.dt}")
        if tile_position and int(tile_position[1]):
            raise NkiError(f"'{call}' tiles the array by rows only: tile_position "
                           f"{tuple(tile_position)} starts at column {int(tile_position[1])}")
    k, m = _shape2(st, call, "stationary")
    k2, n = _shape2(mv, call, "moving")
    if double:
        m, n = m // 2, n // 2
    _same_partitions(st, mv, call, "stationary", "moving")
    _limit(st, m, p.cols, call, "stationary")
    _limit(mv, n, _moving_limit(p, 2), call, "moving")  # checked again by dst's type
    row, col = 0, 0
    if tile_position:
        if not tile_size:
            raise NkiError("tile_position and tile_size must both be set for PE tiling")
        row, col = (int(x) for x in tile_position)
        if row % 32 or col % 32:
            raise NkiError(f"tile_position {tuple(tile_position)} must be multiples of 32")
    if double:
        st_ap, mv_ap = _pair_ap(t, st, call, "stationary"), _pair_ap(t, mv, call, "moving")
    else:
        st_ap = t.ap(st, call, "stationary", ("sbuf",))
        mv_ap = t.ap(mv, call, "moving", ("sbuf",))
    scale_aps = (None, None) if scales is None else tuple(
        t.ap(v, call, name, ("sbuf",), start=False) for v, name in
        zip(scales, ("stationary_scale", "moving_scale"), strict=True))
    acc_dt = matmul_results(p, st.dt)
    t.matmul_dtypes.add(st.dt)

    def make(out: View, acc):
        if out.buf.space != "psum" or out.dt not in acc_dt:
            raise NkiError(f"'{call}' writes {' or '.join(acc_dt)} to PSUM on {p.name}, not "
                           f"{out.dt} to {out.buf.space}", "err_unsupported_memory")
        out_ap = t.ap(out, call, "dst", ("psum",))
        if (out_ap.partitions, out_ap.free) != (m, n):
            raise NkiError(f"'{call}': the result is [{m}, {n}], its destination "
                           f"{list(out.shape)}")
        if out_ap.partition != col:
            raise NkiError(f"'{call}' at tile column {col} writes PSUM partitions from {col}, "
                           f"its destination starts at partition {out_ap.partition}")
        if acc is None:
            acc = accumulate
        if acc is None:  # NKI 0.2's default: the first write overwrites, later ones add
            acc = t.accumulating(out, out_ap)
        elif acc == "add":  # +=: onto what the tensor holds (a new tensor holds nothing)
            acc = out.buf.zero or t.written(out, out_ap)
        if acc and out.buf.zero and out_ap.offset == out.buf.offset \
                and out_ap.free * out_ap.itemsize == out.buf.nbytes \
                and out_ap.partitions == p.partitions:
            out.buf.zero, acc = False, False  # the zeros of nl.zeros: overwrite them
        st_scale, mv_scale = scale_aps
        t.emit("tensor", LoadStationary(src=st_ap, row=row, col=col, double_row=double,
                                        scale=st_scale),
               reads=[(st, st_ap)] + ([(scales[0], st_scale)] if scales else []))
        _limit(mv, n, _moving_limit(p, out_ap.itemsize), call, "moving")
        for src_j, dst_j, scale_j in _moving_pieces(mv_ap, out_ap, mv_scale, n,
                                                    p.moving_max, call):
            reads = [(mv, src_j)] + ([(out, dst_j)] if acc else []) \
                + ([(scales[1], scale_j)] if scales else [])
            t.emit("tensor", MultiplyMoving(dst=dst_j, src=src_j, accumulate=bool(acc),
                                            row=row, col=col, double_row=double,
                                            scale=scale_j), reads=reads,
                   writes=[(out, dst_j)])

    return _finish(t, lambda: _out(t, (m, n), acc_dt[0], "psum", col), make, "matmul", mask, dst)


def _moving_limit(p, itemsize: int) -> int:
    """The widest moving tile of a matmul into PSUM elements of ``itemsize`` bytes: the
    array's ``moving_max``, or from NeuronCore-v4 the whole PSUM ("up to 4096 for float32 dst
    or 8192 for bfloat16 dst, matching the size of 8x PSUM banks" [NKI ``nc_matmul``])."""
    return p.psum_bytes // itemsize if p.generation >= 4 else p.moving_max


def _moving_pieces(src: AP, dst: AP, scale: AP | None, n: int, step: int, call: str):
    """``(src, dst, scale)`` of each multiply a matmul of ``n`` columns makes: one, or (a
    NeuronCore-v4 moving tile wider than the array streams in one multiply, ``step``) one
    for each ``step`` columns, the same columns of ``dst`` and of the MX ``scale``."""
    if n <= step:
        return [(src, dst, scale)]
    if len(src.dims) != 1 or len(dst.dims) != 1 or (scale is not None
                                                    and len(scale.dims) != 1):
        raise NotSupported(f"'{call}' of a moving tile wider than {step} whose free "
                           f"dimensions do not merge", "a contiguous moving tile and dst")

    def cols(ap, j, w):
        (_, stride), = ap.dims
        return replace(ap, offset=ap.offset + j * stride * ap.itemsize, dims=((w, stride),))

    return [(cols(src, j, min(step, n - j)), cols(dst, j, min(step, n - j)),
             None if scale is None else cols(scale, j, min(step, n - j)))
            for j in range(0, n, step)]


def _dropping(mask):
    """What :func:`_finish` is given of a mask its op has applied to its operands itself:
    only whether it drops the op."""
    return False if dropped(mask) else None


def rows_of(mask):
    """``mask`` on the partition axis alone: what cuts a result whose free axes are not its
    operand's (a reduction, a search's 8, statistics) and an operand of one value a
    partition."""
    if isinstance(mask, Mask):
        return Mask({0: mask.ranges[0]}) if 0 in mask.ranges else None
    return mask


def _swapped(mask):
    """``mask`` with its first two axes swapped: what cuts a transpose's result."""
    if isinstance(mask, Mask):
        return Mask({{0: 1, 1: 0}.get(a, a): r for a, r in mask.ranges.items()})
    return mask


def _finish(t, fresh, make, kind: str, mask, dst):
    """Pend the op into a new tile (``fresh()``), or emit it into ``dst``; either cut by
    ``mask``. As NKI has it, the result of an op with a mask is a tile of its operands'
    whole shape, of which the op writes the positions the mask keeps (a result whose axes
    are not its operand's is cut on the partition axis, :func:`_rows`)."""
    if dst is None:
        return t.pend(fresh(), make, kind, mask)
    t.commit()
    if not dropped(mask):
        make(dst.cut(mask), None)
    return None


def partition_broadcast(data: View, partitions: int, *, call: str = "broadcast_to") -> View:
    """A one-partition tile ``data`` [1, N] copied into ``partitions`` partitions, on the
    tensor engine as NKI does a partition broadcast: a stationary of ones [1, partitions]
    times ``data`` a PSUM bank of columns at a time, exact (one product of 1 per sum). A
    float32 broadcast of one bank or less is the PSUM tile itself (fp32); a longer one, or
    of another format, is copied bank by bank into an SBUF tile of ``data``'s format by the
    scalar engine. The ones are a compile-time constant [NKI2, the tensor engine's
    "Alternative Use Case"]: one tile per partition count and format, filled once by
    GpSimd's memset and kept for the rest of the launch, not one per broadcast. An integer
    tile, which the array does not multiply, goes by DMA (:func:`_dma_broadcast`)."""
    t = current(call)
    t.commit()
    x = _tile(data, call, "data")
    if x.ndim != 2 or x.shape[0] != 1:
        raise NotSupported(f"a partition broadcast of {list(x.shape)}",
                           "a partition broadcast of a 2-dimensional tile of one partition")
    if x.dt not in t.params.formats or x.dt.startswith("int"):
        return _dma_broadcast(t, x, partitions, call)
    n, bank = x.shape[1], t.params.moving_max
    key = ("ones", partitions, x.dt)
    ones = t.constant_tiles.get(key)
    if ones is None:  # a compile-time constant: made once, read by every broadcast
        ones = t.constant_tiles[key] = _out(t, (1, partitions), x.dt)
        t.memset(ones, 1.0, "gpsimd", call)
    if x.dt == "fp32" and n <= bank:
        return nc_matmul(ones, x, call=call)
    out = _out(t, (partitions, n), x.dt)
    for c0 in range(0, n, bank):
        c1 = min(n, c0 + bank)
        ps = nc_matmul(ones, x[:, c0:c1], call=call)
        tensor_copy(ps, engine=2, dst=out[:, c0:c1], call=call)
    return out


def _dma_broadcast(t, x: View, partitions: int, call: str) -> View:
    """The partition broadcast of a type the tensor engine does not multiply (the integer
    types): ``x`` [1, N] stored to an HBM scratch row and loaded into every partition by
    one DMA that reads the row again for each (a partition stride of 0)."""
    n = x.shape[1]
    row = t.hbm(f"{call}_row", (1, n), x.dt)
    dma_copy(row, x, call=call)
    out = _out(t, (partitions, n), x.dt)
    every = View(row.buf, x.dt, [(partitions, 0, False), (n, 1, False)], row.part, row.off)
    dma_copy(out, every, call=call)
    return out


def nc_transpose(data, *, mask=None, dtype=None, engine=None, dst=None,
                 call: str = "nc_transpose"):
    """``data`` [P, F] -> [F, P], in its own format: through the tensor engine into PSUM, or
    with ``engine`` the vector engine, up to its ``vector_transpose`` a side, SBUF or PSUM
    to either (into a new SBUF tile)."""
    t = current(call)
    t.commit()
    whole = _tile(data, call, "data")
    x = whole.cut(mask)
    eng = _engine(engine, ("tensor", "vector"), call)
    p, f = _shape2(x, call, "data")
    full = tuple(reversed(_shape2(whole, call, "data")))
    if eng == "vector":
        return _vector_transpose(t, x, p, f, full, dtype, dst, call, mask)
    p_lim = t.params.rows
    if p > p_lim:
        raise NkiError(f"size of dimension 0 in 'data{list(x.shape)}' of '{call}' exceed "
                       f"architecture limitation of {p_lim}",
                       "err_size_of_dimension_exceed_arch_limit")
    _limit(x, f, t.params.cols, call, "data")
    src = t.ap(x, call, "data", ("sbuf",))
    out_dt = x.dt

    def make(out: View, _):
        if out.buf.space != "psum" or out.dt != out_dt:
            tmp = _out(t, (f, p), out_dt, "psum")
            make(tmp, None)
            tensor_copy(tmp, dst=out, call=call)
            return
        out_ap = t.ap(out, call, "dst", ("psum",))
        t.emit("tensor", Transpose(dst=out_ap, src=src), reads=[(x, src)],
               writes=[(out, out_ap)])

    fresh = lambda: _out(t, full, out_dt, "psum")  # noqa: E731
    if dtype is not None and isa_dtype(dtype) != out_dt:
        res = _finish(t, fresh, make, "transpose", _swapped(mask), None)
        return tensor_copy(res, dtype=dtype, dst=dst, mask=_swapped(mask), call=call)
    return _finish(t, fresh, make, "transpose", _swapped(mask), dst)


def _vector_transpose(t, x: View, p: int, f: int, full: tuple, dtype, dst, call: str,
                      mask=None):
    """nc_transpose on the vector engine (:func:`nc_transpose`), of a result whose whole
    shape is ``full``."""
    limit = t.params.vector_transpose
    if p > limit:
        raise NkiError(f"size of dimension 0 in 'data{list(x.shape)}' of '{call}' exceed "
                       f"architecture limitation of {limit}",
                       "err_size_of_dimension_exceed_arch_limit")
    _limit(x, f, limit, call, "data")
    src = t.ap(x, call, "data", ("sbuf", "psum"))
    out_dt = x.dt

    def make(out: View, _):
        if out.dt != out_dt:
            tmp = _out(t, (f, p), out_dt)
            make(tmp, None)
            tensor_copy(tmp, dst=out, call=call)
            return
        out_ap = t.ap(out, call, "dst", ("sbuf", "psum"))
        t.emit("vector", Transpose(dst=out_ap, src=src), reads=[(x, src)],
               writes=[(out, out_ap)])

    fresh = lambda: _out(t, full, out_dt)  # noqa: E731
    if dtype is not None and isa_dtype(dtype) != out_dt:
        res = _finish(t, fresh, make, "transpose", _swapped(mask), None)
        return tensor_copy(res, dtype=dtype, dst=dst, mask=_swapped(mask), call=call)
    return _finish(t, fresh, make, "transpose", _swapped(mask), dst)


# --- vector, scalar and GpSimd engines ----------------------------------------------------

def check_row_sum(reduce_op, reduce_cmd, call: str) -> None:
    """An activation's reduction: a sum along the free axis within the instruction (its
    ``reduce_op`` add, or None), not accumulated across instructions."""
    if reduce_op is not None and VECTOR_OPS.get(reduce_op) != VectorOp.ADD:
        raise NotSupported(f"reduce_op {getattr(reduce_op, '__name__', reduce_op)!r} of "
                           f"'{call}'", "reduce_op add")
    if int(reduce_cmd) == 2:
        raise NotSupported("reduce_cmd=reduce (accumulating across instructions)",
                           "reduce_cmd idle, reset or reset_reduce")


def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=0, mask=None, dtype=None, dst=None, call: str = "activation",
               engine: str = "scalar"):
    """``op(data * scale + bias)`` on the scalar engine (or on the vector engine, for a
    function it evaluates: ``engine``); with ``reduce_op`` add, the sum along the free axis
    into ``reduce_res``. A ``scale`` of one value per partition (a tile: the ISA's scale is
    an immediate) is applied with the bias by a TensorScalar into fp32 first, the same
    multiply and add, on the scalar engine, whose multiply-add it is in NKI."""
    t = current(call)
    t.commit()
    whole = _tile(data, call, "data")
    x = whole.cut(mask)
    func = t.builder.function(_func(op, call))
    if isinstance(scale, View):  # the ISA's scale is an immediate: scale (and bias) first
        pre = tensor_scalar(whole, np.multiply, scale, op1=None if bias is None else np.add,
                            operand1=bias, dtype=np.float32, engine=2, mask=mask, call=call)
        return activation(op, pre, reduce_op=reduce_op, reduce_res=reduce_res,
                          reduce_cmd=reduce_cmd, dtype=dtype or x.dtype, mask=mask, dst=dst,
                          call=call)
    b = None
    if bias is not None:
        b = _tile(bias, call, "bias").cut(rows_of(mask))
        _same_partitions(x, b, call, "data", "bias")
    red = None
    if reduce_op is not None or reduce_res is not None:
        check_row_sum(reduce_op, reduce_cmd, call)
        if reduce_res is None:
            raise NkiError(f"'{call}' with reduce_op needs reduce_res")
        red = _tile(reduce_res, call, "reduce_res").cut(rows_of(mask))
    src = t.ap(x, call, "data")
    bias_ap = t.ap(b, call, "bias") if b is not None else None
    out_dt = isa_dtype(dtype) if dtype is not None else x.dt

    def make(out: View, _):
        out_ap = t.ap(out, call, "dst")
        reads = [(x, src)] + ([(b, bias_ap)] if b is not None else [])
        writes = [(out, out_ap)]
        red_ap = None
        if red is not None:
            red_ap = t.ap(red, call, "reduce_res")
            writes.append((red, red_ap))
        t.emit(engine, Activation(dst=out_ap, src=src, func=func, bias=bias_ap,
                                    reduce_dst=red_ap, scale=float(scale)),
               reads=reads, writes=writes)

    return _finish(t, lambda: _out(t, whole.shape, out_dt), make, "compute", mask, dst)


def _scalar_operand(t, v, x: View, call: str, name: str):
    """(access pattern or None, immediate, view) of a tensor_scalar operand: a number or a
    tile of one element per partition."""
    if isinstance(v, View):
        _same_partitions(x, v, call, "data", name)
        ap = t.ap(v, call, name)
        if ap.free != 1:
            raise NkiError(f"operand '{name}' of '{call}' must have one element per "
                           f"partition, not {list(v.shape)}")
        return ap, 0.0, v
    return None, float(v), None


def _word(value: float) -> float:
    """The immediate of a bitwise operation: an integer's 32-bit word, as the fp32 whose
    bits it is (a word that is a signalling NaN as fp32 arrives with its quiet bit set);
    any other number as it is."""
    if not float(value).is_integer():
        return value
    return float(np.array(int(value) & 0xFFFFFFFF, dtype=np.uint32).view(np.float32))


def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None,
                  reverse1=False, *, dtype=None, mask=None, engine=None, dst=None,
                  call: str = "tensor_scalar"):
    """``(data op0 operand0) op1 operand1``, each operand a number or one value per
    partition; ``reverse0`` / ``reverse1`` put the operand first (a reversed comparison is
    the opposite one, a reversed subtraction ``data * -1 + operand``); a stage of
    :func:`bypass` is left out, and so is an ``op0`` of None (nki-library passes one where a
    clamp is not asked for)."""
    if op0 is None:
        op0, operand0 = bypass, None
    if op1 is bypass:
        op1, operand1, reverse1 = None, None, False
    if op0 is bypass:
        if op1 is None:
            return tensor_copy(data, mask=mask, dtype=dtype, engine=engine, dst=dst, call=call)
        op0, operand0, reverse0, op1, operand1, reverse1 = op1, operand1, reverse1, None, None, \
            False
    t = current(call)
    t.commit()
    whole = _tile(data, call, "data")
    x = whole.cut(mask)
    eng = _engine(engine, ("vector", "scalar", "gpsimd"), call)
    for op, operand, name in ((op0, operand0, "operand0"), (op1, operand1, "operand1")):
        if op in UNARY_OPS and not (operand is None or (not isinstance(operand, View)
                                                        and float(operand) == 0.0)):
            raise NkiError(f"'{call}': {name} of the unary {op.__name__} must be None or 0, "
                           f"not {operand!r}")
    if op0 in UNARY_OPS:
        operand0 = 0.0
    if op1 in UNARY_OPS:
        operand1 = 0.0
    o0 = UNARY_OPS.get(op0) or _op(op0, call)
    o1 = (UNARY_OPS.get(op1) or _op(op1, call)) if op1 is not None else VectorOp.COPY
    if reverse0 and o0 == VectorOp.SUBTRACT:  # operand0 - data = data * -1 + operand0
        if op1 is None:
            return tensor_scalar(data, np.multiply, -1.0, op1=np.add, operand1=operand0,
                                 dtype=dtype, mask=mask, engine=engine, dst=dst, call=call)
        first = tensor_scalar(data, np.multiply, -1.0, op1=np.add, operand1=operand0,
                              dtype=np.float32, mask=mask, engine=engine, call=call)
        return tensor_scalar(first, op1, operand1, reverse1, dtype=dtype, mask=mask,
                             engine=engine, dst=dst, call=call)
    o0 = _reversed(o0, call) if reverse0 else o0
    if reverse1 and o1 != VectorOp.COPY:
        o1 = _reversed(o1, call)
    own = {ENGINE_ONLY_OPS[o] for o in (o0, o1) if o in ENGINE_ONLY_OPS}
    if len(own) > 1:
        raise NkiError(f"'{call}': {o0.name.lower()} and {o1.name.lower()} run on two engines "
                       f"({' and '.join(sorted(own))})")
    if own:  # NKI: power and rsqrt run on GpSimd, reciprocal on the Vector Engine
        eng = _engine(engine, tuple(own), call)
    operand0, operand1 = (v.cut(rows_of(mask)) if isinstance(v, View) else v
                          for v in (operand0, operand1))
    a0, i0, v0 = _scalar_operand(t, operand0, x, call, "operand0")
    a1, i1, v1 = (_scalar_operand(t, operand1, x, call, "operand1") if op1 is not None
                  else (None, 0.0, None))
    # a bitwise operation takes an integer immediate's word
    i0 = _word(i0) if o0 in BITWISE_OPS else i0
    i1 = _word(i1) if o1 in BITWISE_OPS else i1
    src = t.ap(x, call, "data", ("sbuf",) if eng == "gpsimd" else ("sbuf", "psum"))
    out_dt = isa_dtype(dtype) if dtype is not None else x.dt

    def make(out: View, _):
        out_ap = t.ap(out, call, "dst")
        reads = [(x, src)] + [(v, a) for v, a in ((v0, a0), (v1, a1)) if v is not None]
        t.emit(eng, TensorScalar(dst=out_ap, src=src, op0=o0, operand0=a0, imm0=i0, op1=o1,
                                 operand1=a1, imm1=i1), reads=reads, writes=[(out, out_ap)])

    return _finish(t, lambda: _out(t, whole.shape, out_dt), make, "compute", mask, dst)


def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=None, dst=None,
                  call: str = "tensor_tensor"):
    """``data1 op data2`` element by element on the vector engine (or GpSimd)."""
    t = current(call)
    t.commit()
    wa, wb = _tile(data1, call, "data1"), _tile(data2, call, "data2")
    a, b = wa.cut(mask), wb.cut(mask)
    o = _op(op, call)
    # an operation of one engine alone (NKI: power on GpSimd) runs there
    eng = _engine(engine, (ENGINE_ONLY_OPS[o],) if o in ENGINE_ONLY_OPS
                  else ("vector", "gpsimd"), call)
    _same_partitions(a, b, call, "data1", "data2")
    a, b = _free_broadcast(a, b), _free_broadcast(b, a)
    spaces = ("sbuf",) if eng == "gpsimd" else ("sbuf", "psum")
    aa, ba = t.ap(a, call, "data1", spaces), t.ap(b, call, "data2", spaces)
    if aa.free != ba.free:
        raise NkiError(f"'{call}': operand shapes {list(a.shape)} and {list(b.shape)} differ")
    out_dt = isa_dtype(dtype) if dtype is not None else promote(a.dt, b.dt)

    def make(out: View, _):
        out_ap = t.ap(out, call, "dst", spaces)
        t.emit(eng, TensorTensor(dst=out_ap, a=aa, b=ba, op=o), reads=[(a, aa), (b, ba)],
               writes=[(out, out_ap)])

    full = _free_broadcast(wa, wb).shape if isinstance(mask, Mask) else a.shape
    return _finish(t, lambda: _out(t, full, out_dt), make, "compute", mask, dst)


def _free_broadcast(x: View, other: View) -> View:
    """``x`` read with a stride of 0 along its size-1 free dimensions where ``other`` has
    more (numpy's broadcasting within the partitions, tiles of one rank: a [P, 1] scale
    against a [P, N] tile), as the vector engine reads a broadcast operand; ``x`` itself
    otherwise."""
    if x.shape == other.shape or x.ndim < 2:
        return x
    if x.ndim != other.ndim or any(m != n and m != 1 for m, n in zip(x.shape[1:],
                                                                     other.shape[1:],
                                                                     strict=True)):
        return x
    return x.broadcast_to((x.shape[0],) + other.shape[1:])


def _axes(x: View, axis, call: str) -> list[int]:
    axes = sorted({int(a) % x.ndim for a in (axis if isinstance(axis, (list, tuple))
                                              else (axis,))})
    if 0 in axes:
        raise NkiError(f"'{call}' reduces free axes only, not the partition axis 0")
    return axes


def _partial_reduce(op: VectorOp, x: View, axes: list[int], out_dt: str, keepdims: bool,
                    negate: bool, dst, call: str):
    """A reduction along some of the free axes: the ISA's TensorReduce takes a whole free
    axis, so the reduced positions are combined in index order by TensorTensor operations
    over views of the kept axes (in fp32, as the engine computes), one instruction per
    reduced position; the last writes the result."""
    t = current(call)
    x.check_bounds()
    kept = [a for a in range(1, x.ndim) if a not in axes]
    perm = x._with([x.dims[0]] + [x.dims[a] for a in kept] + [x.dims[a] for a in axes],
                   x.part, x.off, ())
    lead = (slice(None),) * (1 + len(kept))
    shape = tuple(1 if keepdims and a in axes else n for a, n in enumerate(x.shape)
                  if keepdims or a not in axes)
    acc = perm[lead + (0,) * len(axes)]
    positions = list(np.ndindex(*(x.shape[a] for a in axes)))[1:]
    if not positions:
        acc = tensor_copy(acc, dtype=np.float32, call=call)
    for i, pos in enumerate(positions):
        last = i == len(positions) - 1 and not negate
        acc = tensor_tensor(acc, perm[lead + pos], op, dtype=np.float32 if not last
                            else numpy_dtype(out_dt), call=call)
    if negate:
        acc = tensor_scalar(acc, np.multiply, -1.0, dtype=numpy_dtype(out_dt), call=call)
    t.commit()
    res = acc.reshape(shape) if keepdims else acc
    if dst is not None:
        tensor_copy(res, dst=dst, call=call)
        return None
    return res


def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False,
                  dst=None, call: str = "tensor_reduce"):
    """The sum or maximum (minimum: the maximum of the negated tile, negated) along the free
    axes, one value per partition; ``negate`` multiplies the result by -1. The other
    reductions NKI allows (:data:`_SCANNED`: a product, the bitwise and logical operators)
    are a TensorTensorScan from the operator's identity, in order along the row, whose last
    element is the result (the hardware's one reduction)."""
    t = current(call)
    t.commit()
    whole = _tile(data, call, "data")
    x, whole = whole.cut(mask).as_column(), whole.as_column()
    axes = _axes(x, axis, call)
    o = _op(op, call)
    if o not in (VectorOp.ADD, VectorOp.MAX, VectorOp.MIN) and o not in _SCANNED:
        raise NotSupported(f"reduction {o.name.lower()} in '{call}'",
                           "add, max, min, multiply, bitwise_and/or/xor and "
                           "logical_and/or/xor")
    if negate and o in BITWISE_OPS:
        raise NkiError(f"'{call}': negate of a {o.name.lower()} reduction (negate is "
                       f"arithmetic)")
    out_dt = isa_dtype(dtype) if dtype is not None else x.dt
    if axes != list(range(1, x.ndim)):
        if dst is None and isinstance(mask, Mask):  # the whole result, the kept part written
            kept = [a for a in range(whole.ndim) if a not in axes]
            at = {a: a if keepdims else kept.index(a) for a in kept}
            res = _out(t, tuple(1 if keepdims and a in axes else n
                                for a, n in enumerate(whole.shape)
                                if keepdims or a not in axes), out_dt)
            cut = Mask({at[a]: r for a, r in mask.ranges.items() if a in at})
            _partial_reduce(o, x, axes, out_dt, keepdims, negate, res.cut(cut), call)
            return res
        return _partial_reduce(o, x, axes, out_dt, keepdims, negate, dst, call)
    src = t.ap(x, call, "data")
    shape = (whole.shape[0],) + ((1,) * (x.ndim - 1) if keepdims else ())
    p = x.shape[0]

    def make(out: View, _):
        if o in _SCANNED:
            _scanned_reduce(o, x, out, negate, call)
            return
        out_ap = t.ap(out, call, "dst")
        s, s_ap, flip = x, src, negate
        if o == VectorOp.MIN:  # min(x) = -max(-x)
            s = _out(t, x.shape, "fp32")
            s_ap = t.ap(s, call, "data")
            t.emit("vector", TensorScalar(dst=s_ap, src=src, op0=VectorOp.MULTIPLY,
                                          imm0=-1.0), reads=[(x, src)], writes=[(s, s_ap)])
            flip = not flip
        red = Reduce.SUM if o == VectorOp.ADD else Reduce.MAX
        if not flip:
            t.emit("vector", TensorReduce(dst=out_ap, src=s_ap, reduce=red),
                   reads=[(s, s_ap)], writes=[(out, out_ap)])
            return
        r = _out(t, (p, 1), "fp32")
        r_ap = t.ap(r, call, "dst")
        t.emit("vector", TensorReduce(dst=r_ap, src=s_ap, reduce=red), reads=[(s, s_ap)],
               writes=[(r, r_ap)])
        t.emit("vector", TensorScalar(dst=out_ap, src=r_ap, op0=VectorOp.MULTIPLY,
                                      imm0=-1.0), reads=[(r, r_ap)], writes=[(out, out_ap)])

    return _finish(t, lambda: _out(t, shape, out_dt), make, "compute", rows_of(mask), dst)


#: The value each cumulative or scanned reduction starts from (its identity; a bitwise
#: one as the fp32 whose word it is).
_IDENTITY = {VectorOp.ADD: 0.0, VectorOp.SUBTRACT: 0.0, VectorOp.MULTIPLY: 1.0,
             VectorOp.MAX: -math.inf, VectorOp.MIN: math.inf, VectorOp.LOGICAL_AND: 1.0,
             VectorOp.LOGICAL_OR: 0.0, VectorOp.LOGICAL_XOR: 0.0,
             VectorOp.BITWISE_AND: _word(-1), VectorOp.BITWISE_OR: 0.0,
             VectorOp.BITWISE_XOR: 0.0}
#: The reductions :func:`tensor_reduce` makes by a scan from their identity.
_SCANNED = (VectorOp.MULTIPLY, VectorOp.LOGICAL_AND, VectorOp.LOGICAL_OR,
            VectorOp.LOGICAL_XOR, VectorOp.BITWISE_AND, VectorOp.BITWISE_OR,
            VectorOp.BITWISE_XOR)
#: The second operations of :func:`tensor_scalar_cumulative`.
_CUMULATIVE = (VectorOp.ADD, VectorOp.SUBTRACT, VectorOp.MULTIPLY, VectorOp.MAX, VectorOp.MIN)


def _scanned_reduce(o: VectorOp, x: View, out: View, negate: bool, call: str) -> None:
    """``out`` (one value per partition) = ``o`` of each row of ``x``, in order: a scan of
    ``x`` from ``o``'s identity, its second operation passing the running value on (a
    bitwise one's word ORed with zeros, kept as it is), then its last column copied."""
    p = x.shape[0]
    f = math.prod(x.shape[1:])
    flat = x.reshape((p, f))
    bitwise = o in BITWISE_OPS
    if bitwise:
        zeros = _out(current(call), (p, f), x.dt)
        memset(zeros, 0.0, call=call)
    run = tensor_tensor_scan(flat, zeros if bitwise else flat, _IDENTITY[o], o,
                             VectorOp.BITWISE_OR if bitwise else VectorOp.COPY,
                             dtype=np.float32 if not bitwise else numpy_dtype(x.dt), call=call)
    last = run[:, f - 1:f]
    if negate:
        tensor_scalar(last, np.multiply, -1.0, dst=out.reshape((p, 1)), call=call)
    else:
        tensor_copy(last, dst=out.reshape((p, 1)), call=call)


def tensor_scalar_reduce(data, op0, operand0, reduce_op, reduce_res, reverse0=False, *,
                         dtype=None, mask=None, dst=None,
                         call: str = "tensor_scalar_reduce"):
    """``data op0 operand0`` on the vector engine, and ``reduce_op`` of that result (as
    written, in its type) along every free axis into ``reduce_res`` in place: the
    TensorScalar, then a TensorReduce of what it wrote (NKI's one instruction costs
    ``max(MIN_II, N) + MIN_II`` vector cycles, these two about ``2N``)."""
    t = current(call)
    t.commit()
    whole = _tile(data, call, "data")
    x = whole.cut(mask)
    res = _tile(reduce_res, call, "reduce_res").cut(rows_of(mask))
    if isinstance(operand0, View):
        operand0 = operand0.cut(rows_of(mask))
    out_dt = isa_dtype(dtype) if dtype is not None else x.dt

    def make(out: View, _):
        tensor_scalar(x, op0, operand0, reverse0, dst=out, call=call)  # the vector engine
        tensor_reduce(reduce_op, out, tuple(range(1, out.ndim)), dst=res, call=call)

    return _finish(t, lambda: _out(t, whole.shape, out_dt), make, "compute", mask, dst)


def tensor_copy(src, *, mask=None, dtype=None, engine=None, dst=None,
                call: str = "tensor_copy"):
    """A copy (and cast to ``dtype`` or the destination's format) on the vector engine, or
    the scalar engine or GpSimd where asked; of a tile at a run-time offset, a
    :class:`TensorCopyDynamic` (the offset read when it runs, every place it may name taken
    as read)."""
    t = current(call)
    t.commit()
    whole = _tile(src, call, "src")
    x = whole.cut(mask)
    eng = _engine(engine, ("vector", "scalar", "gpsimd"), call)
    spaces = ("sbuf",) if eng == "gpsimd" else ("sbuf", "psum")
    s_ap = t.ap(x, call, "src", spaces)
    out_dt = isa_dtype(dtype) if dtype is not None else x.dt
    moved = x.moved  # a tile at a run-time offset (nisa.tensor_copy_dynamic_src)
    if moved is not None:
        offset = _with_partition(moved.tile)
        o_ap = t.ap(offset, call, "offset", ("sbuf",))
        places = replace(s_ap, dims=((moved.count, moved.stride),) + s_ap.dims)

    def make(out: View, _):
        out_ap = t.ap(out, call, "dst", spaces)
        if out_ap.partitions != s_ap.partitions or out_ap.free != s_ap.free:
            raise NkiError(f"'{call}': source {list(x.shape)} and destination "
                           f"{list(out.shape)} differ")
        if moved is not None:  # the offset read when it runs; every place taken as read
            t.emit(eng, TensorCopyDynamic(dst=out_ap, src=s_ap, offset=o_ap,
                                          stride=moved.stride, count=moved.count),
                   reads=[(x, s_ap), (x, places), (offset, o_ap)], writes=[(out, out_ap)])
            return
        if eng != "scalar" and out.dt == x.dt and out.dt in ("int32", "uint32"):
            # bit-accurate, as NKI documents the vector and GpSimd engines' copy between
            # equal types: the words OR 0 (the ISA's copy goes by value)
            ins = TensorScalar(dst=out_ap, src=s_ap, op0=VectorOp.BITWISE_OR, imm0=0.0)
        else:
            ins = TensorCopy(dst=out_ap, src=s_ap)
        t.emit(eng, ins, reads=[(x, s_ap)], writes=[(out, out_ap)])

    return _finish(t, lambda: _out(t, whole.shape, out_dt), make, "compute", mask, dst)


def tensor_copy_dynamic_src(src, *, mask=None, dtype=None, engine=None, dst=None):
    """A copy of ``src``, a tile at a run-time offset (``t[..., offsets[0, i] + e]``):
    :func:`tensor_copy`'s (:class:`TensorCopyDynamic`)."""
    return tensor_copy(src, mask=mask, dtype=dtype, engine=engine, dst=dst,
                       call="tensor_copy_dynamic_src")


def memset(dst: View, value, *, engine=None, call: str = "memset") -> None:
    """``dst`` filled with ``value``; a tile of MX quads only with 0 [NKI ``memset``: "For x4
    packed types ... only value=0 is supported"]: its bytes zeroed as integers of its size."""
    t = current(call)
    t.commit()
    if dst.dt in MX_DTYPES:
        if float(value) != 0.0:
            raise NkiError(f"'{call}' of a {dst.dt} tile takes value 0 only, not {value!r}")
        dst = dst.view("uint32" if dst.itemsize == 4 else "uint16")
    eng = _engine(engine, ("gpsimd", "vector"), call) if engine else \
        ("gpsimd" if dst.buf.space == "sbuf" else "vector")
    t.memset(dst, float(value), eng, call)


def dma_copy(dst: View, src: View, *, mask=None, skip: bool = False, rmw_op=None,
             call: str = "dma_copy") -> None:
    """A DMA from ``src`` to ``dst`` (HBM or SBUF; of two types, each element cast through
    fp32, as NKI's DMA converts) on the next DMA queue; rows of a tile-indexed side out of
    its tensor skipped with ``skip``, else an error; with ``rmw_op`` (``np.add`` or
    ``nl.add``), the sum into ``dst``."""
    from . import language as nl

    if rmw_op is not None and rmw_op is not np.add and rmw_op is not nl.add:
        raise NotSupported(f"{call}(dst_rmw_op={getattr(rmw_op, '__name__', rmw_op)})",
                           "dst_rmw_op=np.add or nl.add")
    t = current(call)
    t.commit()
    if dropped(mask):
        return
    d = _tile(dst, call, "dst").cut(mask)
    s = _tile(src, call, "src").cut(mask)
    # an element of one partition (``t[0, 0]``) is that partition
    d, s = (v if v.buf.space == "hbm" else _with_partition(v) for v in (d, s))
    for v, name in ((d, "dst"), (s, "src")):
        if v.buf.space == "psum":
            t.ap(v, call, name, ("hbm", "sbuf"))
    t.dma(d, s, call, skip, rmw_op is not None)


def stream_shuffle(src: View, dst: View, shuffle_mask, *, mask=None,
                   call: str = "nc_stream_shuffle") -> None:
    """``dst``'s partitions taken from ``src``'s within each quadrant of 32 on the vector
    engine (:class:`~hdl.core.isa.StreamShuffle`): entry ``i`` of ``shuffle_mask`` (32 of
    them, integers) the source partition of each quadrant's ``i``-th, 255 leaving it as it
    is; ``mask`` cuts ``dst``."""
    t = current(call)
    t.commit()
    if dropped(mask):
        return
    s, d = _tile(src, call, "src"), _tile(dst, call, "dst").cut(mask)
    s, d = (_with_partition(v) for v in (s, d))
    s, d = (v.as_column() if v.ndim == 1 else v for v in (s, d))
    entries = tuple(int(m) for m in shuffle_mask)
    if len(entries) != SHUFFLE_LANES:
        raise NkiError(f"'{call}': shuffle_mask has {len(entries)} entries, not "
                       f"{SHUFFLE_LANES}")
    if s.dt != d.dt or math.prod(s.shape[1:]) != math.prod(d.shape[1:]):
        raise NkiError(f"'{call}' moves one type and as many elements a partition: src "
                       f"{list(s.shape)} {s.dt}, dst {list(d.shape)} {d.dt}")
    a, b = t.ap(d, call, "dst"), t.ap(s, call, "src")
    reads = [(s, b)] + ([(d, a)] if SHUFFLE_KEEP in entries else [])
    t.emit("vector", StreamShuffle(dst=a, src=b, shuffle=entries), reads=reads,
           writes=[(d, a)])


# --- searches, random draws and gathers ------------------------------------------------------

def _flat(t, view: View, call: str, operand: str, spaces=("sbuf", "psum"), start=True):
    """``view``'s access pattern with its free dimensions as one (an instruction that
    reads a partition's elements in order); ``start`` as :meth:`Tracer.ap`'s."""
    ap = t.ap(view, call, operand, spaces, start=start)
    if len(ap.dims) > 1:
        raise NotSupported(f"'{call}' of {operand} {list(view.shape)} whose free "
                           f"dimensions do not merge", f"a contiguous {operand}")
    return ap


def _one(t, call: str, make_ins, inputs: dict, shape, out_dt: str, mask, dst,
         engine: str = "vector", extra=()):
    """Emit ``make_ins(dst_ap, **input_aps)`` on ``engine`` into a new tile of ``shape``
    and ``out_dt`` (or ``dst``), cut by ``mask`` (:func:`_finish`); ``extra``: further
    (view, access pattern) pairs it writes."""
    aps = {name: _flat(t, v, call, name) for name, v in inputs.items()}

    def make(out: View, _):
        out_ap = t.ap(out, call, "dst")
        t.emit(engine, make_ins(out_ap, **aps),
               reads=[(inputs[n], a) for n, a in aps.items()],
               writes=[(out, out_ap), *extra])

    return _finish(t, lambda: _out(t, shape, out_dt), make, "compute", mask, dst)


def range_select(on_true: View, comp_op0, comp_op1, bound0: View, bound1: View, *,
                 reduce_cmd=0, reduce_res: View | None = None, reduce_op=None,
                 range_start=0, on_false_value=None, mask=None, dtype=None, dst=None,
                 call: str = "range_select"):
    """``on_true`` where its places ``range_start + i`` pass both comparisons with the
    bounds, else ``on_false_value`` (:class:`RangeSelect`); the row maxima go through the
    vector engine's reduction register (:func:`reduce_into_register`)."""
    t = current(call)
    t.commit()
    register_op(reduce_op, call)
    ops = [_op(op, call) for op in (comp_op0, comp_op1)]
    if any(op not in COMPARISONS.values() for op in ops):
        raise NotSupported(f"{call}(comp_op0={getattr(comp_op0, '__name__', comp_op0)}, "
                           f"comp_op1={getattr(comp_op1, '__name__', comp_op1)})",
                           "equal, less, less_equal, greater, greater_equal")
    whole = _tile(on_true, call, "on_true_tile")
    x = whole.cut(mask)
    b0 = _tile(bound0, call, "bound0").as_column().cut(rows_of(mask))
    b1 = _tile(bound1, call, "bound1").as_column().cut(rows_of(mask))
    src, a0, a1 = (t.ap(v, call, n) for v, n in ((x, "on_true_tile"), (b0, "bound0"),
                                                 (b1, "bound1")))
    fill = float(np.finfo(np.float32).min) if on_false_value is None else float(on_false_value)
    out_dt = isa_dtype(dtype) if dtype is not None else x.dt

    def make(out: View, _):
        out_ap = t.ap(out, call, "dst")
        t.emit("vector", RangeSelect(dst=out_ap, src=src, bound0=a0, bound1=a1, op0=ops[0],
                                     op1=ops[1], start=int(range_start), fill=fill),
               reads=[(x, src), (b0, a0), (b1, a1)], writes=[(out, out_ap)])
        reduce_into_register(out, reduce_cmd, reduce_res, call, rows_of(mask))

    return _finish(t, lambda: _out(t, whole.shape, out_dt), make, "compute", mask, dst)


def register_op(reduce_op, call: str) -> None:
    """Refuse a reduction of the vector engine's register other than the maximum (NKI's
    range_select and select_reduce take no other)."""
    if reduce_op is not None and reduce_op not in (np.amax, np.max) and \
            VECTOR_OPS.get(reduce_op) != VectorOp.MAX:
        raise NotSupported(f"{call}(reduce_op={getattr(reduce_op, '__name__', reduce_op)})",
                           "the maximum, as NKI")


def reduce_into_register(out: View, reduce_cmd, reduce_res: View | None,
                         call: str, kept=None) -> None:
    """The vector engine's reduction register across instructions, for ``out`` just
    written: ``reduce_cmd`` reset clears it, reset_reduce sets it to ``out``'s row maxima,
    reduce takes the larger of it and them; ``reduce_res`` then takes it, in the partitions
    that ``kept`` (the instruction's mask on the partition axis) keeps. The register is
    an fp32 [P, 1] tile of the trace: each maxima a TensorReduce, each accumulation a
    TensorTensor (the hardware keeps both in the instruction)."""
    t = current(call)
    cmd = int(reduce_cmd)
    if cmd == 1:
        t.registers.pop("vector", None)
    elif cmd in (2, 3):
        rows = _out(t, (out.shape[0], 1), "fp32")
        tensor_reduce(np.max, out, tuple(range(1, out.ndim)), dst=rows, call=call)
        held = t.registers.get("vector")
        if cmd == 2 and held is not None:
            both = _out(t, (out.shape[0], 1), "fp32")
            tensor_tensor(held, rows, np.maximum, dst=both, call=call)
            rows = both
        t.registers["vector"] = rows
    if reduce_res is not None:
        held = t.registers.get("vector")
        if held is None:
            raise NkiError(f"'{call}': reduce_res of an empty reduction register (no "
                           f"reduce_cmd reset_reduce or reduce since its reset)")
        tensor_copy(held, dst=_tile(reduce_res, call, "reduce_res").cut(kept), call=call)


def exponential(src, max_value=0.0, *, reduce_res=None, reduce_cmd=0, reduce_init=0.0,
                dst: View, call: str = "exponential") -> None:
    """``exp(src - max_value)`` on the vector engine (an :class:`Activation` there: the
    chip's ``core.vector.functions``), ``max_value`` a number or one fp32 per partition,
    its negation the activation's bias; the row sums go into the vector engine's
    accumulator as ``reduce_cmd`` says (reset_reduce: from zero, load_reduce: from
    ``reduce_init``, reduce: onto what it holds; each addition of the held value a
    TensorTensor), and ``reduce_res`` takes it."""
    t = current(call)
    cmd = int(reduce_cmd)
    if cmd == 1:
        raise NotSupported(f"reduce_cmd reset of '{call}'",
                           "reduce_cmd idle, reset_reduce, reduce or load_reduce")
    if cmd == 0 and reduce_res is not None:
        raise NkiError(f"'{call}': reduce_res with reduce_cmd idle (the accumulator is not "
                       f"used): use reset_reduce, reduce or load_reduce")
    if cmd != 4 and (isinstance(reduce_init, View) or float(reduce_init) != 0.0):
        raise NkiError(f"'{call}': reduce_init is for reduce_cmd load_reduce (0.0 otherwise)")
    x = _tile(src, call, "src")
    rows = x.shape[0]
    bias = None
    if isinstance(max_value, View):
        bias = tensor_scalar(max_value, np.multiply, -1.0, dtype=np.float32, engine=5,
                             call=call)
    elif float(max_value) != 0.0:
        bias = _out(t, (rows, 1), "fp32")
        memset(bias, -float(max_value), engine=5, call=call)
    sums = _out(t, (rows, 1), "fp32") if cmd else None
    activation(np.exp, x, bias=bias, reduce_res=sums, dst=dst, call=call, engine="vector")
    if not cmd:
        return
    start = None
    if cmd == 4:
        start = reduce_init
        if not isinstance(start, View):
            start = _out(t, (rows, 1), "fp32")
            memset(start, float(reduce_init), engine=5, call=call)
    elif cmd == 2:
        start = t.registers.get("vector")
        if start is None:
            raise NkiError(f"'{call}': reduce_cmd reduce onto an empty accumulator (no "
                           f"reset_reduce or load_reduce since its reset)")
    if start is not None:
        both = _out(t, (rows, 1), "fp32")
        tensor_tensor(start, sums, np.add, dst=both, call=call)
        sums = both
    t.registers["vector"] = sums
    if reduce_res is not None:
        tensor_copy(sums, dst=_tile(reduce_res, call, "reduce_res"), call=call)


def sequence_bounds(segment_ids: View, *, dtype=None, dst=None,
                    call: str = "sequence_bounds"):
    """Each element's segment start and end (:class:`SequenceBounds`, GpSimd): a
    [1, 2, N] tile of one partition's N segment ids."""
    t = current(call)
    t.commit()
    x = _tile(segment_ids, call, "segment_ids")
    n = math.prod(x.shape[1:])
    return _one(t, call, lambda d, src: SequenceBounds(dst=d, src=src), {"src": x},
                (x.shape[0], 2, n), isa_dtype(dtype) if dtype is not None else x.dt, None,
                dst, engine="gpsimd")


def local_gather(src_buffer: View, index: View, num_elem_per_idx=1, num_valid_indices=None,
                 *, mask=None, dst=None, call: str = "local_gather"):
    """Each 16-partition group's gather from itself by its uint16 indices, on GpSimd
    (:class:`LocalGather`): [P, valid x per] of the source's type."""
    t = current(call)
    t.commit()
    whole = _tile(src_buffer, call, "src_buffer")
    x = whole.cut(mask)
    i = _tile(index, call, "index").cut(rows_of(mask))
    per = int(num_elem_per_idx)
    valid = int(num_valid_indices) if num_valid_indices else \
        math.prod(i.shape[1:]) * min(16, i.shape[0])
    return _one(t, call, lambda d, src, indices: LocalGather(dst=d, src=src, indices=indices,
                                                             per=per, valid=valid),
                {"src": x, "indices": i}, (whole.shape[0], valid * per), x.dt, rows_of(mask),
                dst, engine="gpsimd")


def max8(src: View, *, mask=None, dtype=None, dst=None, call: str = "max8"):
    """The 8 largest elements of each partition, largest first (:class:`Max8`)."""
    t = current(call)
    t.commit()
    whole = _tile(src, call, "src")
    x = whole.cut(mask)
    return _one(t, call, lambda d, src: Max8(dst=d, src=src), {"src": x},
                (whole.shape[0], 8), isa_dtype(dtype) if dtype is not None else x.dt,
                rows_of(mask), dst)


def find_index8(data: View, vals: View, *, mask=None, dtype=None, dst=None,
                call: str = "nc_find_index8"):
    """Where each of the 8 values of a partition first occurs in it, uint32
    (:class:`FindIndex8`)."""
    t = current(call)
    t.commit()
    if dtype is not None and isa_dtype(dtype) != "uint32":
        raise NotSupported(f"'{call}' into {dtype}", "uint32 indices")
    whole = _tile(data, call, "data")
    x, v = whole.cut(mask), _tile(vals, call, "vals").cut(rows_of(mask))
    return _one(t, call, lambda d, data, vals: FindIndex8(dst=d, data=data, vals=vals),
                {"data": x, "vals": v}, (whole.shape[0], 8), "uint32", rows_of(mask), dst)


def match_replace8(data: View, vals: View, imm: float, *, dst_idx: View | None = None,
                   mask=None, dtype=None, dst=None, call: str = "nc_match_replace8"):
    """``data`` with each of the 8 values of a partition replaced where it first occurs,
    their places into ``dst_idx`` (:class:`MatchReplace8`)."""
    t = current(call)
    t.commit()
    whole = _tile(data, call, "data")
    x, v = whole.cut(mask), _tile(vals, call, "vals").cut(rows_of(mask))
    if dst_idx is not None:
        dst_idx = _tile(dst_idx, call, "dst_idx").cut(rows_of(mask))
    idx_ap = _flat(t, dst_idx, call, "dst_idx", ("sbuf",)) if dst_idx is not None else None
    extra = [(dst_idx, idx_ap)] if dst_idx is not None else []
    return _one(t, call, lambda d, data, vals: MatchReplace8(
        dst=d, data=data, vals=vals, imm=float(imm), dst_idx=idx_ap),
        {"data": x, "vals": v}, whole.shape, isa_dtype(dtype) if dtype is not None else x.dt,
        mask, dst, extra=extra)


def rand(shape, dtype, *, dst=None, call: str = "rand"):
    """Numbers uniform in [0, 1) from the vector engine's generators (:class:`Random`)."""
    t = current(call)
    t.commit()
    return _one(t, call, lambda d: Random(dst=d), {}, tuple(int(s) for s in shape),
                isa_dtype(dtype), None, dst)


def dropout(data: View, prob, *, mask=None, dtype=None, dst=None, call: str = "dropout"):
    """``data`` with each element zeroed where its draw falls below the drop probability
    (a number, or one per partition) (:class:`Dropout`)."""
    t = current(call)
    t.commit()
    whole = _tile(data, call, "data")
    x = whole.cut(mask)
    inputs = {"src": x}
    if isinstance(prob, View):
        inputs["prob"] = prob.as_column().cut(rows_of(mask))
        imm = 0.0
    else:
        imm = float(prob)
    return _one(t, call, lambda d, src, prob=None: Dropout(dst=d, src=src, prob=prob, imm=imm),
                inputs, whole.shape, isa_dtype(dtype) if dtype is not None else x.dt, mask,
                dst)


def gather_flattened(data: View, indices: View, *, mask=None, dtype=None, dst=None,
                     call: str = "gather_flattened"):
    """Each partition's elements of ``data`` (free dimensions flattened) at ``indices``
    (uint32), on GpSimd (:class:`GatherFlattened`)."""
    t = current(call)
    t.commit()
    whole = _tile(indices, call, "indices")
    x, i = _tile(data, call, "data").cut(rows_of(mask)), whole.cut(mask)
    if dtype is not None and isa_dtype(dtype) != x.dt:
        raise NotSupported(f"'{call}' into another type than data's", "data's type")
    return _one(t, call, lambda d, src, indices: GatherFlattened(dst=d, src=src,
                                                                 indices=indices),
                {"src": x, "indices": i}, whole.shape, x.dt, mask, dst, engine="gpsimd")


def nonzero_with_count(src: View, index_offset=0, padding_val=-1, *, dst: View,
                       call: str = "nonzero_with_count") -> None:
    """The positions of ``src``'s nonzero elements, padded, and their count, in the first
    partition of each GpSimd core's 16 (:class:`NonzeroWithCount`); ``dst``'s other
    partitions keep what they hold."""
    t = current(call)
    t.commit()
    x, out = _tile(src, call, "src"), _tile(dst, call, "dst")
    s_ap, d_ap = _flat(t, x, call, "src"), t.ap(out, call, "dst", ("sbuf",))
    t.emit("gpsimd", NonzeroWithCount(dst=d_ap, src=s_ap, offset=int(index_offset),
                                      padding=int(padding_val)),
           reads=[(x, s_ap), (out, d_ap)], writes=[(out, d_ap)])


def quantize_mx(src: View, *, dst: View, scale: View, call: str = "quantize_mx") -> None:
    """``src`` quantized into the MX tile ``dst`` and its E8M0 scales ``scale`` on the vector
    engine (:class:`QuantizeMx`); the scale partitions outside the groups' keep what they
    hold."""
    t = current(call)
    t.commit()
    x, out, sc = _tile(src, call, "src"), _tile(dst, call, "dst"), _tile(scale, call,
                                                                         "dst_scale")
    s_ap, d_ap = _flat(t, x, call, "src"), _flat(t, out, call, "dst")
    c_ap = _flat(t, sc, call, "dst_scale", start=False)
    t.emit("vector", QuantizeMx(dst=d_ap, src=s_ap, scale=c_ap),
           reads=[(x, s_ap), (sc, c_ap)], writes=[(out, d_ap), (sc, c_ap)])


# --- calls the ISA has no single instruction for ------------------------------------------

COMPARISONS = {"<": VectorOp.LESS, "<=": VectorOp.LESS_EQUAL, ">": VectorOp.GREATER,
        ">=": VectorOp.GREATER_EQUAL, "==": VectorOp.IS_EQUAL, "!=": VectorOp.NOT_EQUAL}
#: ``a op b`` = ``b op' a``: the reverse of each ALU operator that has one.
_REVERSED = {VectorOp.LESS: VectorOp.GREATER, VectorOp.GREATER: VectorOp.LESS,
             VectorOp.LESS_EQUAL: VectorOp.GREATER_EQUAL,
             VectorOp.GREATER_EQUAL: VectorOp.LESS_EQUAL}


def _shape_of(expr: Affine, call: str) -> tuple[int, ...]:
    if expr.ndim < 2:
        raise NotSupported(f"'{call}' of a one-dimensional expression",
                           "expressions over nl.arange(n)[:, None] / [None, :] or nl.mgrid")
    return tuple(expr.sizes.get(a, 1) for a in range(expr.ndim))


def _iota_into(t, expr: Affine, out: View, call: str) -> None:
    """``out[p, f...] = expr`` (partition ``p`` axis 0) on GpSimd. The Iota instruction
    counts one flat free index: free axes whose coefficients are row-major (the innermost
    ``step``, each outer one ``step`` times the sizes inside it) take one Iota. Free axes
    the expression does not depend on are filled by one copy of the Iota's values read
    with a stride of 0 there (``3 * y + z`` over ``nl.mgrid[0:P, 0:N, 0:3, 0:3]``: one
    Iota [P, 1, 3, 3] and one copy); the positions of any other outer axes, one Iota
    each."""
    if any(a >= out.ndim for a in expr.coef):
        raise NkiError(f"'{call}': an expression of {expr.ndim} axes for a tile "
                       f"{list(out.shape)}")
    flat = [a for a in range(1, out.ndim) if out.shape[a] > 1 and expr.coef.get(a, 0) == 0]
    if flat:
        compact = out[tuple(slice(0, 1) if a in flat else slice(None)
                            for a in range(out.ndim))]
        tmp = _out(t, compact.shape, out.dt)
        _iota_into(t, expr, tmp, call)
        tensor_copy(tmp.broadcast_to(out.shape), engine=3, dst=out, call=call)
        return
    step, runs = _flat_runs(expr, out.shape)
    for key, base in runs:
        sub = out[key]
        ap = t.ap(sub, call, "dst", ("sbuf",))
        t.emit("gpsimd", Iota(dst=ap, base=base, pstep=expr.coef.get(0, 0), step=step),
               writes=[(sub, ap)])


def _flat_runs(expr: Affine, shape: tuple[int, ...]):
    """``(step, [(key, base), ...])``: ``expr`` over a tile of ``shape`` as runs along the
    flat free index, as an instruction that counts one (Iota, AffineSelect) takes it: the
    innermost free axes whose coefficients are row-major (the innermost ``step``, each outer
    one ``step`` times the sizes inside it) make one run; each position of the outer axes
    is a run of its own (``key`` its subscript of the tile, ``base`` the expression there
    but for the partition's term)."""
    step = expr.coef.get(len(shape) - 1, 0) if len(shape) > 1 else 0
    inner, outer = 1, 0  # axes 1 .. outer - 1 are not row-major: a run per position
    for axis in range(len(shape) - 1, 0, -1):
        if shape[axis] > 1 and expr.coef.get(axis, 0) != step * inner:
            outer = axis + 1
            break
        inner *= shape[axis]
    return step, [((slice(None),) + tuple(slice(i, i + 1) for i in pos),
                   expr.const + sum(expr.coef.get(a + 1, 0) * i for a, i in enumerate(pos)))
                  for pos in np.ndindex(*shape[1:outer])]


def pattern_expr(dst: View, pattern, offset: int, channel_multiplier: int,
                 call: str) -> tuple[View, Affine]:
    """NKI 0.2's ``pattern`` ([[step, num], ...] outermost first), ``offset`` and
    ``channel_multiplier`` as an affine expression over ``dst`` viewed as [P, F] where the
    pattern's steps are row-major (one step per element, as the Iota instruction has), else
    as [P, num, ...], an axis a pattern entry (:func:`_iota_into` then makes it of several
    instructions)."""
    p = dst.shape[0]
    f = math.prod(dst.shape[1:]) if dst.ndim > 1 else 1
    dims = [(int(st), int(nm)) for st, nm in pattern]
    if math.prod(nm for _, nm in dims) != f:
        raise NkiError(f"'{call}': the pattern's {math.prod(nm for _, nm in dims)} elements "
                       f"and the {f} per partition of dst {list(dst.shape)} differ")
    step = dims[-1][0] if dims else 0
    inner, row_major = 1, True
    for st, nm in reversed(dims):
        row_major = row_major and (nm == 1 or st == step * inner)
        inner *= nm
    if row_major:
        return dst.reshape((p, f)), Affine(2, {0: p, 1: f},
                                           {0: int(channel_multiplier), 1: step}, int(offset))
    coef = {0: int(channel_multiplier), **{a + 1: st for a, (st, _) in enumerate(dims)}}
    return dst.reshape((p, *(nm for _, nm in dims))), Affine(
        len(dims) + 1, {0: p, **{a + 1: nm for a, (_, nm) in enumerate(dims)}}, coef,
        int(offset))


def iota(expr, dtype, *, mask=None, dst=None, call: str = "iota"):
    """A tile of the values of an affine ``nl.arange`` expression (partition index on axis
    0): one Iota on GpSimd, computed in 32-bit integers and written as ``dtype``."""
    t = current(call)
    t.commit()
    e = Affine.of(expr)
    shape = _shape_of(e, call)
    out_dt = isa_dtype(dtype)

    def make(out: View, _):
        _iota_into(t, _at_cut(e, mask, shape), out, call)
        if out.shape == shape and out.part == 0 and out.off == 0:
            t.iota_tiles[out.buf] = (e, len(out.buf.written))

    return _finish(t, lambda: _out(t, shape, out_dt), make, "compute", mask, dst)


def iota_again(x: View, partitions: int) -> View | None:
    """A one-partition tile that an ``nisa.iota`` of an expression without the partition
    index made, and nothing wrote since, broadcast across ``partitions`` partitions: the
    same Iota at ``partitions`` partitions (one GpSimd instruction, where a broadcast of
    any other tile goes through the tensor engine). None for any other tile."""
    t = current("broadcast_to")
    t.commit()
    made = t.iota_tiles.get(x.buf)
    if made is None or len(x.buf.written) != made[1] or x.part or x.off:
        return None
    e = made[0]
    if e.coef.get(0, 0) or _shape_of(e, "iota") != x.shape:
        return None
    wide = Affine(e.ndim, {**e.sizes, 0: partitions}, e.coef, e.const)
    return iota(wide, numpy_dtype(x.dt), call="broadcast_to")


def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None, dst=None,
                  call: str = "affine_select"):
    """``pred ? on_true_tile : on_false_value`` for an affine predicate on GpSimd: an
    :class:`AffineSelect` per run of the predicate along the flat free index
    (:func:`_flat_runs`: one for a predicate row-major in the free axes, as a mask of rows
    and columns is). A tile in PSUM, which GpSimd cannot read, is copied to SBUF by the
    vector engine first."""
    t = current(call)
    t.commit()
    if isinstance(pred, Mask) and pred.predicate is not None:
        pred = pred.predicate
    if not isinstance(pred, Predicate):
        raise NotSupported(f"the predicate {pred!r} of '{call}'",
                           "one comparison of an affine nl.arange/nl.mgrid expression, such "
                           "as iy < ix")
    whole = _tile(on_true_tile, call, "on_true_tile")
    x = whole.cut(mask)
    if x.buf.space == "psum":  # GpSimd cannot read PSUM [NKI2]: the vector engine copies it
        x = tensor_copy(x, mask=False if dropped(mask) else None, call=call)
    t.ap(x, call, "on_true_tile", ("sbuf",))  # NKI's error for a tile GpSimd cannot read
    want = _shape_of(pred.expr, call)
    if len(want) != whole.ndim or any(w not in (1, s) for w, s in zip(want, whole.shape,
                                                                      strict=False)):
        raise NkiError(f"'{call}': the predicate's shape {list(want)} and on_true_tile's "
                       f"{list(whole.shape)} differ")
    expr = _at_cut(pred.expr, mask, whole.shape)
    out_dt = isa_dtype(dtype) if dtype is not None else x.dt
    cmp, fill = COMPARISONS[pred.op], float(on_false_value)

    def make(out: View, _):
        step, runs = _flat_runs(expr, x.shape)
        for key, base in runs:
            o, src = out[key], x[key]
            o_ap = t.ap(o, call, "dst", ("sbuf",))
            s_ap = t.ap(src, call, "on_true_tile", ("sbuf",))
            t.emit("gpsimd", AffineSelect(dst=o_ap, base=base, pstep=expr.coef.get(0, 0),
                                          step=step, src=s_ap, op=cmp, fill=fill),
                   reads=[(src, s_ap)], writes=[(o, o_ap)])

    return _finish(t, lambda: _out(t, whole.shape, out_dt), make, "compute", mask, dst)


def _at_cut(expr: Affine, mask, shape: tuple[int, ...]) -> Affine:
    """``expr``, an expression over the positions of a tile of ``shape``, over those that
    ``mask`` keeps: each axis the mask cuts starts at its first kept position, as many
    positions as it keeps (an axis the expression does not span stays one position)."""
    if not isinstance(mask, Mask):
        return expr
    sizes, const = dict(expr.sizes), expr.const
    for axis, (lo, hi) in mask.ranges.items():
        if axis >= len(shape):
            continue
        lo, hi = max(0, lo), min(shape[axis], hi)
        const += expr.coef.get(axis, 0) * lo
        if sizes.get(axis, 1) > 1:
            sizes[axis] = max(0, hi - lo)
    return Affine(expr.ndim, sizes, expr.coef, const)


def _reversed(op: VectorOp, call: str) -> VectorOp:
    if op in COMMUTATIVE:
        return op
    if op in _REVERSED:
        return _REVERSED[op]
    raise NotSupported(f"reverse of {op.name.lower()} in '{call}'",
                       "reverse0/reverse1 of commutative operators, subtract and the "
                       "comparisons")


def scalar_tensor_tensor(data, op0, operand0, op1, operand1, reverse0=False, reverse1=False,
                         *, dtype=None, mask=None, dst=None, call: str = "scalar_tensor_tensor"):
    """``(data op0 operand0) op1 operand1``, ``operand0`` a number or one value per
    partition, ``operand1`` a tile of ``data``'s shape. The ISA has no three-operand
    instruction: a TensorScalar into an fp32 tile, then a TensorTensor, on the vector
    engine; the intermediate is fp32, as the engine's own arithmetic is, so the numerics are
    the fused instruction's (its cost twice one instruction's start-up)."""
    t = current(call)
    t.commit()
    o0, o1 = _op(op0, call), _op(op1, call)
    if reverse0 and o0 == VectorOp.SUBTRACT:  # operand0 - data = data * -1 + operand0
        tmp = tensor_scalar(data, np.multiply, -1.0, op1=np.add, operand1=operand0,
                            dtype=np.float32, mask=mask, call=call)
    else:
        tmp = tensor_scalar(data, _reversed(o0, call) if reverse0 else o0,
                            operand0, dtype=np.float32, mask=mask, call=call)
    b = _tile(operand1, call, "operand1")
    a_, b_ = (b, tmp) if reverse1 else (tmp, b)
    out_dt = isa_dtype(dtype) if dtype is not None else _tile(data, call, "data").dt
    return tensor_tensor(a_, b_, o1, dtype=out_dt, mask=mask, dst=dst, call=call)


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *,
                       dtype=None, mask=None, dst=None, call: str = "tensor_tensor_scan"):
    """``r[:, i] = op1(op0(data0[:, i], r[:, i - 1]), data1[:, i])``, ``r[:, -1]`` =
    ``initial`` (a number or one value per partition): one TensorTensorScan on the vector
    engine, in fp32 as the engine computes, cast to ``dtype`` (default: the wider of the
    inputs' types)."""
    t = current(call)
    t.commit()
    whole = _tile(data0, call, "data0")
    a, b = whole.cut(mask), _tile(data1, call, "data1").cut(mask)
    _same_partitions(a, b, call, "data0", "data1")
    if a.ndim != 2 or a.shape != b.shape:
        raise NotSupported(f"'{call}' of shapes {list(a.shape)} and {list(b.shape)}",
                           "two 2-dimensional tiles of one shape")
    o0, o1 = _op(op0, call), _op(op1, call)
    a_ap, b_ap = t.ap(a, call, "data0"), t.ap(b, call, "data1")
    if a_ap.space == b_ap.space == "psum":
        raise NkiError(f"operands 'data0' and 'data1' of '{call}' cannot both be in PSUM",
                       "err_unsupported_memory")
    if isinstance(initial, View):
        initial = initial.cut(rows_of(mask))
    init_ap, imm, init = _scalar_operand(t, initial, a, call, "initial")
    out_dt = isa_dtype(dtype) if dtype is not None else promote(a.dt, b.dt)

    def make(out: View, _):
        out_ap = t.ap(out, call, "dst")
        reads = [(a, a_ap), (b, b_ap)] + ([(init, init_ap)] if init is not None else [])
        t.emit("vector", TensorTensorScan(dst=out_ap, a=a_ap, b=b_ap, op0=o0, op1=o1,
                                          initial=init_ap, imm=imm, reverse0=bool(reverse0),
                                          reverse1=bool(reverse1)),
               reads=reads, writes=[(out, out_ap)])

    return _finish(t, lambda: _out(t, whole.shape, out_dt), make, "compute", mask, dst)


def tensor_scalar_cumulative(src, op0, op1, imm0, imm1=None, reduce_cmd=3, reverse0=False,
                             *, dst=None, call: str = "tensor_scalar_cumulative"):
    """``reg = op1(op0(src[:, i], imm0), reg)`` along the free axis, each ``reg`` into
    ``dst``, from ``reg`` = op1's identity (``reduce_cmd`` reset_reduce or reset), ``imm1``
    (load_reduce) or the vector engine's reduction register (reduce), which then holds the
    last: the TensorScalar of op0 into fp32, then a TensorTensorScan whose ``op0`` is
    ``op1`` (its ``op1`` a COPY), then the last column copied as the register (the
    hardware does it in one instruction)."""
    t = current(call)
    t.commit()
    x = _tile(src, call, "src")
    o1 = _op(op1, call)
    if o1 not in _CUMULATIVE:
        raise NotSupported(f"'{call}'(op1={getattr(op1, '__name__', op1)})",
                           "add, subtract, multiply, maximum, minimum")
    cmd = int(reduce_cmd)
    y = tensor_scalar(x, op0, imm0, reverse0, dtype=np.float32, call=call)
    init, init_ap, imm = None, None, _IDENTITY[o1]
    if cmd == 4:  # load_reduce
        if imm1 is None:
            raise NkiError(f"'{call}' with reduce_cmd load_reduce needs imm1")
        init_ap, imm, init = _scalar_operand(t, imm1, x, call, "imm1")
    elif cmd == 2:  # reduce: from the register
        init = t.registers.get("vector")
        if init is None:
            raise NkiError(f"'{call}': reduce_cmd reduce of an empty reduction register")
        init_ap = t.ap(init, call, "register")
    y_ap = t.ap(y, call, "src")

    def make(out: View, _):
        out_ap = t.ap(out, call, "dst")
        reads = [(y, y_ap)] + ([(init, init_ap)] if init is not None else [])
        t.emit("vector", TensorTensorScan(dst=out_ap, a=y_ap, b=y_ap, op0=o1,
                                          op1=VectorOp.COPY, initial=init_ap, imm=imm),
               reads=reads, writes=[(out, out_ap)])
        last = out.reshape((out.shape[0], math.prod(out.shape[1:])))[:, -1]
        t.registers["vector"] = tensor_copy(last, dtype=np.float32, call=call)

    return _finish(t, lambda: _out(t, x.shape, "fp32"), make, "compute", None, dst)


def tensor_partition_reduce(op, data, *, mask=None, dtype=None, dst=None,
                            call: str = "tensor_partition_reduce"):
    """The sum, maximum or minimum across the partitions of ``data``, one partition out.
    The ISA reduces along free axes only: each block of up to 128 free elements goes
    through the tensor engine's transpose (bit for bit) into PSUM, is reduced along its
    free axis on the vector engine in fp32 (sum in partition order), and the column is
    transposed back; the last transposes write the result."""
    t = current(call)
    t.commit()
    x = _tile(data, call, "data").cut(mask)
    o = _op(op, call)
    if o not in (VectorOp.ADD, VectorOp.MAX, VectorOp.MIN):
        raise NotSupported(f"reduction {o.name.lower()} in '{call}'", "add, max and min")
    p = x.shape[0]
    f = math.prod(x.shape[1:]) if x.ndim > 1 else 1
    flat = x.reshape((p, f))
    out_dt = isa_dtype(dtype) if dtype is not None else x.dt
    cols = t.params.cols

    def make(out: View, _):
        o2 = out.reshape((1, f))
        for c0 in range(0, f, cols):
            fc = min(cols, f - c0)
            xt = nc_transpose(flat[:, c0:c0 + fc], call=call)
            r = tensor_reduce(o, xt, 1, dtype=np.float32, keepdims=True, call=call)
            rt = nc_transpose(r, call=call)
            tensor_copy(rt, dst=o2[:, c0:c0 + fc], call=call)

    return _finish(t, lambda: _out(t, (1,) + x.shape[1:], out_dt), make, "compute", None,
                   dst)


def bn_stats(data, *, mask=None, dtype=None, dst=None, call: str = "bn_stats"):
    """Per partition (count, mean, variance * count) of the even elements of ``data``, then
    of the odd ones (at most ``bn_stats_fmax`` elements), in fp32. The ISA has no such
    instruction: on the vector engine, a memset of the counts, a sum scaled by 1 / count
    for each mean, and the sum of squares of the deviations from it (a TensorScalar and a
    squaring TensorReduce) for each variance * count."""
    t = current(call)
    t.commit()
    x = _tile(data, call, "data").cut(mask)
    if x.ndim != 2:
        raise NotSupported(f"'{call}' of a {x.ndim}-dimensional tile", "[P, F] tiles")
    p, n = x.shape
    limit = 512
    if n > limit:
        raise NkiError(f"size of dimension 1 in 'data{list(x.shape)}' of '{call}' exceed "
                       f"architecture limitation of {limit}",
                       "err_size_of_dimension_exceed_arch_limit")
    out_dt = isa_dtype(dtype) if dtype is not None else x.dt

    def make(out: View, _):
        s = out if out.dt == "fp32" else _out(t, (p, 6), "fp32")
        for h in (0, 1):
            count = (n - h + 1) // 2
            t.memset(s[:, 3 * h:3 * h + 1], float(count), "vector", call)
            if count == 0:
                t.memset(s[:, 3 * h + 1:3 * h + 3], 0.0, "vector", call)
                continue
            part = x[:, h::2]
            total = tensor_reduce(np.add, part, 1, dtype=np.float32, keepdims=True,
                                  call=call)
            mean = s[:, 3 * h + 1:3 * h + 2]
            tensor_scalar(total, np.multiply, 1.0 / count, dst=mean, call=call)
            dev = tensor_scalar(part, np.subtract, mean, dtype=np.float32, call=call)
            _square_sum(t, dev, s[:, 3 * h + 2:3 * h + 3], call)
        if s is not out:
            tensor_copy(s, dst=out, call=call)

    rows = _tile(data, call, "data").shape[0]
    return _finish(t, lambda: _out(t, (rows, 6), out_dt), make, "compute", rows_of(mask), dst)


def _square_sum(t, x: View, dst: View, call: str) -> None:
    t.commit()
    x_ap, d_ap = t.ap(x, call, "data"), t.ap(dst, call, "dst")
    t.emit("vector", TensorReduce(dst=d_ap, src=x_ap, reduce=Reduce.SUM, op=VectorOp.SQUARE),
           reads=[(x, x_ap)], writes=[(dst, d_ap)])


def bn_aggr(data, *, mask=None, dtype=None, dst=None, call: str = "bn_aggr"):
    """The mean and variance per partition of the (count, mean, variance * count) triples
    of ``data`` (``bn_stats`` outputs side by side), in fp32: ``N = sum(c)``,
    ``mean = sum(c * m) / N``, ``var = (sum(v) + sum(c * (m - mean)^2)) / N``. The ISA has
    no such instruction: vector-engine sums and products, and 1 / N from the scalar
    engine's reciprocal function (whose accuracy bounds the result's)."""
    t = current(call)
    t.commit()
    x = _tile(data, call, "data").cut(mask)
    if x.ndim != 2 or x.shape[1] % 3:
        raise NkiError(f"'{call}': data {list(x.shape)} must hold (count, mean, variance * "
                       f"count) triples: [P, 3k]")
    out_dt = isa_dtype(dtype) if dtype is not None else x.dt
    c, m, v = x[:, 0::3], x[:, 1::3], x[:, 2::3]

    def make(out: View, _):
        n = tensor_reduce(np.add, c, 1, dtype=np.float32, keepdims=True, call=call)
        rn = activation("reciprocal", n, dtype=np.float32, call=call)
        cm = tensor_tensor(c, m, np.multiply, dtype=np.float32, call=call)
        s1 = tensor_reduce(np.add, cm, 1, dtype=np.float32, keepdims=True, call=call)
        mean = tensor_scalar(s1, np.multiply, rn, dtype=np.float32, call=call)
        dev = tensor_scalar(m, np.subtract, mean, dtype=np.float32, call=call)
        sq = tensor_tensor(dev, dev, np.multiply, dtype=np.float32, call=call)
        w = tensor_tensor(sq, c, np.multiply, dtype=np.float32, call=call)
        w2 = tensor_tensor(w, v, np.add, dtype=np.float32, call=call)
        s2 = tensor_reduce(np.add, w2, 1, dtype=np.float32, keepdims=True, call=call)
        tensor_copy(mean, dst=out[:, 0:1], call=call)
        tensor_scalar(s2, np.multiply, rn, dst=out[:, 1:2], call=call)

    rows = _tile(data, call, "data").shape[0]
    return _finish(t, lambda: _out(t, (rows, 2), out_dt), make, "compute", rows_of(mask), dst)

