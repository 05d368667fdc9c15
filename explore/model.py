"""The analytic performance model of a design point running a workload, vectorised.

A design point is one value of each parameter in ``PARAMS``; :func:`evaluate` takes a mapping
of parameter name to a numpy array (one entry per point) and returns one array per metric, so
one call evaluates a whole chunk of a sweep. :func:`evaluate_point` is the same model written
as a plain Python loop over scalars, on the topology and collective functions of
``sim.system``: it is the reference the vectorised model is tested against and the baseline of
the benchmark.

Per rank (one logical NeuronCore of ``lnc`` physical cores) and GEMM:

- tensor engine: :func:`sim.golden.systolic_cycles.matmul_cycles`, the closed form of the systolic
  array's RTL-checked cycle model that the system model uses too: tiles of ``K <= rows``
  (twice that for double-rate formats), ``M <= cols``, ``N <= moving_max``; a new tile every
  ``max(n / min(rate, 1), ceil(m / load_columns) + 1)`` cycles (formats below one MAC per
  PE per cycle take ``1 / rate`` cycles per moving column), plus the first load and the
  pipeline's drain. Where ``K`` fits a tile of the spec's row tiling (``rows / w`` rows),
  tiles of ``cols / w`` columns run ``w`` at once, the loads taking turns: ``w`` tiles every
  ``max(n / min(rate, 1), w * (ceil(m / load_columns) + 1))`` cycles; the fastest way
  counts. The ``lnc``
  physical cores share the tiles: the M tiles or the N range are divided among them,
  whichever is faster.
- memory: the HBM bytes of a weight-stationary schedule whose SBUF (the logical core's, half
  of it per operand) holds as many stationary columns (or moving columns) as fit; the operand
  not held is re-read once per block of the other. A chip's HBM bandwidth is shared by its
  logical cores. GEMM time is the larger of compute and memory time (the roofline).
- collectives: all-reduces over the ranks of a tensor-parallel group (contiguous ranks) and of
  a data-parallel group (strided); the part of a group inside one chip goes through HBM (a
  ring whose steps read and write their chunk), the part across chips over the instance
  topology (multi-dimensional rings on a torus, one hop through a switch), then across the
  instances of a server (the server's ring of same-position chips), then across servers over
  EFA. Every phase is timed by :mod:`sim.system.collectives` (evaluated on arrays of design
  points), the formula the system model uses: chunks of ``collectives.CHUNK`` pipelined
  across ring steps, each reduce-scatter step ending with the vector engines' add
  (:meth:`sim.system.model.Chip.add`, its rate scaled with the point's cores); NeuronLink
  carries payload at the efficiency of the link model
  (:func:`sim.system.model.default_link_efficiency`).

Step time = GEMM time + tensor-parallel all-reduces + the data-parallel all-reduce (the part
of it not hidden behind the backward GEMMs when the workload overlaps them).

Area (``area``, NAND2 equivalents of the system's chips) is composed from synthesis: `gen chip`
synthesises every module of the base chip (:mod:`hdl.area`) and leaves the chip's area terms
in the synthesis cache (fixed per chip, per core, per tensor array, per array row, per array
column and per PE: ``generators.area.shape_terms``); a design point's area is those terms
times its instance counts (:func:`chip_area`). It is NaN until the base chip has been
synthesised (``gen chip CHIP --area``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hdl import area as synthesis
from sim.golden import systolic_cycles
from sim.system import collectives, formulas, topology
from sim.system import model as system_model
from specs import loader
from specs.errors import SpecError
from specs.model import ChipSpec, SystemSpec

from .workloads import DTYPES, Workload

#: Swept parameters: name -> (unit of the arrays, spec dimension or "count", description).
PARAMS = {
    "rows": ("", "count", "tensor-array rows (contraction K per pass)"),
    "cols": ("", "count", "tensor-array columns (stationary M per pass)"),
    "cores": ("", "count", "physical NeuronCores per chip"),
    "clock": ("Hz", "frequency", "tensor-engine clock"),
    "sbuf": ("B", "bytes", "SBUF capacity per core"),
    "hbm_bandwidth": ("B/s", "bandwidth", "HBM bandwidth per chip"),
    "hbm_capacity": ("B", "bytes", "HBM capacity per chip"),
    "link_bandwidth": ("B/s", "bandwidth", "chip-to-chip bandwidth per chip"),
    "chips": ("", "count", "chips per instance"),
    "lnc": ("", "count", "physical cores per logical core (LNC)"),
    "nodes": ("", "count", "nodes (servers, or instances of a cluster) joined by EFA"),
}

#: Metrics of a design point x workload: name -> (unit, description).
METRICS = {
    "valid": ("", "lnc divides cores and the tensor degree divides the ranks"),
    "ranks": ("", "logical cores in the system"),
    "data_parallel": ("", "data-parallel degree"),
    "step_time": ("s", "time of one step"),
    "gemm_time": ("s", "GEMM time of a step (roofline of each GEMM)"),
    "memory_bound": ("", "fraction of GEMM time spent in memory-bound GEMMs"),
    "tp_comm_time": ("s", "tensor-parallel all-reduces per step"),
    "dp_comm_time": ("s", "data-parallel gradient all-reduce per step (before overlap)"),
    "utilisation": ("", "model FLOPs over peak FLOPs x step time"),
    "tokens_per_second": ("tokens/s", "tokens processed per second"),
    "peak_flops": ("FLOP/s", "peak tensor throughput of the system"),
    "pe_total": ("PEs", "PEs per array x cores x chips"),
    "tokens_per_second_per_pe": ("tokens/s/PE", "performance per PE"),
    "area": ("NAND2", "area of the chips' RTL from synthesis, memories included (NaN until "
                      "synthesised)"),
    "tokens_per_second_per_area": ("tokens/s/MNAND2", "performance per million NAND2"),
    "price_per_hour": ("USD/h", "price of the system (sweep price model)"),
    "tokens_per_dollar": ("tokens/USD", "performance per price"),
    "state_bytes": ("B", "weights, gradients and optimizer state per rank"),
    "fits": ("", "the state fits the rank's share of HBM"),
}

#: Bytes of one points x GEMMs float64 temporary: the points of a block are chosen to keep each
#: temporary below glibc's default mmap threshold (128 KiB). Above it, every temporary is
#: mapped and unmapped afresh wherever the dynamic threshold is off (Dask worker processes set
#: MALLOC_TRIM_THRESHOLD_, which turns it off), and evaluation runs 2-3 times slower.
BLOCK_BYTES = 126 * 1024
PRICE_FACTORS = ("chips", "pe", "peak_flops", "hbm_capacity", "hbm_bandwidth", "link_bandwidth")


@dataclass(frozen=True)
class Base:
    """What a sweep does not vary: the base system, flattened to the figures the model uses.

    ``values`` holds the base design point (one number per parameter of ``PARAMS``).
    """

    name: str
    values: dict[str, float]
    rates: dict[str, float]           # MACs per PE per cycle by workload dtype
    moving_max: int
    load_columns: int                 # stationary columns per LoadStationary cycle
    tiles: tuple[int, ...]            # ways the array splits into tiles (the spec's row_tiles)
    topology: str                     # instance topology: torus, ring, switch or none
    links: int                        # NeuronLink ports per chip
    instances: int                    # instances per server (joined by a ring of links)
    efa_bandwidth: float              # per server, bytes/s
    link_alpha: float                 # seconds of one NeuronLink hop (the system spec's)
    efa_alpha: float                  # seconds of one EFA step (the system spec's)
    chip_alpha: float                 # seconds of one step among a chip's cores: a DMA's latency
    link_efficiency: float            # payload fraction of NeuronLink, from the link model
    torus: tuple[int, ...]            # the spec's torus dimensions of the base chip count
    price_per_hour: float             # of the base system, NaN when unknown
    add: collectives.Add = collectives.Add(0.0, 0.0, math.inf)  # a collective's add, base cores
    price_shares: dict[str, float] = field(default_factory=lambda: {"chips": 1.0})
    #: the spec file it was flattened from (the lowered step builds its core from it)
    spec_file: str = ""
    area: dict[str, float] | None = None  # the chip's area terms (chip_area), None: unknown

    def rate(self, dtype: str) -> float:
        return self.rates.get(dtype, math.nan)


def chip_of(doc: loader.Document) -> tuple[ChipSpec, list[SystemSpec]]:
    """The chip spec a chip or system spec is built of, and the system specs on the way to
    it, ``doc``'s own first."""
    chain = []
    while doc.kind == "system":
        chain.append(doc.spec)
        doc = loader.load_document(loader.find(doc.spec.member, near=doc.file.parent))
    return doc.spec, chain


def base_from_spec(name, price: float | None = None,
                   price_shares: dict[str, float] | None = None) -> Base:
    """Flatten a bundled (or given) chip or system spec into a :class:`Base`.

    A chip spec is one chip alone. An instance (or a server of chips) is ``chips`` chips on
    its topology; a server of instances adds a ring across its instances; a cluster adds EFA.
    """
    doc = loader.load_document(name)
    chip, chain = chip_of(doc)
    t = chip.core.tensor
    rates = {}
    for dtype in DTYPES:
        found = [system_model.rate(t, f) for f in system_model.FORMAT_GROUPS[dtype]
                 if f in t.formats]
        if found:
            rates[dtype] = float(max(found))
    systems = list(reversed(chain))          # innermost first
    chips, topo, instances, servers, dims = 1, "none", 1, 1, ()
    link_bw = chip.neuronlink.bandwidth
    efa = math.nan
    link_alpha = efa_alpha = 0.0             # a chip alone crosses neither network
    for s in systems:
        if s.link_bandwidth is not None:
            link_bw = s.link_bandwidth
        if s.link_latency is not None:
            link_alpha = s.link_latency.to("s").magnitude
        if s.efa_latency is not None:
            efa_alpha = s.efa_latency.to("s").magnitude
        if s.level == "instance" or (s.level == "server" and chips == 1):
            chips = s.count
            topo = {"torus2d": "torus", "torus3d": "torus"}.get(s.topology.kind, s.topology.kind)
            dims = tuple(s.topology.dims)
        elif s.level == "server":
            instances = s.count
        else:
            servers = s.count
    efa = _efa_per_server(doc, servers)
    if link_bw is None:
        raise SpecError("expected a NeuronLink bandwidth on the chip or the system, found none",
                        path=f"{doc.kind}.link_bandwidth")
    if chip.dma.latency is None:
        raise SpecError("expected dma.latency on the chip (a step of a collective among its "
                        "cores is a DMA), found none", path="chip.dma.latency")
    values = {
        "rows": t.rows, "cols": t.cols, "cores": chip.cores,
        "clock": t.clock.to("Hz").magnitude,
        "sbuf": (chip.core.sbuf.partitions * chip.core.sbuf.partition_size).to("B").magnitude,
        "hbm_bandwidth": chip.memory.bandwidth.to("B/s").magnitude,
        "hbm_capacity": chip.memory.capacity.to("B").magnitude,
        "link_bandwidth": link_bw.to("B/s").magnitude,
        "chips": chips, "lnc": chip.lnc.default, "nodes": servers,
    }
    spec_price = chain[0].price.to("USD/h").magnitude if chain and chain[0].price else math.nan
    return Base(
        spec_file=str(doc.file),
        name=doc.name, values={k: float(v) for k, v in values.items()}, rates=rates,
        moving_max=t.moving_max, load_columns=t.load_columns, tiles=tuple(t.row_tiles),
        topology=topo,
        links=chip.neuronlink.links or 1, instances=instances,
        efa_bandwidth=float(efa), link_alpha=link_alpha, efa_alpha=efa_alpha,
        chip_alpha=chip.dma.latency.to("s").magnitude,
        link_efficiency=system_model.default_link_efficiency(chip), torus=dims,
        price_per_hour=float(price if price is not None else spec_price),
        add=system_model.Chip(chip).add(),
        price_shares=dict(price_shares or {"chips": 1.0}), area=area_terms(doc))


def _efa_per_server(doc, servers: int) -> float:
    """EFA bandwidth of one server (of the whole system when it is not a cluster), as the
    system model derives it (members' sum, or the spec's own for a system of chips)."""
    model = system_model.build(doc.file)
    if not isinstance(model, system_model.System):
        return math.nan
    part = model.member if servers > 1 and isinstance(model.member, system_model.System) \
        else model
    return part.efa.to("B/s").magnitude if part.efa is not None else math.nan


# --- formula functions (one place each, numpy-friendly) ---------------------------------

def gemm_cycles(m, k, n, rows, cols, rate, moving_max, load_columns, lnc, tiles=(1,)):
    """Tensor-engine cycles of one ``(M, K, N)`` GEMM on a logical core of ``lnc`` cores.

    :func:`sim.system.formulas.matmul_cycles` (the array's cycle model, with its tiling
    ``tiles``) for the share of one physical core: the M tiles or the N range divided among
    the ``lnc`` cores, whichever finishes first.
    """
    m_share = np.ceil(np.ceil(m / cols) / lnc) * cols
    split_m = formulas.matmul_cycles(m_share, k, n, rows, cols, rate, moving_max, load_columns,
                                     tiles)
    split_n = formulas.matmul_cycles(m, k, np.ceil(n / lnc), rows, cols, rate, moving_max,
                                     load_columns, tiles)
    return np.minimum(split_m, split_n)


def gemm_bytes(m, k, n, elem, sbuf, cols, moving_max):
    """HBM bytes of one GEMM with an SBUF of ``sbuf`` bytes (half of it per operand)."""
    w, x, y = k * m * elem, k * n * elem, m * n * elem
    half = sbuf / 2.0
    mb = np.minimum(np.maximum(np.floor(half / (k * elem) / cols) * cols, cols), m)
    nb = np.minimum(np.maximum(np.floor(half / (k * elem) / moving_max) * moving_max,
                               moving_max), n)
    return np.minimum(w + x * np.ceil(m / mb), x + w * np.ceil(n / nb)) + y


def torus_dims(chips):
    """Near-square 2D torus of ``chips`` chips: (a, b), a <= b, a the largest divisor <= sqrt."""
    chips = int(chips)
    a = max(d for d in range(1, math.isqrt(chips) + 1) if chips % d == 0)
    return a, chips // a


def group_allreduce(nbytes, group, per_chip, stride, v, base: Base, dims_long):
    """All-reduce time of ``nbytes`` per rank among ``group`` ranks (arrays over points).

    Ranks are numbered chip-major (``per_chip`` logical cores on each chip, chips in instance
    order, instances in server order); the group's members are ``stride`` ranks apart, and
    every group of the same kind all-reduces at the same time. Phases, hierarchically: a ring
    through HBM among the group's ranks on one chip (each step a DMA's latency,
    ``base.chip_alpha``); the chips of the group in one instance over the instance topology
    (on a torus of ``a x b`` chips, ``b = dims_long``, a group of ``c`` chips is a
    ``b x c/b`` sub-torus when ``b`` divides ``c``, a ring of ``c`` chips otherwise); the
    instances of a server over the ring that joins same-position chips; the servers over EFA.
    Each chip's links carry the traffic of every group on the chip, and a server's EFA the
    traffic of every group in the server.
    """
    layout = group_layout(group, per_chip, stride, v["chips"], base.instances)
    r0, c1, c2, c3 = layout
    share = per_chip / r0                      # groups sharing one chip's links
    t = collectives.ring_time("all_reduce", nbytes, r0, v["hbm_bandwidth"] / (2.0 * per_chip),
                              base.chip_alpha)
    link = v["link_bandwidth"] / base.links
    eff, alpha, add, chunk = base.link_efficiency, base.link_alpha, adds(v, base), \
        collectives.CHUNK
    chip_bytes = nbytes * share
    if base.topology == "torus":
        d1 = np.where(np.mod(c1, dims_long) == 0, dims_long, c1)
        t = t + collectives.torus_time("all_reduce", chip_bytes, (d1, c1 / d1), link, alpha,
                                       eff, True, add, chunk)
    elif base.topology == "ring":
        t = t + collectives.ring_time("all_reduce", chip_bytes, c1, link, alpha, eff, True,
                                      add, chunk)
    elif base.topology == "switch":
        t = t + collectives.switch_time("all_reduce", chip_bytes, c1, v["link_bandwidth"],
                                        alpha, eff, add, chunk)
    t = t + collectives.ring_time("all_reduce", chip_bytes / c1, c2, link, alpha, eff, True,
                                  add, chunk)
    if np.ndim(base.efa_bandwidth) == 0 and math.isnan(base.efa_bandwidth):
        return t                               # a chip alone: no EFA, no group spans it
    server_bytes = nbytes * per_chip * v["chips"] * base.instances / (r0 * c1 * c2)
    return t + collectives.ring_time("all_reduce", server_bytes, c3, base.efa_bandwidth,
                                     base.efa_alpha, 1.0, False, add, chunk)


def adds(v, base: Base) -> collectives.Add:
    """The base chip's add (:meth:`sim.system.model.Chip.add`), its streaming rate scaled
    with the cores of each point (the add is spread over every core's vector engine)."""
    a = base.add
    return collectives.Add(a.fixed, a.start, a.rate * v["cores"] / base.values["cores"])


def group_layout(group, per_chip, stride, chips, instances):
    """Members of a group per chip, chips per instance, instances per server, servers.

    Integer-valued: irregular layouts (a stride that does not divide a level) are rounded the
    same way in :func:`evaluate` and :func:`evaluate_point`.
    """
    r0 = np.where(stride < per_chip,
                  np.minimum(group, np.maximum(np.floor(per_chip / stride), 1.0)), 1.0)
    spanned = np.ceil(group / r0)
    chip_stride = np.maximum(np.floor(stride / per_chip), 1.0)
    c1 = np.minimum(spanned, np.maximum(np.floor(chips / chip_stride), 1.0))
    instance_stride = np.maximum(np.floor(chip_stride / chips), 1.0)
    c2 = np.minimum(np.ceil(spanned / c1), np.maximum(np.floor(instances / instance_stride), 1.0))
    c3 = np.ceil(spanned / (c1 * c2))
    return r0, c1, c2, c3


def evaluate(values: dict[str, np.ndarray], base: Base, work: Workload,
             detail: bool = False) -> dict[str, np.ndarray]:
    """Metrics (see ``METRICS``) of every design point in ``values`` running ``work``.

    ``values`` maps each name of ``PARAMS`` to an array (missing names take the base value).
    With ``detail`` the per-GEMM arrays (points x GEMMs) are added: ``gemm_flops``,
    ``gemm_hbm_bytes``, ``gemm_seconds``, ``gemm_compute_seconds``.
    """
    size = max((np.size(a) for a in values.values()), default=1)
    v = {k: np.broadcast_to(np.asarray(values.get(k, base.values[k]), float), (size,))
         for k in PARAMS}
    parts = []
    with np.errstate(divide="ignore", invalid="ignore"):
        # Blocks of points small enough that the points x GEMMs temporaries stay in cache.
        block = max(64, BLOCK_BYTES // (8 * len(work.gemms.names)))
        for start in range(0, size, block):
            parts.append(_evaluate({k: a[start:start + block] for k, a in v.items()},
                                   base, work, detail))
    if len(parts) == 1:
        return parts[0]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _evaluate(v, base: Base, work: Workload, detail: bool) -> dict[str, np.ndarray]:
    size = len(v["rows"])
    rate = base.rate(work.dtype)
    elem = DTYPES[work.dtype]
    per_chip = v["cores"] / v["lnc"]
    total_chips = v["chips"] * base.instances * v["nodes"]
    ranks = total_chips * per_chip
    tp = float(work.tensor)
    dp = ranks / tp
    valid = (np.mod(v["cores"], v["lnc"]) == 0) & (np.mod(ranks, tp) == 0)
    dp = np.where(valid, dp, np.nan)

    g = work.gemms
    col = (slice(None), None)
    shapes = []
    for j, dim in enumerate(("m", "k", "n", "count")):
        x = getattr(g, dim)[None, :] / np.where(g.tp[:, j], tp, 1.0)[None, :]
        x = x / np.where(g.dp[:, j][None, :], dp[col], 1.0)
        shapes.append(x if dim == "count" else np.ceil(x))
    m, k, n, count = shapes
    cycles = gemm_cycles(m, k, n, v["rows"][col], v["cols"][col], rate, base.moving_max,
                         base.load_columns, v["lnc"][col], base.tiles)
    compute = cycles / v["clock"][col] * count
    traffic = gemm_bytes(m, k, n, elem, v["sbuf"][col] * v["lnc"][col], v["cols"][col],
                         base.moving_max) * count
    memory = traffic / (v["hbm_bandwidth"][col] / per_chip[col])
    seconds = np.maximum(compute, memory)
    gemm_time = seconds.sum(axis=1)
    backward = seconds[:, g.backward].sum(axis=1)
    mem_bound = np.where(memory > compute, seconds, 0.0).sum(axis=1) / gemm_time

    dims_long = longest_dims(v["chips"], base) if base.topology == "torus" else None
    tp_comm = work.tp_allreduces * group_allreduce(
        work.tp_bytes / dp, np.full(size, tp), per_chip, np.ones(size), v, base, dims_long)
    dp_comm = (group_allreduce(work.dp_bytes / tp, dp, per_chip, np.full(size, tp), v, base,
                               dims_long) if work.dp_bytes else np.zeros(size))
    exposed = np.maximum(dp_comm - backward, 0.0) if work.overlap_gradients else dp_comm
    step = gemm_time + tp_comm + exposed

    replicas = dp if work.replicated else 1.0
    flops = work.flops() * replicas
    peak = formulas.peak_flops(v["rows"], v["cols"], v["clock"], rate, v["cores"]) * total_chips
    tokens = work.tokens * replicas / step
    pe_total = v["rows"] * v["cols"] * v["cores"] * total_chips
    gates = chip_area(v["rows"], v["cols"], v["cores"], base) * total_chips
    price = price_per_hour(v, base)
    state = work.state_bytes_tp / tp + work.state_bytes_tpdp / (tp * dp)
    out = {
        "valid": valid, "ranks": ranks, "data_parallel": dp, "step_time": step,
        "gemm_time": gemm_time, "memory_bound": mem_bound, "tp_comm_time": tp_comm,
        "dp_comm_time": dp_comm, "utilisation": flops / (peak * step),
        "tokens_per_second": tokens, "peak_flops": peak, "pe_total": pe_total,
        "tokens_per_second_per_pe": tokens / pe_total, "area": gates,
        "tokens_per_second_per_area": tokens / gates * 1e6, "price_per_hour": price,
        "tokens_per_dollar": tokens * 3600.0 / price, "state_bytes": state,
        "fits": state <= v["hbm_capacity"] / per_chip,
    }
    if detail:
        out.update(gemm_flops=2.0 * m * k * n * count, gemm_hbm_bytes=traffic,
                   gemm_seconds=seconds, gemm_compute_seconds=compute)
    return out


def longest_dims(chips: np.ndarray, base: Base) -> np.ndarray:
    """:func:`instance_long` of each instance size in ``chips``, each distinct size once."""
    uniq, inverse = np.unique(chips, return_inverse=True)
    return np.array([instance_long(c, base) for c in uniq], float)[inverse]


def instance_long(chips, base: Base) -> int:
    """Longest torus dimension of an instance of ``chips`` chips: the spec's own torus for
    its chip count, a near-square 2D torus (:func:`torus_dims`) for any other."""
    if base.torus and math.prod(base.torus) == chips:
        return max(base.torus)
    return torus_dims(chips)[1]


def chip_document(doc: loader.Document) -> loader.Document:
    """The chip spec a chip or system spec is built of."""
    while doc.kind == "system":
        doc = loader.load_document(loader.find(doc.spec.member, near=doc.file.parent))
    return doc


def area_terms(doc: loader.Document) -> dict[str, float] | None:
    """The area terms of the chip a spec is built of, as `gen chip` left them in the
    synthesis cache (``hdl.area.load_chip``); None until every module of that chip has been
    synthesised (``gen chip CHIP --area``)."""
    chip = chip_document(doc)
    return synthesis.load_chip(chip.spec.name, chip.digest)


def chip_area(rows, cols, cores, base: Base):
    """NAND2 equivalents of one chip with ``cores`` cores of ``rows x cols`` tensor arrays:
    the chip's area terms (``generators.area.shape_terms``, composed from the synthesised
    modules' figures and their instance counts), NaN when they are unknown."""
    a = base.area
    if a is None:
        return np.full(np.shape(rows), np.nan)
    return cores * (a["core"] + synthesis.array_area(a, rows, cols)) + a["chip"]


def price_per_hour(v, base: Base):
    """Price of a design point: the base price scaled, factor by factor, by its share."""
    b = base.values
    total_chips = v["chips"] * base.instances * v["nodes"]
    base_chips = b["chips"] * base.instances * b["nodes"]
    scale = {
        "chips": total_chips / base_chips,
        "pe": (v["rows"] * v["cols"] * v["cores"] * total_chips)
        / (b["rows"] * b["cols"] * b["cores"] * base_chips),
        "peak_flops": (v["rows"] * v["cols"] * v["cores"] * v["clock"] * total_chips)
        / (b["rows"] * b["cols"] * b["cores"] * b["clock"] * base_chips),
        "hbm_capacity": v["hbm_capacity"] * total_chips / (b["hbm_capacity"] * base_chips),
        "hbm_bandwidth": v["hbm_bandwidth"] * total_chips / (b["hbm_bandwidth"] * base_chips),
        "link_bandwidth": v["link_bandwidth"] * total_chips
        / (b["link_bandwidth"] * base_chips),
    }
    return base.price_per_hour * sum(share * scale[k] for k, share in base.price_shares.items())


# --- the same model, one point at a time --------------------------------------------------

def evaluate_point(point: dict[str, float], base: Base, work: Workload) -> dict[str, float]:
    """The model for one design point in plain Python (reference and benchmark baseline).

    Collectives come from :mod:`sim.system.collectives` over :mod:`sim.system.topology`
    graphs; everything else is scalar arithmetic written out loop by loop.
    """
    p = {**base.values, **point}
    rows, cols, cores, lnc = (int(p[k]) for k in ("rows", "cols", "cores", "lnc"))
    chips = int(p["chips"])
    per_chip = cores // lnc if cores % lnc == 0 else cores / lnc
    total_chips = chips * base.instances * int(p["nodes"])
    ranks = total_chips * per_chip
    tp = work.tensor
    valid = cores % lnc == 0 and ranks % tp == 0
    rate = base.rate(work.dtype)
    elem = DTYPES[work.dtype]
    if not valid:
        return {"valid": False, "step_time": math.nan}
    dp = ranks // tp
    shard = work.gemms.split(tp, dp)
    gemm_time = backward = bound = 0.0
    hbm_share = p["hbm_bandwidth"] / per_chip
    sbuf = p["sbuf"] * lnc
    for i in range(len(shard.names)):
        m, k, n, count = (float(getattr(shard, d)[i]) for d in ("m", "k", "n", "count"))
        compute = _cycles_loop(m, k, n, rows, cols, rate, base, lnc) / p["clock"] * count
        memory = _bytes_scalar(m, k, n, elem, sbuf, cols, base.moving_max) * count / hbm_share
        t = max(compute, memory)
        gemm_time += t
        backward += t if shard.backward[i] else 0.0
        bound += t if memory > compute else 0.0
    tp_comm = work.tp_allreduces * _allreduce_point(work.tp_bytes / dp, tp, 1, p, base, per_chip)
    dp_comm = _allreduce_point(work.dp_bytes / tp, dp, tp, p, base, per_chip) \
        if work.dp_bytes else 0.0
    exposed = max(dp_comm - backward, 0.0) if work.overlap_gradients else dp_comm
    step = gemm_time + tp_comm + exposed
    replicas = dp if work.replicated else 1
    peak = 2 * rows * cols * p["clock"] * rate * cores * total_chips
    tokens = work.tokens * replicas / step
    pe_total = rows * cols * cores * total_chips
    if base.area is None:
        gates = math.nan
    else:
        a = base.area
        gates = (cores * (a["core"] + synthesis.array_area(a, rows, cols)) + a["chip"]) \
            * total_chips
    price = float(price_per_hour({k: np.float64(x) for k, x in p.items()}, base))
    state = work.state_bytes_tp / tp + work.state_bytes_tpdp / (tp * dp)
    return {
        "valid": True, "ranks": ranks, "data_parallel": dp, "step_time": step,
        "gemm_time": gemm_time, "memory_bound": bound / gemm_time, "tp_comm_time": tp_comm,
        "dp_comm_time": dp_comm, "utilisation": work.flops() * replicas / (peak * step),
        "tokens_per_second": tokens, "peak_flops": peak, "pe_total": pe_total,
        "tokens_per_second_per_pe": tokens / pe_total, "area": gates,
        "tokens_per_second_per_area": tokens / gates * 1e6, "price_per_hour": price,
        "tokens_per_dollar": tokens * 3600 / price, "state_bytes": state,
        "fits": state <= p["hbm_capacity"] / per_chip,
    }


def _cycles_loop(m, k, n, rows, cols, rate, base: Base, lnc) -> float:
    """Cycles by counting the LoadStationary + MultiplyMoving pairs of each tile shape:
    passes of ``rows`` contraction indices (twice that at double rate), stationary tiles of
    ``cols`` columns, moving tiles of ``moving_max``, each pair costing the array's
    :func:`sim.golden.systolic_cycles.tile_interval` (``1 / rate`` cycles per moving column below
    one MAC per PE per cycle), then :func:`sim.golden.systolic_cycles.stream_tail`. Where ``k``
    fits a tile of ``rows / w`` rows (``w`` a way of the array's tiling), stationary tiles
    of ``cols / w`` columns, ``w`` pairs at once; the fastest way counts."""
    slow = 1.0 / min(rate, 1.0)

    def pieces(size, tile):
        full, rest = divmod(int(size), int(tile))
        return [(t, c) for t, c in ((tile, full), (rest, 1)) if t and c]

    def walk(m_size, n_size, ways):
        t_cols = cols // ways
        pairs = sum(mc * nc * float(systolic_cycles.tile_interval(mt, nt, base.load_columns,
                                                                  slow, ways))
                    for mt, mc in pieces(m_size, t_cols)
                    for nt, nc in pieces(n_size, base.moving_max))
        passes = math.ceil(k / (rows * max(rate, 1.0))) if ways == 1 else 1
        first_m, first_n = min(m_size, t_cols), min(n_size, base.moving_max)
        return passes * pairs + float(systolic_cycles.stream_tail(first_m, first_n, rows, cols,
                                                                  base.load_columns, slow, ways))
    mt = math.ceil(m / cols)
    return min(min(walk(math.ceil(mt / lnc) * cols, n, w), walk(m, math.ceil(n / lnc), w))
               for w in sorted(set(base.tiles) | {1}) if w == 1 or k <= rows // w)


def _bytes_scalar(m, k, n, elem, sbuf, cols, moving_max) -> float:
    half = sbuf / 2
    mb = min(max(half // (k * elem) // cols * cols, cols), m)
    nb = min(max(half // (k * elem) // moving_max * moving_max, moving_max), n)
    w, x, y = k * m * elem, k * n * elem, m * n * elem
    return min(w + x * math.ceil(m / mb), x + w * math.ceil(n / nb)) + y


def _allreduce_point(nbytes, group, stride, p, base: Base, per_chip) -> float:
    chips = int(p["chips"])
    r0 = min(group, max(per_chip // stride, 1)) if stride < per_chip else 1
    spanned = -(-group // r0)
    chip_stride = max(stride // per_chip, 1)
    c1 = min(spanned, max(chips // chip_stride, 1))
    c2 = min(-(-spanned // c1), max(base.instances // max(chip_stride // chips, 1), 1))
    c3 = -(-spanned // (c1 * c2))
    t = collectives.ring_time("all_reduce", nbytes, int(r0),
                              p["hbm_bandwidth"] / (2 * per_chip), base.chip_alpha)
    chip_bytes = nbytes * per_chip / r0
    link = p["link_bandwidth"] / base.links
    eff, alpha, chunk = base.link_efficiency, base.link_alpha, collectives.CHUNK
    add = collectives.Add(base.add.fixed, base.add.start,
                          base.add.rate * p["cores"] / base.values["cores"])
    if c1 > 1:
        if base.topology == "torus":
            long = instance_long(chips, base)
            d1 = long if c1 % long == 0 else c1
            g = topology.torus((d1, c1 // d1), link)
            t += collectives.topology_time(g, "all_reduce", chip_bytes, alpha, eff,
                                           bidirectional=True, reduce=add, chunk=chunk)
        elif base.topology == "ring":
            t += collectives.ring_time("all_reduce", chip_bytes, c1, link, alpha, eff,
                                       bidirectional=True, reduce=add, chunk=chunk)
        elif base.topology == "switch":
            g = topology.switch(c1, p["link_bandwidth"])
            t += collectives.topology_time(g, "all_reduce", chip_bytes, alpha, eff, reduce=add,
                                           chunk=chunk)
    t += collectives.ring_time("all_reduce", chip_bytes / c1, c2, link, alpha, eff,
                               bidirectional=True, reduce=add, chunk=chunk)
    if c3 > 1:
        server_bytes = nbytes * per_chip * chips * base.instances / (r0 * c1 * c2)
        t += collectives.ring_time("all_reduce", server_bytes, c3, base.efa_bandwidth,
                                   base.efa_alpha, reduce=add, chunk=chunk)
    return t
