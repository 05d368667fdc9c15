"""Shared pytest options: which HDL simulators to run, and the random seed of seeded tests;
and the order the tests run in.

Every test that takes a ``sim`` argument runs once per simulator of ``--sim`` (default: all).
A simulator that is not installed is skipped with a reason; under ``CI=true`` the test runs
and fails, because CI installs both.

The longest test files run first, so that with pytest-xdist handing out one test at a time
(``run-tests`` passes ``--maxschedchunk 1``) the workers finish together instead of one of them
ending the run alone with a long test. A file's length is what its tests took the last time
they ran on this machine (recorded in ``test-durations.json`` under the machine's trngen
cache, :func:`specs.store.cache_home`), or, for tests never timed here, a guess from their
marks. The tests of one file stay together and in their order, so that module fixtures are
set up once per worker.
"""

import json
import os
import random
from pathlib import Path

import pytest

from sim.tb.runner import SIMULATORS, available_simulators
from specs.files import replace_atomically
from specs.store import cache_home

#: Guessed seconds of a test never timed on this machine, by mark; others take DEFAULT_COST.
MARK_COST = {"cocotb": 60.0, "slow": 60.0}
DEFAULT_COST = 1.0
_KNOWN = pytest.StashKey[dict]()
#: Seconds each test took in this session (setup, call and teardown), as reports come in.
_times: dict[str, float] = {}


def _durations_file() -> Path:
    return cache_home() / "test-durations.json"


def _read_durations() -> dict[str, float]:
    try:
        data = json.loads(_durations_file().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, int | float)}


def pytest_configure(config):
    # the controller reads the record once and hands it to the xdist workers, which must
    # all collect the same order
    worker = getattr(config, "workerinput", None)
    config.stash[_KNOWN] = worker["trngen_durations"] if worker else _read_durations()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput["trngen_durations"] = node.config.stash[_KNOWN]


def pytest_collection_modifyitems(config, items):
    known = config.stash[_KNOWN]

    def cost(item) -> float:
        if item.nodeid in known:
            return known[item.nodeid]
        return max((MARK_COST.get(m.name, DEFAULT_COST) for m in item.iter_markers()),
                   default=DEFAULT_COST)

    def file(item) -> str:
        return item.nodeid.partition("::")[0]

    total: dict[str, float] = {}
    for item in items:
        total[file(item)] = total.get(file(item), 0.0) + cost(item)
    items.sort(key=lambda item: -total[file(item)])     # stable: a file's order is kept


def pytest_runtest_logreport(report):
    _times[report.nodeid] = _times.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session):
    if getattr(session.config, "workerinput", None) is not None or not _times:
        return
    record = {**_read_durations(), **{k: round(v, 3) for k, v in _times.items()}}
    path = _durations_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(path, lambda tmp: tmp.write_text(json.dumps(record, indent=0,
                                                                       sort_keys=True)))
    except OSError:
        pass    # no record: the next run orders by marks


def pytest_addoption(parser):
    parser.addoption("--sim", action="append", choices=SIMULATORS,
                     help="HDL simulator to run cocotb tests on (repeatable; default: all)")
    parser.addoption("--seed", type=int, default=None,
                     help="seed of the random tests (default: a fresh one, printed)")


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
