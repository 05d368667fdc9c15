"""The hardware units `gen chip` emits and `gen sim` runs, and how each is parameterised
from a chip spec. A unit never reads the spec itself: its ``params`` function here maps the
spec to the unit's own small parameter object."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from specs.model import ChipSpec


@dataclass(frozen=True)
class Unit:
    name: str
    #: (spec, "full" | "sim") -> parameter objects to emit (one per variant)
    params: Callable[[ChipSpec, str], Iterable[object]]
    #: (params, rtl_dir, header) -> files written
    emit: Callable[[object, Path, str], list[Path]]
    #: (params, simulator, seed) -> RunResult or a list of them
    simulate: Callable[..., object]
    #: spec -> reason the chip has no such unit, or "" when it has
    unsupported: Callable[[ChipSpec], str] = lambda spec: ""
    #: spec -> datasheet tables (dicts with title, columns, rows, note)
    datasheet: Callable[[ChipSpec], list[dict]] | None = None


UNITS: dict[str, Unit] = {}


def _link_params(spec: ChipSpec, scale: str):
    from hdl.link.link import LinkParams
    from sim.system.model import link_params

    if scale == "full":
        return [link_params(spec)]
    s = spec.sim
    return [LinkParams(width=s.link_width, credits=s.link_credits, max_packet=s.link_packet,
                       replay_depth=2 * s.link_credits, ack_timeout=256)]


def _link_emit(params, rtl_dir, header):
    from generators.link import emit

    return emit(params, rtl_dir, header)


def _link_simulate(params, sim, seed=None):
    from sim.tb.test_link import simulate

    return simulate(params, sim, seed=seed, packets=10_000 if sim == "verilator" else 1_000)


def _link_unsupported(spec: ChipSpec) -> str:
    return "" if spec.neuronlink.links else "the spec gives no NeuronLink ports"


UNITS["link"] = Unit("link", _link_params, _link_emit, _link_simulate, _link_unsupported)
