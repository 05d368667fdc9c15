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
    #: (params, simulator, seed) -> RunResult or a list of them; None: nothing to simulate
    simulate: Callable[..., object] | None
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


# --- number formats (datasheet only: the casts are inside the vector engine) ----------------

def rtl_format_name(spec: ChipSpec, fmt: str) -> str | None:
    """The numerics format name of a spec format, or None where the RTL has none (MX)."""
    if fmt in ("mxfp8", "mxfp4"):
        return None
    if fmt == "cfp8":
        c = spec.core.tensor.cfp8
        layout, bias = (c.layout, c.bias) if c else ("e4m3", 7)
        return f"cfp8_{layout}_b{bias}"
    return fmt


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
        name = rtl_format_name(spec, fmt)
        rate = f"{t.rates.get(fmt, 1):g}"
        if name is None:
            rows.append([fmt] + ["-"] * 8 + ["MX block format: throughput model only, no RTL",
                                             rate])
            continue
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

def _rounding(spec: ChipSpec) -> str:
    return "stochastic" if "stochastic" in spec.rounding.modes else "rne"


def _vector_params(spec: ChipSpec, scale: str):
    from hdl.vector.vector import VectorParams

    lanes = spec.core.vector.lanes if scale == "full" else spec.sim.lanes
    return [VectorParams(lanes=lanes, out_format="bf16", rounding=_rounding(spec),
                         rng=spec.rounding.rng)]


def _vector_emit(params, rtl_dir, header):
    from generators.vector import emit

    return emit(params, rtl_dir, header)


def _vector_simulate(params, sim, seed=None):
    from sim.tb.test_vector import simulate

    return simulate(params, sim, seed=seed)


UNITS["vector"] = Unit("vector", _vector_params, _vector_emit, _vector_simulate)


# --- scalar (activation) engine -----------------------------------------------------------

def activation_functions(spec: ChipSpec):
    """The spec's functions as the generator's function specs, with the spec's overrides."""
    import dataclasses

    from hdl.vector.functions import DEFAULT_FUNCTIONS

    by_name = {f.name: f for f in DEFAULT_FUNCTIONS}
    out = []
    for name in spec.core.scalar.functions:
        f = by_name[name]
        approx = spec.core.scalar.approximations.get(name)
        if approx is not None:
            changes = {}
            if approx.range is not None:
                changes["lo"], changes["hi"] = approx.range
            if approx.segments is not None:
                changes["segments"] = approx.segments
            if approx.degree is not None:
                changes["degree"] = approx.degree
            f = dataclasses.replace(f, **changes)
        out.append(f)
    return tuple(out)


def _scalar_params(spec: ChipSpec, scale: str):
    from hdl.vector.activation import ActivationParams

    lanes = spec.core.scalar.lanes if scale == "full" else spec.sim.lanes
    return [ActivationParams(lanes=lanes, functions=activation_functions(spec))]


def _scalar_simulate(params, sim, seed=None):
    from sim.tb.test_activation import simulate

    return simulate(params, sim, seed=seed)


def scalar_datasheet(spec: ChipSpec) -> list[dict]:
    from generators.vector import accuracy_table

    rows = []
    for r in accuracy_table(activation_functions(spec)):
        rng = "-" if r["range"] is None else f"[{r['range'][0]:g}, {r['range'][1]:g})"
        rows.append([r["function"], r["mode"], rng, r["segments"], r["degree"], r["rom_rows"],
                     f"{r['max_abs_error']:.3g}", f"{r['max_rel_error']:.3g}",
                     f"{r['worst_x']:.6g}"])
    return [{
        "title": "Scalar engine: activation accuracy",
        "note": "Each function is a piecewise polynomial evaluated in fp32 (Horner, multiply "
                "then add, bit-exact between RTL and golden model); errors are against the "
                "exact function in float64 over the fitted range. Relative error is "
                "|y - f| / max(|f|, 2^-20).",
        "columns": ["function", "segmentation", "range", "segments", "degree", "ROM rows",
                    "max abs error", "max rel error", "worst x"],
        "rows": rows,
    }]


UNITS["scalar"] = Unit("scalar", _scalar_params, _vector_emit, _scalar_simulate,
                       datasheet=scalar_datasheet)


# --- tensor engine --------------------------------------------------------------------------

def tensor_params(spec: ChipSpec, scale: str):
    """One systolic array per RTL-supported input format of the spec (the PE's datapath
    differs by format); double rate where the spec gives an 8-bit format rate 2."""
    from hdl.tensor.params import SystolicParams

    t = spec.core.tensor
    rows, cols = (t.rows, t.cols) if scale == "full" else (spec.sim.tensor_rows,
                                                           spec.sim.tensor_cols)
    moving = t.moving_max if scale == "full" else min(t.moving_max, 16)
    out = []
    for fmt in t.formats:
        name = rtl_format_name(spec, fmt)
        if name is None:
            continue
        double = t.rates.get(fmt, 1) == 2 and fmt not in ("int8",)
        out.append(SystolicParams(rows=rows, cols=cols, fmt=name, moving_max=moving,
                                  double_rate=double, load_columns=t.load_columns))
    return out


def _tensor_emit(params, rtl_dir, header):
    from generators.tensor import emit

    top = "tensor_" + params.fmt + ("_x2" if params.double_rate else "")
    return emit(params, rtl_dir, header, top=top)


def _tensor_simulate(params, sim, seed=None):
    from sim.tb.test_systolic import simulate

    return simulate(params, sim, seed=seed)


UNITS["tensor"] = Unit("tensor", tensor_params, _tensor_emit, _tensor_simulate)
