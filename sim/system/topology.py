"""Chip-to-chip topologies of instances and servers, as networkx graphs.

Every graph carries, in ``graph.graph``:

- ``kind``: ``"single"``, ``"torus"`` or ``"switch"``;
- ``dims``: the torus dimensions (``(4, 4)``, ``(4, 4, 4)``), ``(n,)`` for a switch, ``(1,)``
  for a single chip;
- ``chips``: the number of accelerator chips (switch nodes are not chips).

Every edge carries ``bandwidth`` (bytes/s in each direction of that link; links are full
duplex) and ``dim`` (the torus dimension the link belongs to, or ``"switch"``). Chip nodes carry
``chip=True``. Bandwidth figures are inputs, never defaults: the caller takes them from the
system spec (e.g. NeuronLink-v3 at 1.28 TB/s per chip over 4 links is 320 GB/s per link).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import networkx as nx


def _check_bandwidth(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number of bytes/s, not {value!r}")


def per_link_bandwidth(chip_bandwidth: float, links: int) -> float:
    """Bandwidth of one link in one direction, from a per-chip total over ``links`` links.

    AWS quotes NeuronLink bandwidth per chip (e.g. 1.28 TB/s for NeuronLink-v3 over 4 links);
    whether that total counts both directions is not stated, so the caller decides what
    ``chip_bandwidth`` means and this function only divides.
    """
    _check_bandwidth("chip_bandwidth", chip_bandwidth)
    if not (isinstance(links, int) and links >= 1):
        raise ValueError(f"links must be a positive integer, not {links!r}")
    return chip_bandwidth / links


def single_chip() -> nx.Graph:
    """One chip, no links (trn1.2xlarge)."""
    g = nx.Graph(kind="single", dims=(1,), chips=1)
    g.add_node(0, chip=True)
    return g


def torus(dims: Sequence[int], bandwidth: float | Sequence[float]) -> nx.Graph:
    """A torus of ``dims`` chips (a ring closes every dimension).

    ``bandwidth`` is one figure for every link or one per dimension. A dimension of size 2
    has a single link between its two chips (not a doubled one); size 1 has none. Nodes are
    coordinate tuples.
    """
    dims = tuple(dims)
    if not dims or not all(isinstance(d, int) and d >= 1 for d in dims):
        raise ValueError(f"dims must be a non-empty sequence of positive integers, not {dims!r}")
    if isinstance(bandwidth, int | float):
        bws = (bandwidth,) * len(dims)
    else:
        bws = tuple(bandwidth)
        if len(bws) != len(dims):
            raise ValueError(f"bandwidth must have one figure per dimension ({len(dims)}), "
                             f"not {bandwidth!r}")
    for bw in bws:
        _check_bandwidth("bandwidth", bw)
    g = nx.Graph(kind="torus", dims=dims, chips=math.prod(dims))
    for node in itertools.product(*(range(d) for d in dims)):
        g.add_node(node, chip=True)
    for node in list(g.nodes):
        for axis, size in enumerate(dims):
            if size == 1:
                continue
            other = list(node)
            other[axis] = (node[axis] + 1) % size
            g.add_edge(node, tuple(other), bandwidth=float(bws[axis]), dim=axis)
    return g


def switch(chips: int, bandwidth: float) -> nx.Graph:
    """``chips`` chips, each with one port of ``bandwidth`` to a non-blocking switch.

    The switch (NeuronSwitch in the Trn3 UltraServer) is one node named ``"switch"``; any chip
    reaches any other in two hops.
    """
    if not (isinstance(chips, int) and chips >= 2):
        raise ValueError(f"chips must be an integer of at least 2, not {chips!r}")
    _check_bandwidth("bandwidth", bandwidth)
    g = nx.Graph(kind="switch", dims=(chips,), chips=chips)
    g.add_node("switch", chip=False)
    for i in range(chips):
        g.add_node(i, chip=True)
        g.add_edge(i, "switch", bandwidth=float(bandwidth), dim="switch")
    return g


def instance_torus(bandwidth: float) -> nx.Graph:
    """The 2D torus of 4 x 4 chips inside a trn1.32xlarge or trn2.48xlarge."""
    return torus((4, 4), bandwidth)


def trn2_ultraserver(bandwidth: float, ring_bandwidth: float | None = None) -> nx.Graph:
    """Trn2 UltraServer: 4 instances of a 4 x 4 torus, same-position chips joined in a ring.

    The result is a 4 x 4 x 4 torus whose last dimension (the instance index) is the ring
    across instances; ``ring_bandwidth`` is that ring's per-link figure (default: same as the
    in-instance links).
    """
    ring = bandwidth if ring_bandwidth is None else ring_bandwidth
    return torus((4, 4, 4), (bandwidth, bandwidth, ring))


def chips(g: nx.Graph) -> list:
    """The chip nodes of a topology (switch nodes left out)."""
    return [n for n, chip in g.nodes(data="chip") if chip]
