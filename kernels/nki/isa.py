"""``nki.isa`` of NKI 0.1 (``neuronxcc.nki.isa``, ``nisa``): each call returns its result
tile; lowered by :mod:`.lower`. A name this module does not define raises
:class:`~kernels.nki.errors.NotSupported`."""

from __future__ import annotations

from enum import Enum, IntEnum

import numpy as np

from . import language, lower
from .errors import NotSupported
from .tracer import current, isa_dtype


class engine(IntEnum):  # noqa: N801 - NKI's names
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    vector = 5
    sync = 6


tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown


class reduce_cmd(IntEnum):  # noqa: N801
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(IntEnum):  # noqa: N801
    """How a DMA's descriptors are generated (``nisa.dma_copy(dge_mode=)``); the core's DMA
    queues take every transfer the same way, so the mode changes nothing here."""

    none = 0
    swdge = 1
    hwdge = 2
    unknown = 3


class matmul_perf_mode(Enum):  # noqa: N801
    """``nc_matmul(perf_mode=)``: none, or the FP8 double row (NeuronCore-v3 and later)."""

    none = "none"
    double_row = "double_row"


class oob_mode(IntEnum):  # noqa: N801
    """What an indirect DMA does with a row index outside its tensor
    (``nisa.dma_copy(oob_mode=)``): fail, or leave that row unmoved."""

    error = 0
    skip = 1


class dma_engine(IntEnum):  # noqa: N801
    """The DMA that moves a ``nisa.sendrecv`` between the cores of an LNC-2 launch: the
    shared queues, or GpSimd's own; named only, since trngen has no ``sendrecv``."""

    dma = 1
    gpsimd_dma = 2


class nc_version(IntEnum):  # noqa: N801
    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_version() -> nc_version:
    """The NeuronCore generation of the chip the kernel is traced for."""
    return nc_version(current("get_nc_version").params.generation)


def nc_matmul(stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, tile_position=(), tile_size=(), mask=None, perf_mode=None,
              **kwargs):
    _options("nc_matmul", kwargs)
    # is_transpose: NKI's hint that ``moving`` is an identity, so the product is the
    # transpose of ``stationary``; the product is what runs
    return lower.nc_matmul(stationary, moving, tile_position=tile_position,
                           tile_size=tile_size, mask=mask, perf_mode=perf_mode)


def nc_transpose(data, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    _options("nc_transpose", kwargs)
    return lower.nc_transpose(data, mask=mask, dtype=dtype, engine=engine)


def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=reduce_cmd.idle, mask=None, dtype=None, **kwargs):
    _options("activation", kwargs)
    return lower.activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                            reduce_res=reduce_res, reduce_cmd=reduce_cmd, mask=mask,
                            dtype=dtype)


def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None,
                      dtype=None, **kwargs):
    _options("activation_reduce", kwargs)
    return lower.activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                            reduce_res=reduce_res, mask=mask, dtype=dtype,
                            call="activation_reduce")


def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=engine.unknown,
                  **kwargs):
    _options("tensor_tensor", kwargs)
    return lower.tensor_tensor(data1, data2, op, dtype=dtype, mask=mask, engine=engine)


def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None,
                  reverse1=False, *, dtype=None, mask=None, engine=engine.unknown, **kwargs):
    _options("tensor_scalar", kwargs)
    return lower.tensor_scalar(data, op0, operand0, reverse0, op1, operand1, reverse1,
                               dtype=dtype, mask=mask, engine=engine)


def reciprocal(data, *, dtype=None, mask=None, **kwargs):
    """``1 / data`` on the vector engine, IEEE's fp32 division, over the spec's
    ``op_cycles`` cycles an element (NKI: ``max(MIN_II, 8N)``)."""
    _options("reciprocal", kwargs)
    return lower.tensor_scalar(data, np.reciprocal, 0.0, dtype=dtype, mask=mask, engine=5,
                               call="reciprocal")


#: dma_transpose's permutation of a tile of each rank [NKI ``nki.isa.dma_transpose``].
DMA_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def dma_transpose(src, *, axes=None, mask=None, dtype=None, **kwargs):
    """A tensor of 2, 3 or 4 dimensions with its axes permuted as NKI's rule for its rank
    says (:data:`DMA_TRANSPOSE_AXES`), by a strided DMA from HBM (``nl.load_transpose2d``
    for 2); an on-chip tile, or rows of an HBM tensor named by a tile of indices (gathered
    into SBUF first), goes through an HBM tensor of its own first (more DMAs, where the
    hardware's DMA transposes SBUF to SBUF, or gathers and transposes, in one)."""
    _options("dma_transpose", kwargs, ("dge_mode",))
    rank = getattr(src, "ndim", 0)
    order = DMA_TRANSPOSE_AXES.get(rank)
    if order is None or (axes is not None and tuple(axes) != order):
        rules = ", ".join(f"{n} dimensions axes {a}" for n, a in DMA_TRANSPOSE_AXES.items())
        raise NotSupported(f"dma_transpose of {rank} dimensions with axes {axes}", rules)
    if src.buffer != "hbm" or src.index is not None:
        t = current("dma_transpose")
        t.commit()
        if src.buffer == "hbm":
            src = language.load(src)
        staged = t.hbm("transposed", src.shape, src.dt)
        language.store(staged, src)
        src = staged
    return language.load(src.permuted(order), mask=mask, dtype=dtype)


def tensor_copy_predicated(*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None,
                           **kwargs):
    """``dst`` takes ``src`` where ``predicate`` is nonzero (zero with ``reverse_pred``)
    and keeps its own elements elsewhere: ``nl.where``'s select into ``dst``."""
    _options("tensor_copy_predicated", kwargs)
    _select_into(dst, predicate, src, dst, reverse_pred, dtype, mask, "tensor_copy_predicated")


def _select_into(dst, predicate, on_true, on_false, reverse: bool, dtype, mask,
                 call: str) -> None:
    """``dst[...]`` = ``on_true`` where ``predicate`` is nonzero (zero with ``reverse``),
    else ``on_false``: ``nl.where``'s select."""
    if reverse:
        on_true, on_false = on_false, on_true
    current(call).assign(dst, language.where(predicate, on_true, on_false, dtype=dtype,
                                             mask=mask), True)


def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None,
                  reduce_cmd=reduce_cmd.idle, reduce_op=np.amax, reverse_pred=False, mask=None,
                  dtype=None, **kwargs):
    """``dst`` = ``on_true`` where ``predicate`` is nonzero (zero with ``reverse_pred``),
    else ``on_false`` (a number or a column), by ``nl.where``'s select; its row maxima
    through the vector engine's reduction register as ``reduce_cmd`` says, into
    ``reduce_res`` if given (:func:`lower.reduce_into_register`)."""
    _options("select_reduce", kwargs)
    lower.register_op(reduce_op, "select_reduce")
    _select_into(dst, predicate, on_true, on_false, reverse_pred, dtype, mask,
                 "select_reduce")
    if int(reduce_cmd) or reduce_res is not None:
        lower.reduce_into_register(dst.cut(mask), reduce_cmd, reduce_res, "select_reduce",
                                   lower.rows_of(mask))


def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res, reverse0=False,
                         dtype=None, mask=None, **kwargs):
    _options("tensor_scalar_reduce", kwargs)
    return lower.tensor_scalar_reduce(data, op0, operand0, reduce_op, reduce_res, reverse0,
                                      dtype=dtype, mask=mask)


def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False,
                  **kwargs):
    _options("tensor_reduce", kwargs)
    return lower.tensor_reduce(op, data, axis, mask=mask, dtype=dtype, negate=negate,
                               keepdims=keepdims)


def tensor_copy(src, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    _options("tensor_copy", kwargs)
    return lower.tensor_copy(src, mask=mask, dtype=dtype, engine=engine)


def memset(shape, value, dtype, *, mask=None, engine=engine.unknown, **kwargs):
    _options("memset", kwargs)
    t = current("memset")
    t.commit()
    from .tracer import isa_dtype

    out = t.tile(tuple(shape), isa_dtype(dtype))
    lower.memset(out.cut(mask), value, engine=engine or None)
    return out


def iota(expr, dtype, *, mask=None, **kwargs):
    _options("iota", kwargs)
    return lower.iota(expr, dtype, mask=mask)


def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None, **kwargs):
    _options("affine_select", kwargs)
    return lower.affine_select(pred, on_true_tile, on_false_value, mask=mask, dtype=dtype)


def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0=False,
                         reverse1=False, dtype=None, mask=None, **kwargs):
    _options("scalar_tensor_tensor", kwargs)
    return lower.scalar_tensor_tensor(data, op0, operand0, op1, operand1, reverse0, reverse1,
                                      dtype=dtype, mask=mask)


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *,
                       dtype=None, mask=None, **kwargs):
    _options("tensor_tensor_scan", kwargs)
    return lower.tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0, reverse1,
                                    dtype=dtype, mask=mask)


def tensor_partition_reduce(op, data, *, mask=None, dtype=None, **kwargs):
    _options("tensor_partition_reduce", kwargs)
    return lower.tensor_partition_reduce(op, data, mask=mask, dtype=dtype)


def bn_stats(data, *, mask=None, dtype=None, **kwargs):
    _options("bn_stats", kwargs)
    return lower.bn_stats(data, mask=mask, dtype=dtype)


def bn_aggr(data, *, mask=None, dtype=None, **kwargs):
    _options("bn_aggr", kwargs)
    return lower.bn_aggr(data, mask=mask, dtype=dtype)


def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=oob_mode.error, **kwargs):
    _options("dma_copy", kwargs, ("dge_mode",))
    lower.dma_copy(dst, src, mask=mask, skip=getattr(oob_mode, "name", None) == "skip",
                   rmw_op=dst_rmw_op)


def tensor_copy_dynamic_src(src, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    _options("tensor_copy_dynamic_src", kwargs)
    return lower.tensor_copy_dynamic_src(src, mask=mask, dtype=dtype, engine=engine)


def tensor_scalar_cumulative(*, dst, src, op0, op1, imm0, imm1=None,
                             reduce_cmd=reduce_cmd.reset_reduce, reverse0=False, **kwargs):
    _options("tensor_scalar_cumulative", kwargs)
    lower.tensor_scalar_cumulative(src, op0, op1, imm0, imm1, reduce_cmd, reverse0, dst=dst)


def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1,
                 reduce_cmd=reduce_cmd.idle, reduce_res=None, reduce_op=np.amax,
                 range_start=0, on_false_value=None, mask=None, dtype=None, **kwargs):
    _options("range_select", kwargs)
    return lower.range_select(on_true_tile, comp_op0, comp_op1, bound0, bound1,
                              reduce_cmd=reduce_cmd, reduce_res=reduce_res,
                              reduce_op=reduce_op, range_start=range_start,
                              on_false_value=on_false_value, mask=mask, dtype=dtype)


def sequence_bounds(*, segment_ids, dtype=None, **kwargs):
    _options("sequence_bounds", kwargs)
    return lower.sequence_bounds(segment_ids, dtype=dtype)


def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *,
                 mask=None, **kwargs):
    _options("local_gather", kwargs)
    return lower.local_gather(src_buffer, index, num_elem_per_idx, num_valid_indices,
                              mask=mask)


def max8(*, src, mask=None, dtype=None, **kwargs):
    _options("max8", kwargs)
    return lower.max8(src, mask=mask, dtype=dtype)


def nc_find_index8(*, data, vals, mask=None, dtype=None, **kwargs):
    _options("nc_find_index8", kwargs)
    return lower.find_index8(data, vals, mask=mask, dtype=dtype)


def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None, **kwargs):
    _options("nc_match_replace8", kwargs)
    return lower.match_replace8(data, vals, imm, dst_idx=dst_idx, mask=mask, dtype=dtype)


def dropout(data, prob, *, mask=None, dtype=None, **kwargs):
    _options("dropout", kwargs)
    return lower.dropout(data, prob, mask=mask, dtype=dtype)


def nc_stream_shuffle(src, dst, shuffle_mask, *, dtype=None, mask=None, **kwargs):
    _options("nc_stream_shuffle", kwargs)
    if dtype is not None and isa_dtype(dtype) != dst.dt:
        raise NotSupported("nc_stream_shuffle(dtype=) of another type than dst's",
                           "nc_stream_shuffle within one type")
    lower.stream_shuffle(src, dst, shuffle_mask, mask=mask)


def _options(call: str, kwargs: dict, ignored=()) -> None:
    """Refuse the options of ``call`` that change what it does and trngen does not
    implement; ``name=`` (an instruction's label in NKI's profiles) and ``ignored`` pass."""
    bad = [k for k, v in kwargs.items() if v is not None and k not in ("name", *ignored)]
    if bad:
        raise NotSupported(f"{call}({', '.join(f'{k}=' for k in bad)})",
                           f"{call} without these options")


_SUPPORTED = ("nc_matmul nc_transpose activation activation_reduce tensor_tensor "
              "tensor_scalar tensor_scalar_reduce scalar_tensor_tensor tensor_reduce "
              "tensor_partition_reduce reciprocal tensor_copy_predicated select_reduce "
              "nc_stream_shuffle max8 nc_find_index8 nc_match_replace8 dropout "
              "tensor_copy_dynamic_src sequence_bounds range_select tensor_scalar_cumulative "
              "local_gather "
              "dma_transpose "
              "tensor_tensor_scan tensor_copy memset iota affine_select bn_stats bn_aggr "
              "dma_copy get_nc_version, the engine, reduce_cmd, dge_mode, oob_mode, "
              "dma_engine and nc_version enums")


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotSupported(f"nisa.{name}", _SUPPORTED)
