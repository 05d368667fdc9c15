"""The `gen` command line.

Bad input (a spec or sweep that cannot be accepted) prints one line naming the file, line,
column, key path, what was expected and what was found, and exits with status 2, with no
traceback and no output left behind.
"""

from __future__ import annotations

import atexit
import gc
import json
import re
import sys
from pathlib import Path

import click
import yaml
from rich.table import Table

from specs.console import console
from specs.errors import InputError, SpecError
from specs.loader import bundled, load_document

from .. import __version__

EXIT_BAD_INPUT = 2


class SpecAwareGroup(click.Group):
    """Turns bad input (the InputError family: SpecError, ModelError) and unreadable or
    unwritable paths into one line on stderr and status 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except InputError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except OSError as exc:
            click.echo(f"error: {exc.filename or ''}: {exc.strerror or exc}", err=True)
            ctx.exit(EXIT_BAD_INPUT)


@click.group(cls=SpecAwareGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trngen")
def main():
    """trngen: Trainium-class accelerator specs -> RTL, golden models, system models."""
    # At the exit of the process, the interpreter's teardown frees the objects alive then
    # without the collector's last passes over all of them (every object of the imports:
    # Amaranth, pint, numpy, the spec model), which saves their CPU time at the end of each
    # command (benchmarks/chip.md). Registered once however often the command runs in a process.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


@main.command("list")
def list_specs():
    """List the bundled chip and system specs."""
    table = Table(title="Bundled specs")
    for col in ("kind", "name", "title", "level / cores"):
        table.add_column(col, overflow="fold")
    for kind, names in bundled().items():
        for name in names:
            spec = load_document(name).spec
            extra = (f"{spec.cores} x NeuronCore-{spec.neuron_core}" if kind == "chip"
                     else f"{spec.level}: {spec.count} x {spec.member}")
            table.add_row(kind, name, spec.title, extra)
    console().print(table)


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
    out = console()
    out.print(table)
    out.print(f"{changed} fields differ.")


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

    from .checkreport import render, to_table

    reports, status = check_specs(list(specs), strict)
    if fmt == "table":
        if output:
            raise click.UsageError("--output needs --format json, md or html")
        to_table(reports)
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
    from ..chip import generate_chip

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
@click.option("--unit", "unit_names", required=True, multiple=True,
              help="Unit to simulate (repeat for several; 'all': every unit).")
@click.option("--sim", "simulator", type=click.Choice(["icarus", "verilator"]),
              default="icarus", show_default=True)
@click.option("--seed", type=int, default=None, help="Seed of the random tests.")
@click.option("--kernel", default=None, metavar="NAME",
              help="With --unit core: co-simulate only this program (a program of the core's "
                   "testbench, a kernel of `gen kernels`, or 'random').")
@click.option("--waves", is_flag=True,
              help="Record an FST waveform of each run, scoped to the unit, and print its path.")
@click.option("--coverage", "coverage", type=click.Path(file_okay=False, path_type=Path),
              default=None, metavar="DIR",
              help="With --sim verilator: count line and toggle coverage (or the kinds "
                   "--coverage-of names) over every run, merged, and write a report per "
                   "module into DIR (index.html).")
@click.option("--coverage-of", "coverage_kinds", type=click.Choice(["line", "toggle"]),
              multiple=True, metavar="KIND",
              help="With --coverage: count only this kind (line or toggle; repeatable). "
                   "Default: both. Toggles are the costly kind to build: count the core's "
                   "lines alone.")
def sim(spec, unit_names, simulator, seed, kernel, waves, coverage, coverage_kinds):
    """Run a unit's cocotb testbench on SPEC at simulation scale.

    With --unit core, the NeuronCore co-simulation: each program runs on the RTL and on the
    core simulator, and every byte of SBUF, PSUM and memory must match."""
    import contextlib
    import random

    from sim.tb.runner import COVERAGE_KINDS, SimulatorMissing, collecting_coverage, recording_waves

    from ..units import UNITS
    from .benches import BENCHES

    doc = load_document(spec)
    if doc.kind != "chip":
        raise SpecError(f"expected a chip spec, found the {doc.kind} spec {doc.name!r}")
    simulatable = sorted(BENCHES)
    names = list(dict.fromkeys(
        n for u in unit_names for n in (simulatable if u == "all" else [u])))
    for unit_name in names:
        if unit_name not in simulatable:
            raise SpecError(f"expected a unit, found {unit_name!r}",
                            choices=[*simulatable, "all"])
    if "all" in unit_names:
        names = [n for n in names if not UNITS[n].unsupported(doc.spec)]
    for unit_name in names:
        reason = UNITS[unit_name].unsupported(doc.spec)
        if reason:
            raise SpecError(f"{doc.name} has no {unit_name} unit ({reason})")
    if kernel is not None and names != ["core"]:
        raise SpecError(f"--kernel is an option of --unit core, not of "
                        f"--unit {', '.join(names)}")
    if coverage is not None and simulator != "verilator":
        raise SpecError(f"--coverage is counted by Verilator: expected --sim verilator, found "
                        f"--sim {simulator}")
    if coverage_kinds and coverage is None:
        raise SpecError(f"--coverage-of {coverage_kinds[0]} is an option of --coverage DIR: "
                        f"expected --coverage, found none")
    options = {} if kernel is None else {"kernel": kernel}
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    for unit_name in names:
        bench = BENCHES[unit_name]
        for params in UNITS[unit_name].params(doc.spec, "sim") if bench.check else ():
            bench.check(params, simulator, seed, **options)
    click.echo(f"{doc.name}: {', '.join(names)} on {simulator}, seed {seed}")
    ok, runs, counted = True, 0, []
    try:
        with contextlib.ExitStack() as stack:
            if waves:
                stack.enter_context(recording_waves())
            if coverage is not None:
                stack.enter_context(collecting_coverage(coverage_kinds or COVERAGE_KINDS))
            for unit_name in names:
                bench = BENCHES[unit_name]
                for params in UNITS[unit_name].params(doc.spec, "sim"):
                    results = bench.simulate(params, simulator, seed=seed, **options,
                                             **({"spec": spec} if bench.shipped else {}))
                    for r in results if isinstance(results, list) else [results]:
                        ok &= r.ok
                        runs += 1
                        state = "PASS" if r.ok else "FAIL"
                        click.echo(f"  {state} {r.name or _label(params)}: {r.tests} tests, "
                                   f"{r.failures} failed ({r.results_xml})")
                        for message in r.messages:
                            click.echo(f"    {message}")
                        if r.waves is not None:
                            click.echo(f"    waves: {r.waves}")
                        if r.coverage is not None:
                            counted.append(r.coverage)
    except SimulatorMissing as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except RuntimeError as exc:       # the simulator failed, not a test: its log's tail
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if not runs:
        click.echo("error: nothing was simulated", err=True)
    if coverage is not None and counted:
        _coverage_report(counted, coverage)
    sys.exit(0 if ok and runs else 1)


def _coverage_report(counted: list[Path], out: Path) -> None:
    """Merge the runs' coverage counts, write the report into ``out`` and print each
    module's figures."""
    from sim.tb.coverage import ModuleCoverage, merge, write_report

    summary = write_report(merge(counted), out)
    total = [[sum(getattr(c, kind)[i] for c in summary.values()) for i in (0, 1)]
             for kind in ("lines", "toggles")]

    def share(pair) -> str:
        value = ModuleCoverage.percent(pair)
        return "-" if value is None else f"{value:5.1f} % of {pair[1]:,}"

    click.echo(f"coverage of {len(counted)} runs: {out / 'index.html'}")
    click.echo(f"  {'all modules':40} lines {share(total[0])}, toggles {share(total[1])}")
    for module, cov in summary.items():
        click.echo(f"  {module:40} lines {share(cov.lines)}, toggles {share(cov.toggles)}")


@main.command("kernels")
def kernels_list():
    """List the core kernels `gen run` runs, with their shape keys and formats."""
    from kernels import KERNELS

    table = Table(title="Core kernels")
    for col in ("kernel", "shape", "formats", "what it computes"):
        table.add_column(col, overflow="fold")
    for k in KERNELS.values():
        table.add_row(k.name, ",".join(f"{d}={v}" for d, v in k.example.items()),
                      " ".join(k.dtypes), k.summary)
    console().print(table)


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


@main.command("run")
@click.argument("spec")
@click.argument("kernel", required=False)
@click.option("--shape", default=None, metavar="K=V,...",
              help="Shape keys of the kernel, e.g. M=4096,K=8192,N=8192 (default: the "
                   "kernel's example in `gen kernels`).")
@click.option("--dtype", default=None, help="Input format (default: the kernel's first).")
@click.option("--lnc", type=int, default=1, show_default=True,
              help="Physical cores of the logical core; the kernel's split key (its first, "
                   "a GEMM on rows its N) is divided among them.")
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a Chrome/Perfetto trace-event JSON file.")
@click.option("--timing-only", is_flag=True, help="Skip the data (large shapes).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the inputs.")
@click.option("--collective", default=None, metavar="OP",
              help="On a system: execute a collective (all_reduce, all_gather, "
                   "reduce_scatter, all_to_all, send_recv) over every chip.")
@click.option("--size", default="1 GiB", show_default=True,
              help="Collective buffer per chip, as nccl-tests counts it.")
@click.option("--algorithm", default=None,
              help="ring, torus, hierarchical or direct (default: the topology's own).")
@click.option("--chunk", default=None,
              help="Largest piece a link carries at once (default: the executed model's "
                   "chunk, printed with the result).")
@click.option("--members", type=int, default=None,
              help="Members of a cluster executed over EFA (default 2).")
@click.option("--bit-error-rate", type=float, default=None,
              help="Bit error rate of every NeuronLink; failed packets are replayed "
                   "(default: the chip spec's neuronlink.bit_error_rate).")
@click.option("--shard", default=None, metavar="tp=N",
              help="On a system: run KERNEL tensor-parallel over N chips (the contraction "
                   "K split), then all-reduce its output.")
def run_kernel(spec, kernel, shape, dtype, lnc, trace, timing_only, seed, collective, size,
               algorithm, chunk, members, bit_error_rate, shard):
    """Run KERNEL on one (logical) NeuronCore of chip SPEC: time, utilisation, per-engine
    busy and bytes moved; numeric runs also compare the result with numpy in float64.

    On a system SPEC: execute a collective (--collective) or a sharded kernel (--shard) on
    its chips and links: time, algbw, busbw and per-link utilisation."""
    import numpy as np

    import kernels
    from hdl.params import ModelError, core_params
    from sim.core import ProgramError
    from sim.system import formulas

    doc = load_document(spec)
    if doc.kind != "chip":
        from .multichip import run_system

        run_system(doc, kernel, collective=collective, size=size, algorithm=algorithm,
                   chunk=chunk, members=members, shard=shard, shape=shape, dtype=dtype,
                   trace=trace, seed=seed, timing_only=timing_only,
                   bit_error_rate=bit_error_rate)
        return
    if kernel is None:
        raise SpecError(f"expected a kernel to run on the chip {doc.name!r}, found none",
                        choices=sorted(kernels.KERNELS))
    for name, value in (("--collective", collective), ("--shard", shard),
                        ("--members", members), ("--algorithm", algorithm),
                        ("--bit-error-rate", bit_error_rate)):
        if value is not None:
            raise SpecError(f"{name} runs on a system spec, not on the chip {doc.name!r}")
    k = kernels.KERNELS.get(kernel)
    if k is None:
        raise SpecError(f"expected a kernel, found {kernel!r}", choices=sorted(kernels.KERNELS))
    chip = doc.spec
    try:
        if lnc not in chip.lnc.options:
            raise kernels.KernelError(f"--lnc must be one of {chip.lnc.options} on "
                                      f"{chip.name}, not {lnc}")
        dims = kernels.parse_shape(shape, k) if shape is not None else dict(k.example)
        dtype = dtype or k.dtypes[0]
        share = k.per_core(dims, lnc)
        params = core_params(chip)
        r = kernels.run(params, k, share, dtype, timing_only=timing_only, trace=bool(trace),
                        seed=seed)
    except (kernels.KernelError, ProgramError, ModelError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    res = r.result
    fmt_rate = chip.core.tensor.rates.get(dtype, 1.0) if dtype in chip.core.tensor.formats \
        else 1.0
    peak = formulas.peak_flops(params.rows, params.cols, params.clock("tensor"), fmt_rate)
    shape_text = " ".join(f"{d}={v}" for d, v in dims.items())
    mode = "timing only" if timing_only else f"numeric, seed {seed}"
    click.echo(f"{chip.name}: {k.name} {shape_text} {dtype} on a logical core of {lnc} x "
               f"NeuronCore-{chip.neuron_core} ({mode})")
    if lnc > 1:
        click.echo(f"  each physical core runs {k.split}={share[k.split]}")
    flops = res.flops * lnc
    click.echo(f"  time          {res.time * 1e3:.4g} ms")
    if res.instructions.get("tensor"):
        click.echo(f"  work          {_si(flops, 'FLOP')}, {_si(flops / res.time, 'FLOPS')}, "
                   f"{100 * res.flops / res.time / peak:.1f} % of the tensor engine's "
                   f"{_si(peak, 'FLOPS')} ({dtype})")
    else:
        click.echo(f"  work          {_si(flops, 'FLOP')}, {_si(flops / res.time, 'FLOPS')} "
                   f"on the vector, scalar and GpSimd engines")
    click.echo(f"  DMA           {_si(res.dma_bytes * lnc, 'B')} moved, "
               f"{_si(res.dma_bytes / res.time, 'B/s')} per core")
    click.echo(f"  instructions  {r.instructions:,} per core")
    table = Table(show_edge=False, box=None)
    for col in ("engine", "instructions", "busy", "busy %", "cycles"):
        table.add_column(col, overflow="fold", justify="left" if col == "engine" else "right")
    for eng, busy in res.busy.items():
        cycles = f"{res.cycles[eng]:,.0f}" if res.cycles[eng] else "-"
        table.add_row(eng, f"{res.instructions[eng]:,}", f"{busy * 1e6:.1f} us",
                      f"{100 * res.busy_fraction(eng):.1f}", cycles)
    console().print(table)
    if not timing_only:
        ref = r.reference()
        for name, want in ref.items():
            err = float(np.abs(r.outputs[name] - want).max() / max(np.abs(want).max(), 1e-30))
            tol = kernels.tolerance(k, dtype)
            verdict = "ok" if err <= tol else "OUT OF TOLERANCE"
            click.echo(f"  {name}: max error {err:.3g} of max |numpy float64| "
                       f"(tolerance {tol:g}) {verdict}")
    if trace:
        trace.write_text(res.trace_json())
        click.echo(f"  trace         {trace}")


def _separated(convert, what: str):
    """A click callback: ``"8,16"`` -> [convert("8"), convert("16")] (a grid), ``None`` as
    is; anything else is refused, naming ``what`` was expected."""
    def callback(ctx, param, value):
        if value is None:
            return None
        try:
            items = [convert(x.strip()) for x in value.split(",") if x.strip()]
        except ValueError:
            items = []
        if not items:
            raise click.BadParameter(f"expected {what} separated by commas, found {value!r}")
        return items
    return callback


_ints = _separated(int, "integers")
_floats = _separated(float, "numbers")
_words = _separated(str, "names")


def _modes(ctx, param, value):
    if value is None:
        return None
    items = [x.strip() for x in value.split(",") if x.strip()]
    bad = [x for x in items if x not in ("none", "selective", "full")]
    if bad or not items:
        raise click.BadParameter(f"expected none, selective or full (comma-separated), "
                                 f"found {value!r}")
    return items


@main.command("step")
@click.argument("system")
@click.argument("workload")
@click.option("--tp", callback=_ints, help="Tensor-parallel degree (default: the workload's).")
@click.option("--pp", callback=_ints, help="Pipeline stages (default: the workload's).")
@click.option("--dp", callback=_ints, help="Data-parallel degree (default: every rank left; "
              "with --nodes unset it sets the node count).")
@click.option("--nodes", callback=_ints, help="Nodes (instances) over EFA (default: the "
              "cluster spec's count, 1 for an instance).")
@click.option("--micro-batch", callback=_ints, help="Sequences per micro-batch.")
@click.option("--recompute", callback=_modes, help="Activation recomputation: none, "
              "selective or full (default: the workload's).")
@click.option("--seq", type=int, default=None, help="Sequence length in tokens (default: the "
              "workload's).")
@click.option("--batch", type=int, default=None, help="Global batch, sequences per step "
              "(default: the workload's).")
@click.option("--no-sequence-parallel", is_flag=True, help="Norms and residuals on every "
              "tensor-parallel rank in full.")
@click.option("--no-zero1", is_flag=True, help="Optimizer state on every data-parallel rank.")
@click.option("--gemm-only", is_flag=True, help="Drop every kernel but the GEMMs (the "
              "GEMM-only estimate, for comparison).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a stacked bar of the breakdown (PNG and SVG beside it).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With comma-separated values (a grid): write every point as Parquet.")
def step_cmd(system, workload, tp, pp, dp, nodes, micro_batch, recompute, seq, batch,
             no_sequence_parallel, no_zero1, gemm_only, plot, output):
    """Time one training step of WORKLOAD on SYSTEM (an instance or a cluster spec): step
    time, sequences and tokens per second, MFU, the breakdown and the memory per rank.
    Options given as comma-separated lists sweep every combination and print the best."""
    from explore import step as steps
    from explore import step_cli

    lists = {"tp": tp, "pp": pp, "dp": dp, "nodes": nodes, "micro_batch": micro_batch,
             "recompute": recompute}
    options = dict(sequence_parallel=not no_sequence_parallel, zero1=not no_zero1,
                   gemm_only=gemm_only, seq=seq, batch=batch)
    try:
        if any(v is not None and len(v) > 1 for v in lists.values()):
            if dp is not None:
                raise steps.StepError("expected --nodes (not --dp) in a grid, found --dp")
            _step_grid(steps, system, workload, lists, options, plot, output)
            return
        one = {k: (v[0] if v is not None else None) for k, v in lists.items()}
        if one["recompute"] is None:
            one.pop("recompute")
        run = step_cli.from_cli(system, workload, **one, **options)
    except steps.StepError as exc:
        raise SpecError(str(exc)) from None
    r, lay = run.result, run.result.layout
    click.echo(f"{run.system}: {run.workload.name} on {r.nodes} node(s), {r.ranks} ranks "
               f"(TP {lay.tp} x PP {lay.pp} x DP {lay.dp}), micro-batch {lay.micro_batch} x "
               f"{r.micro_batches:g}, recompute {lay.recompute}, sequence parallel "
               f"{'on' if lay.sequence_parallel else 'off'}, ZeRO-1 "
               f"{'on' if lay.zero1 else 'off'}" + (", GEMMs only" if gemm_only else ""))
    click.echo(f"  step time      {r.step_time:.4g} s")
    click.echo(f"  sequences/s    {r.sequences_per_second:.4g}")
    click.echo(f"  tokens/s       {r.tokens_per_second:,.0f}")
    click.echo(f"  MFU            {100 * r.mfu:.1f} %")
    table = Table(show_edge=False, box=None, title="breakdown")
    for col in ("part", "seconds", "share"):
        table.add_column(col, overflow="fold", justify="left" if col == "part" else "right")
    for part in steps.PARTS:
        table.add_row(part, f"{r.parts[part]:.4g}", f"{100 * r.parts[part] / r.step_time:.1f} %")
    table.add_row("step", f"{r.step_time:.4g}", "100.0 %")
    console().print(table)
    mem = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in r.memory.items())
    click.echo(f"  memory/rank    {mem} GiB; {sum(r.memory.values()) / 2**30:.2f} of "
               f"{r.hbm_per_rank / 2**30:.2f} GiB: {'fits' if r.fits else 'DOES NOT FIT'}")
    click.echo(f"  kernels        {r.kernel_calls} calls, {run.simulated} simulated now, "
               f"the rest from the cache")
    if plot:
        from explore.plots import step_breakdown

        written = step_breakdown([(run.workload.name, r.parts)], plot.parent, plot.stem)
        click.echo(f"  plot           {', '.join(str(p) for p in written)}")


def _step_grid(steps, system, workload, lists, options, plot, output, shown=15):
    from explore import step_cli

    lists = {k: v for k, v in lists.items() if k != "dp"}
    t, table = step_cli.grid(system, workload, **lists, **options)
    ok = table[table["valid"] & table["fits"]].sort_values("sequences_per_second",
                                                           ascending=False)
    click.echo(f"{system}: {t.name}, {len(table)} design points, {int(table['valid'].sum())} "
               f"valid, {len(ok)} fit in HBM" + (", GEMMs only" if options["gemm_only"]
                                                 else ""))
    view = Table(show_edge=False, box=None)
    for col in ("nodes", "TP", "PP", "DP", "mb", "recompute", "step s", "seq/s", "MFU %",
                *steps.PARTS):
        view.add_column(col, overflow="fold",
                        justify="left" if col == "recompute" else "right")
    rows = []
    for _, x in ok.head(shown).iterrows():
        view.add_row(str(x.nodes), str(x.tp), str(x.pp), str(int(x.data_parallel)),
                     str(x.micro_batch), x.recompute, f"{x.step_time:.4g}",
                     f"{x.sequences_per_second:.4g}", f"{100 * x.mfu:.1f}",
                     *(f"{x[p + '_time']:.3g}" for p in steps.PARTS))
        rows.append((f"{x.nodes}n TP{x.tp} PP{x.pp} mb{x.micro_batch} {x.recompute}",
                     {p: x[p + "_time"] for p in steps.PARTS}))
    console().print(view)
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        tmp = output.with_suffix(output.suffix + ".tmp")
        table.to_parquet(tmp, index=False)
        tmp.replace(output)
        click.echo(f"  table          {output}")
    if plot and rows:
        from explore.plots import step_breakdown

        written = step_breakdown(rows, plot.parent, plot.stem)
        click.echo(f"  plot           {', '.join(str(p) for p in written)}")


@main.command("infer")
@click.argument("system")
@click.argument("model", required=False)
@click.option("--model", "model_file", default=None, help="A Hugging Face config.json "
              "(Llama, Mistral, OPT, BERT, RoBERTa) instead of a bundled MODEL.")
@click.option("--tp", callback=_ints, required=True, help="Tensor-parallel degree (ranks: "
              "logical NeuronCores).")
@click.option("--dp", callback=_ints, help="Data-parallel replicas (default 1).")
@click.option("--batch", callback=_ints, help="Sequences per batch (default 1).")
@click.option("--input", "input_len", callback=_ints, help="Prompt tokens (default 128).")
@click.option("--output", "output_len", callback=_ints, help="Generated tokens (default 128; "
              "none for an encoder).")
@click.option("--dtype", "dtypes", callback=_words, help="GEMM format: bf16 or fp8 (weights "
              "stored in it; default bf16).")
@click.option("--lnc", callback=_ints, help="Physical cores per logical core (default: the "
              "chip's).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              help="Output format.")
@click.option("-o", "output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write every point as Parquet.")
@click.option("--kernels", is_flag=True, help="List each pass's kernels on a rank: runs, time "
              "and share (one design point).")
@click.option("--sequence-parallel", is_flag=True, help="The prefill's norms, residual adds "
              "and embedding on each rank's share of the tokens (NxD Inference's "
              "sequence parallelism).")
@click.option("--context-buckets", callback=_ints, help="Prompt lengths the model was "
              "compiled for, comma-separated (one list, not a sweep): a prompt is encoded at "
              "the shortest that holds it.")
@click.option("--decode-buckets", callback=_ints, help="Cache lengths the decode step was "
              "compiled for, comma-separated (one list, not a sweep): each step runs at the "
              "shortest that holds its context.")
def infer_cmd(system, model, model_file, tp, dp, batch, input_len, output_len, dtypes, lnc,
              fmt, output, kernels, sequence_parallel, context_buckets, decode_buckets):
    """Time inference of MODEL on SYSTEM (an instance spec): TTFT, TPOT, latency, output
    tokens per second and per dollar, the breakdown and the memory per rank (an encoder:
    latency and inferences per second). Comma-separated values sweep every combination."""
    from .infer import infer_command

    if (model is None) == (model_file is None):
        raise SpecError("expected a MODEL or --model PATH/config.json (one of them), found "
                        + ("neither" if model is None else "both"))
    infer_command(system, model or model_file, tp, dp, batch, input_len, output_len, dtypes,
                  lnc, fmt, output, kernels, sequence_parallel=sequence_parallel,
                  context_buckets=context_buckets, decode_buckets=decode_buckets)


@main.command("serve")
@click.argument("system")
@click.argument("model", required=False)
@click.option("--model", "model_file", default=None, help="A Hugging Face config.json "
              "(Llama, Mistral, OPT) instead of a bundled MODEL.")
@click.option("--tp", type=int, required=True, help="Tensor-parallel degree of the replica "
              "(ranks: logical NeuronCores).")
@click.option("--rate", "rates", callback=_floats, help="Poisson arrival rates, requests per "
              "second (comma-separated: one run each).")
@click.option("--concurrency", type=int, help="Clients, each sending its next request when "
              "its last one ends (instead of --rate).")
@click.option("--requests", type=int, default=1000, show_default=True,
              help="Requests per run.")
@click.option("--input", "input_dist", default="fixed:128", show_default=True,
              help="Prompt tokens: fixed:N, uniform:A-B or normal:MEAN,STD.")
@click.option("--output", "output_dist", default="fixed:128", show_default=True,
              help="Output tokens: fixed:N, uniform:A-B or normal:MEAN,STD.")
@click.option("--max-batch", type=int, default=32, show_default=True,
              help="Most requests running at once.")
@click.option("--max-prefill-tokens", type=int, default=4096, show_default=True,
              help="Most padded prompt tokens of one prefill step.")
@click.option("--bucket", type=int, default=128, show_default=True,
              help="Lengths are padded up to a multiple of this many tokens (where no "
              "bucket list is given).")
@click.option("--sequence-parallel", is_flag=True, help="As gen infer's.")
@click.option("--context-buckets", callback=_ints, help="As gen infer's.")
@click.option("--decode-buckets", callback=_ints, help="As gen infer's.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the draws.")
@click.option("--dtype", type=click.Choice(["bf16", "fp8"]), default="bf16",
              show_default=True, help="GEMM format (weights stored in it).")
@click.option("--lnc", type=int, help="Physical cores per logical core (default: the chip's).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              help="Output format.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the latency-throughput curve as FILE.png and FILE.svg.")
def serve_cmd(system, model, model_file, tp, rates, concurrency, requests, input_dist,
              output_dist, max_batch, max_prefill_tokens, bucket, sequence_parallel,
              context_buckets, decode_buckets, seed, dtype, lnc, fmt, plot):
    """Serve MODEL on SYSTEM by continuous batching (prefill and decode steps interleaved,
    each timed as `gen infer` times it): P50 and P99 of the time to first token and of the
    inter-token latency, and the throughput, at each --rate (or at --concurrency)."""
    from .serve import serve_command

    if (model is None) == (model_file is None):
        raise SpecError("expected a MODEL or --model PATH/config.json (one of them), found "
                        + ("neither" if model is None else "both"))
    if (rates is None) == (concurrency is None):
        raise SpecError("expected one of --rate or --concurrency, found "
                        + ("neither" if rates is None else "both"))
    serve_command(system, model or model_file, tp=tp, rates=rates, concurrency=concurrency,
                  requests=requests, input_dist=input_dist, output_dist=output_dist,
                  max_batch=max_batch, max_prefill_tokens=max_prefill_tokens, bucket=bucket,
                  sequence_parallel=sequence_parallel, context_buckets=context_buckets,
                  decode_buckets=decode_buckets, seed=seed, dtype=dtype, lnc=lnc, fmt=fmt,
                  plot=plot)


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
@click.option("--max-points", type=click.IntRange(min=1), default=None, metavar="N",
              help="Refuse sweeps of more than N design points (default: the sweep's "
                   "execution.max_points, 10,000,000 unless set).")
def explore(sweep, output, scheduler, max_points):
    """Run an exploration SWEEP: Parquet table, summary and plots."""
    from explore.run import explore as run_sweep

    out = output or Path("build") / "explore" / sweep.stem
    summary = run_sweep(sweep, out, scheduler=scheduler, max_points=max_points)
    click.echo(f"{sweep.name}: results in {out}")
    if isinstance(summary, dict):
        for key in ("points", "rows", "computed", "reused", "elapsed_s", "area"):
            if key in summary:
                click.echo(f"  {key}: {summary[key]}")


@main.command("nki")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--kernel", default=None, help="Launch this kernel of FILE on random inputs "
              "(default: run FILE as __main__, its own launches).")
@click.option("--spec", type=click.Choice(["trn1", "trn2", "trn3"]), default=None,
              help="Target chip (default: NEURON_PLATFORM_TARGET_OVERRIDE, else trn1).")
@click.option("--shape", default="", metavar="NAME=DxD:DTYPE,...",
              help="With --kernel: its arguments, e.g. a=128x512:bf16,b=512x512:bf16.")
@click.option("--timing-only", is_flag=True, help="Time every launch without data.")
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a Perfetto trace of each launch (FILE, then FILE.1, ...).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the inputs.")
@click.option("--rtl", is_flag=True,
              help="Trace for the core at simulation scale and co-simulate every launch on "
                   "the core RTL too, every byte of SBUF, PSUM and HBM compared.")
@click.option("--sim", "simulator", type=click.Choice(["icarus", "verilator"]),
              default="verilator", show_default=True, help="With --rtl: the HDL simulator.")
@click.option("--no-spill", "no_spill", is_flag=True,
              help="Refuse a kernel whose live SBUF tensors do not fit (NKI's out-of-memory "
                   "error at the allocation) instead of spilling some to HBM and back, as "
                   "NKI's compiler does.")
def nki_cmd(file, kernel, spec, shape, timing_only, trace, fmt, seed, rtl, simulator,
            no_spill):
    """Trace the NKI kernels of FILE into the core's ISA and run them on the core simulator:
    per launch the predicted time, per-engine busy, HFU, bytes moved and the SBUF/PSUM
    high-water marks; with --rtl, on the core RTL as well. A launch whose SBUF tensors
    spilled to HBM says so, on standard error too, naming the allocation that did not fit."""
    from kernels import KernelError
    from kernels.nki import launch
    from kernels.nki.errors import kernel_code
    from sim.core import ProgramError
    from sim.system import formulas

    if rtl and timing_only:
        raise InputError("--rtl compares results: expected no --timing-only")
    scale = "sim" if rtl else "full"
    try:
        shapes = launch.parse_shapes(shape)
        launches = launch.run_file(file, kernel, shapes, target=spec,
                                   timing_only=timing_only, trace=bool(trace), seed=seed,
                                   scale=scale, keep=rtl, spill=not no_spill)
    except (KernelError, ProgramError) as exc:
        click.echo(f"error: {str(exc).splitlines()[0]}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except SyntaxError as exc:  # the kernel file, or a module it imports, does not parse
        click.echo(f"error: {exc.filename}:{exc.lineno}: the kernel's code does not parse: "
                   f"{type(exc).__name__}: {exc.msg}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except Exception as exc:  # the kernel file's own code failed (its assertion, say)
        import traceback

        frames = traceback.extract_tb(exc.__traceback__)
        if not any(Path(f.filename).resolve() == file.resolve() for f in frames):
            raise
        # the innermost line of kernel code: the file's, or a module it calls (a library's)
        f = [f for f in frames if kernel_code(f.filename)][-1]
        name = file if Path(f.filename).resolve() == file.resolve() else f.filename
        text = str(exc).splitlines()[0] if str(exc) else ""
        click.echo(f"error: {name}:{f.lineno}: the kernel raised "
                   f"{type(exc).__name__}{': ' + text if text else ''}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    verdicts = _nki_on_rtl(launches, simulator, seed) if rtl else {}
    rows = []
    for i, run in enumerate(launches):
        params = launch.params_for(run.target, scale)
        res = run.result
        rate = max((params.rate(d) for d in run.matmul_dtypes if d in params.formats),
                   default=1.0)
        peak = formulas.peak_flops(params.rows, params.cols, params.clock("tensor"), rate)
        row = {"kernel": run.kernel, "file": run.file, "target": run.target,
               "mode": run.mode, "grid": list(run.grid), "time_s": res.time,
               "hfu": res.flops / res.time / peak if res.time else 0.0,
               "flops": res.flops, "dma_bytes": res.dma_bytes,
               "sbuf_high_bytes": run.sbuf_high, "psum_high_bytes": run.psum_high,
               "instructions": run.instructions,
               "busy_s": dict(res.busy), "compile_s": run.compile_seconds,
               "simulate_s": run.run_seconds, "sbuf_spills": run.spills,
               "sbuf_spilled_bytes": run.spilled_bytes, "merged": run.merged}
        if run.spills:
            where, tensor, nbytes = run.first_spill
            click.echo(f"warning: {where}: SBUF full: tensor {tensor} needs {nbytes} bytes "
                       f"per partition; {run.spills} live tensors spilled to HBM and back "
                       f"({run.spilled_bytes:,} bytes per partition; --no-spill refuses)",
                       err=True)
        if trace:
            path = trace if i == 0 else trace.with_name(f"{trace.name}.{i}")
            path.write_text(res.trace_json())
            row["trace"] = str(path)
        if rtl:
            row["rtl"] = verdicts[i]
        rows.append(row)
    failed = any(v["failures"] for v in verdicts.values())
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
        sys.exit(1 if failed else 0)
    for row in rows:
        grid = f" grid {row['grid']}" if row["grid"] else ""
        click.echo(f"{row['kernel']} ({row['file']}) on {row['target']}{grid}, "
                   f"{row['mode']}")
        click.echo(f"  time          {row['time_s'] * 1e6:,.2f} us")
        click.echo(f"  HFU           {100 * row['hfu']:.2f} % of the tensor engine's peak")
        click.echo(f"  DMA           {_si(row['dma_bytes'], 'B')} moved")
        click.echo(f"  SBUF / PSUM   {row['sbuf_high_bytes']:,} / {row['psum_high_bytes']:,} "
                   f"bytes per partition at most")
        if row["sbuf_spills"]:
            click.echo(f"  SBUF spills   {row['sbuf_spills']:,} tensors to HBM and back, "
                       f"{row['sbuf_spilled_bytes']:,} bytes per partition")
        merged = f", {row['merged']:,} repeats computed once" if row["merged"] else ""
        click.echo(f"  instructions  {row['instructions']:,} (traced in "
                   f"{row['compile_s']:.2f} s, simulated in {row['simulate_s']:.2f} s"
                   f"{merged})")
        for eng, busy in row["busy_s"].items():
            if busy:
                click.echo(f"  {eng:<13} busy {busy * 1e6:,.2f} us "
                           f"({100 * busy / row['time_s']:.1f} %)")
        if "trace" in row:
            click.echo(f"  trace         {row['trace']}")
        if "rtl" in row:
            v = row["rtl"]
            state = "FAIL" if v["failures"] else "PASS"
            click.echo(f"  core RTL      {state} on {v['sim']}, every byte of SBUF, PSUM and "
                       f"HBM against the simulator (seed {v['seed']})")
            for line in v["failures"]:
                click.echo(f"    {line}")
    sys.exit(1 if failed else 0)


def _nki_on_rtl(launches, simulator: str, seed: int) -> dict[int, dict]:
    """Co-simulate the launches (traced at simulation scale, their programs kept) on the
    core RTL in one simulation: per launch, ``sim``, ``seed`` and its ``failures`` (lines;
    none: every byte matched). A launch the RTL cannot run ends the command (status 2)."""
    from kernels.nki import launch
    from sim.tb.core import rtl_refusal, simulate_many
    from sim.tb.runner import SimulatorMissing

    if not launches:
        raise InputError("--rtl: the file launched no kernel")
    given, names = {}, []
    for i, run in enumerate(launches):
        name = run.kernel if i == 0 else f"{run.kernel}.{i}"
        if run.cores > 1:
            raise InputError(f"{name} ({run.file}): the core RTL is one NeuronCore; the launch "
                            f"spreads over nl.nc({run.cores})")
        why = rtl_refusal(run.programs[0], launch.params_for(run.target, "sim"))
        if why is not None:
            raise InputError(f"{name} ({run.file}): the core RTL cannot run it: {why}")
        given[name] = (run.programs[0], run.hbm)
        names.append(name)
    targets = {run.target for run in launches}
    if len(targets) > 1:
        raise InputError(f"--rtl: the launches target {', '.join(sorted(targets))}; one "
                        "simulation builds one chip's core")
    try:
        result = simulate_many(targets.pop(), names, simulator, seed, given=given)
    except SimulatorMissing as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    # each failed program is "name: what differs" within the cocotb test's message
    parts = [part for m in result.messages for part in m.split("; ")]
    out = {}
    for i, name in enumerate(names):
        mine = [m.group(1) for part in parts
                if (m := re.search(rf"(?:^|\s){re.escape(name)}: (.*)$", part))]
        if not result.ok and not any(re.search(rf"(?:^|\s){re.escape(n)}: ", part)
                                     for n in names for part in parts):
            mine = [str(result)]  # the run itself failed: every launch with it
        out[i] = {"sim": simulator, "seed": seed, "failures": mine}
    return out
