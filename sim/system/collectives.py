"""Alpha-beta time of all-reduce, all-gather and reduce-scatter over chip topologies.

A step that moves ``m`` bytes over one link costs ``alpha + m / (bandwidth * efficiency)``:
``alpha`` is the per-hop latency in seconds, ``bandwidth`` the link's raw bytes/s in one
direction, ``efficiency`` the fraction of it that carries payload (take it from the link RTL,
:func:`sim.tb.test_link.measured_efficiency`, or from :func:`sim.golden.link.efficiency`).
``n`` is always the full message size per chip in bytes (the size of the vector being reduced
on each chip; the all-gather output, the reduce-scatter input). ``reduce`` is the time of the
addition that ends every reduce-scatter step on the receiving chip (one per direction of a
bidirectional ring; ``p - 1`` of them in turn behind a switch): the vector engine's fixed cost
of one add, which no pipelining hides, from :func:`sim.system.model.reduce_seconds`. Without
it the formula is short by that much per step, which the executed collectives
(:mod:`sim.system.execute`) showed at small messages (benchmarks/collectives.md).

Algorithms:

- ring over ``p`` chips: reduce-scatter and all-gather take ``p - 1`` steps of ``n / p``;
  all-reduce is the two in turn. With ``bidirectional`` the data is split in two halves that
  go round the ring in opposite directions, so each step moves ``n / (2p)`` per link direction.
- torus ``d1 x d2 x ...``: the multi-dimensional ring algorithm: reduce-scatter along each
  dimension in turn (the data shrinks by ``d_i`` after dimension ``i``), then all-gather back
  in reverse order. All rings of one dimension run at once on disjoint links.
- switch: every chip sends its ``p - 1`` shares straight to their owners through a
  non-blocking switch, one step (one ``alpha``) per phase, limited by its own port.
- hierarchical: reduce-scatter inside each server, all-reduce of the shards between servers
  over EFA (a ring over the servers whose per-server EFA bandwidth is shared by the shards of
  all chips of the server), all-gather inside each server.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import networkx as nx

OPS = ("all_reduce", "all_gather", "reduce_scatter")


def _check_reduce(reduce: float) -> None:
    if not (isinstance(reduce, int | float) and math.isfinite(reduce) and reduce >= 0):
        raise ValueError(f"reduce must be a non-negative number of seconds, not {reduce!r}")


def _check(n: float, alpha: float, efficiency: float) -> None:
    if not (isinstance(n, int | float) and math.isfinite(n) and n >= 0):
        raise ValueError(f"n must be a non-negative number of bytes, not {n!r}")
    if not (isinstance(alpha, int | float) and math.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"alpha must be a non-negative number of seconds, not {alpha!r}")
    if not (isinstance(efficiency, int | float) and 0 < efficiency <= 1):
        raise ValueError(f"efficiency must be in (0, 1], not {efficiency!r}")


def _check_op(op: str) -> None:
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, not {op!r}")


def ring_time(op: str, n: float, p: int, bandwidth: float, alpha: float,
              efficiency: float = 1.0, bidirectional: bool = False,
              reduce: float = 0.0) -> float:
    """Time of ``op`` on a ring of ``p`` chips (seconds)."""
    _check_op(op)
    _check(n, alpha, efficiency)
    _check_reduce(reduce)
    if not (isinstance(p, int) and p >= 1):
        raise ValueError(f"p must be a positive integer, not {p!r}")
    if not (bandwidth > 0):
        raise ValueError(f"bandwidth must be a positive number of bytes/s, not {bandwidth!r}")
    if p == 1:
        return 0.0
    phases = 2 if op == "all_reduce" else 1
    # A ring of two chips has one link; both directions of it still carry data.
    ways = 2 if bidirectional else 1
    step_bytes = n / p / ways
    adds = (p - 1) * ways * reduce if op != "all_gather" else 0.0
    return phases * (p - 1) * (alpha + step_bytes / (bandwidth * efficiency)) + adds


def torus_time(op: str, n: float, dims: Sequence[int], bandwidth: float | Sequence[float],
               alpha: float, efficiency: float = 1.0, bidirectional: bool = False,
               reduce: float = 0.0) -> float:
    """Time of ``op`` on a torus by the multi-dimensional ring algorithm (seconds).

    ``bandwidth`` is one per-link figure or one per dimension.
    """
    _check_op(op)
    dims = tuple(dims)
    bws = ((bandwidth,) * len(dims) if isinstance(bandwidth, int | float)
           else tuple(bandwidth))
    if len(bws) != len(dims):
        raise ValueError(f"bandwidth must have one figure per dimension ({len(dims)}), "
                         f"not {bandwidth!r}")
    total = 0.0
    size = float(n)
    for d, bw in zip(dims, bws, strict=True):
        # Each phase of one dimension on the current shard size.
        total += ring_time(op, size, d, bw, alpha, efficiency, bidirectional, reduce)
        size /= d
    return total


def switch_time(op: str, n: float, p: int, bandwidth: float, alpha: float,
                efficiency: float = 1.0, reduce: float = 0.0) -> float:
    """Time of ``op`` among ``p`` chips behind a non-blocking switch (seconds).

    ``bandwidth`` is one chip's port to the switch, one direction.
    """
    _check_op(op)
    _check(n, alpha, efficiency)
    _check_reduce(reduce)
    if p == 1:
        return 0.0
    phases = 2 if op == "all_reduce" else 1
    # The owner adds the p - 1 arrivals in turn; all but the last overlap the transfers
    # only where the segment is larger than one add, so the fixed costs are charged in full.
    adds = (p - 1) * reduce if op != "all_gather" else 0.0
    # Per phase each chip sends (p-1) shares of n/p through its one port; two hops (chip to
    # switch to chip) are pipelined, so the latency is charged twice per phase.
    return phases * (2 * alpha + (p - 1) / p * n / (bandwidth * efficiency)) + adds


def topology_time(g: nx.Graph, op: str, n: float, alpha: float, efficiency: float = 1.0,
                  bidirectional: bool = False, reduce: float = 0.0) -> float:
    """Time of ``op`` on a topology from :mod:`sim.system.topology` (seconds).

    The link bandwidths are read from the graph's ``bandwidth`` edge attributes (per
    dimension for a torus, the slowest link of each dimension).
    """
    kind = g.graph.get("kind")
    if kind == "single":
        _check_op(op)
        return 0.0
    if kind == "torus":
        dims = g.graph["dims"]
        bws = []
        for axis, d in enumerate(dims):
            links = [bw for _, _, k, bw in _edges(g) if k == axis]
            bws.append(min(links) if links else 1.0)  # size-1 dimension: no step is taken
            if d > 1 and not links:
                raise ValueError(f"torus dimension {axis} of size {d} has no links")
        return torus_time(op, n, dims, bws, alpha, efficiency, bidirectional, reduce)
    if kind == "switch":
        bw = min(bw for *_, bw in _edges(g))
        return switch_time(op, n, g.graph["chips"], bw, alpha, efficiency, reduce)
    raise ValueError(f"graph kind must be one of single, torus, switch, not {kind!r}")


def _edges(g: nx.Graph):
    for u, v, data in g.edges(data=True):
        yield u, v, data["dim"], data["bandwidth"]


def hierarchical_time(op: str, n: float, server: nx.Graph, servers: int,
                      efa_bandwidth: float, alpha: float, efa_alpha: float,
                      efficiency: float = 1.0, efa_efficiency: float = 1.0,
                      bidirectional: bool = False, reduce: float = 0.0) -> float:
    """Time of ``op`` over ``servers`` copies of ``server`` joined by EFA (seconds).

    ``efa_bandwidth`` is one server's EFA bandwidth in bytes/s (e.g. 3,200 Gbps = 400e9 B/s
    for a trn2.48xlarge; 4 x 3,200 Gbps for a Trn2 UltraServer). Intra-server phases use the
    server topology; the inter-server phase is a ring over the servers in which every chip's
    shard of ``n / chips`` crosses EFA, so one server moves ``n`` per ring pass.
    """
    _check_op(op)
    _check(n, efa_alpha, efa_efficiency)
    if not (isinstance(servers, int) and servers >= 1):
        raise ValueError(f"servers must be a positive integer, not {servers!r}")
    p_local = server.graph["chips"]

    def local(phase: str) -> float:
        return topology_time(server, phase, n, alpha, efficiency, bidirectional, reduce)

    # Inter-server ring on a shard of n / p_local per chip: all p_local shards share EFA.
    shard = n / p_local
    inter_ag = ring_time("all_gather", shard * p_local, servers, efa_bandwidth,
                         efa_alpha, efa_efficiency)
    # Every chip's shard ring reduces on its own chip: one add per step.
    inter_rs = inter_ag + (servers - 1) * reduce
    if op == "all_reduce":
        return local("reduce_scatter") + inter_rs + inter_ag + local("all_gather")
    if op == "reduce_scatter":
        # Reduce-scatter inside, then across servers; output n / (servers * p_local) per chip.
        return local("reduce_scatter") + inter_rs
    # all_gather: across servers first on the small shards, then inside.
    return inter_ag + local("all_gather")
