"""Pytest entry points of the NeuronCore co-simulation (:mod:`sim.tb.core`).

Every program of :data:`sim.tb.core.PROGRAMS`, and the random program of the run's seed, runs
on Verilator, one build of the core at trn2's simulation scale reused by all, with random
stalls on every AXI channel (the build and the six programs take about 2 minutes on two busy
cores, since the runner makes only the toplevel's signals public). Compared:
every byte of SBUF, PSUM and the external memory after the run, and the deadlock verdict.

Per-instruction cycles are logged, not compared. The simulator times each engine on its own
clock with the spec's fixed costs (about 60 cycles to start an SBUF/PSUM access, at least 64
per vector instruction, about 1.3 us from a DMA's start to its first byte, then the core's
DMA bandwidth); the RTL runs every engine on one clock and has none of those costs yet (a
vector instruction of N elements takes about N + 6 cycles, a DMA about 4 to 6 cycles per
element on its 32-bit AXI port). No bound between the two would mean anything until the RTL
implements the cost structure; the simulator follows its sources and is not changed.
"""

import pytest

from sim.tb.core import PROGRAMS, RANDOM, simulate
from sim.tb.runner import skip_unless_available

SPEC = "trn2"


@pytest.mark.cocotb
@pytest.mark.parametrize("name", [*PROGRAMS, RANDOM])
def test_core_verilator(name, seed):
    skip_unless_available("verilator")
    result = simulate(SPEC, name, "verilator", seed)
    assert result.ok, f"{result} (seed {seed})"
