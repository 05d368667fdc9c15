"""The core's cost rules, one per kind of instruction (cycles of the engine's own clock).

* Tensor engine: the systolic array's RTL-checked cycle model
  (:func:`sim.golden.systolic.cycles`), ``1 / rate`` times slower for formats below one
  multiply-accumulate per PE per cycle (fp32 at a quarter rate).
* Vector, scalar and GpSimd: ``access_start + max(min_interval, passes * N / e)`` for ``N``
  elements per partition, ``e`` elements per lane per cycle, ``passes`` the element streams
  the instruction reads (doubled where a minor stride exceeds ``stride_penalty``) [NKI2,
  ISA-COST]; the constants are spec fields with their sources.
* DMA: ``latency`` before the first byte, then the bytes at the core's DMA bandwidth [DMA].
"""

from __future__ import annotations

from functools import lru_cache

from hdl.core.params import CoreParams
from sim.golden import systolic

__all__ = ["dma_seconds", "stream_cycles", "tensor_cycles"]


@lru_cache(maxsize=4096)
def tensor_cycles(params: CoreParams, fmt: str, k: int, m: int, n: int) -> dict[str, float]:
    """:func:`sim.golden.systolic.cycles` of a ``k x m`` stationary, ``k x n`` moving matmul,
    each figure ``1 / rate`` times longer below one MAC per PE per cycle."""
    c = systolic.cycles(params.tensor, k, m, n)
    slow = 1.0 / min(params.rate(fmt), 1.0)
    return {key: c[key] * slow for key in ("load", "multiply", "latency", "interval")}


def stream_cycles(params: CoreParams, engine: str, elements: int, passes: float = 1.0,
                  strided: bool = False) -> float:
    """Cycles of a vector, scalar or GpSimd instruction streaming ``elements`` per partition."""
    per_cycle = params.vector_elements if engine == "vector" else 1.0
    stream = passes * elements * (2 if strided else 1) / per_cycle
    return params.access_start + max(params.min_interval, stream)


def dma_seconds(params: CoreParams, nbytes: int) -> tuple[float, float]:
    """(latency, transfer time) of a DMA of ``nbytes`` on an otherwise idle fabric."""
    return params.dma_latency, nbytes / params.dma_bandwidth
