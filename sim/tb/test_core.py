"""Pytest entry points of the NeuronCore co-simulation (:mod:`sim.tb.core`).

Every program of :data:`sim.tb.core_programs.PROGRAMS` runs on Verilator in one simulation,
one build of the core at trn2's simulation scale, with random stalls on every AXI channel:
hand-written programs for each engine (GpSimd's Iota and the scalar engine's TensorScalar and
TensorCopy included; stationaries at tile positions of the array's row and column tiling; fp8
double rows; transposes in every type the array transposes; inputs of two types in one
instruction and scalar operands of every type on the vector, GpSimd and scalar engines;
two-operation TensorScalar on all three; TensorTensorScan; StreamShuffle; RangeSelect; Max8,
FindIndex8 and MatchReplace8; Random and Dropout; TensorCopyDynamic on all three; GpSimd's
SequenceBounds;
indirect DMA, gathering, scattering and skipping rows; adding DMA, SBUF and HBM;
stochastic rounding on every
engine; every element type they stream, int8, int32, uint32, tf32 and fp8_e4m3fn included),
the library's kernels (tiled GEMM in bf16 and fp8,
the fp8 one also on double rows, fused GEMM + GELU, softmax, RMSNorm, the KV cache's prefill,
residual add, cross-entropy and the GELU backward pass in fp32 and bf16, gradient
accumulation and SwiGLU, the backward passes of cross-entropy and SwiGLU and sampling in fp32
and bf16, sampling at its default shape (a vector stream three times a sequencer's ring, fed
by the host as it runs); attention, causal attention and decoding attention, rope, the KV
cache's append, LayerNorm, the backward passes of RMSNorm and LayerNorm, Adam, the loss's
row max and the naive GEMM at small shapes), and the seeded random program of the run's seed
(:mod:`sim.tb.core_random`, vetted by the core simulator). Compared: every byte of SBUF,
PSUM and the external memory after the run, the deadlock verdict, and each compute
instruction's cycles against the simulator's as documented in :mod:`sim.core.rtl_cycles`
(:func:`~sim.core.rtl_cycles.rtl_cycles`: equal on the vector, scalar and GpSimd
engines, the stream rule of :mod:`hdl.core.timing`; exact for the tensor engine's loads,
multiplies and transposes; DMA timing is not compared). The programs
share one simulation so that the simulator's start-up and the build's check are paid once
(its cost: benchmarks/core_rtl.md, section 7).
"""

import pytest

from sim.tb.core import simulate_many
from sim.tb.core_programs import PROGRAMS, RANDOM
from sim.tb.runner import skip_unless_available

SPEC = "trn2"


@pytest.mark.cocotb
def test_core_verilator(seed):
    """Every program in one simulation (one start-up; the core reset and its memories
    cleared between programs)."""
    skip_unless_available("verilator")
    result = simulate_many(SPEC, [*PROGRAMS, RANDOM], "verilator", seed)
    assert result.ok, f"{result} (seed {seed})"
