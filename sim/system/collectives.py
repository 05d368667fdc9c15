"""Time of all-reduce, all-gather and reduce-scatter over chip topologies: alpha-beta costs
with the chunk pipeline of the executed collectives.

A chunk of ``m`` bytes crossing one link holds it for ``m / (bandwidth * efficiency)`` and
lands ``alpha`` later: ``alpha`` is the per-hop latency in seconds, ``bandwidth`` the link's
raw bytes/s in one direction, ``efficiency`` the fraction of it that carries payload (take it
from the link RTL, :func:`sim.tb.link.measured_efficiency`, or from
:func:`sim.golden.link.efficiency`). ``n`` is always the full message size per chip in bytes
(the size of the vector being reduced on each chip; the all-gather output, the reduce-scatter
input). Every argument may be a number or a numpy array (one entry per design point; the
exploration model passes arrays), except ``op`` and the topology graphs.

``reduce`` is what one add on the receiving chip costs (every reduce-scatter step ends with
one per chunk): a number of seconds whatever the chunk, or an :class:`Add`, the vector
engines' cost of adding ``m`` bytes (:meth:`sim.system.model.Chip.add`). ``chunk`` is the
size messages are cut into (:data:`CHUNK`, as the executed collectives cut them; infinite:
every step's data crosses as one transfer).

**The pipeline.** A ring pass (a reduce-scatter or an all-gather) over ``p`` chips takes
``S = p - 1`` steps; each step a chip sends ``s = n / (p * ways)`` bytes per direction
(``ways`` = 2 for a bidirectional ring), in ``pieces`` separate regions (the ranges a chip
owns after the earlier stages of a torus, one per direction of each) of ``c`` chunks each.
Chunk ``k`` of step ``j`` leaves when its link is free (the link sends its chunks in order,
all of step ``j - 1``'s before step ``j``'s) and when chunk ``k`` of step ``j - 1`` has
landed and been added, ``L = T + alpha + a`` after it left (``T``: one chunk's link time,
``a``: its add). The last chunk leaves at the longest path through that grid of
dependencies: every chunk in turn on the link, ``(S c - 1) T``, or the first chunk's chain
through the steps, ``(c - 1) T + (S - 1) L``. So one pass takes

    max(S s / B, s / B + (S - 1) L) + alpha + ways a

(``B`` the payload bandwidth): the bandwidth term once the chunks cover the chain's latency,
the classic ``S (alpha + s / B)`` when a step is one chunk. Where adds take longer than a
chunk's link time, the ``pieces`` chunks arriving back to back queue on the vector engines,
``(pieces - 1) (a - T)`` more per step. The executed collectives (:mod:`sim.system.execute`)
agree with this within a few per cent from 4 KiB to 1 GiB (benchmarks/collectives.md).

Algorithms:

- ring over ``p`` chips: reduce-scatter and all-gather take ``p - 1`` steps of ``n / p``;
  all-reduce is the two in turn. With ``bidirectional`` the data is split in two halves that
  go round the ring in opposite directions, so each step moves ``n / (2p)`` per link direction.
- torus ``d1 x d2 x ...``: the multi-dimensional ring algorithm: reduce-scatter along each
  dimension in turn (the data shrinks by ``d_i`` after dimension ``i``, and the ranges a chip
  owns double with a bidirectional ring), then all-gather back in reverse order. All rings of
  one dimension run at once on disjoint links.
- switch: every chip sends its ``p - 1`` shares straight to their owners through a
  non-blocking switch, limited by its own port, store and forward per chunk (two hops, two
  ``alpha``); an owner adds its ``p - 1`` arrivals one chunk at a time, in turn.
- hierarchical: reduce-scatter inside each server, all-reduce of the shards between servers
  over EFA (a ring over the servers whose per-server EFA bandwidth is shared by the shards of
  all chips of the server; a chip goes on to the all-gather as soon as its own shard is
  reduced), all-gather inside each server.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

OPS = ("all_reduce", "all_gather", "reduce_scatter")
#: Bytes a collective cuts its messages into, executed (:mod:`sim.system.execute`) and in the
#: formula alike. An assumption, not published: large enough that a chunk's fixed costs are
#: small beside its transfer, small enough that a 1 GiB all-reduce's pipeline fills
#: (benchmarks/collectives.md: 4 MiB chunks are within 0.12 % of the finest).
CHUNK = 4 * 2**20


@dataclass(frozen=True)
class Add:
    """Seconds to add ``m`` received bytes into a chip's own: ``max(fixed, start + m / rate)``
    (the vector engines' stream rule: a fixed cost, or a start-up and a streaming rate)."""

    fixed: float
    start: float
    rate: float

    def seconds(self, nbytes):
        return np.maximum(self.fixed, self.start + nbytes / self.rate)


def _scalar(x):
    return float(x) if np.ndim(x) == 0 else x


def _ok(x, cond) -> bool:
    """Whether ``cond`` holds for ``x``; an array's NaN entries (design points that are not
    valid) pass, and come out as NaN."""
    try:
        v = np.asarray(x, dtype=float)
        return bool(np.all(cond(v) | np.isnan(v))) if v.ndim else bool(cond(v))
    except (TypeError, ValueError):
        return False


def _check_reduce(reduce) -> None:
    if isinstance(reduce, Add):
        return
    if not (isinstance(reduce, int | float | np.ndarray)
            and _ok(reduce, lambda r: np.isfinite(r) & (r >= 0))):
        raise ValueError(f"reduce must be a non-negative number of seconds or an Add, "
                         f"not {reduce!r}")


def _check(n, alpha, efficiency) -> None:
    if not _ok(n, lambda v: np.isfinite(v) & (v >= 0)):
        raise ValueError(f"n must be a non-negative number of bytes, not {n!r}")
    if not _ok(alpha, lambda v: np.isfinite(v) & (v >= 0)):
        raise ValueError(f"alpha must be a non-negative number of seconds, not {alpha!r}")
    if not _ok(efficiency, lambda v: (v > 0) & (v <= 1)):
        raise ValueError(f"efficiency must be in (0, 1], not {efficiency!r}")


def _check_op(op: str) -> None:
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, not {op!r}")


def _check_chunk(chunk) -> None:
    if not _ok(chunk, lambda v: v > 0):
        raise ValueError(f"chunk must be a positive number of bytes, not {chunk!r}")


def _add(reduce, nbytes):
    return reduce.seconds(nbytes) if isinstance(reduce, Add) else reduce + 0.0 * nbytes


def _passes(n, p, rate, alpha, ways, pieces, chunk, reduce, queued=None):
    """The reduce-scatter and the all-gather pass of a ring (see the module docstring).
    ``queued`` is how many of the ``pieces`` land on one chip's vector engines (all of them
    unless the link is shared by several chips' rings)."""
    p = np.asarray(p, dtype=float)
    if not np.any(p > 1):
        zero = 0.0 * (p + n)
        return zero, zero
    steps = p - 1.0
    s = n / (np.maximum(p, 1.0) * ways)
    first = np.minimum(chunk, s / pieces)
    t = first / rate
    a = _add(reduce, first)
    queue = ((pieces if queued is None else queued) - 1.0) * np.maximum(a - t, 0.0)
    bulk = steps * s / rate
    head = s / rate + (steps - 1.0) * (t + alpha)
    rs = np.maximum(bulk, head + (steps - 1.0) * (a + queue)) + alpha + ways * a + queue
    ag = np.maximum(bulk, head) + alpha
    return np.where(p > 1, rs, 0.0), np.where(p > 1, ag, 0.0)


def _ring(op, n, p, rate, alpha, ways, reduce, chunk, pieces):
    if op == "all_gather":
        return _passes(n, p, rate, alpha, ways, pieces, chunk, 0.0)[1]
    rs, ag = _passes(n, p, rate, alpha, ways, pieces, chunk, reduce)
    return rs + ag if op == "all_reduce" else rs


def _phases(op, rs, ag):
    return rs + ag if op == "all_reduce" else (rs if op == "reduce_scatter" else ag)


def _check_ring(op, n, p, bandwidth, alpha, efficiency, reduce, chunk) -> None:
    _check_op(op)
    _check(n, alpha, efficiency)
    _check_reduce(reduce)
    _check_chunk(chunk)
    if not _ok(p, lambda v: (v >= 1) & (v == np.floor(v))):
        raise ValueError(f"p must be a positive integer, not {p!r}")
    if not _ok(bandwidth, lambda v: v > 0):
        raise ValueError(f"bandwidth must be a positive number of bytes/s, not {bandwidth!r}")


def ring_time(op: str, n, p, bandwidth, alpha, efficiency=1.0, bidirectional: bool = False,
              reduce=0.0, chunk=math.inf, pieces=1.0):
    """Time of ``op`` on a ring of ``p`` chips (seconds); ``pieces`` separate regions per
    direction (see the module docstring)."""
    _check_ring(op, n, p, bandwidth, alpha, efficiency, reduce, chunk)
    # A ring of two chips has one link; both directions of it still carry data.
    ways = 2.0 if bidirectional else 1.0
    return _scalar(_ring(op, n, p, bandwidth * efficiency, alpha, ways, reduce, chunk, pieces))


def torus_time(op: str, n, dims: Sequence, bandwidth, alpha, efficiency=1.0,
               bidirectional: bool = False, reduce=0.0, chunk=math.inf):
    """Time of ``op`` on a torus by the multi-dimensional ring algorithm (seconds).

    ``bandwidth`` is one per-link figure (a number, or an array over design points) or a
    tuple or list of one per dimension.
    """
    dims = tuple(dims)
    bws = (tuple(bandwidth) if isinstance(bandwidth, tuple | list)
           else (bandwidth,) * len(dims))
    if len(bws) != len(dims):
        raise ValueError(f"bandwidth must have one figure per dimension ({len(dims)}), "
                         f"not {bandwidth!r}")
    for d, bw in zip(dims, bws, strict=True):
        _check_ring(op, n, d, bw, alpha, efficiency, reduce, chunk)
    ways = 2.0 if bidirectional else 1.0
    total = 0.0
    size = n
    pieces = 1.0
    for d, bw in zip(dims, bws, strict=True):
        # Each phase of one dimension on the current shard size, on the regions a chip owns
        # when it starts (they double after each bidirectional dimension).
        total = total + _ring(op, size, d, bw * efficiency, alpha, ways, reduce, chunk, pieces)
        size = size / d
        pieces = np.where(np.asarray(d) > 1, pieces * ways, pieces)
    return _scalar(total)


def send_time(n, bandwidth, alpha, efficiency=1.0):
    """Time of one point-to-point send of ``n`` bytes over a path of ``bandwidth`` (one
    direction) with latency ``alpha`` (seconds): ``alpha + n / (bandwidth * efficiency)``.
    Element-wise on numpy arrays."""
    return _scalar(alpha + np.asarray(n, dtype=float) / (bandwidth * efficiency))


def switch_time(op: str, n, p, bandwidth, alpha, efficiency=1.0, reduce=0.0, chunk=math.inf):
    """Time of ``op`` among ``p`` chips behind a non-blocking switch (seconds).

    ``bandwidth`` is one chip's port to the switch, one direction. Per phase each chip sends
    ``p - 1`` shares of ``n / p`` through its port, store and forward through the switch (one
    chunk's link time and two ``alpha`` more); the reduce-scatter's owner adds its
    ``(p - 1) c`` arriving chunks in turn, which takes longer than the transfers when an add
    takes longer than a chunk's link time.
    """
    _check_ring(op, n, p, bandwidth, alpha, efficiency, reduce, chunk)
    p = np.asarray(p, dtype=float)
    rate = bandwidth * efficiency
    seg = n / np.maximum(p, 1.0)
    first = np.minimum(chunk, seg)
    t = first / rate
    chunks = (p - 1.0) * np.maximum(np.ceil(seg / chunk), 1.0)
    a = _add(reduce, first)
    sends = (p - 1.0) * seg / rate
    rs = 2.0 * alpha + t + np.maximum(sends + a, t + chunks * a)
    ag = 2.0 * alpha + t + sends
    return _scalar(np.where(p > 1, _phases(op, rs, ag), 0.0))


def topology_time(g: nx.Graph, op: str, n, alpha, efficiency=1.0,
                  bidirectional: bool = False, reduce=0.0, chunk=math.inf):
    """Time of ``op`` on a topology from :mod:`sim.system.topology` (seconds).

    The link bandwidths are read from the graph's ``bandwidth`` edge attributes (per
    dimension for a torus, the slowest link of each dimension).
    """
    kind = g.graph.get("kind")
    if kind == "single":
        _check_op(op)
        return _scalar(0.0 * np.asarray(n, dtype=float))
    if kind == "torus":
        dims = g.graph["dims"]
        bws = []
        for axis, d in enumerate(dims):
            links = [bw for _, _, k, bw in _edges(g) if k == axis]
            bws.append(min(links) if links else 1.0)  # size-1 dimension: no step is taken
            if d > 1 and not links:
                raise ValueError(f"torus dimension {axis} of size {d} has no links")
        return torus_time(op, n, dims, bws, alpha, efficiency, bidirectional, reduce, chunk)
    if kind == "switch":
        bw = min(bw for *_, bw in _edges(g))
        return switch_time(op, n, g.graph["chips"], bw, alpha, efficiency, reduce, chunk)
    raise ValueError(f"graph kind must be one of single, torus, switch, not {kind!r}")


def _edges(g: nx.Graph):
    for u, v, data in g.edges(data=True):
        yield u, v, data["dim"], data["bandwidth"]


def _regions(g: nx.Graph, bidirectional: bool) -> float:
    """Regions each chip owns after a reduce-scatter on ``g``."""
    if g.graph.get("kind") != "torus":
        return 1.0
    ways = 2.0 if bidirectional else 1.0
    return float(ways ** sum(1 for d in g.graph["dims"] if d > 1))


def hierarchical_time(op: str, n, server: nx.Graph, servers, efa_bandwidth, alpha, efa_alpha,
                      efficiency=1.0, efa_efficiency=1.0, bidirectional: bool = False,
                      reduce=0.0, chunk=math.inf):
    """Time of ``op`` over ``servers`` copies of ``server`` joined by EFA (seconds).

    ``efa_bandwidth`` is one server's EFA bandwidth in bytes/s (e.g. 3,200 Gbps = 400e9 B/s
    for a trn2.48xlarge; 4 x 3,200 Gbps for a Trn2 UltraServer). Intra-server phases use the
    server topology; the inter-server phase is a ring over the servers in which every chip's
    shard of ``n / chips`` crosses EFA, so one server moves ``n`` per ring pass, the regions
    of all its chips pipelining on the one EFA link. In an all-reduce the chips go from the
    reduce-scatter to the all-gather each on its own, so the first chip's all-gather fills
    the link while the last chunks of the others' reduce-scatter land.
    """
    _check_op(op)
    _check(n, efa_alpha, efa_efficiency)
    _check_reduce(reduce)
    _check_chunk(chunk)
    if not _ok(servers, lambda v: (v >= 1) & (v == np.floor(v))):
        raise ValueError(f"servers must be a positive integer, not {servers!r}")
    p_local = server.graph["chips"]

    def local(phase: str):
        return topology_time(server, phase, n, alpha, efficiency, bidirectional, reduce,
                             chunk)

    # Inter-server ring: the shards of all p_local chips share the server's EFA.
    regions = _regions(server, bidirectional)
    inter_rs, inter_ag = _passes(n, servers, efa_bandwidth * efa_efficiency, efa_alpha, 1.0,
                                 p_local * regions, chunk, reduce, queued=regions)
    if op == "all_reduce":
        # The chips' shards queue on the one EFA link in turn, so the first chip is done with
        # its reduce-scatter after a p_local-th of the link's bytes (and its landing and add)
        # and starts its all-gather while the others' reduce-scatter still flows: the link
        # idles for neither the landing nor the add of the last chunk.
        shard = n / servers
        a = _add(reduce, np.minimum(chunk, shard / (p_local * regions)))
        bulk = (servers - 1.0) * shard / (efa_bandwidth * efa_efficiency)
        overlap = np.where(np.asarray(servers) > 1,
                           np.minimum(efa_alpha + a, bulk * (1.0 - 1.0 / p_local)), 0.0)
        t = (local("reduce_scatter") + inter_rs + inter_ag - overlap
             + local("all_gather"))
    elif op == "reduce_scatter":
        # Reduce-scatter inside, then across servers; output n / (servers * p_local) per chip.
        t = local("reduce_scatter") + inter_rs
    else:
        # all_gather: across servers first on the small shards, then inside.
        t = inter_ag + local("all_gather")
    return _scalar(t)
