"""Kernels run tensor-parallel over a system's chips: each chip's shard on the core simulator
(:mod:`sim.core`), then the all-reduce of the partial outputs executed on the chips and links
(:mod:`sim.system.execute`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import kernels
from hdl.core.isa import TF32_SHIFT
from hdl.numerics.formats import format_by_name
from sim.core import Core
from sim.golden import numerics
from sim.system.execute import DEFAULT_CHUNK, DTYPES, Execution, run
from sim.system.model import System
from specs.errors import ModelError

__all__ = ["Sharded", "run_sharded"]


@dataclass
class Sharded:
    """A kernel run tensor-parallel over a system's chips, then the all-reduce of its output.

    ``kernel_time`` is one chip's (every chip runs the same shard shape), its cores sharing
    the shard along the kernel's split key; ``outputs`` (numeric runs) are each chip's partial
    output and ``result`` the all-reduced one, as bit patterns of ``out_dtype``."""

    kernel_time: float
    instructions: int
    collective: Execution
    out_dtype: str
    inputs: dict | None = None
    outputs: list[np.ndarray] | None = None

    @property
    def time(self) -> float:
        return self.kernel_time + self.collective.time

    @property
    def result(self) -> np.ndarray | None:
        return None if self.collective.data is None else self.collective.data[0]


def run_sharded(system: System, kernel, dims: dict, dtype: str, *, timing_only: bool = True,
                algorithm: str | None = None, chunk: int = DEFAULT_CHUNK, seed: int = 0,
                trace: bool = False) -> Sharded:
    """Run the GEMM ``kernel`` (a :class:`kernels.Kernel` with a contraction ``K``) with ``K``
    split over every chip of ``system``, each chip's shard on the core simulator, then
    all-reduce the partial outputs.

    Timing: one chip's cores share its shard along the kernel's split key, each running
    ``M / cores`` rows; the step is that time plus the all-reduce's. With data
    (``timing_only=False``), each chip runs its whole shard on one core of the core simulator
    with data (lhsT and rhs drawn from ``seed``, chip ``i`` taking rows ``i K/p .. (i+1) K/p``)
    and the all-reduce adds the outputs in the documented order, in their format (bf16 with
    round-to-nearest-even, or fp32).
    """
    p = system.chips
    if "K" not in kernel.dims:
        raise ModelError(f"kernel must have a contraction K to shard, not {kernel.name}")
    if dtype in kernels.MX_FORMATS:
        raise ModelError(f"dtype of a sharded run must not be block-scaled (its quantized "
                         f"inputs and their scales are not split over chips here), not "
                         f"{dtype!r}")
    if dims["K"] % p:
        raise ModelError(f"K must be a multiple of the {p} chips, not {dims['K']}")
    params = system.chip.core_params
    if params is None:
        raise ModelError(f"{system.name}: the chip {system.chip.name!r} has no core "
                         f"simulator parameters")
    cores = system.chip.spec.cores
    shard = dict(dims, K=dims["K"] // p)
    per_core = kernel.per_core(shard, cores)
    try:
        timed = kernels.run(params, kernel, per_core, dtype, timing_only=True)
    except kernels.KernelError as exc:
        raise ModelError(str(exc)) from None
    program = kernels.build(params, kernel, shard, dtype).program
    names = kernel.inputs(shard, dtype)
    outs = [t for name, t in program.tensors.items() if name not in names]
    if len(outs) != 1:
        raise ModelError(f"kernel must have one output to all-reduce, not {len(outs)}")
    out = outs[0]
    out_dtype = out.dtype
    if out_dtype not in DTYPES:
        raise ModelError(f"the output must be one of {', '.join(DTYPES)}, not {out_dtype}")
    if timing_only:
        coll = run(system, "all_reduce", out.nbytes, algorithm=algorithm,
                   chunk=min(chunk, max(DTYPES[out_dtype], out.nbytes // p)),
                   dtype=out_dtype, trace=trace, seed=seed)
        return Sharded(timed.result.time, timed.instructions, coll, out_dtype)
    rng = np.random.default_rng(seed)
    full = {}
    for name, (shape, dt) in kernel.inputs(dims, dtype).items():
        x = rng.standard_normal(shape)
        if dt == "tf32":  # 32-bit words, the code at the top (hdl.core.isa.DTYPES)
            codes = numerics.cast_bits(x.astype(np.float32), format_by_name(dt))
            full[name] = (codes.astype(np.uint32) << TF32_SHIFT).view(np.float32)
        else:
            np_type = np.float32 if dt == "fp32" else numerics.ml_dtype(format_by_name(dt))
            full[name] = x.astype(np_type)
    core = Core(params)
    k = shard["K"]
    partials = []
    for c in range(p):
        hbm = np.zeros(program.hbm_bytes, dtype=np.uint8)
        for name, t in program.tensors.items():
            if name in full:
                piece = np.ascontiguousarray(full[name][c * k:(c + 1) * k])
                hbm[t.offset:t.offset + t.nbytes] = piece.view(np.uint8).reshape(-1)
        core.run(program, hbm=hbm, seed=seed + c)
        raw = hbm[out.offset:out.offset + out.nbytes]
        partials.append(raw.view(np.uint16 if out.itemsize == 2 else np.uint32)
                        .astype(np.uint32))
    coll = run(system, "all_reduce", out.nbytes, algorithm=algorithm,
               chunk=min(chunk, max(DTYPES[out_dtype], out.nbytes // p)), dtype=out_dtype,
               timing_only=False, inputs=partials, trace=trace, seed=seed)
    return Sharded(timed.result.time, timed.instructions, coll, out_dtype, full, partials)
