"""Shared pytest options: which HDL simulators to run, and the random seed of seeded tests.

Every test that takes a ``sim`` argument runs once per simulator of ``--sim`` (default: all);
``--slow-builds`` adds the few whose simulator build takes tens of minutes.
A simulator that is not installed is skipped with a reason; under ``CI=true`` the test runs
and fails, because CI installs both.
"""

import os
import random

import pytest

from sim.tb.runner import SIMULATORS, available_simulators


def pytest_addoption(parser):
    parser.addoption("--sim", action="append", choices=SIMULATORS,
                     help="HDL simulator to run cocotb tests on (repeatable; default: all)")
    parser.addoption("--seed", type=int, default=None,
                     help="seed of the random tests (default: a fresh one, printed)")
    parser.addoption("--slow-builds", action="store_true",
                     help="also run the cocotb tests whose simulator build takes tens of "
                          "minutes (the multi-format tensor array and the NeuronCore on Verilator)")


def pytest_generate_tests(metafunc):
    if "sim" not in metafunc.fixturenames:
        return
    chosen = metafunc.config.getoption("--sim") or list(SIMULATORS)
    have = available_simulators()
    params = []
    for sim in chosen:
        marks = []
        if sim not in have and os.environ.get("CI") != "true":
            marks = [pytest.mark.skip(reason=f"{sim} is not installed")]
        params.append(pytest.param(sim, marks=marks, id=sim))
    metafunc.parametrize("sim", params)


@pytest.fixture
def seed(request):
    """The seed of a random test; re-run one with ``--seed N``."""
    value = request.config.getoption("--seed")
    if value is None:
        value = random.SystemRandom().randrange(2**31)
    print(f"seed={value} (re-run with --seed {value})")
    return value
