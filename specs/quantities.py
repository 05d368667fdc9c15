"""The names of the figures a claim can be about, with their dimension.

A claim names one of these; the system model derives those marked ``derived`` at each level
and lays the claim beside the derived figure. The others (a process node, a marketing ratio)
are kept and shown as claims the model does not derive.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QuantityInfo:
    dimension: str
    description: str
    derived: bool = True


def _compute(fmt: str, sparse: bool = False) -> QuantityInfo:
    kind = "structured-sparse" if sparse else "dense"
    return QuantityInfo("compute", f"Peak {kind} tensor-engine throughput with {fmt} inputs.")


QUANTITIES: dict[str, QuantityInfo] = {
    **{f"compute.{f}": _compute(f) for f in (
        "int8", "fp8", "cfp8", "bf16", "fp16", "tf32", "fp32", "mxfp8", "mxfp4")},
    "compute.fp8_sparse": _compute("fp8", sparse=True),
    "vector.fp32": QuantityInfo("compute", "Vector-engine FP32 throughput."),
    "scalar.fp32": QuantityInfo("compute", "Scalar-engine FP32 throughput."),
    "vector.ops_per_cycle": QuantityInfo("count", "Vector-engine FP operations per cycle."),
    "scalar.ops_per_cycle": QuantityInfo("count", "Scalar-engine FP operations per cycle."),
    "clock.tensor": QuantityInfo("frequency", "Tensor-engine clock."),
    "clock.vector": QuantityInfo("frequency", "Vector-engine clock."),
    "clock.scalar": QuantityInfo("frequency", "Scalar-engine clock."),
    "clock.gpsimd": QuantityInfo("frequency", "GpSimd clock."),
    "cores": QuantityInfo("count", "Physical NeuronCores."),
    "logical_cores.lnc1": QuantityInfo("count", "Logical NeuronCores with LNC=1."),
    "logical_cores.lnc2": QuantityInfo("count", "Logical NeuronCores with LNC=2."),
    "chips": QuantityInfo("count", "Chips."),
    "cc_cores": QuantityInfo("count", "Collective-communication cores per chip."),
    "memory.capacity": QuantityInfo("bytes", "Device memory capacity."),
    "memory.bandwidth": QuantityInfo("bandwidth", "Device memory bandwidth."),
    "sbuf.capacity": QuantityInfo("bytes", "SBUF capacity."),
    "psum.capacity": QuantityInfo("bytes", "PSUM capacity."),
    "dma.engines": QuantityInfo("count", "DMA engines."),
    "dma.bandwidth": QuantityInfo("bandwidth", "Aggregate DMA bandwidth."),
    "neuronlink.links": QuantityInfo("count", "NeuronLink ports per chip."),
    "neuronlink.bandwidth": QuantityInfo("bandwidth", "NeuronLink bandwidth per chip."),
    "efa.bandwidth": QuantityInfo("bandwidth", "EFA network bandwidth."),
    "process": QuantityInfo("length", "Manufacturing process node.", derived=False),
    "speedup.previous_generation": QuantityInfo(
        "ratio", "Performance over the previous generation.", derived=False),
    "speedup.stochastic_rounding": QuantityInfo(
        "ratio", "Training speed-up from stochastic rounding.", derived=False),
    "price_performance.vs_gpu": QuantityInfo(
        "ratio", "Price-performance relative to GPU instances.", derived=False),
    "cost_per_job.vs_gpu": QuantityInfo(
        "ratio", "Cost per training job relative to GPU instances.", derived=False),
}
