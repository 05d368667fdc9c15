"""`gen run SYSTEM`: collectives and tensor-parallel kernels executed on a system's chips and
links (:mod:`sim.system.execute`, :mod:`explore.sharded`)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import click
from rich.table import Table

from specs import units
from specs.console import console
from specs.errors import ModelError, SpecError

#: Busiest links listed by name under the per-dimension summary.
BUSIEST = 4


def _bytes(option: str, text: str) -> int:
    try:
        q = units.parse(text, "bytes")
    except units.UnitParseError as exc:
        raise SpecError(f"{option}: {exc}") from None
    value = float(q.to("B").magnitude)
    if value != int(value) or value <= 0:
        raise SpecError(f"{option}: expected a positive whole number of bytes, found {text!r}")
    return int(value)


def _show(value: float, unit: str) -> str:
    """``value`` with an SI prefix, binary for bytes (as sizes are given)."""
    prefixes = (((2**40, "Ti"), (2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki")) if unit == "B"
                else ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")))
    for scale, prefix in prefixes:
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms" if seconds >= 1e-4 else f"{seconds * 1e6:.4g} us"


def _links(result) -> Table:
    """Per-link utilisation, summarised per link dimension, then the busiest links."""
    table = Table(show_edge=False, box=None, title="link utilisation", title_justify="left")
    for col in ("links", "count", "bytes each (max)", "min %", "mean %", "max %"):
        table.add_column(col, overflow="fold", justify="left" if col == "links" else "right")
    util = result.utilisation()
    groups: dict[str, list[str]] = defaultdict(list)
    for name, dim in result.link_dims.items():
        label = (f"torus dim {dim}" if isinstance(dim, int) else str(dim))
        groups[label].append(name)
    for label, names in sorted(groups.items()):
        us = [100 * util[n] for n in names]
        table.add_row(label, str(len(names)),
                      _show(max(result.link_bytes[n] for n in names), "B"),
                      f"{min(us):.1f}", f"{sum(us) / len(us):.1f}", f"{max(us):.1f}")
    for name in sorted(util, key=lambda n: (-util[n], n))[:BUSIEST]:
        table.add_row(f"  {name}", "1", _show(result.link_bytes[name], "B"), "", "",
                      f"{100 * util[name]:.1f}")
    return table


def run_system(doc, kernel, *, collective, size, algorithm, chunk, members, shard, shape,
               dtype, trace: Path | None, seed: int, timing_only: bool,
               bit_error_rate: float | None = None) -> None:
    """Execute a collective, or a kernel sharded tensor-parallel, on the system of ``doc``."""
    from sim.system import execute, model
    from sim.system.collectives import CHUNK

    if (collective is None) == (kernel is None):
        raise SpecError(f"expected --collective OP or a KERNEL with --shard tp=N on the "
                        f"system {doc.name!r}, found "
                        f"{'both' if collective else 'neither'}")
    try:
        system = model.build(doc.file)
        if not isinstance(system, model.System):
            raise SpecError(f"expected a system spec, found {doc.name!r}")
        if system.chips < 2:
            raise SpecError(f"expected a system of several chips, found {doc.name!r} with one")
        chunk_bytes = CHUNK if chunk is None else _bytes("--chunk", chunk)
        if kernel is not None:
            _sharded(system, kernel, shard, shape, dtype, chunk_bytes, trace, seed,
                     timing_only)
            return
        if collective not in execute.OPS:
            raise SpecError(f"--collective: expected one of {', '.join(execute.OPS)}, found "
                            f"{collective!r}", choices=execute.OPS)
        nbytes = _bytes("--size", size)
        dt = dtype or "fp32"
        r = execute.run(system, collective, nbytes, algorithm=algorithm, chunk=chunk_bytes,
                        dtype=dt, members=members, trace=bool(trace), seed=seed,
                        bit_error_rate=bit_error_rate)
    except ModelError as exc:
        raise SpecError(str(exc)) from None
    click.echo(f"{system.name}: {collective} of {_show(nbytes, 'B')} per chip over "
               f"{r.chips} chips ({r.algorithm}, {dt}, chunks of {_show(chunk_bytes, 'B')}, "
               f"timing only)")
    _report(system, r, collective, nbytes, members, trace)


def _report(system, r, op, nbytes, members, trace) -> None:
    from sim.system import execute

    want = execute.analytic(system, op, nbytes, r.algorithm, members, r.chunk)
    note = ""
    if want:
        note = f"   (alpha-beta formula {_time(want)}, {100 * (r.time / want - 1):+.2f} %)"
    click.echo(f"  time     {_time(r.time)}{note}")
    click.echo(f"  algbw    {_show(r.algbw, 'B/s')}")
    click.echo(f"  busbw    {_show(r.busbw, 'B/s')}   (algbw x "
               f"{execute.bus_factor(op, r.chips):.4g}, as nccl-tests counts it)")
    if r.bit_error_rate:
        click.echo(f"  replays  {r.replays:,} packets replayed after bit errors "
                   f"(bit error rate {r.bit_error_rate:g})")
    console().print(_links(r))
    if trace:
        trace.write_text(r.trace_json())
        click.echo(f"  trace    {trace}")


def _sharded(system, kernel_name, shard, shape, dtype, chunk_bytes, trace, seed,
             timing_only) -> None:
    """The kernel with its contraction split over every chip, then the all-reduce of the
    partial outputs (:func:`explore.sharded.run_sharded`)."""
    import numpy as np

    import kernels
    from explore.sharded import run_sharded
    from hdl.numerics.formats import BF16
    from sim.core import ProgramError
    from sim.golden import numerics

    k = kernels.KERNELS.get(kernel_name)
    if k is None:
        raise SpecError(f"expected a kernel, found {kernel_name!r}",
                        choices=sorted(kernels.KERNELS))
    if shard is None or not shard.startswith("tp="):
        raise SpecError(f"--shard: expected tp=N to run {k.name} on a system, found "
                        f"{shard!r}")
    try:
        tp = int(shard[3:])
    except ValueError:
        raise SpecError(f"--shard: expected tp=N with N a whole number, found {shard!r}") \
            from None
    if tp != system.chips:
        raise SpecError(f"--shard: expected tp={system.chips} (every chip of "
                        f"{system.name}), found {shard!r}")
    if "K" not in k.dims:
        raise SpecError(f"--shard: expected a kernel with a contraction K to split, found "
                        f"{k.name} ({', '.join(k.dims)})",
                        choices=sorted(n for n, x in kernels.KERNELS.items() if "K" in x.dims))
    try:
        dims = kernels.parse_shape(shape, k) if shape is not None else dict(k.example)
        if dims["K"] % tp:
            raise kernels.KernelError(f"--shape: K={dims['K']} must be a multiple of tp={tp}")
        dtype = dtype or k.dtypes[0]
        if dtype not in k.dtypes:
            raise kernels.KernelError(f"{k.name} takes dtype {', '.join(k.dtypes)}, "
                                      f"not {dtype!r}")
        r = run_sharded(system, k, dims, dtype, timing_only=timing_only, chunk=chunk_bytes,
                        seed=seed, trace=bool(trace))
    except (kernels.KernelError, ProgramError) as exc:
        raise SpecError(str(exc)) from None
    cores = system.chip.spec.cores
    shape_text = " ".join(f"{d}={v}" for d, v in dims.items())
    mode = "timing only" if timing_only else f"numeric, seed {seed}"
    click.echo(f"{system.name}: {k.name} {shape_text} {dtype}, tensor-parallel over "
               f"{tp} chips (K split), then all-reduce of the {r.out_dtype} output ({mode})")
    split = k.per_core(dims, cores)[k.split]
    click.echo(f"  each chip: {k.name} with K={dims['K'] // tp} on its {cores} cores, "
               f"{k.split}={split} each: {_time(r.kernel_time)}")
    click.echo(f"  all-reduce of {_show(r.collective.nbytes, 'B')}: {_time(r.collective.time)}")
    click.echo(f"  step     {_time(r.time)}   (the all-reduce "
               f"{100 * r.collective.time / r.time:.1f} %)")
    if not timing_only:
        want = k.reference({n: v.astype(np.float64) for n, v in r.inputs.items()})
        want = next(iter(want.values()))
        got = np.asarray(r.result, dtype=np.uint32)
        values = (numerics.widen(got, BF16) if r.out_dtype == "bf16" else got).view(
            np.float32).astype(np.float64).reshape(want.shape)
        err = float(np.abs(values - want).max() / max(np.abs(want).max(), 1e-30))
        click.echo(f"  out: max error {err:.3g} of max |numpy float64| (every chip's partial "
                   f"and the all-reduce rounded to {r.out_dtype})")
    _report(system, r.collective, "all_reduce", r.collective.nbytes, None, trace)
