"""`gen sim SPEC --unit core`: what it refuses before simulating, the seeded random program,
and the co-simulation on Icarus (a small program and the deadlock)."""

import pytest
from click.testing import CliRunner

from generators.cli import main
from hdl.params import core_params
from sim.core import Core
from sim.tb.core import RANDOM, build_program, check_program
from sim.tb.runner import skip_unless_available
from specs.loader import load


def run(*args):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def params():
    return core_params(load("trn2"), "sim")


@pytest.mark.parametrize("args, message", [
    (("--kernel", "cross_entropy"), "error: not simulated: cross_entropy: the core RTL cannot "
                                    "run it: gpsimd[0] Iota: "),
    (("--kernel", "attention"), "error: not simulated: attention: D must be at most 8, "),
    (("--kernel", "softmx"), "error: --kernel must be one of vector_add, "),
])
def test_refused_before_anything_is_simulated(args, message):
    result = run("sim", "trn2", "--unit", "core", "--sim", "icarus", *args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(message), result.output
    assert result.output.count("\n") == 1


def test_kernel_is_an_option_of_the_core_alone():
    result = run("sim", "trn2", "--unit", "vector", "--kernel", "random")
    assert result.exit_code == 2
    assert result.output == "error: --kernel is an option of --unit core, not of --unit " \
                            "vector\n"


def test_random_programs_keep_the_rules(params):
    """Every seed gives a program the core simulator accepts and the RTL can run, and the
    seed decides it."""
    for seed in range(60):
        assert check_program(params, RANDOM, seed) is None, seed
    a, b = (build_program(params, RANDOM, 7) for _ in range(2))
    assert a.streams == b.streams
    assert build_program(params, RANDOM, 8).streams != a.streams
    kinds = {type(ins).__name__ for seed in range(60)
             for ins in build_program(params, RANDOM, seed).streams["vector"]}
    assert kinds >= {"TensorTensor", "TensorScalar", "TensorReduce", "TensorCopy", "Memset"}
    Core(params).run(a, timing_only=True)


@pytest.mark.cocotb
def test_icarus_runs_a_program_and_detects_the_deadlock():
    """`gen sim trn2 --unit core --sim icarus`: vector_add matches the simulator byte for byte;
    the deadlocking program stops the core with its deadlock bit, as the simulator refuses
    it."""
    skip_unless_available("icarus")
    result = run("sim", "trn2", "--unit", "core", "--sim", "icarus", "--seed", "3")
    assert result.exit_code == 0, result.output
    assert "  PASS vector_add: 1 tests, 0 failed" in result.output
    assert "  PASS deadlock: 1 tests, 0 failed" in result.output
