"""The datasheet's pictures, drawn as SVG from the spec and the models, never by hand.

* :func:`block_diagram`: the chip: its cores (each with its engines, SBUF and PSUM), the HBM
  stacks, the DMA engines and the NeuronLink ports, every label and count from the spec.
* :func:`topology`: the graph that the system model uses for the chip's instance (the first
  bundled instance spec built from this chip), nodes laid out by their torus coordinates or
  around their switch.
* :func:`roofline`: attainable tensor throughput against arithmetic intensity for each input
  format of the chip, under its HBM bandwidth (log-log).
* :func:`core_diagram`: one NeuronCore as its RTL is built at full scale: sequencers,
  semaphores, engines, SBUF, PSUM and the ports.
"""

from __future__ import annotations

import math
from xml.sax.saxutils import escape

from specs.model import ChipSpec
from specs.units import show

FONT = "font-family='system-ui, sans-serif'"


def _svg(width: float, height: float, body: list[str], title: str) -> str:
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' "
            f"height='{height:.0f}' viewBox='0 0 {width:.0f} {height:.0f}' {FONT}>\n"
            f"<title>{escape(title)}</title>\n"
            f"<rect width='100%' height='100%' fill='white'/>\n" + "\n".join(body) + "\n</svg>\n")


def _box(x, y, w, h, label, fill, size=11, stroke="#333", sub="") -> str:
    text = (f"<text x='{x + w / 2:.1f}' y='{y + h / 2 + (size / 3 if not sub else -1):.1f}' "
            f"font-size='{size}' text-anchor='middle'>{escape(label)}</text>")
    if sub:
        text += (f"<text x='{x + w / 2:.1f}' y='{y + h / 2 + size:.1f}' font-size='{size - 2}' "
                 f"text-anchor='middle' fill='#444'>{escape(sub)}</text>")
    return (f"<rect x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' height='{h:.1f}' rx='3' "
            f"fill='{fill}' stroke='{stroke}'/>" + text)


def block_diagram(spec: ChipSpec) -> str:
    """The chip as blocks: cores with engines and buffers, HBM, DMA and links."""
    core = spec.core
    t = core.tensor
    per_row = min(spec.cores, 4)
    rows = math.ceil(spec.cores / per_row)
    cw, ch, gap, margin = 230, 190, 14, 90
    inner_w = per_row * cw + (per_row - 1) * gap
    width = inner_w + 2 * margin
    height = rows * ch + (rows - 1) * gap + 2 * margin + 40
    body = [f"<text x='{width / 2:.0f}' y='24' font-size='16' text-anchor='middle' "
            f"font-weight='bold'>{escape(spec.title)} ({escape(spec.name)})</text>",
            f"<rect x='{margin - 20}' y='{margin - 30}' width='{inner_w + 40}' "
            f"height='{height - 2 * margin + 40}' rx='8' fill='#f7f7f7' stroke='#555'/>"]
    for i in range(spec.cores):
        x = margin + (i % per_row) * (cw + gap)
        y = margin + (i // per_row) * (ch + gap)
        body.append(_box(x, y, cw, ch, "", "#fff", stroke="#777"))
        body.append(f"<text x='{x + 8}' y='{y + 16}' font-size='12' font-weight='bold'>"
                    f"NeuronCore-{escape(spec.neuron_core)} {i}</text>")
        body.append(_box(x + 8, y + 24, cw - 16, 44, "Tensor engine", "#cfe3ff",
                         sub=f"{t.rows} x {t.cols} PEs, {show(t.clock, 'GHz')}"))
        ew = (cw - 16 - 2 * 6) / 3
        engines = [("Vector", f"{core.vector.lanes} lanes"),
                   ("Scalar", f"{core.scalar.lanes} lanes"),
                   ("GpSimd", f"{core.gpsimd.cores} cores" if core.gpsimd else "none")]
        for j, (name, sub) in enumerate(engines):
            body.append(_box(x + 8 + j * (ew + 6), y + 74, ew, 40, name, "#d9f2d9", size=10,
                             sub=sub))
        sbuf = core.sbuf.partitions * core.sbuf.partition_size
        psum = core.psum.partitions * core.psum.partition_size
        body.append(_box(x + 8, y + 120, cw - 16, 28, "SBUF", "#ffe9c7", size=10,
                         sub=f"{core.sbuf.partitions} partitions, {show(sbuf.to('MiB'))}"))
        body.append(_box(x + 8, y + 152, cw - 16, 28, "PSUM", "#ffd7d7", size=10,
                         sub=f"{core.psum.banks} banks, {show(psum.to('KiB'))}"))
    stacks = spec.memory.stacks or 0
    kind = spec.memory.kind.upper()
    side_h = height - 2 * margin
    if stacks:
        per_side = math.ceil(stacks / 2)
        for s in range(stacks):
            left = s < per_side
            k = s if left else s - per_side
            n = per_side if left else stacks - per_side
            h = min(70, (side_h - (n - 1) * 8) / n)
            y = margin + k * (h + 8)
            x = 8 if left else width - 8 - 56
            body.append(_box(x, y, 56, h, "HBM", "#e6d9f7", size=10, sub=f"stack {s}"))
    else:
        body.append(_box(8, margin, 56, side_h, kind, "#e6d9f7", size=10, sub="memory"))
    body.append(f"<text x='{width / 2:.0f}' y='{height - 38}' font-size='11' "
                f"text-anchor='middle'>{escape(kind)}: "
                + (f"{stacks} stacks, " if stacks else "")
                + f"{escape(show(spec.memory.capacity, 'GiB'))}, "
                f"{escape(show(spec.memory.bandwidth, 'TB/s'))}</text>")
    dma = f"DMA: {spec.dma.engines} engines" + (
        f", {show(spec.dma.bandwidth, 'GB/s')}" if spec.dma.bandwidth else "")
    body.append(_box(margin, height - 30, inner_w / 2 - 6, 24, dma, "#eeeeee", size=10))
    links = spec.neuronlink.links or 0
    link_text = f"NeuronLink-{spec.neuronlink.version}: {links} ports" + (
        f", {show(spec.neuronlink.bandwidth, 'GB/s')}" if spec.neuronlink.bandwidth else "")
    body.append(_box(margin + inner_w / 2 + 6, height - 30, inner_w / 2 - 6, 24, link_text,
                     "#dff3f7", size=10))
    for k in range(links):
        x = margin + (k + 0.5) * inner_w / max(links, 1)
        body.append(f"<line x1='{x:.1f}' y1='{margin - 30}' x2='{x:.1f}' y2='{margin - 48}' "
                    f"stroke='#1b7f99' stroke-width='3'/>")
    return _svg(width, height, body, f"{spec.name} block diagram")


def _positions(g) -> dict:
    """Node -> (x, y) in a unit square: torus coordinates on a grid (a third dimension as
    side-by-side planes), a switch in the middle of a circle of chips."""
    kind, dims = g.graph.get("kind"), tuple(g.graph.get("dims", (1,)))
    if kind == "switch":
        chips = [n for n in g.nodes if n != "switch"]
        pos = {"switch": (0.5, 0.5)}
        for i, n in enumerate(chips):
            a = 2 * math.pi * i / len(chips)
            pos[n] = (0.5 + 0.42 * math.cos(a), 0.5 + 0.42 * math.sin(a))
        return pos
    pos = {}
    planes = dims[2] if len(dims) > 2 else 1
    for n in g.nodes:
        c = n if isinstance(n, tuple) else (n,)
        x = c[0] / max(dims[0], 1)
        y = c[1] / max(dims[1], 1) if len(c) > 1 else 0.0
        plane = c[2] if len(c) > 2 else 0
        pos[n] = ((plane + 0.1 + 0.8 * x) / planes, 0.1 + 0.8 * y)
    return pos


def topology(g, title: str) -> str:
    """A topology graph (``sim.system.topology``) as SVG: chips as boxes, links as lines
    (torus wrap-around links as arcs)."""
    width = 760 if len(g.graph.get("dims", ())) > 2 else 420
    height = 420
    pos = {n: (40 + x * (width - 80), 50 + y * (height - 90)) for n, (x, y) in
           _positions(g).items()}
    body = [f"<text x='{width / 2:.0f}' y='24' font-size='15' text-anchor='middle' "
            f"font-weight='bold'>{escape(title)}</text>"]
    colours = ["#1b7f99", "#c0392b", "#7d3c98"]
    for a, b, data in g.edges(data=True):
        (x1, y1), (x2, y2) = pos[a], pos[b]
        dim = data.get("dim")
        colour = colours[dim % 3] if isinstance(dim, int) else "#555"
        bw = data.get("bandwidth")
        tip = f"<title>{escape(str(a))} - {escape(str(b))}" + (
            f": {bw / 1e9:.0f} GB/s" if bw else "") + "</title>"
        span = math.hypot(x2 - x1, y2 - y1)
        step = (width - 80) / max(g.graph.get("dims", (1,))[0], 1)
        if g.graph.get("kind") == "torus" and span > 1.6 * step:
            mx, my = (x1 + x2) / 2, (y1 + y2) / 2
            nx_, ny_ = (y2 - y1) / span, (x1 - x2) / span
            bend = 0.18 * span
            body.append(f"<path d='M{x1:.1f},{y1:.1f} Q{mx + nx_ * bend:.1f},"
                        f"{my + ny_ * bend:.1f} {x2:.1f},{y2:.1f}' fill='none' "
                        f"stroke='{colour}' stroke-width='1.5' opacity='0.6'>{tip}</path>")
        else:
            body.append(f"<line x1='{x1:.1f}' y1='{y1:.1f}' x2='{x2:.1f}' y2='{y2:.1f}' "
                        f"stroke='{colour}' stroke-width='2'>{tip}</line>")
    for n, (x, y) in pos.items():
        label = "switch" if n == "switch" else (",".join(map(str, n)) if isinstance(n, tuple)
                                                else str(n))
        fill = "#eeeeee" if n == "switch" else "#cfe3ff"
        body.append(_box(x - 22, y - 11, 44, 22, label, fill, size=10))
    body.append(f"<text x='{width / 2:.0f}' y='{height - 12}' font-size='11' "
                f"text-anchor='middle' fill='#444'>{g.graph.get('chips')} chips, "
                f"{g.number_of_edges()} links ({escape(str(g.graph.get('kind')))} "
                f"{' x '.join(map(str, g.graph.get('dims', ())))})</text>")
    return _svg(width, height, body, title)


def roofline(spec: ChipSpec, peaks: dict[str, float], bandwidth: float) -> str:
    """Attainable FLOP/s against FLOP per HBM byte, one roof per format (``peaks``: format ->
    peak FLOP/s of the chip), the memory slope at ``bandwidth`` bytes/s."""
    width, height, left, right, top, bottom = 640, 400, 70, 150, 40, 50
    lo_i, hi_i = 2.0 ** -2, 2.0 ** 12
    top_f = max(peaks.values()) * 2
    lo_f = min(min(peaks.values()) / 8, bandwidth * lo_i)
    pw, ph = width - left - right, height - top - bottom

    def px(i):
        return left + pw * (math.log(i) - math.log(lo_i)) / (math.log(hi_i) - math.log(lo_i))

    def py(f):
        return top + ph * (1 - (math.log(f) - math.log(lo_f)) / (math.log(top_f)
                                                                 - math.log(lo_f)))

    body = [f"<text x='{left + pw / 2:.0f}' y='22' font-size='15' text-anchor='middle' "
            f"font-weight='bold'>{escape(spec.name)} roofline (tensor engine, HBM)</text>",
            f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='none' "
            f"stroke='#333'/>"]
    e = math.ceil(math.log2(lo_i))
    while 2.0 ** e <= hi_i:
        x = px(2.0 ** e)
        body.append(f"<line x1='{x:.1f}' y1='{top}' x2='{x:.1f}' y2='{top + ph}' "
                    f"stroke='#ddd'/><text x='{x:.1f}' y='{top + ph + 16}' font-size='10' "
                    f"text-anchor='middle'>{2.0 ** e:g}</text>")
        e += 2
    d = math.ceil(math.log10(lo_f))
    while 10.0 ** d <= top_f:
        y = py(10.0 ** d)
        body.append(f"<line x1='{left}' y1='{y:.1f}' x2='{left + pw}' y2='{y:.1f}' "
                    f"stroke='#ddd'/><text x='{left - 6}' y='{y + 4:.1f}' font-size='10' "
                    f"text-anchor='end'>1e{d}</text>")
        d += 1
    body.append(f"<text x='{left + pw / 2:.0f}' y='{height - 10}' font-size='11' "
                f"text-anchor='middle'>arithmetic intensity (FLOP per HBM byte)</text>")
    body.append(f"<text x='16' y='{top + ph / 2:.0f}' font-size='11' text-anchor='middle' "
                f"transform='rotate(-90 16 {top + ph / 2:.0f})'>attainable FLOP/s</text>")
    colours = ["#1b7f99", "#c0392b", "#27ae60", "#7d3c98", "#d68910", "#34495e", "#e84393",
               "#16a085", "#8e44ad"]
    for k, (fmt, peak) in enumerate(sorted(peaks.items(), key=lambda kv: -kv[1])):
        ridge = peak / bandwidth
        c = colours[k % len(colours)]
        a = max(lo_i, lo_f / bandwidth)
        pts = [(a, bandwidth * a), (min(ridge, hi_i), min(peak, bandwidth * hi_i)),
               (hi_i, peak)]
        path = " ".join(f"{px(i):.1f},{py(f):.1f}" for i, f in pts)
        body.append(f"<polyline points='{path}' fill='none' stroke='{c}' stroke-width='2'>"
                    f"<title>{escape(fmt)}: {peak / 1e12:.0f} TFLOP/s, ridge at "
                    f"{ridge:.0f} FLOP/B</title></polyline>")
        body.append(f"<text x='{left + pw + 8}' y='{top + 14 + 16 * k}' font-size='11' "
                    f"fill='{c}'>{escape(fmt)}: {peak / 1e12:,.0f} TFLOP/s</text>")
    body.append(f"<text x='{left + pw + 8}' y='{top + 22 + 16 * len(peaks)}' font-size='11' "
                f"fill='#444'>HBM {bandwidth / 1e12:.2f} TB/s</text>")
    return _svg(width, height, body, f"{spec.name} roofline")


def core_diagram(params) -> str:
    """One NeuronCore as its RTL builds it (:class:`hdl.core.core.NeuronCore` of ``params``):
    the host port, one sequencer per instruction stream, the semaphores, the engines, SBUF
    and PSUM, and the DMA engine on its AXI4 port."""
    from hdl.core.core import HOST_BITS, HostMap

    hm = HostMap(params)
    engines = [s for s in hm.streams if not s.startswith("dma")]
    queues = [s for s in hm.streams if s.startswith("dma")]
    columns = len(engines) + 1
    cw, gap, margin = 170, 16, 20
    width = max(2 * margin + columns * cw + (columns - 1) * gap, 620)
    cw = (width - 2 * margin - (columns - 1) * gap) / columns
    height = 360
    body = [f"<text x='{width / 2:.0f}' y='22' font-size='15' text-anchor='middle' "
            f"font-weight='bold'>NeuronCore RTL of {escape(params.name)} "
            f"(neuron_core)</text>"]
    body.append(_box(margin, 36, width - 2 * margin, 34, "Host port", "#eeeeee",
                     sub=f"{HOST_BITS}-bit words: programs, start, status, cycle stamps, "
                         f"SBUF and PSUM"))
    for i, name in enumerate(engines + ["dma"]):
        x = margin + i * (cw + gap)
        if name == "dma":
            seq = f"{len(queues)} sequencers ({queues[0]} .. {queues[-1]})"
            label, sub = "DMA engine", f"{len(queues)} queues"
        else:
            seq = f"sequencer: a ring of {params.instructions}"
            label, sub = f"{name.capitalize()} engine", f"{params.partitions} partitions"
        body.append(_box(x, 84, cw, 40, f"{name} stream" if name != "dma" else "DMA streams",
                         "#fff3c4", size=10, sub=seq))
        body.append(f"<line x1='{x + cw / 2:.1f}' y1='124' x2='{x + cw / 2:.1f}' y2='176' "
                    f"stroke='#555'/>")
        body.append(_box(x, 176, cw, 40, label, "#d9f2d9", size=11, sub=sub))
    body.append(_box(margin, 134, width - 2 * margin, 30, f"{params.semaphores} semaphores",
                     "#f2e6ff", size=10, sub="32-bit counters; deadlock detection"))
    addr_bits = max(1, (params.hbm_bytes - 1).bit_length())
    sbuf_w, psum_w = hm.sbuf_words, hm.psum_words
    half = (width - 2 * margin - gap) / 2
    def size(nbytes: int) -> str:
        for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if nbytes >= scale and nbytes % scale == 0:
                return f"{nbytes // scale} {unit}"
        return f"{nbytes} B"

    bits = 32 * params.partitions
    body.append(_box(margin, 230, half, 44, "SBUF", "#ffe9c7", size=11,
                     sub=f"{params.partitions} x {size(params.sbuf_bytes)}: {sbuf_w} rows of "
                         f"{bits} bits"))
    body.append(_box(margin + half + gap, 230, half, 44, "PSUM", "#ffd7d7", size=11,
                     sub=f"{params.psum_banks} banks, {params.partitions} x "
                         f"{size(params.psum_bytes)}: {psum_w} rows of {bits} bits"))
    body.append(_box(margin, 294, width - 2 * margin, 40, "AXI4 manager port (m_axi)",
                     "#e6d9f7", size=11,
                     sub=f"{addr_bits}-bit addresses, 32-bit data, {size(params.hbm_bytes)} "
                         f"of memory"))
    return _svg(width, height, body, f"{params.name} NeuronCore RTL")
