"""The core's cost rules, one per kind of instruction (cycles of the engine's own clock).

* Tensor engine: the systolic array's RTL-checked cycle model
  (:func:`sim.golden.systolic_cycles.cycles`) in the instruction's format, fp32's quarter rate
  included; a transpose is the array's load and transpose pass
  (:func:`sim.golden.systolic_cycles.transpose_cycles`), one column a cycle in every format.
* Vector, scalar and GpSimd: the stream rule, ``access_start + max(min_interval,
  ceil(passes * N / e))`` for ``N`` elements per partition, stated once for the simulator
  and the core RTL in :mod:`hdl.core.timing` (:func:`stream_cycles` is its
  :func:`hdl.core.timing.stream_cycles`).
* DMA: ``latency`` before the first byte, then its packets at the core's DMA bandwidth: a
  packet is a contiguous run of bytes on both sides, at most one partition's row where a side
  is SBUF or PSUM, and a packet of ``b`` bytes takes the time of
  ``max(b + packet_overhead, packet_minimum)`` bytes [DMA].
"""

from __future__ import annotations

import math
from functools import lru_cache

from hdl.core.isa import AP
from hdl.core.params import CoreParams
from hdl.core.timing import stream_cycles
from sim.golden import systolic_cycles

__all__ = ["TRANSPOSE_BLOCK", "dma_charged_bytes", "dma_packet", "dma_seconds", "stream_cycles",
           "tensor_cycles", "transpose_cycles", "transposes"]


@lru_cache(maxsize=4096)
def tensor_cycles(params: CoreParams, fmt: str, k: int, m: int, n: int) -> dict[str, float]:
    """:func:`sim.golden.systolic_cycles.cycles` of a ``k x m`` stationary, ``k x n`` moving matmul
    in ``fmt`` (a name of the core's formats) on the core's array."""
    c = systolic_cycles.cycles(params.tensor, k, m, n, params.array_format(fmt))
    return {key: float(c[key]) for key in ("load", "multiply", "latency", "interval")}


@lru_cache(maxsize=4096)
def transpose_cycles(params: CoreParams, k: int, m: int) -> dict[str, float]:
    """:func:`sim.golden.systolic_cycles.transpose_cycles` of a ``k x m`` tile on the core's array:
    ``issue`` (the array's occupancy), ``latency`` (the pass's, from its acceptance to its last
    output beat) and ``total`` (from the load's acceptance to the last output beat)."""
    c = systolic_cycles.transpose_cycles(params.tensor, k, m)
    return {key: float(c[key]) for key in ("issue", "latency", "total")}


def _run_bytes(ap: AP) -> int:
    """Bytes of the longest contiguous runs ``ap`` is made of: its innermost free dimensions
    while each is laid right after the last, and in HBM whole rows where they follow on."""
    run, expect = 1, 1
    for size, stride in reversed(ap.dims):
        if size == 1:
            continue
        if stride != expect:
            return run * ap.itemsize
        run *= size
        expect *= size
    row = run * ap.itemsize
    if ap.space == "hbm" and run == ap.free and ap.pstride == row:
        return row * ap.partitions
    return row


def dma_packet(src: AP, dst: AP) -> int:
    """Bytes of each packet of a copy from ``src`` to ``dst``: the elements of the runs both
    sides share, in the wider side's type (a converting copy moves its wider side's bytes)."""
    elements = min(_run_bytes(src) // src.itemsize, _run_bytes(dst) // dst.itemsize)
    return elements * max(src.itemsize, dst.itemsize)


#: A DMA transpose's block: the engines write 16 contiguous elements of each of 128
#: partitions at a time [NKI3, "DMA Transpose"].
TRANSPOSE_BLOCK = (128, 16)


def transposes(src: AP, dst: AP) -> bool:
    """Whether a copy is a DMA transpose: into SBUF, its partitions reading consecutive 2- or
    4-byte elements of its source (the source's most minor dimension becomes the
    destination's partitions), more than one partition each of more than one element."""
    return (dst.space == "sbuf" and src.itemsize == dst.itemsize and src.itemsize in (2, 4)
            and src.partitions > 1 and src.free > 1
            and src.space == "hbm" and src.pstride == src.itemsize)


def dma_charged_bytes(params: CoreParams, src: AP, dst: AP) -> int:
    """The bytes whose time at the core's DMA bandwidth a copy from ``src`` to ``dst`` takes:
    each of its packets ``max(packet + packet_overhead, packet_minimum)``; on a chip whose
    engines transpose (``dma_transpose``), a transposing copy (:func:`transposes`) its
    :data:`TRANSPOSE_BLOCK` blocks' bytes (each block whole) over that throughput."""
    if params.dma_transpose and transposes(src, dst):
        rows, run = TRANSPOSE_BLOCK
        blocks = -(-src.partitions // rows) * -(-src.free // run)
        return math.ceil(blocks * rows * run * src.itemsize / params.dma_transpose)
    packet = dma_packet(src, dst)
    packets = -(-max(src.nbytes, dst.nbytes) // packet)
    return packets * max(packet + params.dma_packet_overhead, params.dma_packet_minimum)


def dma_seconds(params: CoreParams, src: AP, dst: AP,
                more: tuple[AP, ...] = ()) -> tuple[float, float]:
    """(latency, transfer time) of a DMA from ``src`` to ``dst`` on an otherwise idle fabric;
    one that sums ``src`` and the sources ``more`` into ``dst`` reads each as a copy would,
    after one latency."""
    charged = sum(dma_charged_bytes(params, s, dst) for s in (src, *more))
    return params.dma_latency, charged / params.dma_bandwidth
