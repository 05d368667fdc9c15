"""The datasheet of `gen chip`: its summary and claims, its pictures, and the table of derived
figures against published claims."""

from __future__ import annotations

from hdl.params import rounding_rng
from specs.loader import Document, sources
from specs.model import ChipSpec
from specs.quantities import QUANTITIES
from specs.units import show

from . import __version__
from .units import UNITS


def datasheet_context(doc: Document, scale: str, rtl: list[str], skipped: dict[str, str],
                      sections: dict[str, object]) -> dict:
    spec: ChipSpec = doc.spec
    core = spec.core
    t = core.tensor
    rows = [
        ("NeuronCores", f"{spec.cores} x NeuronCore-{spec.neuron_core}"),
        ("Tensor engine", f"one {t.rows} x {t.cols} PE array at {show(t.clock, 'GHz')}, "
                          f"the input format chosen per instruction"),
        ("Tensor formats", ", ".join(t.formats)),
        ("Rates (MAC/PE/cycle)", ", ".join(f"{f}: {t.rates.get(f, 1):g}" for f in t.formats)),
        ("Moving tile", f"N <= {t.moving_max}; a new tile every max(N, ceil(M / "
                        f"{t.load_columns}) + 1) cycles"),
        ("Sparsity", ", ".join(t.sparsity.patterns) + f" (x{t.sparsity.speedup:g})"
         if t.sparsity else "none"),
        ("Vector engine", f"{core.vector.lanes} lanes at {show(core.vector.clock, 'GHz')}"),
        ("Scalar engine", f"{core.scalar.lanes} lanes at {show(core.scalar.clock, 'GHz')}; "
                          f"{', '.join(core.scalar.functions)}"),
        ("GpSimd", f"{core.gpsimd.cores} x {core.gpsimd.width}-bit at "
                   f"{show(core.gpsimd.clock, 'GHz')}" if core.gpsimd else "none"),
        ("SBUF per core", f"{core.sbuf.partitions} x {show(core.sbuf.partition_size, 'KiB')}"),
        ("PSUM per core", f"{core.psum.partitions} x {show(core.psum.partition_size, 'KiB')} "
                          f"in {core.psum.banks} banks"),
        ("Memory", f"{spec.memory.kind.upper()}, {show(spec.memory.capacity, 'GiB')}, "
                   f"{show(spec.memory.bandwidth, 'GB/s')}"),
        ("DMA", f"{spec.dma.engines} engines" + (f", {show(spec.dma.bandwidth, 'GB/s')}"
                                                 if spec.dma.bandwidth else "")),
        ("NeuronLink", f"{spec.neuronlink.version}" + (
            f", {spec.neuronlink.links} links" if spec.neuronlink.links else "") + (
            f", {show(spec.neuronlink.bandwidth, 'GB/s')}" if spec.neuronlink.bandwidth
            else "")),
        ("CC-Cores", str(spec.cc_cores) if spec.cc_cores else "n/a"),
        ("LNC", f"{spec.lnc.options} (default {spec.lnc.default})"),
        ("Rounding", ", ".join(spec.rounding.modes) + (
            f"; RNG {rounding_rng(spec)}" if rounding_rng(spec) else "")),
    ]
    known = sources()
    claims = [{
        "level": c.level or "chip", "quantity": c.quantity, "value": str(c.value),
        "source": c.source, "kind": known[c.source].kind, "note": c.note,
        "modelled": QUANTITIES[c.quantity].derived,
    } for c in spec.claims]
    cited = sorted({c.source for c in spec.claims})
    return {
        "spec": spec, "doc": doc, "version": __version__, "scale": scale, "summary": rows,
        "claims": claims, "assumptions": spec.assumptions, "rtl": rtl, "skipped": skipped,
        "sections": sections,
        "sources": [(k, known[k]) for k in cited],
    }


FIGURE_TITLES = {
    "block": "Block diagram: cores, engines, buffers, HBM, DMA and links",
    "topology": "Topology of the instance the system model builds from this chip",
    "roofline": "Roofline: tensor throughput against arithmetic intensity under HBM",
    "core": "One NeuronCore as its RTL is built: sequencers, semaphores, engines, SBUF, PSUM "
            "and ports",
}


def draw_figures(doc: Document) -> dict[str, str]:
    """The datasheet's SVG pictures, by name (see :mod:`generators.pictures`)."""
    from hdl.params import core_params
    from sim.system.model import ModelError, build
    from specs.loader import bundled, load_document

    from .pictures import block_diagram, core_diagram, roofline, topology

    spec: ChipSpec = doc.spec
    out = {"block": block_diagram(spec)}
    # the chip's largest instance (most chips; of equals, the first by name)
    instances = [(-system.count, name) for name in bundled()["system"]
                 if (system := load_document(name).spec).member == spec.name
                 and system.level == "instance"]
    if instances:
        name = min(instances)[1]
        try:
            out["topology"] = topology(build(name).topology, f"{name}: chip topology")
        except ModelError:
            pass  # the system model draws no links for it (no NeuronLink figures)
    chip = build(doc.file)
    peaks = {k.removeprefix("compute."): v.to("FLOPS").magnitude
             for k, v in chip.compute().items()
             if k.startswith("compute.") and not k.endswith("_sparse")}
    out["roofline"] = roofline(spec, peaks, spec.memory.bandwidth.to("B/s").magnitude)
    if UNITS["core"].unsupported(spec):
        return out  # no core RTL for it (the reason is the core unit's "not emitted")
    out["core"] = core_diagram(core_params(spec, "full"))
    return out


def check_table(doc: Document) -> dict:
    """The chip's derived figures beside its claims, as a datasheet table."""
    from sim.system.check import FIELDS, rows
    from sim.system.model import build

    columns = [f for f in FIELDS]
    table_rows = [[r.text(f) for f in columns] for r in rows(build(doc.file))]
    return {
        "title": "Derived figures against published claims",
        "note": "Each derived figure is computed from the spec; each claim is as published. "
                "`gen check " + doc.name + "` prints the same table.",
        "columns": columns,
        "rows": table_rows,
        "verdict_column": columns.index("verdict"),
    }
