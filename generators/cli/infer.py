"""`gen infer SYSTEM MODEL`: prefill and decode of a model on an instance, lowered to kernels
timed by the core simulator (:mod:`explore.infer`); a grid of comma-separated values
(:func:`explore.infer_cli.grid`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
from rich.table import Table

from specs.console import console


def _show_point(p, fmt: str) -> None:
    from explore.infer import PARTS  # noqa: PLC0415

    r, t = p.result, p.model
    if fmt == "json":
        click.echo(json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v)
                               for k, v in p.row().items()}, indent=2))
        return
    click.echo(f"{p.system}: {t.name}, TP {p.tp} x DP {p.dp} of {p.ranks} logical cores "
               f"(LNC {p.lnc}), batch {p.batch}, {p.input} tokens in"
               + (f", {p.output} out" if t.causal else "") + f", {p.dtype}")
    c = p.compiled
    compiled = [text for on, text in (
        (c.sequence_parallel, "sequence-parallel prefill"),
        (c.context_buckets, f"context buckets {','.join(map(str, c.context_buckets))}"),
        (c.decode_buckets, f"decode buckets {','.join(map(str, c.decode_buckets))}")) if on]
    if compiled:
        click.echo(f"  compiled       {'; '.join(compiled)}")
    price = "unknown price" if math.isnan(p.price_per_hour) else f"{p.price_per_hour:g} USD/h"
    if t.causal:
        click.echo(f"  TTFT           {1e3 * r.ttft:.4g} ms")
        click.echo(f"  TPOT           {1e3 * r.tpot:.4g} ms")
        click.echo(f"  latency        {r.latency:.4g} s")
        click.echo(f"  tokens/s       {r.tokens_per_second:,.1f}")
        click.echo(f"  tokens/USD     {p.per_dollar:,.0f} ({price})")
    else:
        click.echo(f"  latency        {1e3 * r.latency:.4g} ms")
        click.echo(f"  inferences/s   {r.inferences_per_second:,.1f}")
        click.echo(f"  per USD        {p.per_dollar:,.0f} ({price})")
    table = Table(show_edge=False, box=None, title="breakdown (ms)")
    stages = ("prefill", "decode step") if t.causal else ("pass",)
    for col in ("part", *stages):
        table.add_column(col, justify="left" if col == "part" else "right")
    for part in (*PARTS, "total"):
        vals = [sum(r.prefill.values()) if part == "total" else r.prefill[part]]
        if t.causal:
            vals.append(sum(r.decode.values()) if part == "total" else r.decode[part])
        table.add_row(part, *(f"{1e3 * v:.4g}" for v in vals))
    console().print(table)
    mem = ", ".join(f"{k.replace('_', ' ')} {v / 2**30:.2f}" for k, v in r.memory.items())
    click.echo(f"  memory/rank    {mem} GiB; {sum(r.memory.values()) / 2**30:.2f} of "
               f"{r.hbm_per_rank / 2**30:.2f} GiB")
    click.echo(f"  kernels        {p.simulated} simulated now, the rest from the cache")
    titles = {"prefill": "prefill" if t.causal else "pass",
              "decode": "decode step, averaged over the context"}
    for phase, rows in (p.kernels or {}).items():
        _show_kernels(f"kernels of the {titles[phase]} on a rank", rows)


def _show_kernels(title: str, rows) -> None:
    """Each kernel of a pass: its runs, the time of one and of all, its share of the
    kernels' time."""
    total = sum(k.seconds for k in rows)
    table = Table(show_edge=False, box=None, title=title)
    for col in ("part", "what", "kernel", "shape", "dtype", "runs", "us each", "ms", "%"):
        table.add_column(col, justify="left" if col in ("part", "what", "kernel", "shape",
                                                        "dtype") else "right")
    for k in rows:
        table.add_row(k.part, k.what, k.kernel, ",".join(f"{n}={v}" for n, v in k.shape.items()),
                      k.dtype, f"{k.runs:g}", f"{1e6 * k.seconds / k.runs:.4g}",
                      f"{1e3 * k.seconds:.4g}", f"{100 * k.seconds / total:.1f}")
    console().print(table)


def _show_grid(t, table, fmt: str, output: Path | None, shown: int = 15) -> None:
    ok = table[table["refused"] == ""]
    key = "tokens_per_second" if t.causal else "inferences_per_second"
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        tmp = output.with_suffix(output.suffix + ".tmp")
        table.to_parquet(tmp, index=False)
        tmp.replace(output)
    if fmt == "json":
        rows = json.loads(table.to_json(orient="records"))
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{t.name}: {len(table)} design points, {len(ok)} run, "
               f"{len(table) - len(ok)} refused")
    view = Table(show_edge=False, box=None)
    cols = ("TP", "DP", "batch", "in", "out", "dtype", "LNC", "TTFT ms", "TPOT ms",
            "tokens/s" if t.causal else "inf/s", "per USD")
    for col in cols:
        view.add_column(col, justify="left" if col == "dtype" else "right")
    for _, x in ok.sort_values(key, ascending=False).head(shown).iterrows():
        view.add_row(str(x.tp), str(x.dp), str(x.batch), str(x.input), str(x.output), x["dtype"],
                     str(x.lnc), f"{1e3 * x.ttft_s:.4g}", f"{1e3 * x.tpot_s:.4g}",
                     f"{x[key]:,.1f}", f"{x.per_dollar:,.0f}")
    console().print(view)
    if output:
        click.echo(f"  table          {output}")


def infer_command(system, model, tp, dp, batch, input_len, output_len, dtypes, lnc, fmt,
                  output, kernels: bool = False, *, sequence_parallel: bool = False,
                  context_buckets=None, decode_buckets=None) -> None:
    """The body of `gen infer` (options already parsed into lists)."""
    from explore import infer_cli  # noqa: PLC0415
    from explore.infer import Compilation, InferError  # noqa: PLC0415

    compiled = Compilation(sequence_parallel, tuple(context_buckets or ()),
                           tuple(decode_buckets or ()))
    lists = {"tp": tp, "dp": dp, "batch": batch, "input_len": input_len,
             "output_len": output_len, "dtype": dtypes, "lnc": lnc}
    several = [f"--{k.removesuffix('_len')}" for k, v in lists.items()
               if v is not None and len(v) > 1]
    if kernels and (several or output is not None):
        raise InferError("expected one design point with --kernels, found "
                         + (f"lists of {', '.join(several)}" if several else "-o (a table)"))
    if several or output is not None:
        t, table = infer_cli.grid(system, model, **lists, compiled=compiled)
        _show_grid(t, table, fmt, output)
        return
    one = {k: v[0] for k, v in lists.items() if v is not None}
    if "output_len" not in one:
        one["output_len"] = None
    _show_point(infer_cli.from_cli(system, model, **one, kernels=kernels, compiled=compiled),
                fmt)
