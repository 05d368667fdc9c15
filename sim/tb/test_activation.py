"""Pytest entry points of the scalar (activation) engine's cocotb testbench
(:mod:`sim.tb.activation`)."""

import pytest

from hdl.vector.activation import ActivationParams
from hdl.vector.functions import FunctionSpec
from sim.tb.activation import simulate
from sim.tb.runner import skip_unless_available

# A small function set (fewer ROM rows, lower degrees) that keeps every path of the lane:
# exact, the exp reduction, the exp tails (gelu_tanh's with its cubic exponent), constant and
# ``x`` rules, the log-domain reductions, sin's and cos's reduction modulo pi/2, arctan's 1/x.
SMALL_FUNCTIONS = (
    FunctionSpec("relu", mode="exact"),
    FunctionSpec("exp", lo=-0.5, hi=0.5, segments=4, degree=3, anchor=0.0),
    FunctionSpec("silu", lo=-8.0, hi=8.0, segments=8, degree=2, post_mul_x=True,
                 below="exp", above="x"),
    FunctionSpec("tanh", lo=-4.0, hi=4.0, segments=8, degree=2, post_mul_x=True,
                 below="minus_one", above="one"),
    FunctionSpec("reciprocal", mode="log", lo=1.0, hi=2.0, segments=2, degree=3, anchor=1.0),
    FunctionSpec("rsqrt", mode="log", lo=1.0, hi=4.0, segments=1, degree=3),
    FunctionSpec("log", mode="log", lo=0.5, hi=2.0, segments=2, degree=3, anchor=1.0),
    FunctionSpec("square", mode="exact"),
    FunctionSpec("gelu_tanh", lo=-4.0, hi=8.0, segments=6, degree=2, post_mul_x=True,
                 below="exp", above="x"),
    FunctionSpec("sin", lo=0.0, hi=0.5, segments=2, degree=3, anchor=0.0),
    FunctionSpec("cos", lo=0.0, hi=0.5, segments=1, degree=3, anchor=0.0),
    FunctionSpec("arctan", lo=0.0, hi=1.0, segments=2, degree=3, anchor=0.0),
)

PARAMS = {
    "lanes1-default-rne": ActivationParams(lanes=1, rng=None),  # no generator, as inf1
    "lanes2-small": ActivationParams(lanes=2, functions=SMALL_FUNCTIONS, seed=7),
    "lanes3-small": ActivationParams(lanes=3, functions=SMALL_FUNCTIONS, rng="lfsr32"),
}


# One parameter set runs on every simulator; the other sizes run on Icarus only, because a
# Verilator build of this engine costs minutes of C++ compilation per parameter set.
BOTH_SIMULATORS = "lanes2-small"


@pytest.mark.cocotb
def test_activation(sim, seed):
    result = simulate(PARAMS[BOTH_SIMULATORS], sim, seed)
    assert result.ok, f"{result} (seed {seed})"


@pytest.mark.cocotb
@pytest.mark.parametrize("name", [n for n in PARAMS if n != BOTH_SIMULATORS])
def test_activation_sizes_icarus(name, seed):
    skip_unless_available("icarus")
    result = simulate(PARAMS[name], "icarus", seed)
    assert result.ok, f"{result} (seed {seed})"
