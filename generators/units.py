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
    #: (params, simulator, seed) -> RunResult or a list of them; None: nothing to simulate
    simulate: Callable[..., object] | None
    #: spec -> reason the chip has no such unit, or "" when it has
    unsupported: Callable[[ChipSpec], str] = lambda spec: ""
    #: spec -> datasheet tables (dicts with title, columns, rows, note)
    datasheet: Callable[[ChipSpec], list[dict]] | None = None


UNITS: dict[str, Unit] = {}


def _link_emit(params, rtl_dir, header):
    from generators.link import emit

    return emit(params, rtl_dir, header)


def _link_simulate(params, sim, seed=None):
    from sim.tb.link import simulate

    return simulate(params, sim, seed=seed, packets=10_000 if sim == "verilator" else 1_000)


def _link_unsupported(spec: ChipSpec) -> str:
    return "" if spec.neuronlink.links else "the spec gives no NeuronLink ports"


UNITS["link"] = Unit("link", lambda spec, scale: [link_params(spec, scale)], _link_emit,
                     _link_simulate, _link_unsupported)


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


UNITS["formats"] = Unit("formats", lambda spec, scale: [], lambda *a: [], None,
                        datasheet=formats_datasheet)


# --- vector engine ----------------------------------------------------------------------------

def _vector_emit(params, rtl_dir, header):
    from generators.vector import emit

    return emit(params, rtl_dir, header)


def _vector_simulate(params, sim, seed=None):
    from sim.tb.vector import simulate

    return simulate(params, sim, seed=seed)


UNITS["vector"] = Unit("vector", lambda spec, scale: [vector_params(spec, scale)],
                       _vector_emit, _vector_simulate)


# --- scalar (activation) engine -----------------------------------------------------------

def _scalar_simulate(params, sim, seed=None):
    from sim.tb.activation import simulate

    return simulate(params, sim, seed=seed)


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
                       _vector_emit, _scalar_simulate, datasheet=scalar_datasheet)


# --- tensor engine --------------------------------------------------------------------------

def _tensor_emit(params, rtl_dir, header):
    from generators.tensor import emit

    return emit(params, rtl_dir, header, top="tensor")


def _tensor_simulate(params, sim, seed=None):
    from sim.tb.systolic import simulate

    return simulate(params, sim, seed=seed)


UNITS["tensor"] = Unit("tensor", lambda spec, scale: [tensor_params(spec, scale)],
                       _tensor_emit, _tensor_simulate)
