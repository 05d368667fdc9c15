"""Collectives executed on the chips and links of an instance, an UltraServer or a cluster slice.

:func:`fabric` builds the chips and directed links of a system model (:mod:`sim.system.model`):
the NeuronLink topology graph the model builds (each edge two directed links of the edge's
bandwidth) and, for a cluster, a ring of EFA links between its members, each carrying the
member's whole EFA bandwidth. :func:`run` executes one collective on it.

**Execution.** A collective is a graph of operations, each on one resource: a chunk crossing
one directed link (a hop), or a chunk reduced on a chip's vector engine. An operation starts
when all it depends on has finished and its resource is free; a resource serves its
operations in the order they become ready (first come, first served), so transfers that share
a link queue behind each other (contention). Operations run in time order on the core
simulator's event engine (:mod:`sim.core.events`): an operation is woken when its last
dependency finishes, links and vector engines are its first-come-first-served resources.

- A hop of ``b`` bytes holds its link for ``b / (bandwidth * efficiency)`` and lands ``alpha``
  later (the system's ``link_alpha`` or ``efa_alpha``, from its spec). ``efficiency`` is the
  link golden model's steady-state payload fraction (framing, credit and replay loops,
  :func:`sim.system.model.default_link_efficiency`); EFA is taken at full efficiency, as the
  analytic model does. Messages are cut into chunks of at most ``chunk`` bytes, so the steps of
  a ring pipeline; a transfer between chips that are not neighbours crosses every link of the
  shortest path, store and forward per chunk.
- With a ``bit_error_rate`` (by default the chip spec's ``neuronlink.bit_error_rate``, an
  assumption), each hop's packets (``neuronlink.max_packet`` bytes) fail with the
  link model's packet error rate; a failed packet is replayed (go-back-N) and costs
  :func:`sim.golden.link.replay_cycles` link cycles, a retransmission that fails again
  ``ack_timeout`` more, so the expected time per packet is that of
  :func:`sim.golden.link.efficiency_with_errors`. A link cycle moves one ``width``-bit flit at
  the link's raw bandwidth. The data is delivered once, whatever the replays.
- A reduction of ``e`` elements costs the vector engine's stream rule
  (:func:`sim.core.costs.stream_cycles`, two input streams) at the vector clock, the chunk
  spread over the vector engines of all the chip's cores (``e / (partitions * cores)``
  elements per lane); a chip reduces one chunk at a time.
  The DMA between HBM and SBUF around it is not modelled.

**Numerics** (unless ``timing_only``). ``fp32``: each reduction is ``add32`` of the vector
engine's golden model (:func:`sim.golden.vector.elementwise`). ``bf16``: both operands widened
to fp32, added with ``add32`` and cast back to bf16 by :func:`sim.golden.numerics.cast_bits`,
round-to-nearest-even or stochastic (the chip's per-lane generator, seeded per chunk and
chip).

**Reduction order** (what makes the result reproducible bit for bit). A ring reduce-scatter
over members ``0 .. g-1`` cuts its region into ``g`` equal segments (``numpy.array_split``);
member ``i`` ends up owning segment ``i``, which it summed as the left fold
``((x[i+1] + x[i+2]) + ...) + x[i]`` over members taken in ring order from ``i + 1``. The
bidirectional ring sends the first half of every region round the ring and the second half
round the reversed ring (member order reversed). The torus reduces dimension 0 first, then
1, 2 on the segment each chip owns; the hierarchical algorithm reduces inside each member
first, then over the members' ring. :func:`ring_order` is the order of the single-ring
algorithm.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from hdl.numerics.formats import BF16
from hdl.params import link_params, rounding_rng
from hdl.vector.ops import VectorOp
from sim.core.events import Agenda, Resources
from sim.golden import link as golden_link
from sim.golden import numerics, vector
from specs.errors import ModelError

from . import collectives
from .model import Chip, System

__all__ = ["ALGORITHMS", "DTYPES", "OPS", "Execution", "Fabric", "Link", "analytic", "bus_factor",
           "fabric", "ring_order", "run"]

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
ALGORITHMS = ("ring", "torus", "hierarchical", "direct")
DTYPES = {"fp32": 4, "bf16": 2}
ROUNDINGS = ("rne", "stochastic")
DEFAULT_CHUNK = collectives.CHUNK


def bus_factor(op: str, p: int) -> float:
    """busbw / algbw as nccl-tests defines it: ``2(p-1)/p`` for all-reduce, ``(p-1)/p`` for
    all-gather, reduce-scatter and all-to-all, 1 for send/receive."""
    if op == "all_reduce":
        return 2 * (p - 1) / p
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (p - 1) / p
    return 1.0


@dataclass(frozen=True)
class Link:
    """One direction of a link: payload bytes/s is ``bandwidth * efficiency``."""

    name: str
    bandwidth: float
    efficiency: float
    alpha: float
    kind: str  # "neuronlink" or "efa"
    dim: object = None  # the torus dimension, "switch" or "efa"


@dataclass
class Fabric:
    """Chips (``0 .. chips-1``) and directed links of a system, and how they are grouped."""

    name: str
    chips: int
    graph: nx.DiGraph            # nodes: chip indices and switch names; edges carry ``link``
    coords: list                 # a chip's node in its member's topology
    member_of: list[int]         # member (instance, server) index of every chip
    members: int
    inner: nx.Graph              # one member's topology graph (the whole system's if members=1)
    chip: Chip                   # the chip model (its reduction cost rule)
    rng: str | None              # the chip's generator of stochastic rounding (None: none)
    link_params: object          # LinkParams of the chip's NeuronLink port
    link_latency: int            # channel latency, link cycles
    _paths: dict = field(default_factory=dict)
    _hops: dict = field(default_factory=dict)
    _links: dict = field(default_factory=dict)

    def path(self, a, b) -> list[tuple]:
        """Directed links from chip ``a`` to chip ``b`` along a shortest path."""
        tree = self._paths.get(a)
        if tree is None:
            tree = self._paths[a] = nx.single_source_dijkstra_path(self.graph, a,
                                                                   weight="hops")
        return list(itertools.pairwise(tree[b]))

    def hops(self, a, b) -> tuple[tuple[tuple, Link], ...]:
        """:meth:`path`'s links that carry data (a chip's way to its member's EFA port
        carries none), each with its :class:`Link`; remembered per pair."""
        got = self._hops.get((a, b))
        if got is None:
            got = self._hops[a, b] = tuple((e, self.link(e)) for e in self.path(a, b)
                                           if self.link(e) is not None)
        return got

    def link(self, edge) -> Link:
        got = self._links.get(edge)
        if got is None and edge not in self._links:
            got = self._links[edge] = self.graph.edges[edge]["link"]
        return got


def fabric(system: System, members: int | None = None) -> Fabric:
    """The chips and links of ``system``; a cluster over EFA executes a slice of ``members``
    of its members (default 2), joined in a ring of EFA links. Built once per system and
    ``members`` (its shortest paths are what a large system's runs spend most time finding),
    and kept beside the system's other cached figures."""
    built = system.__dict__.setdefault("_fabrics", {})
    if members not in built:
        built[members] = _fabric(system, members)
    return built[members]


def _fabric(system: System, members: int | None) -> Fabric:
    chip = system.chip
    spec = chip.spec
    lp = link_params(spec, "full")
    eff = chip.efficiency
    if system.over_efa:
        inner = system.member
        if inner.efa is None:
            raise ModelError(f"{system.name}: members joined over EFA need an EFA bandwidth, "
                             f"{inner.name!r} has none")
        m = 2 if members is None else members
        if not (isinstance(m, int) and 2 <= m <= system.count):
            raise ModelError(f"{system.name}: members must be 2 .. {system.count}, not {m!r}")
        inner_graph = inner.topology
        alpha, efa_alpha = inner.link_alpha, inner.efa_alpha
        efa_bw = float(inner.efa.to("B/s").magnitude)
    else:
        if members not in (None, 1):
            raise ModelError(f"{system.name}: members slices a cluster over EFA; "
                             f"{system.name} is one {system.level}")
        m, inner_graph = 1, system.topology
        alpha, efa_alpha, efa_bw = system.link_alpha, 0.0, 0.0
    local = [n for n, c in inner_graph.nodes(data="chip") if c]
    index = {n: i for i, n in enumerate(local)}
    g = nx.DiGraph()
    coords, member_of = [], []
    for k in range(m):
        for n in local:
            coords.append(n)
            member_of.append(k)
            g.add_node(k * len(local) + index[n])

    def node(k, n):
        return k * len(local) + index[n] if n in index else f"{n}{k}"

    for k in range(m):
        for u, v, data in inner_graph.edges(data=True):
            for a, b in ((u, v), (v, u)):
                name = f"{a}->{b}" if m == 1 else f"m{k}:{a}->{b}"
                g.add_edge(node(k, a), node(k, b), link=Link(
                    name, data["bandwidth"], eff, alpha, "neuronlink", data["dim"]))
    if m > 1:
        for k in range(m):
            nxt = (k + 1) % m
            for a, b in ((k, nxt), (nxt, k)):
                if g.has_edge(f"efa{a}", f"efa{b}"):
                    continue
                g.add_edge(f"efa{a}", f"efa{b}",
                           link=Link(f"efa m{a}->m{b}", efa_bw, 1.0, efa_alpha, "efa", "efa"))
        for i in range(len(coords)):
            # A chip reaches its member's EFA port at no cost (the port's bandwidth is the
            # member's whole EFA figure, shared by every chip of the member).
            g.add_edge(i, f"efa{member_of[i]}", link=None, hops=len(coords))
            g.add_edge(f"efa{member_of[i]}", i, link=None, hops=len(coords))
    return Fabric(system.name, len(coords), g, coords, member_of, m, inner_graph, chip,
                  rounding_rng(spec), lp, spec.neuronlink.latency)


def ring_order(nodes: list) -> list:
    """A ring through torus coordinates in which consecutive chips are neighbours: the
    boustrophedon (snake) order, the last dimension outermost."""
    if not nodes or not isinstance(nodes[0], tuple):
        return list(nodes)
    dims = tuple(max(c[a] for c in nodes) + 1 for a in range(len(nodes[0])))

    def snake(axes: int) -> list[tuple]:
        if axes == 1:
            return [(i,) for i in range(dims[0])]
        inner = snake(axes - 1)
        out = []
        for j in range(dims[axes - 1]):
            part = inner if j % 2 == 0 else inner[::-1]
            out += [c + (j,) for c in part]
        return out

    return snake(len(dims))


# --- the schedule -----------------------------------------------------------------------------

class _Graph:
    """Operations with their resource, duration, landing latency and dependencies."""

    def __init__(self):
        self.resource: list = []
        self.duration: list[float] = []
        self.latency: list[float] = []
        self.nbytes: list[int] = []
        self.waiting: list[int] = []
        self.children: list[list[int]] = []
        self.action: list[Callable | None] = []
        self.label: list[str] = []

    def add(self, resource, duration: float, deps, *, latency: float = 0.0, nbytes: int = 0,
            action=None, label: str = "") -> int:
        i = len(self.resource)
        self.resource.append(resource)
        self.duration.append(duration)
        self.latency.append(latency)
        self.nbytes.append(nbytes)
        self.children.append([])
        self.action.append(action)
        self.label.append(label)
        waiting = 0
        children = self.children
        for d in deps:
            if d is not None:
                children[d].append(i)
                waiting += 1
        self.waiting.append(waiting)
        return i


@dataclass
class Execution:
    """What an executed collective took: time, bandwidths, per-link use and the trace."""

    system: str
    op: str
    algorithm: str
    chips: int
    nbytes: int
    dtype: str
    time: float
    link_busy: dict[str, float]
    link_bytes: dict[str, int]
    link_dims: dict[str, object]
    chip_busy: dict[int, float]
    replays: int
    operations: int
    data: list[np.ndarray] | None = None
    deliveries: dict | None = None  # numeric runs: how often each chunk arrived
    events: list[dict] = field(default_factory=list)
    chunk: int = DEFAULT_CHUNK
    bit_error_rate: float = 0.0

    @property
    def algbw(self) -> float:
        """Bytes per second as nccl-tests defines it: the buffer size over the time."""
        return self.nbytes / self.time if self.time else math.inf

    @property
    def busbw(self) -> float:
        return self.algbw * bus_factor(self.op, self.chips)

    def utilisation(self) -> dict[str, float]:
        """Fraction of the run each link was busy carrying chunks."""
        return {k: (v / self.time if self.time else 0.0) for k, v in self.link_busy.items()}

    def trace_json(self) -> str:
        """Chrome/Perfetto trace-event JSON: one track per chip (its reductions) and one per
        link, as the core simulator writes them."""
        links = sorted(self.link_busy)
        meta = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "chips"}},
                {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "links"}}]
        meta += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": c,
                  "args": {"name": f"chip {c}"}} for c in range(self.chips)]
        meta += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": i,
                  "args": {"name": name}} for i, name in enumerate(links)]
        tid = {name: i for i, name in enumerate(links)}
        events = []
        for e in self.events:
            e = dict(e)
            track = e.pop("track")
            if isinstance(track, int):
                events.append(dict(e, pid=0, tid=track))
            else:
                events.append(dict(e, pid=1, tid=tid[track]))
        return json.dumps({"traceEvents": meta + events, "displayTimeUnit": "ns"})


class _Builder:
    """Builds the operation graph of one collective on a fabric, with its data effects."""

    def __init__(self, fab: Fabric, itemsize: int, chunk: int, data, dtype: str,
                 rounding: str, seed: int):
        self.fab = fab
        self.g = _Graph()
        self.itemsize = itemsize
        self.chunk_elems = max(1, chunk // itemsize)
        self.data = data
        self.dtype = dtype
        self.rounding = rounding
        self.seed = seed
        self.barrier = [None] * fab.chips     # last phase's closing operation per chip
        self.phase_ops: list[list[int]] = [[] for _ in range(fab.chips)]
        self.phase = 0
        self.messages: dict[int, np.ndarray] = {}
        self.deliveries: dict[tuple, int] = {}
        self._adds: dict[int, float] = {}     # reduce_seconds by element count

    # -- costs --
    def reduce_seconds(self, elems: int) -> float:
        got = self._adds.get(elems)
        if got is None:
            got = self._adds[elems] = self.fab.chip.reduce_seconds(elems)
        return got

    # -- phases --
    def close_phase(self) -> None:
        """Every chip's next operations wait for all its operations of this phase."""
        for c in range(self.fab.chips):
            ops = self.phase_ops[c]
            if ops:
                self.barrier[c] = self.g.add(None, 0.0, ops + [self.barrier[c]],
                                             label="phase")
            self.phase_ops[c] = []
        self.phase += 1

    def chunks(self, lo: int, hi: int):
        step = self.chunk_elems
        for a in range(lo, hi, step):
            yield a, min(hi, a + step)

    def transfer(self, src: int, dst: int, lo: int, hi: int, deps, *, reduce: bool,
                 key, after=(), to: int | None = None) -> int:
        """A chunk of chip ``src``'s elements ``lo:hi`` to chip ``dst`` once ``deps`` are done;
        ``reduce`` adds it into ``dst``'s elements (on ``dst``'s vector engine, after
        ``after``), otherwise it overwrites them. ``key`` names the delivery, which is
        counted. ``to`` moves the chunk to ``dst``'s elements from ``to`` instead of ``lo``."""
        key = (self.phase, *key)
        at = lo if to is None else to
        nbytes = (hi - lo) * self.itemsize
        data = self.data
        first = prev = None
        for edge, link in self.fab.hops(src, dst):
            prev = self.g.add(edge, nbytes / (link.bandwidth * link.efficiency),
                              [prev] if first is not None else list(deps) + [self.barrier[src]],
                              latency=link.alpha, nbytes=nbytes, label=f"{lo}:{hi}")
            if first is None:
                first = prev
                if data is not None:
                    self.g.action[prev] = (lambda t=prev: self.messages.__setitem__(
                        t, data[src][lo:hi].copy()))
        tid = first
        self.phase_ops[src].append(tid)
        arrive = [prev, self.barrier[dst], *after]
        numeric = data is not None
        if not reduce and not numeric:
            # Timing only: the arrival is the delivery (what waits for it also waits for
            # dst's previous phase, through the barrier every send from dst carries).
            op = prev
        elif reduce:
            op = self.g.add(("vector", dst), self.reduce_seconds(hi - lo), arrive,
                            action=self._reducer(dst, lo, hi, tid, key) if numeric else None,
                            label=f"add {lo}:{hi}")
        else:
            op = self.g.add(None, 0.0, arrive, action=self._writer(dst, at, at + hi - lo, tid,
                                                                   key) if numeric else None)
        self.phase_ops[dst].append(op)
        return op

    def _count(self, key) -> None:
        self.deliveries[key] = self.deliveries.get(key, 0) + 1

    def _writer(self, dst, lo, hi, tid, key):
        data = self.data

        def write():
            self._count(key)
            data[dst][lo:hi] = self.messages.pop(tid)
        return write

    def _reducer(self, dst, lo, hi, tid, key):
        data = self.data

        def add():
            self._count(key)
            incoming = self.messages.pop(tid)
            local = data[dst][lo:hi]
            if self.dtype == "fp32":
                data[dst][lo:hi] = vector.elementwise(VectorOp.ADD, local, incoming)
                return
            wide = vector.elementwise(VectorOp.ADD, numerics.widen(local, BF16),
                                      numerics.widen(incoming, BF16))
            seed = (self.seed * 1_000_003 + dst * 65_537 + lo) & 0xFFFFFFFF or 1
            data[dst][lo:hi] = numerics.cast_bits(wide.view(np.float32), BF16, self.rounding,
                                                  seed, self.fab.rng)
        return add

    # -- rings --
    def ring_rs(self, members: list[int], lo: int, hi: int) -> list[tuple[int, int]]:
        """Ring reduce-scatter of ``lo:hi`` over ``members``; member ``i`` owns segment ``i``."""
        g = len(members)
        bounds = _split(lo, hi, g)
        last: dict[tuple[int, int], int] = {}  # (member, chunk lo) -> op that reduced it
        for s in range(g - 1):
            new = {}
            for i in range(g):
                j = (i - s - 1) % g
                a, b = bounds[j]
                for clo, chi in self.chunks(a, b):
                    dep = last.get((i, clo))
                    op = self.transfer(members[i], members[(i + 1) % g], clo, chi, [dep],
                                       reduce=True, key=("rs", members[(i + 1) % g], clo, s))
                    new[((i + 1) % g, clo)] = op
            last = new
        return bounds

    def ring_ag(self, members: list[int], lo: int, hi: int) -> None:
        """Ring all-gather of ``lo:hi`` over ``members``; member ``i`` holds segment ``i``."""
        g = len(members)
        bounds = _split(lo, hi, g)
        last: dict[tuple[int, int], int] = {}
        for s in range(g - 1):
            new = {}
            for i in range(g):
                j = (i - s) % g
                a, b = bounds[j]
                for clo, chi in self.chunks(a, b):
                    dep = last.get((i, clo))
                    op = self.transfer(members[i], members[(i + 1) % g], clo, chi, [dep],
                                       reduce=False, key=("ag", members[(i + 1) % g], clo, s))
                    new[((i + 1) % g, clo)] = op
            last = new

    def bidirectional(self, fn, members: list[int], ranges: list[tuple[int, int]]):
        """``fn`` on the first half of every range round the ring, the second half round the
        reversed ring; returns, per member, the ranges it owns afterwards."""
        owned: dict[int, list[tuple[int, int]]] = {m: [] for m in members}
        for lo, hi in ranges:
            mid = lo + (hi - lo) // 2
            for order, (a, b) in ((members, (lo, mid)), (members[::-1], (mid, hi))):
                bounds = fn(order, a, b) or _split(a, b, len(order))
                for i, m in enumerate(order):
                    owned[m].append(bounds[i])
        return owned


def _split(lo: int, hi: int, g: int) -> list[tuple[int, int]]:
    """``lo:hi`` cut into ``g`` segments as ``numpy.array_split`` cuts it."""
    q, r = divmod(hi - lo, g)
    ends = [lo + (i + 1) * q + min(i + 1, r) for i in range(g)]
    return list(zip([lo] + ends[:-1], ends, strict=True))


def _torus_groups(fab: Fabric, chips: list[int], axis: int) -> list[list[int]]:
    """Rings of ``chips`` along torus ``axis`` (members ordered by that coordinate)."""
    groups: dict[tuple, list[int]] = {}
    for c in chips:
        co = fab.coords[c]
        groups.setdefault(co[:axis] + co[axis + 1:], []).append(c)
    return [sorted(g, key=lambda c: fab.coords[c][axis]) for g in groups.values()]


def _member_chips(fab: Fabric, k: int) -> list[int]:
    return [c for c in range(fab.chips) if fab.member_of[c] == k]


class _Collective:
    """The algorithms: each reduce-scatters or all-gathers regions and says who owns what."""

    def __init__(self, b: _Builder, algorithm: str):
        self.b = b
        self.fab = b.fab
        self.algorithm = algorithm

    def _local_rings(self, chips: list[int]) -> list[list[list[int]]]:
        """Per stage, the rings of one member's chips."""
        kind = self.fab.inner.graph["kind"]
        if self.algorithm == "ring" or kind != "torus":
            order = ring_order([self.fab.coords[c] for c in chips])
            where = {self.fab.coords[c]: c for c in chips}
            return [[[where[n] for n in order]]]
        dims = self.fab.inner.graph["dims"]
        return [_torus_groups(self.fab, chips, a) for a, d in enumerate(dims) if d > 1]

    def reduce_scatter(self, n: int) -> dict[int, list]:
        """Reduce-scatter of ``0:n`` over every chip; returns each chip's owned ranges."""
        b = self.b
        owned = {c: [(0, n)] for c in range(self.fab.chips)}
        stages = self._stages()
        self.history = []
        for stage in stages:
            before = dict(owned)
            for ring in stage["rings"]:
                ranges = owned[ring[0]]
                if stage["bidirectional"]:
                    got = b.bidirectional(b.ring_rs, ring, ranges)
                else:
                    got = {m: [] for m in ring}
                    for lo, hi in ranges:
                        bounds = b.ring_rs(ring, lo, hi)
                        for i, m in enumerate(ring):
                            got[m].append(bounds[i])
                owned.update(got)
            b.close_phase()
            self.history.append((stage, before))
        return owned

    def all_gather(self) -> None:
        """The reverse of :meth:`reduce_scatter`'s stages, all-gathering what it scattered."""
        b = self.b
        for stage, before in reversed(self.history):
            for ring in stage["rings"]:
                ranges = before[ring[0]]
                if stage["bidirectional"]:
                    b.bidirectional(b.ring_ag, ring, ranges)
                else:
                    for lo, hi in ranges:
                        b.ring_ag(ring, lo, hi)
            b.close_phase()

    def _stages(self) -> list[dict]:
        fab = self.fab
        members = [_member_chips(fab, k) for k in range(fab.members)]
        local = [self._local_rings(ch) for ch in members]
        stages = []
        for s in range(len(local[0])):
            stages.append({"rings": [r for lr in local for r in lr[s]], "bidirectional": True})
        if fab.members > 1:
            per = len(members[0])
            rings = [[members[k][i] for k in range(fab.members)] for i in range(per)]
            stages.append({"rings": rings, "bidirectional": False})
        return stages


def analytic(system: System, op: str, nbytes: int, algorithm: str,
             members: int | None = None, chunk: int = DEFAULT_CHUNK,
             peer: int | None = None) -> float | None:
    """The formula's time (:mod:`sim.system.collectives`, on the system model's inputs, with
    ``chunk`` as the execution cuts messages) of what :func:`run` executes, in seconds; None
    for the operations it has no formula for. A send/receive (to ``peer``, as :func:`run`
    chooses it) is :func:`~sim.system.collectives.send_time` over its path's links."""
    if op == "send_recv":
        fab = fabric(system, members)
        links = [link for _, link in fab.hops(0, _peer(fab, peer))]
        rates = [link.bandwidth * link.efficiency for link in links]
        # Store and forward in chunks: the first chunk crosses every link, the rest follow
        # at the slowest link's rate, which is one send with each link's latency and the
        # first chunk's time on the faster links added.
        c = min(chunk, nbytes)
        alpha = sum(link.alpha + c / r for link, r in zip(links, rates, strict=True)) \
            - c / min(rates)
        return collectives.send_time(nbytes, min(rates), alpha)
    if op not in collectives.OPS:
        return None
    eff = system.chip.efficiency
    add = system.chip.add()
    if algorithm == "hierarchical":
        inner = system.member
        return collectives.hierarchical_time(
            op, nbytes, inner.topology, 2 if members is None else members,
            float(inner.efa.to("B/s").magnitude), inner.link_alpha,
            inner.efa_alpha, eff, bidirectional=True, reduce=add, chunk=chunk)
    if algorithm == "ring":
        g = system.topology
        bw = min(bw for *_, bw in g.edges(data="bandwidth"))
        hops = 2 if g.graph["kind"] == "switch" else 1
        return collectives.ring_time(op, nbytes, g.graph["chips"], bw,
                                     hops * system.link_alpha, eff, bidirectional=True,
                                     reduce=add, chunk=chunk)
    return collectives.topology_time(system.topology, op, nbytes, system.link_alpha,
                                     eff, bidirectional=True, reduce=add, chunk=chunk)


def _peer(fab: Fabric, peer: int | None) -> int:
    """The chip a send/receive from chip 0 goes to: ``peer``, by default the nearest."""
    dst = peer if peer is not None else min(
        (v for v in nx.bfs_tree(fab.graph, 0) if isinstance(v, int) and v != 0),
        key=lambda v: len(fab.path(0, v)))
    _check("peer", isinstance(dst, int) and 0 < dst < fab.chips, f"a chip 1 .. {fab.chips - 1}",
           dst)
    return dst


def _check(name: str, ok: bool, expected: str, value) -> None:
    if not ok:
        raise ModelError(f"{name} must be {expected}, not {value!r}")


def run(system: System, op: str, nbytes: int, *, algorithm: str | None = None,
        chunk: int = DEFAULT_CHUNK, dtype: str = "fp32", rounding: str = "rne",
        timing_only: bool = True, inputs: list[np.ndarray] | None = None,
        bit_error_rate: float | None = None, members: int | None = None, seed: int = 0,
        trace: bool = False, peer: int | None = None) -> Execution:
    """Execute ``op`` on a buffer of ``nbytes`` per chip over every chip of ``system``.

    ``nbytes`` is what nccl-tests calls the size: the all-reduce buffer, the all-gather
    output, the reduce-scatter input, the all-to-all buffer, the message of a send/receive
    (chip 0 to ``peer``, default its first neighbour). ``algorithm`` defaults to ``torus``
    on a torus, ``direct`` behind a switch, ``hierarchical`` over EFA. With data
    (``timing_only=False``), ``inputs`` holds each chip's buffer as bit patterns of
    ``dtype`` (uint32 for fp32, bf16 as uint32 too), random when left out; the results are
    in :attr:`Execution.data`. ``bit_error_rate`` defaults to the chip spec's
    ``neuronlink.bit_error_rate``.
    """
    _check("op", op in OPS, f"one of {', '.join(OPS)}", op)
    _check("dtype", dtype in DTYPES, f"one of {', '.join(DTYPES)}", dtype)
    _check("rounding", rounding in ROUNDINGS, f"one of {', '.join(ROUNDINGS)}", rounding)
    chip = system.chip.spec
    if rounding != "rne" and rounding_rng(chip) is None:
        raise ModelError(f"{system.name}: rounding must be 'rne', not {rounding!r} ({chip.name}"
                         f" rounds to nearest even only: its rounding.modes are "
                         f"{', '.join(chip.rounding.modes)})")
    _check("chunk", isinstance(chunk, int) and chunk >= DTYPES[dtype],
           "a whole number of bytes of at least one element", chunk)
    if bit_error_rate is None:
        bit_error_rate = system.chip.spec.neuronlink.bit_error_rate
    _check("bit_error_rate", 0 <= bit_error_rate < 1, "in [0, 1)", bit_error_rate)
    fab = fabric(system, members)
    p = fab.chips
    itemsize = DTYPES[dtype]
    _check("size", isinstance(nbytes, int) and nbytes >= itemsize * p and nbytes % itemsize == 0,
           f"a whole number of {dtype} elements, at least one per chip ({itemsize * p} B)",
           nbytes)
    if op == "all_to_all":
        _check("size", nbytes % (itemsize * p) == 0,
               f"a multiple of {p} {dtype} elements for an all-to-all", nbytes)
    kind = fab.inner.graph["kind"]
    default = "hierarchical" if fab.members > 1 else ("direct" if kind == "switch" else
                                                       "torus" if kind == "torus" else "ring")
    algorithm = algorithm or default
    _check("algorithm", algorithm in ALGORITHMS, f"one of {', '.join(ALGORITHMS)}", algorithm)
    legal = {"hierarchical": fab.members > 1, "torus": kind == "torus" and fab.members == 1,
             "ring": fab.members == 1, "direct": kind == "switch" and fab.members == 1}
    if op in ("all_to_all", "send_recv"):
        legal = dict.fromkeys(ALGORITHMS, True)
    if not legal[algorithm]:
        ok = [a for a, v in legal.items() if v]
        raise ModelError(f"{system.name}: algorithm must be one of {', '.join(ok)}, "
                         f"not {algorithm!r}")
    n = nbytes // itemsize
    data = None
    if not timing_only:
        if inputs is None:
            rng = np.random.default_rng(seed)
            vals = rng.standard_normal((p, n)).astype(np.float32)
            inputs = [vals[c].view(np.uint32) if dtype == "fp32" else
                      numerics.cast_bits(vals[c], BF16).astype(np.uint32) for c in range(p)]
        _check("inputs", len(inputs) == p and all(np.asarray(x).size == n for x in inputs),
               f"{p} arrays of {n} elements", f"{len(inputs)} arrays")
        data = [np.asarray(x, dtype=np.uint32).copy() for x in inputs]
    b = _Builder(fab, itemsize, chunk, data, dtype, rounding, seed)
    if op in ("all_reduce", "reduce_scatter", "all_gather") and algorithm == "direct":
        _direct(b, op, n)
    elif op in ("all_reduce", "reduce_scatter", "all_gather"):
        coll = _Collective(b, "ring" if algorithm == "ring" else "torus")
        if op == "all_gather":
            # Build the reduce-scatter's ownership without running it, then gather.
            shadow = _Builder(fab, itemsize, chunk, None, dtype, rounding, seed)
            probe = _Collective(shadow, coll.algorithm)
            probe.reduce_scatter(n)
            coll.history = probe.history
            coll.all_gather()
        else:
            coll.reduce_scatter(n)
            if op == "all_reduce":
                coll.all_gather()
    elif op == "all_to_all":
        block = n // p
        for k in range(1, p):
            for s in range(p):
                d = (s + k) % p
                for lo, hi in b.chunks(d * block, (d + 1) * block):
                    b.transfer(s, d, lo, hi, [], reduce=False, key=("a2a", d, s, lo),
                               to=s * block + lo - d * block)
    else:
        dst = _peer(fab, peer)
        for lo, hi in b.chunks(0, n):
            b.transfer(0, dst, lo, hi, [], reduce=False, key=("p2p", dst, lo))
    r = _execute(b, system.name, op, algorithm, nbytes, dtype, bit_error_rate, seed, trace)
    r.chunk, r.bit_error_rate = chunk, bit_error_rate
    return r


def _direct(b: _Builder, op: str, n: int) -> None:
    """Behind a switch: every chip sends segment ``j`` straight to chip ``j``, which adds the
    arrivals in the order ``j+1, j+2, ...`` (so its own last); the all-gather sends every
    owned segment straight to every chip. Chip ``s`` sends to ``s+1, s+2, ...`` in turn, so
    that no port receives from every chip at once."""
    p = b.fab.chips
    bounds = _split(0, n, p)
    if op in ("all_reduce", "reduce_scatter"):
        last: dict[tuple[int, int], int] = {}
        for k in range(1, p):
            for s in range(p):
                j = (s - k) % p
                for lo, hi in b.chunks(*bounds[j]):
                    last[j, lo] = b.transfer(s, j, lo, hi, [], after=[last.get((j, lo))],
                                             reduce=True, key=("rs", j, lo, s))
        b.close_phase()
    if op in ("all_reduce", "all_gather"):
        for k in range(1, p):
            for j in range(p):
                d = (j + k) % p
                for lo, hi in b.chunks(*bounds[j]):
                    b.transfer(j, d, lo, hi, [], reduce=False, key=("ag", d, lo, j))
        b.close_phase()


def _execute(b: _Builder, name, op, algorithm, nbytes, dtype, ber, seed, trace) -> Execution:
    g = b.g
    fab = b.fab
    count = len(g.resource)
    ready = [0.0] * count
    agenda = Agenda(count)
    resources = Resources()
    moved: dict = {}
    rng = np.random.default_rng(seed + 1)
    lp, D = fab.link_params, fab.link_latency
    packet_bytes = lp.max_packet * lp.width // 8
    fail = (golden_link.packet_error_rate(lp, lp.max_packet, ber) if ber else 0.0)
    lost = golden_link.replay_cycles(lp, D, lp.max_packet)
    replays = 0
    # The failed first transmissions of every hop, drawn at once (most are none).
    firsts = (rng.binomial(-(-np.asarray(g.nbytes, dtype=np.int64) // packet_bytes), fail)
              .tolist() if fail else None)
    for i in range(count):
        if g.waiting[i] == 0:
            agenda.wake(0.0, i)
    events: list[dict] = []
    end_time = 0.0
    waiting = list(g.waiting)
    resource, duration, latency, children, action = (g.resource, g.duration, g.latency,
                                                     g.children, g.action)
    pop, wake, serve = agenda.pop, agenda.wake, resources.serve
    while (woken := pop()) is not None:
        t, i, _ = woken
        r = resource[i]
        if r is None:
            done = t
        else:
            dur = duration[i]
            if fail and firsts[i] and r[0] != "vector":
                link = fab.link(r)
                if link.kind == "neuronlink":
                    first = firsts[i]
                    again = int(rng.negative_binomial(first, 1 - fail)) if first else 0
                    replays += first + again
                    cycle = lp.width / 8 / link.bandwidth
                    dur += ((first + again) * lost + again * lp.ack_timeout) * cycle
            start = serve(r, t, dur)
            end = start + dur
            if r[0] != "vector":
                moved[r] = moved.get(r, 0) + g.nbytes[i]
            done = end + latency[i]
            if trace:
                track = r[1] if r[0] == "vector" else fab.link(r).name
                events.append({"name": g.label[i], "ph": "X", "ts": start * 1e6,
                               "dur": dur * 1e6, "track": track})
        if action[i] is not None:
            action[i]()
        if done > end_time:
            end_time = done
        for c in children[i]:
            if done > ready[c]:
                ready[c] = done
            waiting[c] -= 1
            if waiting[c] == 0:
                wake(ready[c], c)
    busy = resources.busy
    link_busy = {fab.link(r).name: v for r, v in busy.items() if r[0] != "vector"}
    link_bytes = {fab.link(r).name: v for r, v in moved.items()}
    link_dims = {fab.link(r).name: fab.link(r).dim for r in moved}
    chip_busy: dict[int, float] = {}
    for r, v in busy.items():
        if r[0] == "vector":
            chip_busy[r[1]] = chip_busy.get(r[1], 0.0) + v
    return Execution(name, op, algorithm, fab.chips, nbytes, dtype, end_time, link_busy,
                     link_bytes, link_dims, chip_busy, replays, count, b.data, b.deliveries,
                     events)
