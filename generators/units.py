"""The hardware units `gen chip` emits and `gen sim` runs, and how each is parameterised
from a chip spec. A unit never reads the spec itself: its ``params`` entry is the unit's part of
:mod:`hdl.params`, the one mapping from a spec to unit parameter objects."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from hdl.params import (
    accuracy_bounds,
    activation_functions,
    link_params,
    rtl_format_name,
    scalar_params,
    tensor_params,
    vector_params,
)
from specs.model import ChipSpec


@dataclass(frozen=True)
class Unit:
    name: str
    #: (spec, "full" | "sim") -> parameter objects to emit (one per variant)
    params: Callable[[ChipSpec, str], Iterable[object]]
    #: (params, rtl_dir, header) -> files written
    emit: Callable[[object, Path, str], list[Path]]
    #: spec -> reason the chip has no such unit, or "" when it has
    unsupported: Callable[[ChipSpec], str] = lambda spec: ""
    #: spec -> datasheet tables (dicts with title, columns, rows, note)
    datasheet: Callable[[ChipSpec], list[dict]] | None = None
    #: whether the datasheet's area tables count the unit's modules (not the core's: it
    #: assembles engines they already count, once per core)
    area: bool = True
    #: params -> the parts of the unit's emission that workers compute apart (each
    #: ``part(params, name, units)``, ``units`` the chip's other units emitted into the same
    #: directory as (name, parameters) pairs, its result handed to
    #: ``take_parts(params, {name: result})`` in the process that then runs ``emit``, once
    #: those units are written); None: the emission is one task
    parts: Callable[[object], tuple[str, ...]] | None = None
    part: Callable[[object, str], object] | None = None
    take_parts: Callable[[object, dict], None] | None = None


UNITS: dict[str, Unit] = {}


def _link_emit(params, rtl_dir, header):
    from generators.link import emit

    return emit(params, rtl_dir, header)


def _link_unsupported(spec: ChipSpec) -> str:
    return "" if spec.neuronlink.links else "the spec gives no NeuronLink ports"


UNITS["link"] = Unit("link", lambda spec, scale: [link_params(spec, scale)], _link_emit,
                     _link_unsupported)


# --- number formats (datasheet only: the casts are inside the vector engine) ----------------

def _fmt_number(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def formats_datasheet(spec: ChipSpec) -> list[dict]:
    from hdl.numerics.formats import format_table

    t = spec.core.tensor
    rows = []
    for fmt in t.formats:
        name = rtl_format_name(t, fmt)
        rate = f"{t.rates.get(fmt, 1):g}"
        row = format_table([name])[0]
        rows.append([fmt if fmt == name else f"{fmt} ({name})", row["bits"],
                     _fmt_number(row["exponent_bits"]), _fmt_number(row["mantissa_bits"]),
                     _fmt_number(row["bias"]), _fmt_number(row["max_finite"]),
                     _fmt_number(row["min_normal"]), _fmt_number(row["min_subnormal"]),
                     _fmt_number(row["infinities"]), row["nan_encoding"], rate])
    modes = ", ".join("round-to-nearest-even" if m == "rne" else
                      f"stochastic ({spec.rounding.rng} per lane)" for m in spec.rounding.modes)
    return [{
        "title": "Number formats",
        "note": f"Tensor-engine input formats; accumulation is binary32 (int32 for int8). "
                f"Casts from fp32: {modes}.",
        "columns": ["format", "bits", "exp", "mant", "bias", "max finite", "min normal",
                    "min subnormal", "inf", "NaN", "MAC/PE/cycle"],
        "rows": rows,
    }]


UNITS["formats"] = Unit("formats", lambda spec, scale: [], lambda *a: [],
                        datasheet=formats_datasheet)


# --- vector engine ----------------------------------------------------------------------------

def _vector_emit(params, rtl_dir, header):
    from generators.vector import emit

    return emit(params, rtl_dir, header)


UNITS["vector"] = Unit("vector", lambda spec, scale: [vector_params(spec, scale)],
                       _vector_emit)


# --- scalar (activation) engine -----------------------------------------------------------

def scalar_datasheet(spec: ChipSpec) -> list[dict]:
    from generators.vector import accuracy_table
    from hdl.vector.fitting import rom_words

    functions = activation_functions(spec)
    bounds = accuracy_bounds(spec)
    rows = []
    for r in accuracy_table(functions):
        rng = "-" if r["range"] is None else f"[{r['range'][0]:g}, {r['range'][1]:g})"
        bound = bounds[r["function"]]
        rows.append([r["function"], r["reduction"], r["mode"], rng, r["segments"], r["degree"],
                     r["rom_rows"] if r["rom_shared"] is None else f"{r['rom_shared']}'s",
                     r["points"], f"{r['max_rel_error']:.3g}",
                     f"{r['worst_x']:.9g}", f"{bound:.3g}",
                     "within" if r["max_rel_error"] <= bound else "EXCEEDS"])
    _, words = rom_words(functions)
    return [{
        "title": "Scalar engine: activation accuracy over the whole fp32 domain",
        "note": "Each function is a piecewise polynomial evaluated in fp32 (Horner, multiply "
                "then add, bit-exact between RTL and golden model); exp, log, sqrt, rsqrt and "
                "reciprocal first reduce their argument on the fp32 exponent, sin and cos "
                "modulo pi/2 (exactly, for every fp32 input), arctan to 1/x above 1, and "
                "sigmoid, "
                "softplus and silu follow exp(x) (x exp(x)) below their range. Errors are "
                "relative, |y - f| / |f|, against the exact function in float64, at inputs "
                "drawn from every binade of fp32 (both signs, subnormals included) and every "
                "segment, wherever the exact result is a normal fp32 number. Range is that of "
                "the polynomial's argument. Bound: the spec's core.scalar.max_rel_error, or "
                f"the function's own in approximations. ROM: {len(words)} rows in all.",
        "columns": ["function", "reduction", "segmentation", "range", "segments", "degree",
                    "ROM rows", "points", "max rel error", "worst x", "bound", "verdict"],
        "rows": rows,
    }]


UNITS["scalar"] = Unit("scalar", lambda spec, scale: [scalar_params(spec, scale)],
                       _vector_emit, datasheet=scalar_datasheet)


# --- tensor engine --------------------------------------------------------------------------

def _tensor_emit(params, rtl_dir, header):
    from generators.tensor import emit
    from hdl.tensor.structural import UNIT_TOP

    return emit(params, rtl_dir, header, top=UNIT_TOP)


UNITS["tensor"] = Unit("tensor", lambda spec, scale: [tensor_params(spec, scale)],
                       _tensor_emit)


# --- the NeuronCore -------------------------------------------------------------------------

def _core_params(spec: ChipSpec, scale: str):
    from hdl.params import core_params

    return [core_params(spec, scale)]


def _core_unsupported(spec: ChipSpec) -> str:
    """Why the spec gives no core RTL at either scale ("" when it gives one)."""
    from hdl.core.core import HostMap
    from specs.errors import InputError

    try:
        for scale in ("full", "sim"):
            HostMap(_core_params(spec, scale)[0])
    except (InputError, ValueError) as err:
        return str(err)
    return ""


def core_datasheet(spec: ChipSpec) -> list[dict]:
    """The core's memories and engines as its RTL builds them, at full and simulation
    scale."""
    from hdl.core.core import HOST_BITS, HostMap
    from hdl.core.isa import WORD_BITS

    scales = {scale: _core_params(spec, scale)[0] for scale in ("full", "sim")}

    def row(what: str, value) -> list[str]:
        return [what] + [value(p, HostMap(p)) for p in scales.values()]

    def engines(p, hm) -> str:
        return ", ".join(s for s in hm.streams if not s.startswith("dma"))

    rows = [
        row("SBUF", lambda p, hm: f"{p.partitions} partitions x {p.sbuf_bytes} B: one memory "
            f"of {hm.sbuf_words} rows x {32 * p.partitions} bits, byte enables"),
        row("PSUM", lambda p, hm: f"{p.partitions} partitions x {p.psum_bytes} B in "
            f"{p.psum_banks} banks of {p.psum_bank_bytes} B: {hm.psum_words} rows x "
            f"{32 * p.partitions} bits"),
        row("Engines", lambda p, hm: f"{engines(p, hm)} and DMA, over {p.partitions} "
            "partitions"),
        row("DMA", lambda p, hm: f"{p.dma_queues} queues on one AXI4 manager port, "
            f"{max(1, (p.hbm_bytes - 1).bit_length())}-bit addresses, 32-bit data"),
        row("Sequencers", lambda p, hm: f"{len(hm.streams)} ({', '.join(hm.streams[:4])}"
            f"{' ..' if len(hm.streams) > 4 else ''}), each a ring of {p.instructions} "
            f"instructions of {WORD_BITS} bits with cycle stamps, fed by the host"),
        row("Semaphores", lambda p, hm: f"{p.semaphores} x 32 bits"),
        row("Host port", lambda p, hm: f"{HOST_BITS}-bit words: programs, start, status, "
            "cycles, stamps, SBUF and PSUM reads"),
    ]
    return [{
        "title": "NeuronCore RTL: memories and engines",
        "note": "As `hdl.core.core.NeuronCore` builds them from the spec (`gen chip` emits "
                "neuron_core.v at full scale; `gen sim --unit core` co-simulates the core at "
                "simulation scale against the core simulator).",
        "columns": ["part", "full scale", "simulation scale"],
        "rows": rows,
    }]


def _core_emit(params, rtl_dir, header):
    from generators.core import emit

    return emit(params, rtl_dir, header)


def _core_parts(params):
    from generators.core import PARTS

    return PARTS


def _core_part(params, name, units):
    from generators.core import part_texts

    return part_texts(params, name, units)


def _core_take_parts(params, texts):
    from generators.core import take_parts

    take_parts(params, texts)


UNITS["core"] = Unit("core", _core_params, _core_emit, _core_unsupported,
                     datasheet=core_datasheet, area=False,
                     parts=_core_parts, part=_core_part, take_parts=_core_take_parts)
