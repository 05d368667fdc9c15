"""``nki.isa`` of NKI 0.2 and later: every call writes its destination ``dst``, given first,
and returns nothing; the same lowering as NKI 0.1's (:mod:`.isa`), so that a kernel written
in either generation gives the same program."""

from __future__ import annotations

import numpy as np

from hdl.vector.ops import VectorOp

from . import isa as _v1
from . import language as _language
from . import lower
from .errors import NkiError, NotSupported, Unimplemented
from .isa import (
    dge_mode,
    dma_engine,
    engine,
    get_nc_version,
    gpsimd_engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from .tracer import Register, View, current

__all__ = ["activate2", "activation", "activation_reduce", "affine_select", "bn_aggr", "bn_stats",
           "core_barrier", "dge_mode", "dma_compute", "dma_copy", "dma_engine", "dma_transpose",
           "dropout", "engine", "exponential", "get_nc_sub_version", "get_nc_version",
           "gpsimd_engine", "iota",
           "local_gather", "matmul_perf_mode", "max8", "memset", "nc_find_index8",
           "nc_match_replace8", "nc_matmul", "nc_matmul_mx", "nc_n_gather", "nc_stream_shuffle",
           "nc_transpose", "nc_version", "nonzero_with_count", "oob_mode", "quantize_mx",
           "rand2", "range_select", "reciprocal", "reduce_cmd", "register_alloc", "register_load",
           "register_move", "register_store", "scalar_engine", "scalar_tensor_tensor",
           "select_reduce", "sendrecv", "sequence_bounds", "tensor_copy", "tensor_copy_dynamic_src",
           "tensor_copy_predicated", "tensor_engine", "tensor_partition_reduce", "tensor_reduce",
           "tensor_scalar", "tensor_scalar_cumulative", "tensor_scalar_reduce", "tensor_tensor",
           "tensor_tensor_scan", "unknown_engine", "vector_engine"]


def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(),
              perf_mode=None, name=None):
    # is_transpose: from NeuronCore-v3 the array's transpose mode, "bit-accurate data
    # transpose" of ``stationary`` (``moving`` the identity NKI asks for, not read) into a
    # destination of its type; on NeuronCore-v2, or into another type, a hint on the
    # product, which is what runs (as in nki.isa 0.1)
    if is_transpose and current("nc_matmul").params.generation >= 3 \
            and isinstance(dst, View) and isinstance(stationary, View) \
            and dst.dt == stationary.dt:
        lower.nc_transpose(stationary, dst=dst, call="nc_matmul")
        return
    lower.nc_matmul(stationary, moving, tile_position=tile_position, tile_size=tile_size,
                    dst=dst, accumulate=accumulate, perf_mode=perf_mode)


def nc_matmul_mx(dst, stationary, moving, stationary_scale, moving_scale, tile_position=None,
                 tile_size=None, accumulate=None, name=None):
    """MX tiles multiplied with their E8M0 scales (NeuronCore-v4): the ISA's MX
    LoadStationary and MultiplyMoving."""
    lower.nc_matmul(stationary, moving, tile_position=tile_position or (),
                    tile_size=tile_size or (), dst=dst, accumulate=accumulate,
                    call="nc_matmul_mx", scales=(stationary_scale, moving_scale))


def quantize_mx(dst, src, dst_scale, name=None):
    """``src`` (bf16 or fp16) into MXFP8 quads and their E8M0 scales on the vector engine
    (NeuronCore-v4)."""
    lower.quantize_mx(src, dst=dst, scale=dst_scale)


def nc_transpose(dst, data, engine=engine.unknown, name=None):
    lower.nc_transpose(data, engine=engine, dst=dst)


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=reduce_cmd.idle, name=None):
    lower.activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                     reduce_res=reduce_res, reduce_cmd=reduce_cmd, dst=dst)


def activate2(dst, op, data, imm0, imm1, op0, op1, relu_param=0.0, reverse0=False,
              reverse1=False, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
              name=None):
    """NeuronCore-v4's ``op((data op0 imm0) op1 imm1)`` on the Scalar Engine, one
    ``Activation`` where the stage is its own multiply-add (a number's multiply, a tile's
    add, both, or neither); any other stage a ``TensorScalar`` on the scalar engine into fp32
    first, as :func:`activation` applies a tile's scale. ``op`` ``nl.prelu`` with its slope
    ``relu_param`` (a number or one a partition; trngen's engine has no parameterised
    function): :func:`_prelu`."""
    call = "activate2"
    if current(call).params.generation < 4:
        raise NkiError("'activate2' is NeuronCore-v4's (trn3 on): use activation on this "
                       "chip")
    if op is not _language.prelu and (isinstance(relu_param, View)
                                      or float(relu_param) != 0.0):
        raise NkiError("'activate2': relu_param is nl.prelu's slope, not a parameter of "
                       f"{getattr(op, '__name__', op)}")
    kind = [None if o in (None, lower.bypass) else lower.VECTOR_OPS.get(o, o)
            for o in (op0, op1)]
    scale, bias, pre = 1.0, None, data
    if kind == [VectorOp.MULTIPLY, None] and not isinstance(imm0, View):
        scale = imm0
    elif kind == [VectorOp.MULTIPLY, VectorOp.ADD] and not isinstance(imm0, View) \
            and isinstance(imm1, View) and not reverse1:
        scale, bias = imm0, imm1
    elif kind == [VectorOp.ADD, None] and isinstance(imm0, View):
        bias = imm0
    elif kind != [None, None]:
        pre = lower.tensor_scalar(data, op0, imm0, reverse0, op1, imm1, reverse1,
                                  dtype=np.float32, engine=2, call=call)
    if op is _language.prelu:
        if scale != 1.0 or bias is not None:
            pre = lower.activation("identity", pre, bias=bias, scale=scale, dtype=np.float32,
                                   call=call)
        _prelu(pre, relu_param, reduce_op, reduce_res, reduce_cmd, dst, call)
        return
    lower.activation(op, pre, bias=bias, scale=scale, reduce_op=reduce_op,
                     reduce_res=reduce_res, reduce_cmd=reduce_cmd, dst=dst, call=call)


def _prelu(z, slope, reduce_op, reduce_res, reduce_cmd, dst, call: str) -> None:
    """``z`` where above zero, else ``slope * z``, into ``dst``: ``max(z, 0) + slope *
    min(z, 0)``, exact (one of the two terms is a zero), by a TensorScalar on the scalar
    engine and a scalar_tensor_tensor; the row sums, where asked, by a TensorReduce."""
    lower.check_row_sum(reduce_op, reduce_cmd, call)
    below = lower.tensor_scalar(z, np.minimum, 0.0, op1=np.multiply, operand1=slope,
                                dtype=np.float32, engine=2, call=call)
    lower.scalar_tensor_tensor(z, np.maximum, 0.0, np.add, below, dst=dst, call=call)
    if reduce_res is not None:
        lower.tensor_reduce(np.add, dst, tuple(range(1, dst.ndim)), keepdims=True,
                            dst=reduce_res, call=call)


def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                reduce_init=0.0, name=None):
    """``exp(src - max_value)`` on the Vector Engine with its running sum (NeuronCore-v4):
    where the chip's vector engine evaluates exp (its spec's ``core.vector.functions``)."""
    call = "exponential"
    p = current(call).params
    if "exp" not in p.vector_functions:
        raise NkiError(f"'exponential' needs the vector engine's exp, which {p.name}'s has not "
                       f"(core.vector.functions; NeuronCore-v4's, trn3 on): use activation "
                       f"with nl.exp on this chip")
    lower.exponential(src, max_value, reduce_res=reduce_res, reduce_cmd=reduce_cmd,
                      reduce_init=reduce_init, dst=dst)


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    lower.activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                     reduce_res=reduce_res, dst=dst, call="activation_reduce")


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    lower.tensor_tensor(data1, data2, op, engine=engine, dst=dst)


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None,
                  reverse1=False, engine=engine.unknown, name=None):
    lower.tensor_scalar(data, op0, operand0, reverse0, op1, operand1, reverse1, engine=engine,
                        dst=dst)


def reciprocal(dst, data, name=None):
    lower.tensor_scalar(data, np.reciprocal, 0.0, engine=5, dst=dst, call="reciprocal")


def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res, reverse0=False,
                         name=None):
    lower.tensor_scalar_reduce(data, op0, operand0, reduce_op, reduce_res, reverse0, dst=dst)


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    lower.tensor_reduce(op, data, axis, negate=negate, keepdims=keepdims, dst=dst)


def tensor_copy(dst, src, engine=engine.unknown, name=None):
    lower.tensor_copy(src, engine=engine, dst=dst)


def memset(dst, value, engine=engine.unknown, name=None):
    lower.memset(dst, value, engine=engine or None)


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    flat, expr = lower.pattern_expr(dst, pattern, offset, channel_multiplier, "iota")
    lower.iota(expr, flat.dtype, dst=flat)


def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value,
                  cmp_op=None, offset=0, name=None):
    from . import language as nl
    from .tracer import Predicate

    flat, expr = lower.pattern_expr(dst, pattern, offset, channel_multiplier, "affine_select")
    op = lower.VECTOR_OPS.get(nl.equal if cmp_op is None else cmp_op)
    names = {v: k for k, v in lower.COMPARISONS.items()}
    if op not in names:
        raise NotSupported(f"affine_select(cmp_op={getattr(cmp_op, '__name__', cmp_op)})",
                           "the comparisons equal, not_equal, less, less_equal, greater, "
                           "greater_equal")
    src = on_true_tile.reshape((on_true_tile.shape[0], *flat.shape[1:]))
    lower.affine_select(Predicate(expr, names[op]), src, on_false_value, dst=flat)


def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False,
                         reverse1=False, name=None):
    lower.scalar_tensor_tensor(data, op0, operand0, op1, operand1, reverse0, reverse1,
                               dst=dst)


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False,
                       name=None):
    lower.tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0, reverse1, dst=dst)


def tensor_partition_reduce(dst, op, data, name=None):
    lower.tensor_partition_reduce(op, data, dst=dst)


def bn_stats(dst, data, name=None):
    lower.bn_stats(data, dst=dst)


def bn_aggr(dst, data, name=None):
    lower.bn_aggr(data, dst=dst)


def dma_copy(dst, src, dst_rmw_op=None, oob_mode=None, dge_mode=None, priority=None,
             engine=None, name=None):
    lower.dma_copy(dst, src, skip=getattr(oob_mode, "name", None) == "skip",
                   rmw_op=dst_rmw_op)


def tensor_copy_dynamic_src(dst, src, engine=engine.unknown, name=None):
    lower.tensor_copy_dynamic_src(src, engine=engine, dst=dst)


def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None,
                             reduce_cmd=reduce_cmd.reset_reduce, reverse0=False, name=None):
    lower.tensor_scalar_cumulative(src, op0, op1, imm0, imm1, reduce_cmd, reverse0, dst=dst)


def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1,
                 reduce_cmd=reduce_cmd.reset_reduce, reduce_res=None, reduce_op=None,
                 range_start=0, on_false_value=None, name=None):
    lower.range_select(on_true_tile, comp_op0, comp_op1, bound0, bound1,
                       reduce_cmd=reduce_cmd, reduce_res=reduce_res, reduce_op=reduce_op,
                       range_start=range_start, on_false_value=on_false_value, dst=dst)


def sequence_bounds(dst, segment_ids, name=None):
    lower.sequence_bounds(segment_ids, dst=dst)


def max8(dst, src, name=None):
    lower.max8(src, dst=dst)


def nc_find_index8(dst, data, vals, name=None):
    lower.find_index8(data, vals, dst=dst)


def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
    lower.match_replace8(data, vals, imm, dst_idx=dst_idx, dst=dst)


def dropout(dst, data, prob, name=None):
    lower.dropout(data, prob, dst=dst)


def rand2(dst, min, max, name=None):  # noqa: A002 - NKI's names
    """Numbers uniform in [min, max] on the Vector Engine (NeuronCore-v4): the engine's
    uniform draws in [0, 1) (:class:`Random`, the spec's generator), then ``u * (max - min)
    + min`` by a TensorScalar into ``dst``'s type (whose rounding may reach ``max``);
    ``min`` and ``max`` numbers or one fp32 per partition (their difference then computed
    first)."""
    call = "rand2"
    t = current(call)
    if t.params.generation < 4:
        raise NkiError("'rand2' is NeuronCore-v4's (trn3 on): use nl.rand on this chip")
    if not isinstance(min, View) and not isinstance(max, View) and not min < max:
        raise NkiError(f"'rand2' needs min < max, not {min} and {max}")
    span = (_language.subtract(max, min, dtype=np.float32)
            if isinstance(min, View) or isinstance(max, View) else float(max) - float(min))
    u = lower.rand(dst.shape, np.float32, call=call)
    lower.tensor_scalar(u, np.multiply, span, op1=np.add, operand1=min, engine=5, dst=dst,
                        call=call)


def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    lower.stream_shuffle(src, dst, shuffle_mask)


def dma_transpose(dst, src, axes=None, priority=None, dge_mode=None, oob_mode=None, name=None):
    current("dma_transpose").assign(dst, _v1.dma_transpose(src, axes=axes), True)


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    _v1.tensor_copy_predicated(src=src, dst=dst, predicate=predicate, reverse_pred=reverse_pred)


def select_reduce(dst, predicate, on_true, on_false, reduce_res=None,
                  reduce_cmd=reduce_cmd.idle, reduce_op=None, reverse_pred=False, name=None):
    _v1.select_reduce(dst=dst, predicate=predicate, on_true=on_true, on_false=on_false,
                      reduce_res=reduce_res, reduce_cmd=reduce_cmd,
                      **({} if reduce_op is None else {"reduce_op": reduce_op}),
                      reverse_pred=reverse_pred)


def nc_n_gather(dst, data, indices, name=None):
    """Each partition's elements of ``data`` (free dimensions flattened) at its ``indices``
    (uint32), on GpSimd: ``nl.gather_flattened``'s instruction."""
    lower.gather_flattened(data, indices, dst=dst, call="nc_n_gather")


def core_barrier(data, cores, engine=engine.gpsimd, name=None):
    """NKI's barrier of the two NeuronCores of a logical core over shared HBM ``data``: on
    one core nothing to wait for (the tracer orders the core's own reads of ``data`` after
    its writes); across the cores of an ``nl.nc`` grid, every instruction before it ends on
    both before any after it starts (:meth:`~kernels.nki.tracer.Tracer.meet`)."""
    t = current("core_barrier")
    if t.cores > 1:
        t.meet("core_barrier")


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=dma_engine.dma,
             name=None):
    """NKI's exchange between the two NeuronCores of a logical core: ``dst`` (SBUF) receives
    the ``src`` tile of core ``recv_from_rank`` while this core's ``src`` goes to core
    ``send_to_rank``; the cores meet there (:meth:`~kernels.nki.tracer.Tracer.meet`: a
    barrier, as a group of one ``pipe_id`` completes together), the transfer a DMA of
    ``src`` between the cores' SBUF."""
    t = current("sendrecv")
    if t.cores < 2:
        raise NotSupported("sendrecv in a launch on one NeuronCore",
                           "sendrecv between the cores of an nl.nc(2) grid")
    for rank in (send_to_rank, recv_from_rank):
        if int(rank) not in range(t.cores):
            raise NkiError(f"'sendrecv': rank {rank} is not a core of the logical core "
                           f"(0 .. {t.cores - 1})")
    if int(dma_engine) == _v1.dma_engine.gpsimd_dma and src.itemsize in _GPSIMD_DMA_BYTES:
        per = src.itemsize * (src.size // src.shape[0])
        if per > _GPSIMD_DMA_BYTES[src.itemsize]:
            raise NkiError(f"'sendrecv' by GpSimd's DMA moves at most "
                           f"{_GPSIMD_DMA_BYTES[src.itemsize]} bytes a partition of "
                           f"{8 * src.itemsize}-bit elements, not {per}")
    t.meet("sendrecv", (src, dst, send_to_rank, recv_from_rank))


#: Bytes a partition GpSimd's DMA moves in one sendrecv, by element size [NKI ``sendrecv``:
#: "1024 bytes for 32-bit types, 512 bytes for 16-bit types, 256 bytes for 8-bit types"].
_GPSIMD_DMA_BYTES = {4: 1024, 2: 512, 1: 256}


def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None,
                 name=None):
    current("local_gather").assign(
        dst, _v1.local_gather(src_buffer, index, num_elem_per_idx, num_valid_indices), True)


def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=None,
                name=None):
    """NKI's sum of ``srcs`` into ``dst`` by the DMA, in fp32 (``reduce_op`` add, every
    scale 1.0, as NKI allows; unique indices)."""
    t = current("dma_compute")
    if reduce_op is not np.add and getattr(reduce_op, "__name__", "") != "add":
        raise NotSupported(f"dma_compute(reduce_op={getattr(reduce_op, '__name__', reduce_op)})",
                           "reduce_op=nl.add, as NKI allows")
    if scales is not None and any(float(s) != 1.0 for s in scales):
        raise NotSupported(f"dma_compute(scales={list(scales)})", "scales of 1.0, as NKI "
                                                                  "allows")
    if not unique_indices:
        raise NotSupported("dma_compute(unique_indices=False)", "unique indices, as NKI "
                                                                "allows")
    t.dma_compute(dst, srcs, skip=getattr(oob_mode, "name", None) == "skip")


def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None):
    lower.nonzero_with_count(src, index_offset, padding_val, dst=dst)


def register_alloc(x=None) -> Register:
    """A virtual register (:class:`~kernels.nki.tracer.Register`) holding ``x``: an integer,
    the value a one-element tensor holds (as :func:`register_load` reads it), or none."""
    t = current("register_alloc")
    if isinstance(x, View):
        reg = Register()
        t.register_load(reg, x, "register_alloc")
        return reg
    if x is not None and not isinstance(x, (int, np.integer)):
        raise NkiError(f"register_alloc: x must be an integer, a tensor or None, not {x!r}")
    return Register(x)


def _register(reg, call: str, name: str = "dst") -> Register:
    if not isinstance(reg, Register):
        raise NkiError(f"{call}: {name} must be a register from nisa.register_alloc, not "
                       f"{type(reg).__name__}")
    return reg


def register_move(dst, src) -> None:
    """``dst`` takes the integer ``src`` or the value of the register ``src``."""
    current("register_move")
    value = src.known("register_move") if isinstance(src, Register) else src
    if not isinstance(value, (int, np.integer)):
        raise NkiError(f"register_move: src must be an integer or a register, not {src!r}")
    _register(dst, "register_move").value = Register(value).value


def register_load(dst, src) -> None:
    """``dst`` takes the 32-bit integer ``src`` holds (HBM or on chip, one element), read
    by each engine's sequencer before its next instruction (:meth:`Tracer.register_load`)."""
    current("register_load").register_load(_register(dst, "register_load"), src)


def register_store(dst, src) -> None:
    """``dst`` (one int32 or uint32 element on chip) takes the register ``src``'s value."""
    value = _register(src, "register_store", "src").known("register_store")
    if dst.dt not in ("int32", "uint32") or int(np.prod(dst.shape)) != 1:
        raise NkiError(f"register_store: dst must hold one int32 or uint32 element, not "
                       f"{list(dst.shape)} {dst.dt}")
    lower.memset(dst, value if dst.dt == "int32" else value & 0xFFFFFFFF,
                 call="register_store")


def get_nc_sub_version() -> int:
    """The silicon revision within the generation: 0, the first (NKI's default)."""
    current("get_nc_sub_version")
    return 0


#: Calls NKI 0.2 documents that trngen does not implement: a kernel module may import them
#: (aws-neuron/nki-library imports register_alloc at module level), and each is refused where
#: it is called.
_DOCUMENTED = frozenset((
    "rand_get_state", "rand_set_state", "rng", "set_rng_seed", "topk"))


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _DOCUMENTED:
        return Unimplemented(f"nisa.{name}", " ".join(__all__))
    raise NotSupported(f"nisa.{name}", " ".join(__all__))

