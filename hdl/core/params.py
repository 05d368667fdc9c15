"""Parameters of one NeuronCore, for the core simulator and (later) the core's RTL.

:func:`core_params` is the one mapping from a chip spec; every figure here comes from the
spec (a parameter, a claim or an assumption with its reasoning), none is typed in.
"""

from __future__ import annotations

from dataclasses import dataclass

from hdl.vector.functions import FunctionSpec

__all__ = ["CoreParams", "CoreSpecError", "core_params"]


@dataclass(frozen=True, kw_only=True)
class CoreParams:
    """One physical NeuronCore.

    Clocks are in Hz, bandwidths in bytes per second, times in seconds, sizes in bytes.
    """

    name: str
    version: str
    partitions: int
    sbuf_bytes: int
    psum_bytes: int
    psum_banks: int
    rows: int
    cols: int
    moving_max: int
    row_tiles: tuple[int, ...]
    formats: tuple[str, ...]
    rates: tuple[tuple[str, float], ...]
    clocks: tuple[tuple[str, float], ...]
    vector_elements: float
    functions: tuple[FunctionSpec, ...]
    rng: str
    access_start: int
    min_interval: int
    stride_penalty: int
    semaphore_latency: float
    shared_ports: tuple[tuple[tuple[str, ...], str], ...]
    dma_queues: int
    dma_bandwidth: float
    dma_latency: float
    hbm_bytes: int

    @property
    def psum_bank_bytes(self) -> int:
        return self.psum_bytes // self.psum_banks

    def clock(self, engine: str) -> float:
        return dict(self.clocks)[engine]

    def rate(self, fmt: str) -> float:
        """Multiply-accumulates per PE per cycle of ``fmt`` (1 unless the spec says)."""
        return dict(self.rates).get(fmt, 1.0)


class CoreSpecError(ValueError):
    """The spec lacks what the core simulator needs."""


def core_params(spec) -> CoreParams:
    """One physical NeuronCore of chip spec ``spec``.

    The core's share of HBM bandwidth is the chip's divided by its physical cores; one DMA
    transfer is spread over the core's engines (``dma.engines / cores``), each at
    ``dma.engine_bandwidth``, and runs at the lower of the two.
    """
    from generators.units import activation_functions  # noqa: PLC0415  moves to hdl/params

    c, d = spec.core, spec.dma
    missing = [k for k, v in (("chip.core.costs", c.costs), ("chip.dma.engine_bandwidth",
                                                              d.engine_bandwidth),
                              ("chip.dma.queues", d.queues), ("chip.dma.latency", d.latency),
                              ("chip.core.gpsimd", c.gpsimd)) if v is None]
    if missing:
        raise CoreSpecError(f"{spec.name}: the core simulator needs {', '.join(missing)} "
                            f"in the spec")

    def si(q, unit):
        return float(q.to(unit).magnitude)

    engines_per_core = d.engines // spec.cores
    dma_bw = min(engines_per_core * si(d.engine_bandwidth, "B/s"),
                 si(spec.memory.bandwidth, "B/s") / spec.cores)
    t = c.tensor
    rate = {f: t.rates.get(f, 1.0) for f in t.formats}
    return CoreParams(
        name=spec.name, version=spec.neuron_core, partitions=c.sbuf.partitions,
        sbuf_bytes=int(si(c.sbuf.partition_size, "B")),
        psum_bytes=int(si(c.psum.partition_size, "B")), psum_banks=c.psum.banks,
        rows=t.rows, cols=t.cols, moving_max=t.moving_max, row_tiles=tuple(t.row_tiles),
        formats=tuple(t.formats), rates=tuple(rate.items()),
        clocks=(("tensor", si(t.clock, "Hz")), ("vector", si(c.vector.clock, "Hz")),
                ("scalar", si(c.scalar.clock, "Hz")), ("gpsimd", si(c.gpsimd.clock, "Hz"))),
        vector_elements=c.vector.elements_per_cycle,
        functions=activation_functions(spec), rng=spec.rounding.rng,
        access_start=c.costs.access_start, min_interval=c.costs.min_interval,
        stride_penalty=int(si(c.costs.stride_penalty, "B")),
        semaphore_latency=si(c.costs.semaphore_latency, "s"),
        shared_ports=tuple((tuple(sp.engines), sp.memory) for sp in c.costs.shared_ports),
        dma_queues=d.queues, dma_bandwidth=dma_bw, dma_latency=si(d.latency, "s"),
        hbm_bytes=int(si(spec.memory.capacity, "B")),
    )
