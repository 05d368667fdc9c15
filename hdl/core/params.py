"""Parameters of one NeuronCore, for the core simulator and (later) the core's RTL.

:func:`hdl.params.core_params` builds them from a chip spec; every figure comes from the spec
(a parameter, a claim or an assumption with its reasoning), none is typed in here.
"""

from __future__ import annotations

from dataclasses import dataclass

from hdl.tensor.params import SystolicParams
from hdl.vector.functions import FunctionSpec

__all__ = ["CoreParams"]


@dataclass(frozen=True, kw_only=True)
class CoreParams:
    """One physical NeuronCore.

    Clocks are in Hz, bandwidths in bytes per second, times in seconds, sizes in bytes.
    """

    name: str
    version: str
    partitions: int
    activation_lanes: int
    sbuf_bytes: int
    psum_bytes: int
    psum_banks: int
    rows: int
    cols: int
    moving_max: int
    row_tiles: tuple[int, ...]
    formats: tuple[str, ...]
    tensor: SystolicParams
    rates: tuple[tuple[str, float], ...]
    clocks: tuple[tuple[str, float], ...]
    vector_elements: float
    vector_transpose: int  # the vector engine's largest transpose, partitions and free each
    functions: tuple[FunctionSpec, ...]
    vector_functions: tuple[str, ...]  # the functions the vector engine evaluates itself
    rng: str | None  # stochastic rounding's generator; None: the chip rounds to nearest even only
    access_start: int
    min_interval: int
    dynamic_interval: int | None  # fewest streaming cycles of a copy from a run-time offset
    stride_penalty: int
    op_cycles: tuple[tuple[str, float], ...]  # an engine's cycles an element of such an op
    semaphore_latency: float
    shared_ports: tuple[tuple[tuple[str, ...], str], ...]
    dma_queues: int
    dma_bandwidth: float
    dma_latency: float
    dma_packet_overhead: int  # bytes' worth of the fabric's time each packet costs besides its own
    dma_packet_minimum: int  # the least bytes' worth of time one packet costs
    dma_transpose: float | None  # a DMA transpose's throughput against a copy's; None: no such
    hbm_bytes: int
    instructions: int
    semaphores: int

    @property
    def generation(self) -> int:
        """The NeuronCore generation's number (``version`` v3: 3)."""
        return int(self.version.lstrip("v"))

    @property
    def psum_bank_bytes(self) -> int:
        return self.psum_bytes // self.psum_banks

    def clock(self, engine: str) -> float:
        return dict(self.clocks)[engine]

    def array_format(self, fmt: str) -> str:
        """The tensor array's name of input format ``fmt`` (cFP8 carries its layout and bias
        there): :attr:`formats` lists the array's formats, in order."""
        return self.tensor.formats[self.formats.index(fmt)]

    def rate(self, fmt: str) -> float:
        """Multiply-accumulates per PE per cycle of ``fmt`` (1 unless the spec says)."""
        return dict(self.rates).get(fmt, 1.0)
