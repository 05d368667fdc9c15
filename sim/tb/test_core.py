"""Pytest entry points of the NeuronCore co-simulation (:mod:`sim.tb.core`).

Every program runs on Verilator (one build of the core at trn2's simulation scale, reused);
the smallest also on Icarus. What is compared: every byte of SBUF, PSUM and the external
memory after the run, and the deadlock verdict. Per-instruction cycles are logged, not
compared: the simulator times engines on their own clocks with the spec's access, DMA and
semaphore latencies (about 1.3 us per DMA), which this RTL does not model yet.
"""

import pytest

from sim.tb.core import PROGRAMS, simulate
from sim.tb.runner import skip_unless_available

SPEC = "trn2"


@pytest.mark.cocotb
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_core_verilator(name, seed):
    skip_unless_available("verilator")
    result = simulate(SPEC, name, "verilator", seed)
    assert result.ok, f"{result} (seed {seed})"


@pytest.mark.cocotb
def test_core_icarus(seed):
    skip_unless_available("icarus")
    result = simulate(SPEC, "vector_add", "icarus", seed)
    assert result.ok, f"{result} (seed {seed})"
