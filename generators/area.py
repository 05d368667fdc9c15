"""The datasheet's area tables: every module `gen chip` emits, synthesised (:mod:`hdl.area`)
and rolled up by instance counts to the engine, the core and the chip.

Generic over the unit generators: a unit's emitted ``.v`` files are its modules (each file
named after its main module); which module instantiates which, and how many times, comes from
synthesis itself. Per core: one of each core engine (the tensor engine is one array that
runs every input format), and the core's SBUF and PSUM, which no emitted unit holds; per
chip: ``cores`` cores and ``neuronlink.links`` link ports.

SBUF and PSUM count by their bits at the spec's ``area.sram_bit`` (:func:`buffer_bits`), as
the units' own memories do. The tensor array's PSUM columns hold one bank of PSUM each (a
memory of the array's RTL, counted with it), so the PSUM row counts the rest of the spec's
PSUM.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

from hdl import area
from hdl.params import tensor_params
from specs.model import ChipSpec

#: Units instantiated once per chip rather than once per core, with their count.
PER_CHIP = {"link": lambda spec: spec.neuronlink.links or 0}


def _kind(cell: str) -> str:
    m = re.fullmatch(r"\$_([A-Z0-9]+)_(?:[NP01]+_)?", cell)
    kind = m.group(1) if m else cell
    return "flip-flops" if "FF" in kind or "LATCH" in kind else kind


def _fmt(x: float) -> str:
    return f"{x:,.0f}"


def buffer_bits(spec: ChipSpec, known: dict[str, area.ModuleArea], engines,
                sources: dict[str, str]) -> dict[str, int]:
    """Bits of the core's SBUF and of its PSUM beyond the banks that the tensor array's PSUM
    columns hold (the memories of the modules its top instantiates once per column; the PEs'
    weight registers, which Yosys keeps as small memories, are not PSUM)."""
    def bits(buf) -> int:
        return buf.partitions * int(buf.partition_size.to("B").magnitude) * 8

    in_array = 0
    for unit, _, group in engines:
        if unit != "tensor":
            continue
        for top in area.tops({k: known[k] for k in group}):
            instances = area.counts(known, top)
            for child, found in area.structural_loops(sources[top], known).items():
                if any(bound == "COLS" for loops in found for bound, _ in loops):
                    in_array += instances[child] * known[child].memory_bits
    return {"SBUF": bits(spec.core.sbuf), "PSUM": max(bits(spec.core.psum) - in_array, 0)}


#: The loop bounds of the tensor array's structural top, and the shape parameter each counts.
AXES = {"ROWS": "rows", "COLS": "cols"}


def array_shape(group: dict[str, str]) -> tuple[int, int] | None:
    """``(rows, cols)`` of the tensor array whose modules are ``group`` (name -> text), read
    from the generate loops of its structural top; None when no module of it has loops over
    both."""
    for text in group.values():
        shape = {AXES.get(bound): n for found in area.structural_loops(text, group).values()
                 for loops in found for bound, n in loops}
        if {"rows", "cols"} <= set(shape):
            return shape["rows"], shape["cols"]
    return None


def shape_terms(spec: ChipSpec, engines, known: dict[str, area.ModuleArea],
                sources: dict[str, str]) -> dict | None:
    """The chip's area as a function of the tensor array's shape, for exploration: NAND2
    equivalents that are fixed per chip (``chip``: link ports), per core (``core``: every
    engine but the tensor engine, the SBUF and the PSUM beyond the array's banks;
    ``array``: the tensor arrays' parts outside their loops), per array row (``row``: a row
    module's own logic), per array column (``column``: a PSUM column module with all it
    holds) and per PE (``pe``: what a row module instantiates, a row spanning the columns).
    So a chip of ``cores`` cores with ``rows x cols`` arrays has
    ``chip + cores * (core + array + rows * row + cols * column + rows * cols * pe)``;
    ``rows`` and ``cols`` hold the synthesised shape.

    Composed from the figures at the spec's own shape: instance counts follow the shape,
    each module's own logic stays as synthesised (the squares of :data:`hdl.area.SHAPE_TERMS`
    are zero). That misses what a row or column holds for the whole array (skew, deskew):
    :func:`chip_area` replaces the array's terms but the PE's by a fit over several shapes.
    None without a tensor array, or when its top is not a structural module whose loops run
    over ``ROWS`` and ``COLS`` (the terms cannot be told apart then)."""
    buffers = sum(buffer_bits(spec, known, engines, sources).values()) * spec.area.sram_bit
    terms = {"rows": 0.0, "cols": 0.0, "chip": 0.0, "core": buffers,
             **dict.fromkeys(area.SHAPE_TERMS, 0.0)}
    for unit, _, group in engines:
        for top in area.tops({n: known[n] for n in group}):
            total = area.rollup(known, top)
            if unit in PER_CHIP:
                terms["chip"] += PER_CHIP[unit](spec) * total
                continue
            if unit != "tensor":
                terms["core"] += total
                continue
            loops = {child: {tuple((AXES.get(b), n) for b, n in bs) for bs in found}
                     for child, found in area.structural_loops(sources[top], known).items()}
            shape = {axis: n for found in loops.values() for bs in found for axis, n in bs}
            if not loops or set(shape) != {"rows", "cols"}:
                return None
            terms["rows"], terms["cols"] = float(shape["rows"]), float(shape["cols"])
            terms["array"] += known[top].gates
            for child in known[top].children:
                found = loops.get(child, set())
                if found == {()}:
                    terms["array"] += area.rollup(known, child)
                elif found == {(("rows", shape["rows"]),)}:
                    own = known[child].gates
                    terms["row"] += own
                    terms["pe"] += (area.rollup(known, child) - own) / shape["cols"]
                elif found == {(("cols", shape["cols"]),)}:
                    terms["column"] += area.rollup(known, child)
                else:
                    return None
    return terms if terms["rows"] else None


#: Shapes of the tensor array (rows, cols), beside the spec's own, whose synthesis fits the
#: array's shape terms (:func:`hdl.area.fit_array`). The PE's term is not fitted: it is the
#: spec's PE (:func:`shape_terms`), synthesised with the chip, and the small arrays count
#: their PEs at its figure (:func:`chip_area`), so no PE is emitted or synthesised for the
#: fit. Nothing else of the array grows with ``rows x cols`` (a row's own logic holds its
#: input skew and pipelines, which grow with the rows; a PSUM column's text follows the
#: columns only), so the array less its PEs is ``f(rows) + g(cols)``, and the five other
#: terms fit it: a quadratic in the rows through three row counts (8, 12, the spec's), one in
#: the columns through three or more (8, 12, 16, the spec's), and a shape that tells the two
#: apart (12 x 16 beside 12 x 8). With the spec's shape, six shapes for five terms: one more
#: than they need, as before, so that the residuals are a check. Small, so that each of their
#: modules synthesises in a second or two (``benchmarks/area.md``).
FIT_SHAPES = ((8, 8), (8, 12), (8, 16), (12, 8), (12, 16))


def fit_path(spec: ChipSpec, sources: dict[str, str]) -> Path:
    """The cache entry of the fit's samples (:data:`FIT_SHAPES`), keyed by the texts of the
    tensor array's modules at the spec's shape (``sources``: a change of the array's RTL
    changes them; its PE is the samples' PE as well), its parameters, the shapes, the Yosys
    version and the script."""
    texts = [f"{name}\0{area.strip_comments(text)}" for name, text in sorted(sources.items())]
    key = hashlib.sha256("\0".join([repr(tensor_params(spec, "full")), repr(FIT_SHAPES),
                                    area.yosys_version(), area.SCRIPT, area.ABC_SCRIPT,
                                    repr(spec.area.sram_bit), *texts]).encode()).hexdigest()
    return area.CACHE / "fits" / f"{spec.name}-{key[:20]}.json"


def fit_sources(spec: ChipSpec) -> dict[tuple[int, int], dict[str, str]]:
    """The spec's tensor array (full scale, its formats) emitted at each of
    :data:`FIT_SHAPES`, all but its PE: module name -> Verilog text, by shape."""
    from hdl.tensor.structural import LEVELS, UNIT_TOP, verilog_modules

    base = tensor_params(spec, "full")
    levels = tuple(level for level in LEVELS if level != "pe")
    return {(rows, cols): {Path(name).stem: text for name, text in verilog_modules(
                dataclasses.replace(base, rows=rows, cols=cols), UNIT_TOP, levels).items()}
            for rows, cols in FIT_SHAPES}


def chip_area(spec: ChipSpec, emitted: dict[str, list[list[Path]]], synthesise: bool,
              jobs: int | None = None, fit: bool = True) -> tuple[list[dict], dict]:
    """Datasheet tables and a JSON-ready summary for the files ``emitted`` (unit -> one file
    list per parameter set). Without ``synthesise``, only modules already in the cache count;
    the others are listed as missing. ``jobs``: modules synthesised at once (default: the
    machine's cores). With ``fit`` and ``synthesise``, the full-scale tensor array is also
    emitted at :data:`FIT_SHAPES` (while the chip's modules synthesise) and synthesised in
    the same pool as the chip's modules, unless its samples are cached (:func:`fit_path`),
    with the spec's PE in place of theirs (the chip's, synthesised once for both);
    without ``synthesise``, they come from the cache or not at all (then the summary has no
    area terms, as without ``fit``)."""
    engines: list[tuple[str, str, dict[str, area.ModuleArea | None]]] = []
    sources: dict[str, str] = {}
    for unit, groups in emitted.items():
        for files in groups:
            group = {p.stem: p.read_text() for p in files if p.suffix == ".v"}
            if group:
                sources.update(group)
                engines.append((unit, "", group))
    sram_bit = spec.area.sram_bit
    # The fit is of the full-scale array (exploration's), not of a simulation-scale one; its
    # shapes are emitted while the chip's modules synthesise, and join their pool. They are
    # emitted without their PE: the modules of the spec's array that they lack (its PE) stand
    # in, so that their rows instantiate the spec's PE and their roll-up counts it, as the
    # fit's fixed PE term does. The PE is a black box of the row, whose weight-skip hop-count
    # ports are wider than the small row's wires (their width follows the columns): Yosys
    # pads and truncates them, which is wiring (8 x 8's row: 11,810 NAND2 of its own either
    # way).
    arrays = [group for unit, _, group in engines if unit == "tensor"]
    full = len(arrays) == 1 and array_shape(arrays[0]) == (spec.core.tensor.rows,
                                                            spec.core.tensor.cols)
    at: dict[tuple[int, int], dict[str, str]] = {}
    if fit and full and synthesise and not fit_path(spec, arrays[0]).is_file():
        def shapes() -> list[dict[str, str]]:
            for shape, group in fit_sources(spec).items():
                at[shape] = {**group, **{n: t for n, t in arrays[0].items() if n not in group}}
            return list(at.values())
    else:
        shapes = None
    found = area.synthesize_groups([sources], sram_bit=sram_bit, cached_only=not synthesise,
                                   jobs=jobs, more=shapes)
    results = found[0]
    if at:
        area.store(fit_path(spec, arrays[0]),
                   [(rows, cols, area.rollup(known, "tensor"))
                    for (rows, cols), known in zip(at, found[1:], strict=True)])
    missing = sorted(n for n, a in results.items() if a is None)
    summary: dict = {"unit": "NAND2 equivalents", "sram_bit": sram_bit,
                     "yosys": area.yosys_version(), "missing": missing, "engines": []}
    if missing:
        note = (f"{len(missing)} of {len(results)} emitted modules are not synthesised yet "
                f"(`gen chip {spec.name} --area` synthesises them, once: results are cached "
                f"per module).")
        return [{"title": "Area from synthesis", "note": note, "columns": ["missing module"],
                 "rows": [[m] for m in missing]}], summary

    known = {n: a for n, a in results.items() if a is not None}
    rows, per_core, per_chip = [], 0.0, 0.0
    for unit, _, group in engines:
        for top in area.tops({n: known[n] for n in group}):
            total = area.rollup(known, top)
            count = PER_CHIP[unit](spec) if unit in PER_CHIP else 1
            where = "chip" if unit in PER_CHIP else "core"
            for module, n in area.counts(known, top).items():
                a = known[module]
                rows.append([unit, top, module, f"{n:,}", _fmt(a.gates),
                             f"{a.memory_bits:,}" if a.memory_bits else "-",
                             _fmt(n * a.gates)])
            rows.append([unit, top, "total", f"{count} per {where}", "", "",
                         _fmt(total)])
            if unit in PER_CHIP:
                per_chip += count * total
            else:
                per_core += total
            summary["engines"].append({"unit": unit, "top": top, "per": where, "count": count,
                                       "gates": total, "modules": area.counts(known, top)})
    buffers = buffer_bits(spec, known, engines, sources)
    for name, bits in buffers.items():
        what = "PSUM beyond the array's banks" if name == "PSUM" else name
        rows.append(["core", name, what, "1", _fmt(bits * sram_bit), f"{bits:,}",
                     _fmt(bits * sram_bit)])
        per_core += bits * sram_bit
    summary["buffers"] = {name: {"bits": bits, "gates": bits * sram_bit}
                          for name, bits in buffers.items()}
    chip_total = spec.cores * per_core + per_chip
    terms = shape_terms(spec, engines, known, sources)
    path = fit_path(spec, arrays[0]) if fit and full and terms is not None else None
    samples = None
    if path is not None and path.is_file():
        samples = [tuple(s) for s in json.loads(path.read_text())]
        # The spec's own shape, as composed (exactly its synthesised figure), and the
        # others, fitted together; the PE's term stays the spec's PE (the samples count it).
        own = (terms["rows"], terms["cols"],
               area.array_area(terms, terms["rows"], terms["cols"]))
        fit, residuals = area.fit_array([own, *samples], fixed={"pe": terms["pe"]})
        terms.update(fit)
        summary["fit"] = [{"rows": r, "cols": c, "nand2": a, "residual": e}
                          for (r, c, a), e in zip([own, *samples], residuals, strict=True)]
    summary["terms"] = terms if samples is not None else None
    fit_note = "" if samples is None else (
        f" Exploration's area of the tensor array is fitted to its synthesis at "
        f"{len(summary['fit'])} shapes (this one and {len(FIT_SHAPES)} small ones, their "
        f"PEs counted as this one's PE, whose figure is the PE's term; hdl/area.py's "
        f"`fit_array`): residuals within "
        f"{100 * max(abs(f['residual']) for f in summary['fit']):.1f} %.")
    rows.append(["core", "", "total", "1", "", "", _fmt(per_core)])
    rows.append(["chip", "", "total", f"{spec.cores} cores", "", "",
                 _fmt(chip_total)])
    summary.update(core=per_core, chip=chip_total,
                   modules={n: {"cells": dict(a.cells), "memory_bits": a.memory_bits,
                                "children": dict(a.children), "gates": a.gates}
                            for n, a in known.items()})
    kinds = sorted({_kind(c) for a in known.values() for c in a.cells} - {"$scopeinfo"},
                   key=lambda k: (k == "flip-flops", k))
    cell_rows = []
    for name, a in known.items():
        by_kind = dict.fromkeys(kinds, 0)
        for c, n in a.cells.items():
            if c != "$scopeinfo":
                by_kind[_kind(c)] += n
        cell_rows.append([name] + [f"{by_kind[k]:,}" for k in kinds])
    return [{
        "title": "Area from synthesis",
        "note": "Yosys " + area.yosys_version() + " generic `synth -flatten` (without "
                "resource sharing, `check`, `opt -full` and flip-flop optimisation after "
                "`memory`) of each "
                "emitted module on its own, gates mapped by ABC with `" + area.ABC_SCRIPT +
                "` (hdl/area.py says why; the modules it instantiates are black boxes, counted "
                "by instance); gates "
                "are NAND2 equivalents by the Nangate 45 nm cell areas "
                "(hdl/area.py documents the table), memories at "
                f"{sram_bit:.4g} NAND2 a bit (the spec's `area.sram_bit`, an assumption). "
                "Instances are per engine; the core counts one of each engine, its SBUF and "
                "the PSUM beyond the tensor array's banks (at the same figure a bit), the chip "
                "its cores and link ports." + fit_note,
        "columns": ["unit", "engine", "module", "instances", "NAND2 each", "memory bits",
                    "NAND2 total"],
        "rows": rows,
    }, {
        "title": "Cells by type",
        "note": "Yosys internal gates of each module's own logic after synthesis "
                "(flip-flops of every kind together).",
        "columns": ["module"] + kinds,
        "rows": cell_rows,
    }], summary
