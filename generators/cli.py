"""The `gen` command line.

Bad input (a spec or sweep that cannot be accepted) prints one line naming the file, line,
column, key path, what was expected and what was found, and exits with status 2, with no
traceback and no output left behind.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import yaml
from rich.console import Console
from rich.table import Table

from specs.errors import SpecError
from specs.loader import bundled, load_document

from . import __version__

EXIT_BAD_INPUT = 2


class SpecAwareGroup(click.Group):
    """Turns SpecError (and unreadable output paths) into one line on stderr and status 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SpecError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except OSError as exc:
            click.echo(f"error: {exc.filename or ''}: {exc.strerror or exc}", err=True)
            ctx.exit(EXIT_BAD_INPUT)


def _console() -> Console:
    return Console(width=max(100, Console().width), highlight=False)


@click.group(cls=SpecAwareGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trngen")
def main():
    """trngen: Trainium-class accelerator specs -> RTL, golden models, system models."""


@main.command("list")
def list_specs():
    """List the bundled chip and system specs."""
    table = Table(title="Bundled specs")
    for col in ("kind", "name", "title", "level / cores"):
        table.add_column(col)
    for kind, names in bundled().items():
        for name in names:
            spec = load_document(name).spec
            extra = (f"{spec.cores} x NeuronCore-{spec.neuron_core}" if kind == "chip"
                     else f"{spec.level}: {spec.count} x {spec.member}")
            table.add_row(kind, name, spec.title, extra)
    _console().print(table)


@main.command()
@click.argument("spec")
def show(spec):
    """Print SPEC resolved (inheritance applied, units normalised) as YAML."""
    doc = load_document(spec)
    data = {doc.kind: doc.spec.model_dump(mode="json")}
    click.echo(f"# {doc.file.name}, sha256 {doc.digest}")
    click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100), nl=False)


def _flatten(value, prefix="") -> dict[str, object]:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


@main.command()
@click.argument("a")
@click.argument("b")
@click.option("--claims/--no-claims", default=False, help="Also compare the claim lists.")
def diff(a, b, claims):
    """Show what changed between two specs of the same kind (e.g. trn1 trn2)."""
    da, db = load_document(a), load_document(b)
    if da.kind != db.kind:
        raise SpecError(f"expected two specs of the same kind, found a {da.kind} and a "
                        f"{db.kind}")
    skip = () if claims else ("claims", "assumptions")
    fa = _flatten({k: v for k, v in da.spec.model_dump(mode="json").items() if k not in skip})
    fb = _flatten({k: v for k, v in db.spec.model_dump(mode="json").items() if k not in skip})
    table = Table(title=f"{da.name} -> {db.name}")
    for col in ("key", da.name, db.name):
        table.add_column(col, overflow="fold")
    changed = 0
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key, "-"), fb.get(key, "-")
        if va != vb:
            changed += 1
            table.add_row(key, _cell(va), _cell(vb))
    console = _console()
    console.print(table)
    console.print(f"{changed} fields differ.")


def _cell(value) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return "null" if value is None else str(value)


@main.command()
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file instead of stdout.")
def schema(output):
    """Print the JSON Schema of spec files (for editors)."""
    from specs.schema import spec_schema

    text = json.dumps(spec_schema(), indent=2) + "\n"
    if output:
        output.write_text(text)
    else:
        click.echo(text, nl=False)


@main.command()
@click.argument("specs", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["table", "json", "md", "html"]),
              default="table", show_default=True, help="Output format.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file instead of stdout (json, md, html).")
@click.option("--strict", is_flag=True,
              help="Exit with status 1 when a derived figure disagrees with a claim.")
def check(specs, fmt, output, strict):
    """Lay every derived figure of SPECS beside every published claim, at every level."""
    from sim.system.check import check as check_specs
    from sim.system.check import render, to_table
    from sim.system.model import ModelError

    try:
        reports, status = check_specs(list(specs), strict)
    except ModelError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if fmt == "table":
        if output:
            raise click.UsageError("--output needs --format json, md or html")
        to_table(reports, _console())
    else:
        text = render(reports, fmt)
        if output:
            output.write_text(text, encoding="utf-8")
        else:
            click.echo(text, nl=False)
    sys.exit(status)


@main.command()
@click.argument("spec")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path),
              help="Output directory (default: build/<chip>).")
@click.option("--scale", type=click.Choice(["full", "sim"]), default="full", show_default=True,
              help="Emit at the spec's full scale or at its simulation scale (chip.sim).")
@click.option("--area", "synthesise", is_flag=True,
              help="Synthesise the emitted modules not yet in the area cache (Yosys), for the "
                   "datasheet's area tables; without it they come from the cache alone.")
def chip(spec, output, scale, synthesise):
    """Validate a chip SPEC and write its RTL, datasheets and manifest."""
    from .chip import generate_chip

    doc = load_document(spec)
    if doc.kind != "chip":
        raise SpecError(f"expected a chip spec, found the {doc.kind} spec {doc.name!r} "
                        "(use `gen check` for systems)", location=None)
    out = output or Path("build") / doc.name
    result = generate_chip(doc, out, scale, synthesise=synthesise)
    state = "written" if result.changed else "unchanged"
    click.echo(f"{doc.name}: {len(result.files)} files {state} in {out}")
    for unit, reason in result.skipped.items():
        click.echo(f"  {unit}: not emitted ({reason})")


@main.command()
@click.argument("spec")
@click.option("--unit", "unit_name", required=True, help="Unit to simulate.")
@click.option("--sim", "simulator", type=click.Choice(["icarus", "verilator"]),
              default="icarus", show_default=True)
@click.option("--seed", type=int, default=None, help="Seed of the random tests.")
@click.option("--format", "formats", multiple=True, metavar="FMT",
              help="Tensor engine only: simulate the arrays of these input formats "
                   "(repeatable; default: every format of the spec).")
@click.option("--waves", is_flag=True,
              help="Record an FST waveform of each run, scoped to the unit, and print its path.")
def sim(spec, unit_name, simulator, seed, formats, waves):
    """Run a unit's cocotb testbench on SPEC at simulation scale."""
    import contextlib
    import random

    from sim.tb.runner import SimulatorMissing, recording_waves

    from .units import UNITS

    doc = load_document(spec)
    if doc.kind != "chip":
        raise SpecError(f"expected a chip spec, found the {doc.kind} spec {doc.name!r}")
    simulatable = sorted(n for n, u in UNITS.items() if u.simulate is not None)
    if unit_name not in simulatable:
        raise SpecError(f"expected a unit, found {unit_name!r}", choices=simulatable)
    unit = UNITS[unit_name]
    reason = unit.unsupported(doc.spec)
    if reason:
        raise SpecError(f"{doc.name} has no {unit_name} unit ({reason})")
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    variants = list(unit.params(doc.spec, "sim"))
    if formats:
        known = sorted(str(getattr(p, "fmt", "")) for p in variants)
        spec_formats = doc.spec.core.tensor.formats
        for f in formats:
            if f not in spec_formats and f not in known:
                raise SpecError(f"expected a format of {doc.name}'s tensor engine, found "
                                f"{f!r}", choices=spec_formats)
        from .units import rtl_format_name

        wanted = {rtl_format_name(doc.spec, f) if f in spec_formats else f for f in formats}
        variants = [p for p in variants if getattr(p, "fmt", None) in wanted]
        if not variants:
            raise SpecError(f"expected a format with RTL, found only {', '.join(formats)}")
    click.echo(f"{doc.name}: {unit_name} on {simulator}, seed {seed}")
    ok, runs = True, 0
    try:
        with recording_waves() if waves else contextlib.nullcontext():
            for params in variants:
                results = unit.simulate(params, simulator, seed=seed)
                for r in results if isinstance(results, list) else [results]:
                    ok &= r.ok
                    runs += 1
                    state = "PASS" if r.ok else "FAIL"
                    click.echo(f"  {state} {_label(params)}: {r.tests} tests, {r.failures} "
                               f"failed ({r.results_xml})")
                    if r.waves is not None:
                        click.echo(f"    waves: {r.waves}")
    except SimulatorMissing as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if not runs:
        click.echo("error: nothing was simulated", err=True)
    sys.exit(0 if ok and runs else 1)


def _label(params) -> str:
    """A parameter object in one short line: scalar fields as they are, collections by size."""
    import dataclasses

    if not dataclasses.is_dataclass(params):
        return repr(params)
    parts = []
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        if isinstance(value, (tuple, list, dict, set)):
            parts.append(f"{f.name}=<{len(value)}>")
        else:
            parts.append(f"{f.name}={value!r}")
    return f"{type(params).__name__}({', '.join(parts)})"


@main.command()
@click.argument("sweep", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path),
              help="Output directory (default: build/explore/<sweep>).")
@click.option("--scheduler", metavar="ADDR", default=None,
              help="Address of a running Dask scheduler, e.g. tcp://host:8786.")
def explore(sweep, output, scheduler):
    """Run an exploration SWEEP: Parquet table, summary and plots."""
    from explore.run import explore as run_sweep

    out = output or Path("build") / "explore" / sweep.stem
    summary = run_sweep(sweep, out, scheduler=scheduler)
    click.echo(f"{sweep.name}: results in {out}")
    if isinstance(summary, dict):
        for key in ("points", "rows", "computed", "reused", "elapsed_s"):
            if key in summary:
                click.echo(f"  {key}: {summary[key]}")


if __name__ == "__main__":
    main()
