"""The one mapping from a chip spec to the parameter objects of its hardware units.

Every consumer of unit parameters calls this module: ``gen chip`` and ``gen sim`` (the
generators), the system model (tensor-engine cycles, link efficiency), the core simulator and
exploration. A unit never reads the spec; it takes the small frozen object built here.

Two scales: ``"full"`` is the chip as specified; ``"sim"`` is its simulation instance, sized by
the spec's explicit ``chip.sim`` fields. Where a parameter object cannot be built from a spec
that loaded (a link whose credits cannot hold one packet, say), :class:`ModelError` names the
spec fields and why.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from hdl.core.isa import MX_QUAD
from hdl.core.params import CoreParams
from hdl.link.link import LinkParams
from hdl.numerics.formats import FloatFormat, MxFormat, input_format_by_name
from hdl.tensor.params import SystolicParams
from hdl.vector.activation import ActivationParams
from hdl.vector.functions import DEFAULT_FUNCTIONS, FunctionSpec
from hdl.vector.vector import VectorParams
from specs.errors import ModelError
from specs.model import ChipSpec, SimScale, TensorSpec

__all__ = [
    "SCALES",
    "ChipParams",
    "ModelError",
    "activation_functions",
    "core_dma_bandwidth",
    "core_params",
    "link_params",
    "params_from_spec",
    "rounding_rng",
    "rtl_format_name",
    "scalar_params",
    "systolic_params",
    "tensor_params",
    "vector_params",
]

Scale = Literal["full", "sim"]
SCALES: tuple[Scale, ...] = ("full", "sim")

@dataclass(frozen=True, kw_only=True)
class ChipParams:
    """Every unit's parameters for one chip spec at one scale.

    tensor : the tensor engine's one systolic array, every input format with RTL.
    vector, scalar : the vector engine and the scalar (activation) engine.
    link : the NeuronLink port; None where the spec gives no ports (``neuronlink.links``).
    """

    tensor: SystolicParams
    vector: VectorParams
    scalar: ActivationParams
    link: LinkParams | None


def _check_scale(scale: str) -> None:
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(map(repr, SCALES))}, "
                         f"not {scale!r}")


def _build(cls, where: str, **kwargs):
    """``cls(**kwargs)``, a refusal turned into a ModelError naming the spec fields."""
    try:
        return cls(**kwargs)
    except ValueError as exc:
        raise ModelError(f"{where} do not make a {cls.__name__} ({exc})") from None


def rtl_format_name(tensor: TensorSpec, fmt: str) -> str:
    """The numerics format name the RTL knows a spec format by: cFP8 carries the spec's
    layout and bias, every other name is the same."""
    if fmt == "cfp8":
        c = tensor.cfp8
        layout, bias = (c.layout, c.bias) if c else ("e4m3", 7)
        return f"cfp8_{layout}_b{bias}"
    return fmt


def systolic_params(tensor: TensorSpec, sim: SimScale | None = None) -> SystolicParams:
    """The tensor engine's array: full size, or at ``sim`` scale when given.

    Its formats are the spec's input formats, in the spec's order; double rate for each
    8-bit float format the spec gives rate 2, quarter rate for each format it gives rate 0.25
    (fp32). The MX formats run at rate 4, the rate of Trainium3's spec (a word is the
    instruction set's quad of MX elements); another rate of an MX format is refused. The RTL
    has no double-rate int8: a rate-2 int8 runs one product per PE per cycle, and the
    throughput model keeps the documented rule for it. Its tiling is the spec's
    ``row_tiles``, along the rows and the columns alike.
    """
    names, double, quarter = [], [], []
    for fmt in tensor.formats:
        name = rtl_format_name(tensor, fmt)
        f = input_format_by_name(name)
        names.append(name)
        if isinstance(f, MxFormat) and tensor.rates.get(fmt, 1) != MX_QUAD:
            raise ModelError(f"core.tensor.rates of {fmt} must be {MX_QUAD} (the RTL's MX "
                             f"word is a quad), not {tensor.rates.get(fmt, 1)!r}")
        if tensor.rates.get(fmt, 1) == 2 and isinstance(f, FloatFormat) and f.bits == 8:
            double.append(name)
        elif tensor.rates.get(fmt, 1) == 0.25:
            quarter.append(name)
    if sim is None:
        rows, cols, moving = tensor.rows, tensor.cols, tensor.moving_max
    else:
        rows, cols = sim.tensor_rows, sim.tensor_cols
        moving = min(tensor.moving_max, sim.tensor_moving_max)
    return _build(SystolicParams, "core.tensor fields", rows=rows, cols=cols,
                  formats=tuple(names), double_rate=tuple(double),
                  quarter_rate=tuple(quarter), moving_max=moving,
                  load_columns=tensor.load_columns, tiles=tuple(tensor.row_tiles))


def tensor_params(spec: ChipSpec, scale: Scale) -> SystolicParams:
    """The tensor engine's one array at ``scale``."""
    _check_scale(scale)
    return systolic_params(spec.core.tensor, spec.sim if scale == "sim" else None)


def rounding_rng(spec: ChipSpec) -> str | None:
    """The generator of the chip's stochastic rounding (``rounding.rng``), or None where its
    ``rounding.modes`` have no stochastic rounding: every engine of such a chip rounds to
    nearest even only, without generators or stochastic datapaths, and the models refuse a
    stochastic instruction."""
    return spec.rounding.rng if "stochastic" in spec.rounding.modes else None


def vector_params(spec: ChipSpec, scale: Scale) -> VectorParams:
    """The vector engine: its lanes and the chip's generator of stochastic rounding
    (:func:`rounding_rng`; the output format and rounding are the instruction's)."""
    _check_scale(scale)
    lanes = spec.core.vector.lanes if scale == "full" else spec.sim.lanes
    return _build(VectorParams, f"{spec.name}: core.vector and rounding fields", lanes=lanes,
                  rng=rounding_rng(spec))


def activation_functions(spec: ChipSpec) -> tuple[FunctionSpec, ...]:
    """The spec's activation functions as function specs, with its approximation overrides."""
    by_name = {f.name: f for f in DEFAULT_FUNCTIONS}
    out = []
    for name in spec.core.scalar.functions:
        f = by_name[name]
        approx = spec.core.scalar.approximations.get(name)
        if approx is not None:
            changes = {}
            if approx.range is not None:
                changes["lo"], changes["hi"] = approx.range
            if approx.segments is not None:
                changes["segments"] = approx.segments
            if approx.degree is not None:
                changes["degree"] = approx.degree
            f = dataclasses.replace(f, **changes)
        out.append(f)
    return tuple(out)


def accuracy_bounds(spec: ChipSpec) -> dict[str, float]:
    """Each of the spec's activation functions' bound on its max relative error: its
    ``approximations`` entry's ``max_rel_error``, else the engine's."""
    scalar = spec.core.scalar
    out = {}
    for name in scalar.functions:
        approx = scalar.approximations.get(name)
        bound = None if approx is None else approx.max_rel_error
        out[name] = scalar.max_rel_error if bound is None else bound
    return out


def scalar_params(spec: ChipSpec, scale: Scale) -> ActivationParams:
    """The scalar (activation) engine: its lanes, its function set and the chip's generator
    of stochastic rounding (:func:`rounding_rng`)."""
    _check_scale(scale)
    lanes = spec.core.scalar.lanes if scale == "full" else spec.sim.lanes
    return _build(ActivationParams, f"{spec.name}: core.scalar fields", lanes=lanes,
                  functions=activation_functions(spec), rng=rounding_rng(spec))


def link_params(spec: ChipSpec, scale: Scale) -> LinkParams:
    """The NeuronLink port.

    Full scale: one flit is one datapath word (``flit`` must equal ``width``), ``max_packet``
    bytes become words of ``width`` bits. Both scales: the replay buffer is as deep as the
    receive buffer (``credits``) unless the spec sets its depth.
    """
    _check_scale(scale)
    link = spec.neuronlink
    if scale == "sim":
        s = spec.sim
        return _build(LinkParams, f"{spec.name}: sim.link_* fields", width=s.link_width,
                      credits=s.link_credits, max_packet=s.link_packet,
                      replay_depth=s.link_replay_depth or s.link_credits,
                      ack_timeout=s.link_ack_timeout)
    if link.flit != link.width:
        raise ModelError(f"{spec.name}: neuronlink.flit must equal neuronlink.width "
                         f"({link.width}) for the link RTL, not {link.flit}")
    words = math.ceil(8 * link.max_packet / link.width)
    try:
        return LinkParams(width=link.width, credits=link.credits, max_packet=words,
                          replay_depth=link.replay_depth or link.credits,
                          ack_timeout=link.ack_timeout)
    except ValueError as exc:
        raise ModelError(f"{spec.name}: neuronlink parameters do not make a link port "
                         f"({exc}; a packet of {link.max_packet} B is {words} flits of "
                         f"{link.width} bits)") from None


def params_from_spec(spec: ChipSpec, scale: Scale) -> ChipParams:
    """Every unit's parameter object for ``spec`` at ``scale`` (``"full"`` or ``"sim"``)."""
    return ChipParams(tensor=tensor_params(spec, scale), vector=vector_params(spec, scale),
                      scalar=scalar_params(spec, scale),
                      link=link_params(spec, scale) if spec.neuronlink.links else None)


def core_dma_bandwidth(engines, cores, engine_bandwidth: float, hbm_bandwidth: float) -> float:
    """DMA bandwidth of one core in bytes/s: its share of the chip's DMA engines, each at
    ``engine_bandwidth``, or its share of HBM, whichever is lower."""
    return min(engines // cores * engine_bandwidth, hbm_bandwidth / cores)


def core_params(spec: ChipSpec, scale: Scale = "full") -> CoreParams:
    """One physical NeuronCore of ``spec``, for the core simulator and the core's RTL.

    The core's share of HBM bandwidth is the chip's divided by its physical cores; one DMA
    transfer is spread over the core's engines (``dma.engines / cores``), each at
    ``dma.engine_bandwidth``, and runs at the lower of the two. The tensor engine is its one
    array (:func:`systolic_params`).

    At ``"sim"`` scale the spec's ``chip.sim`` fields cut the core down: ``partitions``,
    ``sbuf_partition_bytes``, ``hbm_bytes``, ``dma_queues``, ``instructions`` and
    ``semaphores``, the scalar engine's activation lanes (``lanes``; at full scale
    ``core.scalar.lanes``), the simulated array (``tensor_rows`` x ``tensor_cols``, moving
    tiles of ``tensor_moving_max``), and PSUM banks each one moving tile of fp32 deep. Clocks
    and cost rules stay the chip's.
    """
    _check_scale(scale)
    c, d = spec.core, spec.dma
    missing = [k for k, v in (("chip.core.costs", c.costs),
                              ("chip.dma.engine_bandwidth", d.engine_bandwidth),
                              ("chip.dma.queues", d.queues), ("chip.dma.latency", d.latency),
                              ("chip.dma.packet_overhead", d.packet_overhead),
                              ("chip.dma.packet_minimum", d.packet_minimum),
                              ("chip.core.gpsimd", c.gpsimd)) if v is None]
    if missing:
        raise ModelError(f"{spec.name}: the core simulator needs {', '.join(missing)} in the "
                         f"spec")

    def si(q, unit):
        return float(q.to(unit).magnitude)

    dma_bw = core_dma_bandwidth(d.engines, spec.cores, si(d.engine_bandwidth, "B/s"),
                                si(spec.memory.bandwidth, "B/s"))
    t = c.tensor
    sim = spec.sim if scale == "sim" else None
    array = systolic_params(t, sim)
    formats = tuple(t.formats)
    if sim is None:
        partitions, sbuf_bytes = c.sbuf.partitions, int(si(c.sbuf.partition_size, "B"))
        psum_bytes, rows, cols = int(si(c.psum.partition_size, "B")), t.rows, t.cols
        moving, hbm, queues = t.moving_max, int(si(spec.memory.capacity, "B")), d.queues
        instructions, semaphores = c.instructions, c.semaphores
        activation_lanes = c.scalar.lanes
    else:
        moving = min(t.moving_max, sim.tensor_moving_max)
        partitions, sbuf_bytes = sim.partitions, sim.sbuf_partition_bytes
        psum_bytes, rows, cols = c.psum.banks * moving * 4, sim.tensor_rows, sim.tensor_cols
        hbm, queues, instructions = sim.hbm_bytes, sim.dma_queues, sim.instructions
        semaphores = min(sim.semaphores, c.semaphores)
        activation_lanes = min(sim.lanes, partitions)
    return _build(
        CoreParams, f"{spec.name}: core fields" + (" at sim scale" if sim else ""),
        name=spec.name, version=spec.neuron_core, partitions=partitions,
        activation_lanes=activation_lanes,
        sbuf_bytes=sbuf_bytes, psum_bytes=psum_bytes, psum_banks=c.psum.banks,
        rows=rows, cols=cols, moving_max=moving, row_tiles=tuple(t.row_tiles),
        formats=formats, tensor=array,
        rates=tuple((f, t.rates.get(f, 1.0)) for f in t.formats),
        clocks=(("tensor", si(t.clock, "Hz")), ("vector", si(c.vector.clock, "Hz")),
                ("scalar", si(c.scalar.clock, "Hz")), ("gpsimd", si(c.gpsimd.clock, "Hz"))),
        vector_elements=c.vector.elements_per_cycle,
        vector_transpose=min(c.vector.transpose, partitions),
        functions=activation_functions(spec), vector_functions=tuple(c.vector.functions),
        rng=rounding_rng(spec), access_start=c.costs.access_start,
        min_interval=c.costs.min_interval, dynamic_interval=c.costs.dynamic_interval,
        stride_penalty=int(si(c.costs.stride_penalty, "B")),
        op_cycles=tuple(sorted(c.costs.op_cycles.items())),
        semaphore_latency=si(c.costs.semaphore_latency, "s"),
        shared_ports=tuple((tuple(sp.engines), sp.memory) for sp in c.costs.shared_ports),
        dma_queues=queues, dma_bandwidth=dma_bw, dma_latency=si(d.latency, "s"),
        dma_packet_overhead=int(si(d.packet_overhead, "B")),
        dma_packet_minimum=int(si(d.packet_minimum, "B")), dma_transpose=d.transpose,
        hbm_bytes=hbm, instructions=instructions, semaphores=semaphores)
