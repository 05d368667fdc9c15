"""The testbench of each unit that `gen sim` runs (sim/tb/), by the unit's name in
:data:`generators.units.UNITS`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BENCHES", "Bench"]


@dataclass(frozen=True)
class Bench:
    #: (params, simulator, seed, **options) -> RunResult or a list of them
    simulate: Callable[..., object]
    #: (params, simulator, seed, **options) -> raises InputError for what `gen sim` would
    #: refuse, checked before anything is simulated (its return value is not used)
    check: Callable[..., None] | None = None
    #: whether ``simulate`` also takes ``spec`` (the chip spec's name or path): a bench that
    #: builds the files `gen chip SPEC --scale sim` writes
    shipped: bool = False


def _link_simulate(params, sim, seed=None):
    from sim.tb.link import simulate

    return simulate(params, sim, seed=seed, packets=10_000 if sim == "verilator" else 1_000)


def _vector_simulate(params, sim, seed=None):
    from sim.tb.vector import simulate

    return simulate(params, sim, seed=seed)


def _scalar_simulate(params, sim, seed=None):
    from sim.tb.activation import simulate

    return simulate(params, sim, seed=seed)


def _tensor_simulate(params, sim, seed=None):
    from sim.tb.systolic import simulate

    return simulate(params, sim, seed=seed)


#: The programs `gen sim --unit core` runs without --kernel, by simulator: on Verilator every
#: program of the co-simulation and a seeded random one; on Icarus, about ten times slower
#: (benchmarks/core_rtl.md), a small one and the deadlock. Either adds the MX programs where
#: the array has MX formats.
CORE_PROGRAMS = {"verilator": None, "icarus": ("vector_add", "deadlock")}


def _core_names(params, sim, seed, kernel=None) -> list[str]:
    """The programs `gen sim --unit core` runs (``kernel`` alone: a program or kernel name,
    or ``random``); raises InputError for a program the core simulator rejects or the RTL
    cannot run, so that it is never simulated."""
    from sim.tb.core import check_program
    from sim.tb.core_programs import MX_PROGRAMS, PROGRAMS, RANDOM, program_names
    from specs.errors import InputError

    if kernel is not None:
        if kernel not in program_names():
            raise InputError(f"--kernel must be one of {', '.join(program_names())}, not "
                             f"{kernel!r}")
        names = [kernel]
    else:
        mx = list(MX_PROGRAMS) if params.tensor.has_mx else []
        names = ([*CORE_PROGRAMS[sim], *mx] if CORE_PROGRAMS[sim] else
                 [*PROGRAMS, *mx, RANDOM])
    for name in names:
        why = check_program(params, name, seed)
        if why is not None:
            raise InputError(f"not simulated: {why}")
    return names


def _core_simulate(params, sim, seed=None, kernel=None, *, spec):
    """Every program of :func:`_core_names` in one simulation (one start-up and one build
    of the core as `gen chip SPEC --scale sim` ships it; the core reset and its memories
    cleared before each program)."""
    from sim.tb.core import simulate_many

    return simulate_many(spec, _core_names(params, sim, seed, kernel), sim, seed)


BENCHES = {"link": Bench(_link_simulate), "vector": Bench(_vector_simulate),
           "scalar": Bench(_scalar_simulate), "tensor": Bench(_tensor_simulate),
           "core": Bench(_core_simulate, check=_core_names, shipped=True)}
