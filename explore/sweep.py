"""Sweep specs: a base chip or system, parameter ranges, constraints, workloads and metrics.

A sweep file holds one top-level key ``sweep``::

    sweep:
      name: array-vs-clock
      base: trn2.48xlarge            # a chip or system spec (bundled name or path)
      parameters:                    # each a list, or a range {start, stop, step|num|factor}
        rows: [64, 128, 256]
        clock: {start: 1.6 GHz, stop: 3.2 GHz, step: 0.4 GHz}
      constraints:                   # keep only the points that satisfy all of them
        - {quantity: pe_per_chip, equal: 131072}
      workloads: [llama2-7b, {name: llama2-70b, tensor: 32}]
      metrics: [step_time, utilisation, tokens_per_second]
      price: {base: 44.7 USD/h, shares: {chips: 0.6, hbm_capacity: 0.4}}
      execution: {chunk_size: 50000, dask_threshold: 200000}

Parameters not listed keep the base spec's value. Quantities carry units and are checked for
dimension like a chip spec's; counts are positive integers. Every error names the file, line
and column, the key path, what was expected and what was found.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import Discriminator, Field, Tag, model_validator
from pydantic_core import PydanticCustomError

from sim.system import formulas
from specs import units
from specs.errors import SpecError, nearest
from specs.loader import find as find_spec
from specs.loader import load_document
from specs.yamlsrc import Positions

from . import model, workloads
from .infer_sweep import SWEEP_METRICS as INFER_METRICS
from .infer_sweep import expand as expand_serving
from .specio import Strict, load_model
from .step_sweep import SWEEP_METRICS

SWEEP_ROOT = Path(__file__).resolve().parent / "sweeps"
PosInt = Annotated[int, Field(gt=0)]
Number = int | float | str
ParamName = Literal[tuple(model.PARAMS)]  # type: ignore[valid-type]
MetricName = Literal[(*model.METRICS, *SWEEP_METRICS, *INFER_METRICS)]  # type: ignore[valid-type]
PriceFactor = Literal[model.PRICE_FACTORS]  # type: ignore[valid-type]
#: Quantities a constraint can bound: name -> (dimension, function of the parameter arrays).
CONSTRAINTS = {
    "pe_per_chip": ("count", lambda v: v["rows"] * v["cols"] * v["cores"]),
    "pe_per_core": ("count", lambda v: v["rows"] * v["cols"]),
    "aspect": ("ratio", lambda v: v["rows"] / v["cols"]),
    "peak_flops_chip": ("compute", lambda v: formulas.peak_flops(v["rows"], v["cols"],
                                                                 v["clock"], 1.0, v["cores"])),
    "sbuf_per_chip": ("bytes", lambda v: v["sbuf"] * v["cores"]),
    "logical_cores": ("count", lambda v: v["cores"] / v["lnc"]),
}
#: Default limit on design points: 10 million points of the model's parameters take about a
#: gigabyte of arrays and, at 100,000 points per second per workload, minutes per workload.
MAX_POINTS = 10_000_000
UNIT_OF = {"count": 1, "ratio": 1, "frequency": "Hz", "bytes": "B", "bandwidth": "B/s",
           "compute": "FLOPS"}


class Range(Strict):
    """Values from ``start`` to ``stop`` (inclusive) by a ``step``, a ``factor`` or ``num``."""

    start: Number = Field(description="First value (with a unit for quantities).")
    stop: Number = Field(description="Last value, included when the steps land on it.")
    step: Number | None = Field(None, description="Difference between neighbours.")
    factor: float | int | None = Field(None, gt=1, description="Ratio between neighbours.")
    num: PosInt | None = Field(None, description="Number of values, evenly spaced.")
    spacing: Literal["linear", "log"] = Field("linear", description="Spacing of ``num`` values.")

    @model_validator(mode="after")
    def _one_rule(self):
        given = [k for k in ("step", "factor", "num") if getattr(self, k) is not None]
        if len(given) != 1:
            raise PydanticCustomError(
                "sweep", "expected exactly one of step, factor or num, found {f}",
                {"f": ", ".join(given) if given else "none"})
        return self


Values = Annotated[
    Annotated[list[Number], Tag("list")] | Annotated[Range, Tag("range")],
    Discriminator(lambda v: "range" if isinstance(v, dict | Range) else "list")]


class Constraint(Strict):
    """A bound on a quantity derived from the parameters."""

    quantity: Literal[tuple(CONSTRAINTS)] = Field(  # type: ignore[valid-type]
        description="pe_per_chip (rows x cols x cores), pe_per_core, aspect (rows / cols), "
                    "peak_flops_chip (at one MAC per PE per cycle), sbuf_per_chip, "
                    "logical_cores (cores / lnc).")
    equal: Number | None = Field(None, description="Required value.")
    min: Number | None = Field(None, description="Smallest value allowed.")
    max: Number | None = Field(None, description="Largest value allowed.")

    @model_validator(mode="after")
    def _some_bound(self):
        if self.equal is None and self.min is None and self.max is None:
            raise PydanticCustomError("sweep", "expected at least one of equal, min or max, "
                                               "found none", {})
        return self


class ServingRef(Strict):
    """Serving configurations of the inference metrics: every combination of the lists."""

    batch: PosInt | list[PosInt] = Field(1, description="Sequences per batch.")
    input: PosInt | list[PosInt] = Field(128, description="Prompt tokens.")
    output: PosInt | list[PosInt] = Field(128, description="Generated tokens.")
    dtype: Literal["bf16", "fp8"] | list[Literal["bf16", "fp8"]] = Field(
        "bf16", description="GEMM format (weights stored in it).")

    def lists(self) -> list[list]:
        return [v if isinstance(v, list) else [v]
                for v in (self.batch, self.input, self.output, self.dtype)]


class WorkloadRef(Strict):
    name: str = Field(description="Bundled workload name or a path beside the sweep.")
    tensor: PosInt | None = Field(None, description="Tensor-parallel degree (ranks), "
                                                    "overriding the workload's.")
    serving: ServingRef | None = Field(
        None, description="Serving configurations for the infer_* metrics: one workload per "
                          "combination, named NAME-tpTENSOR-bBATCH-INPUTxOUTPUT, its tensor the "
                          "replica's TP degree.")


class Price(Strict):
    """How the price per hour of a design point follows from the base system's."""

    base: str | None = Field(None, description="Price of the base system, e.g. '44.7 USD/h'; "
                                               "default: the system spec's price.")
    shares: dict[PriceFactor, float] = Field(
        default_factory=lambda: {"chips": 1.0},
        description="Share of the base price that scales with each factor (chips, pe, "
                    "peak_flops, hbm_capacity, hbm_bandwidth, link_bandwidth), each taken over "
                    "the whole system; the shares sum to 1.")

    @model_validator(mode="after")
    def _sum(self):
        total = sum(self.shares.values())
        if abs(total - 1.0) > 1e-9 or any(s < 0 for s in self.shares.values()):
            raise PydanticCustomError("sweep", "expected non-negative shares summing to 1, "
                                               "found a sum of {t}", {"t": f"{total:g}"})
        return self


class Execution(Strict):
    chunk_size: PosInt = Field(50_000, description="Design points per chunk (one Parquet part "
                                                   "per chunk and workload).")
    dask_threshold: PosInt = Field(200_000, description="Design points x workloads from "
                                                        "which a Dask cluster is used.")
    workers: PosInt = Field(2, description="Workers of the local Dask cluster.")
    max_points: PosInt = Field(
        MAX_POINTS, description="Largest number of design points (the product of the "
                                "parameters' value counts, before constraints) a run accepts; "
                                "larger sweeps are refused before anything is allocated.")


class Plots(Strict):
    colour: ParamName | None = Field(None, description="Parameter that colours the points of "
                                                       "the Pareto plots; default: the swept "
                                                       "parameter with the most values.")


class SweepSpec(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", description="Short name.")
    title: str = Field("", description="What the sweep asks.")
    base: str = Field(description="Base chip or system spec (bundled name or path).")
    parameters: dict[ParamName, Values] = Field(
        default_factory=dict, description="Values of each swept parameter.")
    constraints: list[Constraint] = Field(default_factory=list,
                                          description="Bounds every kept point satisfies.")
    workloads: list[str | WorkloadRef] = Field(min_length=1, description="Workloads to run.")
    metrics: list[MetricName] = Field(default_factory=lambda: list(model.METRICS),
                                      description="Metrics kept in the table.")
    price: Price = Field(default_factory=Price, description="Price model.")
    execution: Execution = Field(default_factory=Execution, description="Execution settings.")
    plots: Plots = Field(default_factory=Plots, description="Plot settings.")


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: the base, the value grid of each parameter, the workloads."""

    spec: SweepSpec
    file: Path
    base: model.Base
    base_digest: str
    grid: dict[str, np.ndarray]
    constraints: tuple[tuple[str, float | None, float | None, float | None], ...]
    workloads: tuple[workloads.Workload, ...]

    @property
    def name(self) -> str:
        return self.spec.name

    def points(self) -> tuple[dict[str, np.ndarray], int]:
        """All kept design points (parameter -> array) and how many the filters dropped.

        The order is the Cartesian product of the grids in ``PARAMS`` order, last fastest.
        Points whose ``lnc`` does not divide ``cores``, or that break a constraint, are dropped.
        """
        names = list(self.grid)
        if names:
            mesh = np.meshgrid(*(self.grid[n] for n in names), indexing="ij")
            v = {n: m.ravel() for n, m in zip(names, mesh, strict=True)}
        else:
            v = {}
        size = len(next(iter(v.values()))) if v else 1
        full = {k: np.broadcast_to(v.get(k, np.float64(self.base.values[k])), (size,))
                for k in model.PARAMS}
        keep = np.mod(full["cores"], full["lnc"]) == 0
        for quantity, equal, lo, hi in self.constraints:
            x = CONSTRAINTS[quantity][1](full)
            if equal is not None:
                keep &= np.isclose(x, equal, rtol=1e-9, atol=0)
            if lo is not None:
                keep &= x >= lo * (1 - 1e-12)
            if hi is not None:
                keep &= x <= hi * (1 + 1e-12)
        return {k: np.ascontiguousarray(a[keep]) for k, a in full.items()}, int(size - keep.sum())

    def digest(self) -> str:
        """Hash of what determines the results (base, workloads, model parameters)."""
        text = json.dumps({"base": self.base_digest, "area": self.base.area,
                           "price": self.spec.price.model_dump(),
                           "metrics": self.spec.metrics,
                           "workloads": [_workload_key(w) for w in self.workloads]},
                          sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


def _workload_key(w: workloads.Workload) -> dict:
    g = w.gemms
    return {"name": w.name, "tensor": w.tensor, "dtype": w.dtype,
            "gemms": [g.m.tolist(), g.k.tolist(), g.n.tolist(), g.count.tolist(),
                      g.tp.tolist(), g.dp.tolist(), g.backward.tolist()],
            "comm": [w.tokens, w.tp_allreduces, w.tp_bytes, w.dp_bytes, w.overlap_gradients,
                     w.replicated, w.state_bytes_tp, w.state_bytes_tpdp],
            "serving": None if w.serving is None else w.serving.suffix}


def bundled() -> list[str]:
    return sorted(p.stem for p in SWEEP_ROOT.glob("*.yaml"))


def find(name: str | Path) -> Path:
    p = Path(name)
    if p.is_file():
        return p
    f = SWEEP_ROOT / f"{p.name.removesuffix('.yaml')}.yaml"
    if f.is_file():
        return f
    raise SpecError(f"expected a sweep file or a bundled sweep name, found {str(name)!r}",
                    nearest=nearest(p.stem, bundled()), choices=bundled())


def load(name: str | Path, max_points: int | None = None) -> Sweep:
    """Load and validate a sweep; raise SpecError naming file:line:col on any fault.

    ``max_points`` overrides the sweep's ``execution.max_points``: a sweep with more design
    points is refused from the value counts alone, before any grid is built.
    """
    file = find(name).resolve()
    spec, data, pos = load_model(file, "sweep", SweepSpec)
    _check_size(spec, pos, max_points or spec.execution.max_points)
    try:
        base_file = find_spec(spec.base, near=file.parent)
    except SpecError as exc:
        raise SpecError(f"names a base spec that does not exist: {exc.detail}",
                        location=pos.of(("sweep", "base")), path="sweep.base",
                        nearest=exc.nearest, choices=exc.choices) from None
    price = (_quantity(spec.price.base, "price", pos, ("price", "base"))
             if spec.price.base is not None else None)
    base_doc = load_document(base_file)
    base = model.base_from_spec(base_file, price=price, price_shares=spec.price.shares)
    grid = {}
    for name_ in model.PARAMS:
        if name_ in spec.parameters:
            grid[name_] = _values(name_, spec.parameters[name_], pos)
    if base.topology == "none" and "chips" in grid and np.any(grid["chips"] > 1):
        raise SpecError(f"expected chips of 1 for a base without chip-to-chip links "
                        f"({spec.base}), found {grid['chips'].max():g}",
                        location=pos.of(("sweep", "parameters", "chips")),
                        path="sweep.parameters.chips")
    constraints = []
    for i, c in enumerate(spec.constraints):
        dim = CONSTRAINTS[c.quantity][0]
        bounds = [None if b is None else
                  _scalar(b, dim, pos, ("constraints", i, key))
                  for key, b in (("equal", c.equal), ("min", c.min), ("max", c.max))]
        constraints.append((c.quantity, *bounds))
    loaded = []
    for i, ref in enumerate(spec.workloads):
        ref = WorkloadRef(name=ref) if isinstance(ref, str) else ref
        at = ("workloads", i) if isinstance(spec.workloads[i], str) else ("workloads", i, "name")
        try:
            w = workloads.load(ref.name, near=file.parent, tensor=ref.tensor)
        except SpecError as exc:
            if exc.location is not None:
                raise
            raise SpecError(f"names a workload that does not exist: {exc.detail}",
                            location=pos.of(("sweep", *at)),
                            path="sweep." + "".join(f"[{p}]" if isinstance(p, int) else
                                                    f".{p}" for p in at).lstrip("."),
                            nearest=exc.nearest, choices=exc.choices) from None
        if math.isnan(base.rate(w.dtype)):
            raise SpecError(f"expected a workload format the base chip has, found {w.dtype!r}",
                            location=pos.of(("sweep", *at)), path=f"sweep.workloads[{i}]",
                            choices=sorted(base.rates))
        if ref.serving is None:
            loaded.append(w)
            continue
        if w.spec is None or not w.spec.causal:
            raise SpecError("expected a decoder transformer for a serving configuration, "
                            f"found {w.name!r}", location=pos.of(("sweep", *at)),
                            path=f"sweep.workloads[{i}]")
        for one in expand_serving(*ref.serving.lists()):
            loaded.append(replace(w, name=f"{w.name}-tp{w.tensor}-{one.suffix}", serving=one))
    return Sweep(spec, file, base, base_doc.digest, grid, tuple(constraints), tuple(loaded))


def _where(path: tuple) -> str:
    out = "sweep"
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def _quantity(text, dimension: str, pos: Positions, path: tuple) -> float:
    try:
        q = units.parse(text, dimension)
    except units.UnitParseError as exc:
        raise SpecError(str(exc), location=pos.of(("sweep", *path)), path=_where(path)) from None
    return float(q.to(UNIT_OF.get(dimension, "USD/h")).magnitude)


def _scalar(value, dimension: str, pos: Positions, path: tuple) -> float:
    if dimension in ("count", "ratio"):
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
        if dimension == "count":
            ok = ok and float(value).is_integer()
        if not ok:
            what = "a positive integer" if dimension == "count" else "a positive number"
            raise SpecError(f"expected {what}, found {value!r}",
                            location=pos.of(("sweep", *path)), path=_where(path))
        return float(value)
    value_ = _quantity(value, dimension, pos, path)
    if value_ <= 0:
        raise SpecError(f"expected a positive value, found {value!r}",
                        location=pos.of(("sweep", *path)), path=_where(path))
    return value_


def _count(name: str, spec, pos: Positions) -> float:
    """How many values ``spec`` gives ``name``, from its bounds alone (nothing allocated);
    ``inf`` where a step is too small for the count to be a number."""
    if isinstance(spec, list):
        return len(spec)
    if spec.num is not None:
        return spec.num
    dimension = model.PARAMS[name][1]
    path = ("parameters", name)
    start = _scalar(spec.start, dimension, pos, (*path, "start"))
    stop = _scalar(spec.stop, dimension, pos, (*path, "stop"))
    if stop < start:
        return 1.0
    if spec.step is not None:
        ratio = (stop - start) / _scalar(spec.step, dimension, pos, (*path, "step"))
    else:
        ratio = math.log(stop / start) / math.log(spec.factor)
    return math.floor(ratio) + 1.0 if math.isfinite(ratio) else math.inf


def _check_size(spec: SweepSpec, pos: Positions, limit: int) -> None:
    counts = {n: _count(n, v, pos) for n, v in spec.parameters.items()}
    total = math.prod(counts.values()) if counts else 1
    if total > limit:
        shown = " x ".join(f"{c:,.0f} {n}" if math.isfinite(c) else f"too many {n}"
                           for n, c in counts.items())
        found = f"{total:,.0f}" if math.isfinite(total) else "too many to count"
        raise SpecError(f"expected at most {limit:,} design points (execution.max_points, or "
                        f"--max-points), found {found} ({shown})",
                        location=pos.of(("sweep", "parameters")), path="sweep.parameters")


def _values(name: str, spec, pos: Positions) -> np.ndarray:
    dimension = model.PARAMS[name][1]
    path = ("parameters", name)
    if isinstance(spec, list):
        if not spec:
            raise SpecError("expected at least one value, found an empty list",
                            location=pos.of(("sweep", *path)), path=_where(path))
        vals = [_scalar(x, dimension, pos, (*path, i)) for i, x in enumerate(spec)]
        return np.array(sorted(set(vals)), float)
    start = _scalar(spec.start, dimension, pos, (*path, "start"))
    stop = _scalar(spec.stop, dimension, pos, (*path, "stop"))
    if stop < start:
        raise SpecError(f"expected stop >= start, found {spec.stop!r} < {spec.start!r}",
                        location=pos.of(("sweep", *path, "stop")), path=_where((*path, "stop")))
    if spec.step is not None:
        step = _scalar(spec.step, dimension, pos, (*path, "step"))
        count = math.floor((stop - start) / step * (1 + 1e-12)) + 1
        vals = start + step * np.arange(count)
    elif spec.factor is not None:
        count = math.floor(math.log(stop / start) / math.log(spec.factor) + 1e-9) + 1
        vals = start * spec.factor ** np.arange(count)
    elif spec.spacing == "log":
        vals = np.geomspace(start, stop, spec.num)
    else:
        vals = np.linspace(start, stop, spec.num)
    if dimension == "count":
        vals = np.round(vals)
    return np.unique(vals)
