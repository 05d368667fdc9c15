"""`gen serve SYSTEM MODEL`: continuous batching of requests on one replica, every step timed
by `gen infer`'s engine (:mod:`explore.serve`): TTFT, inter-token latency and throughput at
each offered load, and the latency-throughput curve."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
from rich.table import Table

from specs.console import console


def serve_command(system, model, *, tp, rates, concurrency, requests, input_dist, output_dist,
                  max_batch, max_prefill_tokens, bucket, seed, dtype, lnc, fmt,
                  plot: Path | None, sequence_parallel: bool = False, context_buckets=None,
                  decode_buckets=None) -> None:
    """The body of `gen serve` (options already parsed)."""
    from explore import serve  # noqa: PLC0415
    from explore.infer import Compilation  # noqa: PLC0415

    compiled = Compilation(sequence_parallel, tuple(context_buckets or ()),
                           tuple(decode_buckets or ()))
    t, engine, results = serve.from_cli(
        system, model, tp=tp, rates=rates, concurrency=concurrency, requests=requests,
        input_dist=input_dist, output_dist=output_dist, max_batch=max_batch,
        max_prefill_tokens=max_prefill_tokens, bucket=bucket, seed=seed, dtype=dtype, lnc=lnc,
        compiled=compiled)
    written = []
    if plot is not None:
        from explore.plots import serving_curve  # noqa: PLC0415

        written = serving_curve(results, plot.parent, plot.stem,
                                f"{t.name} on {system}, TP {tp}: latency against throughput")
    if fmt == "json":
        click.echo(json.dumps({"system": system, "model": t.name, "tp": tp,
                               "lnc": engine.lnc, "dtype": dtype, "requests": requests,
                               "input": input_dist, "output": output_dist,
                               "max_batch": max_batch, "seed": seed,
                               "runs": [r.row() for r in results],
                               "plots": [str(p) for p in written]}, indent=2))
        return
    click.echo(f"{system}: {t.name}, TP {tp} (LNC {engine.lnc}), {dtype}; {requests} requests, "
               f"input {input_dist}, output {output_dist}, max batch {max_batch}, seed {seed}")
    view = Table(show_edge=False, box=None)
    load = "rate req/s" if results[0].mode == "rate" else "clients"
    for col in (load, "TTFT P50 ms", "TTFT P99 ms", "ITL P50 ms", "ITL P99 ms", "tokens/s",
                "req/s", "mean batch"):
        view.add_column(col, justify="right")

    def ms(v):
        return "-" if math.isnan(v) else f"{1e3 * v:.4g}"

    for r in results:
        view.add_row(f"{r.load:g}", ms(r.ttft_p50), ms(r.ttft_p99), ms(r.itl_p50),
                     ms(r.itl_p99), f"{r.tokens_per_second:,.1f}",
                     f"{r.requests_per_second:,.2f}",
                     "-" if math.isnan(r.mean_batch) else f"{r.mean_batch:.1f}")
    console().print(view)
    if written:
        click.echo(f"  plot           {', '.join(str(p) for p in written)}")
