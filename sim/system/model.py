"""Core -> chip -> instance -> server -> cluster: figures derived from the specs.

Each level derives its figures from the level below and its own spec: a chip is ``cores``
cores plus its memory, DMA and links; an instance is ``count`` chips joined by a topology with
EFA to the outside; a server is ``count`` instances (or chips); a cluster is ``count``
instances or servers. The arithmetic is in :mod:`sim.system.formulas` (plain numbers, numpy
arrays welcome); this module maps spec fields onto it and returns pint quantities.

Two figures measured on the RTL feed the model, so a change in the RTL shows up at every
level above it:

- the tensor engine's cycles per matmul, :func:`sim.golden.systolic_cycles.matmul_cycles`: the
  closed form of the cycle model the systolic array's RTL is checked against, the same function
  the exploration model and the core simulator use (:func:`sustained`, :func:`tile_interval`);
- the NeuronLink efficiency (``link_efficiency``, default :func:`default_link_efficiency`:
  the link's golden model, framing, credit and replay loops, on the spec's link parameters),
  which scales the link bandwidth in the collective times.

A system's EFA bandwidth is its members' summed; a system of chips takes its own ``efa``, and
a system that gives one beside members that have EFA must give their sum.

Assumptions of the collective model (none is published): a chip's NeuronLink bandwidth is the
sum over its links of one direction of each full-duplex link, shared equally by its links
(``neuronlink.links``); every torus link, the ring across a Trn2 UltraServer's instances
included, runs at that per-link figure; the rings of a torus run both directions at once; a
cluster all-reduces hierarchically, its members' EFA carrying the inter-member phase; each
reduce-scatter step ends with an add on the vector engines (:meth:`Chip.reduce_seconds` of one
element), whose fixed cost the executed collectives showed the formula lacked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import networkx as nx
import pint

from hdl.core.params import CoreParams
from hdl.params import core_params, link_params
from sim.core.costs import stream_cycles
from sim.golden import link as golden_link
from sim.golden import systolic_cycles
from specs import units
from specs.errors import ModelError
from specs.loader import find, load_document
from specs.model import ChipSpec, SystemSpec, TensorSpec
from specs.quantities import QUANTITIES, QuantityInfo

from . import collectives, formulas, topology

__all__ = [
    "COLLECTIVE_BYTES",
    "EXTRA_QUANTITIES",
    "FORMAT_GROUPS",
    "LEVELS",
    "SUSTAINED_SHAPES",
    "Chip",
    "Core",
    "ModelError",
    "Sustained",
    "System",
    "build",
    "default_link_efficiency",
    "quantity_info",
    "rate",
    "sustained",
    "tile_interval",
]

LEVELS = ("core", "chip", "instance", "server", "cluster")

#: The input formats behind each ``compute.<name>`` figure; a group's rate is the highest of
#: the formats the array lists (fp8 is whichever 8-bit float layout runs fastest).
FORMAT_GROUPS: dict[str, tuple[str, ...]] = {
    "int8": ("int8",),
    "fp8": ("fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2"),
    "cfp8": ("cfp8",),
    "bf16": ("bf16",),
    "fp16": ("fp16",),
    "tf32": ("tf32",),
    "fp32": ("fp32",),
    "mxfp8": ("mxfp8", "mxfp8_e5m2"),
    "mxfp4": ("mxfp4",),
}

#: Buffer size of the collective figures (bytes per chip).
COLLECTIVE_BYTES = 2**30

#: Most chips one NeuronLink graph (ring, torus or switch) may join: a limit of the model, not of
#: the hardware. The largest bundled NeuronLink domain is the Trn3 UltraServer's 144 chips.
#: `gen check` executes collectives on the graph, which grows with the square of the chips
#: (28 CPU s for a 512-chip switch, 108 s for 1,024, over 5 minutes for 8,192), and a count
#: mutated to 1e11 would build nodes until memory ran out. Larger systems join their members
#: over EFA.
MAX_GRAPH_CHIPS = 512

#: Matmul shapes (m, k, n) of the ``sustained.*`` figures: a large square one, and one with a
#: short moving tile (a decode step), where the LoadStationary cost shows.
SUSTAINED_SHAPES = {"sustained.bf16": (4096, 4096, 4096),
                    "sustained.bf16_n64": (4096, 4096, 64)}

#: Figures the model derives beyond those a claim can name.
EXTRA_QUANTITIES: dict[str, QuantityInfo] = {
    **{name: QuantityInfo("compute", "Sustained BF16 tensor throughput, every core running "
                                     "a {}x{}x{} matmul.".format(*shape))
       for name, shape in SUSTAINED_SHAPES.items()},
    "neuronlink.efficiency": QuantityInfo(
        "ratio", "Fraction of NeuronLink bandwidth that carries payload."),
    **{f"collective.{op}": QuantityInfo(
        "time", f"Time of a {op.replace('_', '-')} of 1 GiB per chip over all chips.")
       for op in collectives.OPS},
}

_ureg = units.registry()
Q = _ureg.Quantity


def quantity_info(name: str) -> QuantityInfo:
    """Dimension and description of a claimable or an extra derived quantity."""
    return QUANTITIES.get(name) or EXTRA_QUANTITIES[name]


def _si(q: pint.Quantity, unit: str) -> float:
    return float(q.to(unit).magnitude)


def rate(tensor: TensorSpec, fmt: str) -> float:
    """Multiply-accumulates per PE per cycle of ``fmt`` (1 when the spec lists no rate)."""
    if fmt not in tensor.formats:
        raise ModelError(f"fmt must be one of the array's formats "
                         f"({', '.join(tensor.formats)}), not {fmt!r}")
    return tensor.rates.get(fmt, 1.0)


def _group_rate(tensor: TensorSpec, group: str) -> float | None:
    rates = [rate(tensor, f) for f in FORMAT_GROUPS[group] if f in tensor.formats]
    return max(rates) if rates else None


# --- tensor engine: cycles per tile and sustained throughput ------------------------------

def tile_interval(tensor: TensorSpec, fmt: str, k: int, m: int, n: int) -> float:
    """Steady-state cycles of one LoadStationary + MultiplyMoving pair on a tile of ``k x m``
    stationary and ``k x n`` moving, the load hidden behind the previous multiply:
    :func:`sim.golden.systolic_cycles.tile_interval`, with ``1 / rate`` cycles per moving column for
    formats below one MAC per PE per cycle (fp32 at a quarter rate, as the array runs it)."""
    slow = 1.0 / min(rate(tensor, fmt), 1.0)
    return float(systolic_cycles.tile_interval(m, n, tensor.load_columns, slow))


@dataclass(frozen=True)
class Sustained:
    """Tensor-engine figures of one matmul shape on a chip, every core running it."""

    cycles: float
    time: pint.Quantity
    flops: pint.Quantity
    peak: pint.Quantity

    @property
    def efficiency(self) -> float:
        return float((self.flops / self.peak).to("").magnitude)


def _pieces(size: int, tile: int) -> list[tuple[int, int]]:
    """``size`` cut into tiles of at most ``tile``: (tile size, how many) pairs."""
    full, rest = divmod(size, tile)
    return [(t, c) for t, c in ((tile, full), (rest, 1)) if t and c]


def sustained(chip: ChipSpec, m: int, k: int, n: int, fmt: str) -> Sustained:
    """Sustained throughput of an ``m x k`` by ``k x n`` matmul in ``fmt`` on every core:
    :func:`sim.golden.systolic_cycles.matmul_cycles` on the spec's array and its tiling."""
    for name, v in (("m", m), ("k", k), ("n", n)):
        if not (isinstance(v, int) and v >= 1):
            raise ModelError(f"{name} must be a positive integer, not {v!r}")
    t = chip.core.tensor
    r = rate(t, fmt)
    cycles = float(formulas.matmul_cycles(m, k, n, t.rows, t.cols, r, t.moving_max,
                                          t.load_columns, tuple(t.row_tiles)))
    clock = _si(t.clock, "Hz")
    flops = formulas.sustained_flops(m, k, n, cycles, clock, chip.cores)
    peak = formulas.peak_flops(t.rows, t.cols, clock, r, chip.cores)
    return Sustained(cycles, Q(cycles / clock, "s"), Q(flops, "FLOPS"), Q(peak, "FLOPS"))


# --- links --------------------------------------------------------------------------------

def default_link_efficiency(chip: ChipSpec) -> float:
    """Payload fraction of the link in steady state, from the link's golden model
    (framing, credit and replay loops) on the spec's parameters and channel latency,
    full-size packets."""
    params = link_params(chip, "full")
    return float(golden_link.efficiency(params, chip.neuronlink.latency, params.max_packet))


# --- levels -------------------------------------------------------------------------------

Figures = dict[str, "pint.Quantity | int | float"]


@dataclass(frozen=True)
class Core:
    """One physical NeuronCore of ``spec``."""

    spec: ChipSpec
    level = "core"

    def compute(self, cores: int = 1) -> Figures:
        """Peak tensor throughput per claimable format of ``cores`` cores."""
        t = self.spec.core.tensor
        clock = _si(t.clock, "Hz")
        out: Figures = {}
        for group in FORMAT_GROUPS:
            r = _group_rate(t, group)
            if r is not None:
                out[f"compute.{group}"] = Q(
                    formulas.peak_flops(t.rows, t.cols, clock, r, cores), "FLOPS")
        if t.sparsity is not None and "compute.fp8" in out:
            out["compute.fp8_sparse"] = Q(formulas.sparse_flops(
                t.rows, t.cols, clock, t.sparsity.speedup, cores), "FLOPS")
        c = self.spec.core
        for name, engine in (("vector", c.vector), ("scalar", c.scalar)):
            out[f"{name}.fp32"] = Q(formulas.engine_flops(
                engine.lanes, _si(engine.clock, "Hz"), engine.ops_per_lane_cycle, cores), "FLOPS")
        return out

    def figures(self) -> Figures:
        c = self.spec.core
        out = self.compute()
        for name, engine in (("vector", c.vector), ("scalar", c.scalar)):
            out[f"{name}.ops_per_cycle"] = float(
                formulas.engine_ops_per_cycle(engine.lanes, engine.ops_per_lane_cycle))
        out["clock.tensor"] = c.tensor.clock.to("GHz")
        out["clock.vector"] = c.vector.clock.to("GHz")
        out["clock.scalar"] = c.scalar.clock.to("GHz")
        if c.gpsimd is not None:
            out["clock.gpsimd"] = c.gpsimd.clock.to("GHz")
        for name, buf in (("sbuf", c.sbuf), ("psum", c.psum)):
            out[f"{name}.capacity"] = Q(formulas.buffer_bytes(
                buf.partitions, _si(buf.partition_size, "B")), "B").to("MiB")
        return out


@dataclass(frozen=True)
class Chip:
    """One chip: ``cores`` cores, memory, DMA and links.

    ``link_bandwidth`` replaces the chip's NeuronLink bandwidth when the system it sits in
    says so; ``link_efficiency`` overrides :func:`default_link_efficiency` (e.g. with the
    figure measured on the link RTL).
    """

    spec: ChipSpec
    link_bandwidth: pint.Quantity | None = None
    link_efficiency: float | None = None
    level = "chip"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def chips(self) -> int:
        return 1

    @property
    def chip(self) -> Chip:
        return self

    @cached_property
    def core(self) -> Core:
        return Core(self.spec)

    @property
    def neuronlink_bandwidth(self) -> pint.Quantity | None:
        return self.link_bandwidth or self.spec.neuronlink.bandwidth

    @property
    def efficiency(self) -> float:
        if self.link_efficiency is not None:
            return self.link_efficiency
        return default_link_efficiency(self.spec)

    @cached_property
    def core_params(self) -> CoreParams | None:
        """The core simulator's parameters, None where the spec lacks its cost fields."""
        try:
            return core_params(self.spec)
        except ModelError:
            return None

    def reduce_seconds(self, elements: int) -> float:
        """Seconds to add ``elements`` received elements into the chip's own (a collective's
        reduction): the vector engine's stream rule (:func:`sim.core.costs.stream_cycles`, two
        input streams) with the elements spread over the vector engines of all the chip's
        cores. 0 for a chip whose spec has no core cost fields."""
        p = self.core_params
        if p is None:
            return 0.0
        per_lane = -(-elements // (p.partitions * self.spec.cores))
        return stream_cycles(p, "vector", per_lane, 2.0) / p.clock("vector")

    def add(self, itemsize: int = 4) -> collectives.Add:
        """:meth:`reduce_seconds` as a cost of adding received bytes of ``itemsize``-byte
        elements, for the collective formulas: its fixed cost (one element), and the start-up
        and streaming rate read off it at two sizes where the stream dominates."""
        small = self.reduce_seconds(1)
        if not small:
            return collectives.Add(0.0, 0.0, math.inf)
        p = self.core_params
        big = p.partitions * self.spec.cores * 2**12
        t1, t2 = self.reduce_seconds(big), self.reduce_seconds(2 * big)
        rate = big * itemsize / (t2 - t1)
        return collectives.Add(small, t1 - big * itemsize / rate, rate)

    def sustained(self, m: int, k: int, n: int, fmt: str) -> Sustained:
        return sustained(self.spec, m, k, n, fmt)

    def compute(self) -> Figures:
        return self.core.compute(self.spec.cores)

    def logical_cores(self) -> dict[int, int]:
        return {lnc: int(formulas.logical_cores(self.spec.cores, lnc))
                for lnc in self.spec.lnc.options}

    def figures(self) -> Figures:
        s = self.spec
        out = self.compute()
        if "bf16" in s.core.tensor.formats:
            for name, shape in SUSTAINED_SHAPES.items():
                out[name] = self.sustained(*shape, "bf16").flops
        for name in ("vector", "scalar"):
            engine = getattr(s.core, name)
            out[f"{name}.ops_per_cycle"] = float(formulas.engine_ops_per_cycle(
                engine.lanes, engine.ops_per_lane_cycle, s.cores))
        out["cores"] = s.cores
        for lnc, n in self.logical_cores().items():
            out[f"logical_cores.lnc{lnc}"] = n
        for name in ("sbuf", "psum"):
            buf = getattr(s.core, name)
            out[f"{name}.capacity"] = Q(formulas.buffer_bytes(
                buf.partitions, _si(buf.partition_size, "B"), s.cores), "B").to("MiB")
        if s.cc_cores is not None:
            out["cc_cores"] = s.cc_cores
        out["memory.capacity"] = s.memory.capacity
        out["memory.bandwidth"] = s.memory.bandwidth
        out["dma.engines"] = s.dma.engines
        if s.dma.bandwidth is not None:
            out["dma.bandwidth"] = s.dma.bandwidth
        if s.neuronlink.links is not None:
            out["neuronlink.links"] = s.neuronlink.links
        if self.neuronlink_bandwidth is not None:
            out["neuronlink.bandwidth"] = self.neuronlink_bandwidth
            out["neuronlink.efficiency"] = self.efficiency
        return out

    def levels(self) -> dict[str, Figures]:
        """Figures of every level of this model, innermost first."""
        return {"core": self.core.figures(), "chip": self.figures()}


@dataclass(frozen=True)
class System:
    """An instance, server or cluster: ``count`` members joined by ``spec.topology``."""

    spec: SystemSpec
    member: Chip | System

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def level(self) -> str:
        return self.spec.level

    @property
    def count(self) -> int:
        return self.spec.count

    @property
    def chips(self) -> int:
        return self.count * self.member.chips

    @property
    def chip(self) -> Chip:
        return self.member.chip

    @property
    def efa(self) -> pint.Quantity | None:
        """EFA bandwidth: the members' summed, or the spec's own for a system of chips."""
        inner = self.member.efa if isinstance(self.member, System) else None
        own = self.spec.efa
        if inner is None:
            return own
        total = inner * self.count
        if own is not None and not math.isclose(_si(own, "bps"), _si(total, "bps"),
                                                rel_tol=1e-9):
            raise ModelError(f"{self.name}: efa must be its members' {self.count} x "
                             f"{units.show(inner)} = {units.show(total.to(inner.units))} "
                             f"or be left out, not {units.show(own)}")
        return total

    @property
    def link_alpha(self) -> float:
        """Seconds of one NeuronLink hop of a collective: the spec's ``link_latency`` (0 for a
        system without links, which has no hop)."""
        lat = self.spec.link_latency
        return 0.0 if lat is None else _si(lat, "s")

    @property
    def efa_alpha(self) -> float:
        """Seconds of one step of a collective over EFA: the spec's ``efa_latency``, else its
        members' (a cluster of instances takes theirs)."""
        if self.spec.efa_latency is not None:
            return _si(self.spec.efa_latency, "s")
        if isinstance(self.member, System):
            return self.member.efa_alpha
        raise ModelError(f"{self.name}: no efa_latency in the spec or its members")

    def _link(self) -> float:
        """Per-link bandwidth in bytes/s, one direction."""
        chip = self.chip
        bw = chip.neuronlink_bandwidth
        if bw is None:
            raise ModelError(f"{self.name}: the chip {chip.name!r} has no NeuronLink "
                             f"bandwidth, so its topology has no link figures")
        return _si(bw, "B/s") / (chip.spec.neuronlink.links or 1)

    @cached_property
    def topology(self) -> nx.Graph:
        """Graph of the chip-to-chip links inside this system (EFA not included)."""
        kind, dims = self.spec.topology.kind, tuple(self.spec.topology.dims)
        if self.chips > MAX_GRAPH_CHIPS:
            raise ModelError(f"{self.name}: {self.chips:,} chips joined by NeuronLink "
                             f"({kind}); the model builds link graphs of at most "
                             f"{MAX_GRAPH_CHIPS:,} chips (join larger systems over EFA)")
        if kind == "none":
            if self.chips != 1:
                raise ModelError(f"{self.name}: topology 'none' must join 1 chip, "
                                 f"not {self.chips}")
            return topology.single_chip()
        if kind in ("ring", "torus2d", "torus3d"):
            if math.prod(dims) != self.chips:
                raise ModelError(f"{self.name}: topology dims {list(dims)} must hold "
                                 f"{self.chips} chips, not {math.prod(dims)}")
            return topology.torus(dims, self._link())
        if not isinstance(self.member, Chip):
            raise ModelError(f"{self.name}: a switch joins chips; members joined over EFA "
                             f"have no chip-to-chip graph")
        return topology.switch(self.chips, _si(self.chip.neuronlink_bandwidth, "B/s"))

    @property
    def over_efa(self) -> bool:
        """Whether the members are joined by EFA rather than NeuronLink."""
        return self.spec.topology.kind == "switch" and isinstance(self.member, System)

    def collective(self, op: str, nbytes: float = COLLECTIVE_BYTES) -> pint.Quantity:
        """Time of ``op`` on a buffer of ``nbytes`` per chip over every chip of the system."""
        eff = self.chip.efficiency
        add = self.chip.add()
        if self.over_efa:
            inner = self.member
            if inner.efa is None:
                raise ModelError(f"{self.name}: members joined over EFA need an EFA "
                                 f"bandwidth, {inner.name!r} has none")
            if isinstance(inner, System) and inner.over_efa:
                raise ModelError(f"{self.name}: a cluster of clusters is not modelled")
            t = collectives.hierarchical_time(
                op, nbytes, inner.topology, self.count, _si(inner.efa, "B/s"),
                inner.link_alpha, inner.efa_alpha, eff, bidirectional=True,
                reduce=add, chunk=collectives.CHUNK)
        else:
            t = collectives.topology_time(self.topology, op, nbytes, self.link_alpha,
                                          eff, bidirectional=True, reduce=add,
                                          chunk=collectives.CHUNK)
        return Q(t, "s").to("ms")

    def figures(self) -> Figures:
        chip = self.chip
        out: Figures = {k: (v * self.chips) for k, v in chip.compute().items()}
        out["chips"] = self.chips
        out["cores"] = chip.spec.cores * self.chips
        for lnc, n in chip.logical_cores().items():
            out[f"logical_cores.lnc{lnc}"] = n * self.chips
        out["memory.capacity"] = chip.spec.memory.capacity * self.chips
        out["memory.bandwidth"] = chip.spec.memory.bandwidth * self.chips
        if self.efa is not None:
            out["efa.bandwidth"] = self.efa
        if self.chips > 1 and chip.neuronlink_bandwidth is not None:
            for op in collectives.OPS:
                out[f"collective.{op}"] = self.collective(op)
        return out

    def levels(self) -> dict[str, Figures]:
        """Figures of every level of this model, innermost first."""
        return {**self.member.levels(), self.level: self.figures()}


def build(name: str | Path, *, link_efficiency: float | None = None,
          link_bandwidth: pint.Quantity | None = None) -> Chip | System:
    """The model of a bundled spec (or a spec file), members built recursively.

    ``link_efficiency`` overrides the link model's figure (see the module docstring). A
    system's ``link_bandwidth`` applies to the chips inside it, the outermost system that
    sets one taking precedence.
    """
    doc = load_document(name)
    spec = doc.spec
    if isinstance(spec, ChipSpec):
        return Chip(spec, link_bandwidth, link_efficiency)
    bw = link_bandwidth or spec.link_bandwidth
    member = find(spec.member, near=doc.file.parent)
    return System(spec, build(member, link_efficiency=link_efficiency, link_bandwidth=bw))
