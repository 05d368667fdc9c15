"""Pytest entry points of the vector engine's cocotb testbench (:mod:`sim.tb.vector`)."""

import pytest

from hdl.vector.vector import VectorParams
from sim.tb.runner import skip_unless_available
from sim.tb.vector import simulate

PARAMS = {
    "lanes1-rne": VectorParams(lanes=1, rng=None),  # no generator: a chip without stochastic
    "lanes4-seed7": VectorParams(lanes=4, seed=7),
    "lanes3-lfsr32": VectorParams(lanes=3, rng="lfsr32"),
}


# One parameter set runs on every simulator; the other sizes run on Icarus only, because a
# Verilator build of this engine costs minutes of C++ compilation per parameter set.
BOTH_SIMULATORS = "lanes4-seed7"


@pytest.mark.cocotb
def test_vector(sim, seed):
    result = simulate(PARAMS[BOTH_SIMULATORS], sim, seed)
    assert result.ok, f"{result} (seed {seed})"


@pytest.mark.cocotb
@pytest.mark.parametrize("name", [n for n in PARAMS if n != BOTH_SIMULATORS])
def test_vector_sizes_icarus(name, seed):
    skip_unless_available("icarus")
    result = simulate(PARAMS[name], "icarus", seed)
    assert result.ok, f"{result} (seed {seed})"
