"""Published inference results (``explore/published/inference.csv``) against ``gen infer``.

Each row of the file is one published measurement: its source (a key of
``specs/sources.yaml``), the CSV it came from with that repository's commit, the instance, the
model, the configuration (TP, DP, LNC, batch, input and output lengths, GEMM format, weight
storage), the framework and the sequence length it was compiled for, and the published
figures (P50 where the source gives percentiles). A Transformers NeuronX row of Neuron 2.18 or
later is compiled with that library's default buckets for its sequence length
(:meth:`~explore.infer.Compilation.transformers_neuronx`); the others at their own lengths.
A row ``gen infer`` cannot express carries the reason in ``skipped`` and is not run.
:func:`compare`
predicts every other row as ``gen infer SYSTEM MODEL ... --format json`` does
(:func:`explore.infer_cli.design_point`, :meth:`~explore.infer_cli.Point.row`) and holds each
figure against its published value: TTFT within 35 %, every other figure within 25 %.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from .infer import AS_GIVEN, Compilation, InferError
from .infer_cli import design_point, load_model, resolve
from .kerneltimes import KernelTimes

__all__ = ["FIGURES", "ROWS", "Compared", "Row", "compare", "load_rows", "tolerance"]

#: The published rows.
ROWS = Path(__file__).resolve().parent / "published" / "inference.csv"

#: figure -> (column of the rows file, its unit in seconds or 1, key of ``gen infer``'s JSON).
FIGURES = {
    "tokens_per_second": ("tokens_per_second", 1.0, "tokens_per_second"),
    "tpot": ("tpot_ms", 1e-3, "tpot_s"),
    "ttft": ("ttft_ms", 1e-3, "ttft_s"),
    "latency": ("latency_ms", 1e-3, "latency_s"),
    "inferences_per_second": ("inferences_per_second", 1.0, "inferences_per_second"),
}
_TOLERANCE = {"ttft": 0.35}
_INTS = ("tp", "dp", "lnc", "batch", "input", "output")
_COLUMNS = ("key", "source", "csv", "commit", "published_model", "neuron_version", "framework",
            "sequence", "instance", "model", *_INTS, "dtype", "weights",
            *(c for c, _, _ in FIGURES.values()), "skipped")
#: The library whose default buckets a row is compiled with, and its first release with them.
_TNX, _TNX_BUCKETS = "Transformers NeuronX", (2, 18)


def tolerance(figure: str) -> float:
    """The relative tolerance a predicted ``figure`` is held to (the issue's check)."""
    return _TOLERANCE.get(figure, 0.25)


@dataclass(frozen=True)
class Row:
    """One published measurement: configuration, figures (seconds, per second), skip reason."""

    key: str
    source: str
    csv: str
    commit: str
    published_model: str
    instance: str
    model: str
    options: dict
    published: dict
    skipped: str
    compiled: Compilation = AS_GIVEN

    def command(self) -> str:
        """The ``gen infer`` command that predicts the row."""
        o, c = self.options, self.compiled
        args = [self.instance, self.model, f"--tp {o['tp']}", f"--dp {o['dp']}",
                f"--batch {o['batch']}", f"--input {o['input_len']}"]
        if o["output_len"]:
            args.append(f"--output {o['output_len']}")
        args += [f"--dtype {o['dtype']}", f"--lnc {o['lnc']}"]
        for flag, buckets in (("--context-buckets", c.context_buckets),
                              ("--decode-buckets", c.decode_buckets)):
            if buckets:
                args.append(f"{flag} {','.join(map(str, buckets))}")
        return "gen infer " + " ".join(args + ["--format json"])


def load_rows(path: Path = ROWS) -> list[Row]:
    """Every row of the published file (a missing column or a bad number: one-line error)."""
    rows = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = set(_COLUMNS) - set(reader.fieldnames or ())
        if missing:
            raise InferError(f"{path}: expected the columns {', '.join(sorted(missing))}, "
                             f"found {', '.join(reader.fieldnames or ())}")
        for n, r in enumerate(reader, start=2):
            try:
                ints = {k: int(r[k]) for k in (*_INTS, "sequence") if r[k] != ""}
                version = tuple(int(x) for x in r["neuron_version"].split(".")[:2])
                published = {f: float(r[c]) * unit for f, (c, unit, _) in FIGURES.items()
                             if r[c] != ""}
            except ValueError as exc:
                raise InferError(f"{path}:{n}: {r['key']}: expected numbers, found "
                                 f"{exc}") from None
            options = dict(tp=ints.get("tp"), dp=ints.get("dp"), lnc=ints.get("lnc"),
                           batch=ints.get("batch"), input_len=ints.get("input"),
                           output_len=ints.get("output"), dtype=r["dtype"])
            compiled = (Compilation.transformers_neuronx(ints["sequence"])
                        if r["framework"] == _TNX and version >= _TNX_BUCKETS
                        and "sequence" in ints else AS_GIVEN)
            rows.append(Row(r["key"], r["source"], r["csv"], r["commit"],
                            r["published_model"], r["instance"], r["model"], options,
                            published, r["skipped"], compiled))
    keys = [r.key for r in rows]
    if len(set(keys)) != len(keys):
        dup = sorted({k for k in keys if keys.count(k) > 1})
        raise InferError(f"{path}: expected unique keys, found {', '.join(dup)} repeated")
    return rows


@dataclass(frozen=True)
class Compared:
    """One figure of one row: predicted, published, their ratio, whether within tolerance."""

    key: str
    figure: str
    predicted: float
    published: float

    @property
    def ratio(self) -> float:
        return self.predicted / self.published

    @property
    def within(self) -> bool:
        return abs(self.predicted - self.published) <= tolerance(self.figure) * self.published


def compare(rows: list[Row]) -> tuple[list[Compared], dict]:
    """Predict every row that is not skipped; (every figure compared, key -> the JSON row of
    ``gen infer``). Each instance is resolved and each model loaded once, and one
    :class:`KernelTimes` (kernel times from the machine's store) serves each core model."""
    systems: dict = {}
    models: dict = {}
    stores: list[KernelTimes] = []
    engines: dict = {}
    out, points = [], {}
    for row in rows:
        if row.skipped:
            continue
        o = dict(row.options)
        skey = (row.instance, o.pop("lnc"))
        if skey not in systems:
            base, params, lnc, ranks = resolve(*skey)
            same = [kt for kt in stores if kt.params == params]
            if not same:
                stores.append(KernelTimes(params))
            systems[skey] = (base, lnc, ranks, same[0] if same else stores[-1])
        base, lnc, ranks, times = systems[skey]
        t = models.get(row.model) or models.setdefault(row.model, load_model(row.model))
        point = design_point(row.instance, t, base, ranks, times,
                             engines.setdefault((skey, row.model), {}), lnc=lnc,
                             compiled=row.compiled, **o)
        points[row.key] = js = point.row()
        out += [Compared(row.key, f, js[FIGURES[f][2]], v) for f, v in row.published.items()]
    return out, points
