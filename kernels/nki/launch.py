"""Launching NKI kernels: ``nki.jit``, ``simulate_kernel``, ``simulate``, ``baremetal`` and
``benchmark``, each tracing the kernel (:class:`~kernels.nki.tracer.Tracer`) and running the
program on the core simulator (:class:`sim.core.Core`) of the target chip.

The target is ``platform_target=`` of the launch, else ``NEURON_PLATFORM_TARGET_OVERRIDE``
(``trn1``/``inf2``/``gen2``, ``trn2``/``gen3``, ``trn3``/``gen4``), else the session's
(``gen nki --spec``), else trn1. Numeric launches write numpy inputs into HBM, fill outputs
with NaN first (as NKI's simulator fills new buffers) and return the outputs as numpy arrays;
``benchmark`` runs timing only, and its ``benchmark_result.nc_latency`` gives trngen's
predicted time at every percentile (it is one number, not a distribution); ``profile`` runs
timing only and writes a Perfetto trace. A grid dimension made with ``nl.nc(n)`` /
``nl.spmd_dim`` spreads its instances over the ``n`` physical cores of a logical core (the
spec's LNC options say which chips have one): each core's instances are traced into their
own program and run on their own core, sharing HBM; the launch takes the slowest. Every
launch is recorded in :data:`SESSION` ``.launches``, traced for the core at the session's
``scale`` (``"sim"``: the core RTL's simulation scale) and, with its ``keep``, with its
programs and initial HBM, which `gen nki --rtl` co-simulates on the core RTL.
"""

from __future__ import annotations

import copy
import functools
import inspect
import itertools
import math
import os
import time
from dataclasses import dataclass, field, replace

import ml_dtypes
import numpy as np

from hdl.core.params import CoreParams
from kernels.builder import KernelError
from sim.core import Core, Program, ProgramError, Result, dma_seconds

from .errors import NkiError, NotSupported
from .source import with_mask_logic
from .tracer import Tracer, View, cross_core_race, isa_dtype, near, numpy_dtype, tracing
from .typing import TensorType

__all__ = ["SESSION", "Kernel", "Launch", "baremetal", "benchmark", "jit", "params_for",
           "parse_shapes", "profile", "run_file", "simulate", "simulate_kernel"]

_TARGETS = {"trn1": "trn1", "inf2": "inf2", "gen2": "trn1", "trn2": "trn2", "gen3": "trn2",
            "trn3": "trn3", "gen4": "trn3"}
_PERCENTILES = (0, 1, 10, 25, 50, 90, 99, 100)


@dataclass
class Launch:
    """One launch: what ran where, the program's size and the simulator's result."""

    kernel: str
    file: str
    target: str
    mode: str  # "numeric" or "timing"
    grid: tuple[int, ...]
    instructions: int
    result: Result
    sbuf_high: int  # bytes per partition held at most
    psum_high: int
    matmul_dtypes: tuple[str, ...]
    compile_seconds: float
    run_seconds: float
    cores: int = 1  # physical NeuronCores the grid ran on (nl.nc); result is the slowest
    #: with the session's ``keep``: each core's program and the HBM it started from (None
    #: in timing mode)
    programs: tuple[Program, ...] = ()
    hbm: np.ndarray | None = None
    #: SBUF tensors spilled to HBM and back (:meth:`Tracer.allocate`), their bytes per
    #: partition, and the allocation that made the first: (kernel line, tensor, bytes)
    spills: int = 0
    spilled_bytes: int = 0
    first_spill: tuple[str, str, int] | None = None
    #: repeated instructions computed once (:meth:`Tracer.merge_repeats`)
    merged: int = 0


@dataclass
class Session:
    target: str | None = None
    timing_only: bool = False
    trace: bool = False
    #: the core's scale the kernels are traced for (:func:`hdl.params.core_params`)
    scale: str = "full"
    #: whether each launch keeps its programs and initial HBM (:class:`Launch`)
    keep: bool = False
    #: whether SBUF that does not fit spills to HBM, as NKI's compiler does, or is NKI's
    #: out-of-memory error (:meth:`Tracer.allocate`)
    spill: bool = True
    launches: list[Launch] = field(default_factory=list)


#: The defaults of launches and their record (``gen nki`` sets and reads it).
SESSION = Session()


@functools.cache
def _lnc(target: str) -> tuple[int, ...]:
    """The logical-core sizes (NeuronCores per logical core) the target's spec offers."""
    from specs.loader import load_document

    return tuple(load_document(target).spec.lnc.options)


@functools.cache
def params_for(target: str, scale: str = "full") -> CoreParams:
    """The NeuronCore of chip ``target`` at ``scale`` ("full", or "sim": the core RTL's
    simulation scale)."""
    from hdl.params import core_params
    from specs.loader import load_document

    return core_params(load_document(target).spec, scale)


def _target(platform_target) -> str:
    name = platform_target or os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE") or \
        SESSION.target or "trn1"
    if name not in _TARGETS:
        raise NkiError(f"platform target must be one of {', '.join(_TARGETS)}, not {name!r}")
    return _TARGETS[name]


def _is_array(x) -> bool:
    return isinstance(x, (np.ndarray, TensorType))


def _run(tracer: Tracer, program, timing_only: bool, trace: bool, hbm, lines=None,
         memories=None):
    """The core simulator's run of ``program`` (a phase of ``lines``, from ``memories``:
    :func:`_run_phases`); a rule of the core that an instruction breaks is an error at the
    kernel's line that made the instruction, and an indirect DMA's row out of its tensor the
    ``IndexError`` NKI's simulator raises."""
    try:
        return Core(tracer.params).run(program, timing_only=timing_only, trace=trace, hbm=hbm,
                                       memories=memories)
    except ProgramError as e:
        if e.rule == "index bounds":
            raise IndexError(e.detail) from None
        where = (tracer.lines if lines is None else lines).get(e.at) if e.at else None
        if where is None:
            raise
        raise NkiError(f"the core's rules refuse the instruction this line makes: {e}",
                       where=where) from None


def _image(programs, inputs: dict, names: dict, tracers) -> np.ndarray:
    """The HBM image a launch starts from: every floating-point tensor NaN, the kernel's
    inputs (``names``: argument -> its HBM tensor's name) and constants written."""
    hbm = np.zeros(max(p.hbm_bytes for p in programs), dtype=np.uint8)
    for t in (t for p in programs for t in p.tensors.values()):
        if t.dtype in ("fp32", "bf16", "fp16"):
            _put(hbm, t, np.full(t.shape, np.nan, numpy_dtype(t.dtype)))
    for name, value in inputs.items():
        _put(hbm, programs[0].tensors[names[name]], np.asarray(value))
    for tracer in tracers:
        for tensor, data in tracer.constants:
            _put(hbm, tensor, data)
    return hbm


def _run_to_here(inputs: dict, names: dict, core: int = 0, others: dict | None = None):
    """A tracer's :attr:`~Tracer.oracle`: the program traced so far (a copy of the tracer,
    finished as a launch finishes it) run on the core simulator from the kernel's
    ``inputs``; the bytes ``view`` then holds. On core ``core`` of an ``nl.nc`` grid the
    other cores' programs (``others``: core -> its tracer and phases, of an earlier trace)
    run with it phase by phase up to the meeting before the load, after which this core
    runs alone: between two meetings nothing orders the cores, so only what they did
    before counts."""
    def oracle(tracer: Tracer, view: View) -> np.ndarray:
        memo = {id(tracer.params): tracer.params, id(tracer.oracle): None}
        clone, v = copy.deepcopy((tracer, view), memo)
        phases = clone.programs()
        given = others or {}
        cores = {core: clone, **{c: t for c, (t, _) in given.items()}}
        order = sorted(cores)
        every = {c: phases if c == core else given[c][1] for c in order}
        hbm = _image([every[c][0] for c in order], inputs, names,
                     [cores[c] for c in order])
        before = len(phases) - 1
        if before and len(order) > 1:
            kept: list = []
            _run_phases([cores[c] for c in order], [every[c][:before] for c in order],
                        False, False, hbm, kept)
            mine = kept[order.index(core)]
        else:
            mine = Core(clone.params).memories(phases[0], hbm)
            for k in range(before):
                _run(clone, phases[k], False, False, hbm, clone.phase_lines[k], mine)
        _run(clone, phases[before], False, False, hbm, clone.phase_lines[before], mine)
        ap = clone.ap(v, "register_load", "src", ("sbuf", "psum", "hbm"), dma=True)
        if ap.space != "hbm":
            ap = replace(ap, offset=ap.offset + v.buf.offset)
        return mine.read(ap)
    return oracle


def _same_meetings(tracers: list[Tracer]) -> None:
    """Refuse a launch whose cores meet (``core_barrier``, ``sendrecv``) at different
    places: in number, or one core's barrier the other's exchange."""
    kinds = [[m is None for _, _, m in t.boundaries] for t in tracers]
    if any(k != kinds[0] for k in kinds):
        where = next(t.boundaries[-1][1] for t in tracers if t.boundaries)
        raise NotSupported("cores of an nl.nc grid that meet (core_barrier, sendrecv) at "
                           "different places", "the same core_barrier and sendrecv calls "
                           "on every core, in the same order", where=where)


def _no_races_between_cores(tracers: list[Tracer], phases: list[list], ks=None,
                            landed=None) -> None:
    """Refuse a launch two of whose cores touch the same HBM bytes between two meetings,
    one of them writing (:func:`~kernels.nki.tracer.cross_core_race`): nothing but a
    ``core_barrier`` or ``sendrecv`` orders the cores, so the result is whichever core's
    DMA ran last. ``ks``: the phases to check (every one); ``landed``: where the indirect
    DMAs of the one phase checked landed, each core's, from its run."""
    for k in range(len(phases[0])) if ks is None else ks:
        race = cross_core_race([p[k] for p in phases], [t.phase_lines[k] for t in tracers],
                               tracers[0].private, landed)
        if race is None:
            continue
        (c0, s0, i0), (c1, s1, i1) = race
        here, there = (tracers[c].phase_lines[k].get((s, i), "?")
                       for c, s, i in ((c0, s0, i0), (c1, s1, i1)))
        raise NkiError(f"core {c0}'s DMA of this line writes HBM bytes that core {c1}'s "
                       f"DMA of {near(there, here)} also accesses, with no core_barrier or "
                       f"sendrecv between them: the result depends on which core runs first",
                       where=here)


def _run_phases(tracers: list[Tracer], phases: list[list], timing_only: bool, trace: bool,
                hbm, kept: list | None = None) -> list[Result]:
    """Each core's program run phase by phase (:meth:`Tracer.programs`): a phase starts on
    every core when the last core ended the one before and its exchanges (``sendrecv``:
    each core's ``dst`` takes the ``src`` of the core it receives from, read before any is
    written) arrived, one DMA between the cores' SBUF each (the DMA rule,
    :func:`~sim.core.dma_seconds`, the slowest counted). Each core's result is its phases'
    (busy and work summed, the trace's events at their phase's start). ``kept``: filled with
    each core's memories (a run of the phases before a meeting makes that meeting's
    exchange too)."""
    cores = [Core(t.params) for t in tracers]
    memories = [None] * len(tracers) if timing_only else \
        [c.memories(p[0], hbm) for c, p in zip(cores, phases, strict=True)]
    if kept is not None:
        kept[:] = memories
    parts: list[list[tuple[float, Result]]] = [[] for _ in tracers]
    moved = [0] * len(tracers)
    start = 0.0
    # the HBM tensors each core has its own of (nl.hbm, nl.private_hbm) share their places
    # in the one image: each core's bytes are put back before its phase and kept after
    own = [None] * len(tracers)

    def run(i, k):
        t = tracers[i]
        if hbm is not None and own[i] is not None:
            for (a, b), data in zip(t.private, own[i], strict=True):
                hbm[a:b] = data
        r = _run(t, phases[i][k], timing_only, trace, hbm, t.phase_lines[k], memories[i])
        if hbm is not None and t.private:
            own[i] = [hbm[a:b].copy() for a, b in t.private]
        return r

    for k in range(len(phases[0])):
        for m in memories:
            if m is not None:
                m.landed = []
        runs = [run(i, k) for i in range(len(tracers))]
        landed = [m.landed if m is not None else None for m in memories]
        if any(landed):  # where the indirect DMAs landed, against the other cores' accesses
            _no_races_between_cores(tracers, phases, (k,), landed)
        for part, r in zip(parts, runs, strict=True):
            part.append((start, r))
        start += max(r.time for r in runs)
        if k >= len(tracers[0].boundaries) or tracers[0].boundaries[k][2] is None:
            continue  # no meeting after this phase, or one that exchanges nothing
        sent, took = [], 0.0
        for t in tracers:  # every src read before any dst is written
            src, sbuf, dst, dbuf, _, frm = t.boundaries[k][2]
            src = replace(src, offset=src.offset + sbuf.offset)
            sent.append((src, replace(dst, offset=dst.offset + dbuf.offset), frm))
        data = [None if m is None else m.read(src) for m, (src, _, _) in
                zip(memories, sent, strict=True)]
        for i, (t, (_, dst, frm)) in enumerate(zip(tracers, sent, strict=True)):
            if memories[i] is not None:
                memories[i].write(dst, data[frm])
            latency, transfer = dma_seconds(t.params, sent[frm][0], dst)
            took = max(took, latency + transfer)
            moved[i] += dst.nbytes
        start += took
    return [Result(start, _summed(r.busy for _, r in part), _summed(r.cycles for _, r in part),
                   _summed(r.instructions for _, r in part), sum(r.flops for _, r in part),
                   sum(r.dma_bytes for _, r in part) + extra,
                   [dict(e, ts=e["ts"] + at * 1e6) for at, r in part for e in r.events],
                   part[-1][1].sbuf, part[-1][1].psum)
            for part, extra in zip(parts, moved, strict=True)]


def _summed(dicts) -> dict:
    out: dict = {}
    for d in dicts:
        for key, value in d.items():
            out[key] = out.get(key, 0) + value
    return out


def generation(func) -> int:
    """The NKI ``func`` is written in: 2 where its module took ``nki.isa`` (the 0.2
    interface, :mod:`kernels.nki.isa_dst`), else 1."""
    from . import isa_dst

    return 2 if any(v is isa_dst for v in getattr(func, "__globals__", {}).values()) else 1


class Kernel:
    """A kernel function and how to launch it; ``kernel[g0, g1]`` launches an SPMD grid."""

    def __init__(self, func, mode: str = "auto", grid: tuple[int, ...] = (), **options):
        while isinstance(func, Kernel):
            func = func.func
        self.func, self.mode, self.grid, self.options = func, mode, grid, options
        self.body = with_mask_logic(func)  # what runs when the kernel is traced
        functools.update_wrapper(self, func)
        self.benchmark_result = None

    def __getitem__(self, grid) -> Kernel:
        from .language import SpmdDim

        grid = grid if isinstance(grid, tuple) else (grid,)
        for g in grid:
            if not isinstance(g, (int, np.integer, SpmdDim)):
                raise NotSupported(f"launch grid dimension {g!r}",
                                   "integers, nl.nc(n) and nl.spmd_dim(...)")
            if isinstance(g, (int, np.integer)) and g < 1:
                raise NkiError(f"a launch grid dimension of {g} launches no instance of "
                               f"{self.__name__}: each dimension is at least 1")
        return Kernel(self.func, self.mode, tuple(SpmdDim.of(g) for g in grid),
                      **self.options)

    def __call__(self, *args, **kwargs):
        if tracing():  # a kernel called from a kernel being traced is part of its program
            if self.grid:
                raise NotSupported("a launch grid on a kernel called from a kernel",
                                   "the call without a grid")
            return self.body(*args, **kwargs)
        mode = self.mode
        if mode in ("jax", "torchxla"):
            raise NotSupported(f"nki.jit(mode={mode!r})", "numpy inputs (modes auto, "
                               "baremetal, simulation, benchmark)")
        if mode == "benchmark":
            return self.benchmark(*args, **kwargs)
        if mode == "profile":
            return self.profile(*args, **kwargs)
        return self.run(*args, **kwargs)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(d.size for d in self.grid)

    def trace(self, *args, platform_target=None, **kwargs):
        """(tracer, target, kernel arguments, inputs by name, returned value) of one trace
        of the kernel: every instance of its grid on one NeuronCore."""
        tracers, target, calls, inputs, out = self._trace(args, kwargs, platform_target, 1)
        return tracers[0], target, calls[0], inputs, out

    def _trace(self, args, kwargs, platform_target, cores: int):
        """A tracer per physical core (``cores``: those the grid's ``nl.nc`` spreads its
        instances over), each tracing its instances in grid order. A register a core of
        several loads (:meth:`Tracer.register_load`) takes its value from a run of the
        cores up to it, the other cores' programs those of the trace before (at first, this
        core's alone): the cores are traced again until every register's values are those
        of the trace before (refused if they are not by the third)."""
        earlier = None
        for _ in range(3):
            traced = self._trace_once(args, kwargs, platform_target, cores, earlier)
            values = [t.register_values for t in traced[0]]
            if cores == 1 or not any(values) or (
                    earlier is not None and values == [t.register_values for t, _ in earlier]):
                return traced
            # finished, for the next trace's registers to run
            earlier = [(t, t.programs()) for t in traced[0]]
        raise NotSupported("registers whose values change from one trace of an nl.nc "
                           "grid's cores to the next", "registers loaded from data that "
                           "settles", where=traced[0][0].register_lines[0])

    def _trace_once(self, args, kwargs, platform_target, cores: int, earlier):
        """Every core traced once (:meth:`_trace`); ``earlier``: the tracers of the trace
        before, whose programs a register load runs for the other cores."""
        target = _target(platform_target or self.options.get("platform_target"))
        bound = inspect.signature(self.func).bind(*args, **kwargs)
        pids = list(itertools.product(*(range(g) for g in self.sizes))) if self.grid \
            else [()]
        tracers, calls, inputs, out = [], [], {}, None
        for core in range(cores):
            tracer = Tracer(params_for(target, SESSION.scale), spill=SESSION.spill)
            tracer.grid = self.sizes
            tracer.cores = cores
            tracer.auto_alloc = getattr(self.func, "__nki_auto_alloc__", False)
            tracer.generation = generation(self.func)
            call = {}
            with tracer:
                for name, value in bound.arguments.items():
                    if _is_array(value):
                        dt = value.isa if isinstance(value, TensorType) else \
                            isa_dtype(value.dtype)
                        call[name] = tracer.hbm(name, value.shape, dt)
                        inputs[name] = value
                    else:
                        call[name] = value
                if not any(isinstance(v, TensorType) for v in inputs.values()):
                    tracer.oracle = _run_to_here(
                        inputs, {n: call[n].buf.hbm.name for n in inputs}, core,
                        None if earlier is None else
                        {c: t for c, t in enumerate(earlier) if c != core})
                for pid in pids:
                    if cores > 1 and self._core(pid) != core:
                        continue
                    tracer.program_id = tuple(pid)
                    tracer._shared_next = 0
                    out = _stored(tracer, self.body(**call))
            tracers.append(tracer)
            calls.append(call)
        return tracers, target, calls, inputs, out

    def _core(self, pid) -> int:
        """The physical core of grid instance ``pid``."""
        core, scale = 0, 1
        for d, i in zip(reversed(self.grid), reversed(pid), strict=True):
            core += d.core(i) * scale
            scale *= d.cores
        return core

    def _launch(self, args, kwargs, timing_only: bool, trace: bool = False):
        platform = kwargs.pop("platform_target", None)
        t0 = time.perf_counter()
        cores = math.prod(d.cores for d in self.grid)
        target = _target(platform or self.options.get("platform_target"))
        if cores > 1 and cores > max(_lnc(target)):
            raise NkiError(f"a launch grid over nl.nc({cores}) needs a logical core of "
                           f"{cores} NeuronCores; {target} has LNC "
                           f"{'/'.join(map(str, _lnc(target)))}")
        tracers, target, calls, inputs, out = self._trace(args, kwargs, platform, cores)
        _same_meetings(tracers)
        phases = [t.programs() for t in tracers]
        if cores > 1:
            _no_races_between_cores(tracers, phases)
        programs = [p[0] for p in phases]
        _same_hbm_tensors(tracers, programs, calls[0])
        t1 = time.perf_counter()
        timing_only = timing_only or SESSION.timing_only or \
            any(isinstance(v, TensorType) for v in inputs.values())
        hbm = None
        if not timing_only:
            hbm = _image(programs, inputs, {n: calls[0][n].buf.hbm.name for n in inputs},
                         tracers)
        initial = hbm.copy() if SESSION.keep and hbm is not None else None
        # the cores run side by side on their own engines; the instances of an SPMD grid
        # share no on-chip state, so running them one after the other gives their numerics
        if len(phases[0]) > 1 or cores > 1:
            results = _run_phases(tracers, phases, timing_only, SESSION.trace or trace, hbm)
        else:
            results = [_run(t, p, timing_only, SESSION.trace or trace, hbm)
                       for t, p in zip(tracers, programs, strict=True)]
        slowest = max(range(cores), key=lambda i: results[i].time)
        t2 = time.perf_counter()
        code = self.func.__code__
        tracer = tracers[slowest]
        SESSION.launches.append(Launch(
            self.func.__name__, f"{code.co_filename}:{code.co_firstlineno}", target,
            "timing" if timing_only else "numeric", self.sizes,
            sum(len(p) for p in phases[slowest]),
            results[slowest], tracer.spaces["sbuf"].high, tracer.spaces["psum"].high,
            tuple(sorted(tracer.matmul_dtypes)), t1 - t0, t2 - t1, cores,
            tuple(programs) if SESSION.keep else (), initial, tracer.spills,
            tracer.spilled_bytes, tracer.first_spill, tracer.merged))
        if hbm is not None:
            for prefix, copy in tracers[0].prints:  # nl.device_print (the first core's)
                print(prefix, _outputs(copy, hbm))
            # an argument is device memory: what the kernel wrote, it holds
            for name, value in inputs.items():
                if isinstance(value, np.ndarray) and value.flags.writeable:
                    t = calls[0][name].buf.hbm
                    value[...] = hbm[t.offset:t.offset + t.nbytes].view(value.dtype) \
                        .reshape(value.shape)
        return _outputs(out, hbm)

    def run(self, *args, **kwargs):
        """Trace, run with data and return the kernel's outputs as numpy arrays."""
        return self._launch(args, kwargs, False)

    def benchmark(self, *args, **kwargs):
        """Trace and time; ``benchmark_result.nc_latency`` holds the predicted time. With
        ``save_trace_name``, the run's Chrome/Perfetto trace (JSON, whatever the name's
        suffix: NKI's NTFF device profile has no equivalent here) is written to that path."""
        where = self.options.get("save_trace_name")
        self._launch(args, kwargs, True, trace=bool(where))
        if where:
            with open(where, "w") as f:
                f.write(SESSION.launches[-1].result.trace_json())
        self.benchmark_result = BenchmarkResult(
            Latency(SESSION.launches[-1].result.time * 1e6))
        return None

    def profile(self, *args, **kwargs):
        """Trace and time, and write the run as a Chrome/Perfetto trace (JSON) into
        ``working_directory`` (an absolute path, as NKI asks), named ``save_trace_name``
        with its suffix ``.json`` (``profile.json`` by default); an existing file is kept
        unless ``overwrite``. NKI's device profile (NEFF, NTFF) has no equivalent here."""
        opts = self.options
        where = opts.get("working_directory")
        if not where or not os.path.isabs(str(where)):
            raise NkiError(f"nki.profile needs an absolute working_directory, not {where!r}")
        name = os.path.splitext(opts.get("save_trace_name") or "profile.ntff")[0] + ".json"
        path = os.path.join(str(where), name)
        if os.path.exists(path) and not opts.get("overwrite", False):
            raise NkiError(f"{path} exists (nki.profile(overwrite=True) replaces it)")
        self._launch(args, kwargs, True, trace=True)
        os.makedirs(str(where), exist_ok=True)
        with open(path, "w") as f:
            f.write(SESSION.launches[-1].result.trace_json())
        return None


def _same_hbm_tensors(tracers, programs, call: dict) -> None:
    """Refuse a launch whose cores' programs place the kernel's HBM tensors (its arguments,
    its shared_hbm tensors, its constants) differently. A core may make HBM tensors of its
    own besides (trngen's staging of an on-chip transpose): placed after the shared ones,
    only its own program touches them, and the cores' programs run one after the other on
    one HBM image."""
    kernel = {v.buf.hbm.name for v in call.values() if isinstance(v, View)}
    for tracer in tracers:
        kernel |= {v.buf.hbm.name for v in tracer.shared}
        kernel |= {tensor.name for tensor, _ in tracer.constants}
    first = {n: (x.offset, x.shape) for n, x in programs[0].tensors.items()}
    for other in programs[1:]:
        mine = {n: (x.offset, x.shape) for n, x in other.tensors.items()}
        if {n for n in first.keys() | mine.keys() if first.get(n) != mine.get(n)} & kernel:
            raise NotSupported("an SPMD kernel whose instances on different cores make "
                               "different HBM tensors",
                               "instances that make the same shared_hbm tensors")


def _put(hbm: np.ndarray, t, x: np.ndarray) -> None:
    if x.dtype in (np.bool_, ml_dtypes.float8_e8m0fnu):  # bytes to the core
        x = x.view(np.uint8)
    if tuple(x.shape) != tuple(t.shape):
        raise NkiError(f"input {t.name} has shape {list(x.shape)}, the kernel's tensor "
                       f"{list(t.shape)}")
    want = numpy_dtype(t.dtype)
    if x.dtype != want:
        raise NkiError(f"input {t.name} is {x.dtype}, the kernel's tensor {want}")
    hbm[t.offset: t.offset + t.nbytes] = np.ascontiguousarray(x).view(np.uint8).reshape(-1)


def _stored(tracer: Tracer, out):
    """A kernel's results with each on-chip tile it returns (NKI's simulator returns them)
    stored at its end into an HBM tensor of its own."""
    if isinstance(out, (tuple, list)):
        return type(out)(_stored(tracer, o) for o in out)
    if isinstance(out, View) and out.buf.space != "hbm":
        from . import language

        tracer.commit()
        hbm = tracer.hbm("returned", out.shape, out.dt, shared=True)
        language.store(hbm, out)
        return hbm
    return out


def _outputs(out, hbm):
    if out is None:
        return None
    if isinstance(out, (tuple, list)):
        return type(out)(_outputs(o, hbm) for o in out)
    if not isinstance(out, View) or out.buf.space != "hbm":
        raise NkiError(f"a kernel returns HBM tensors, not {out!r}")
    t = out.buf.hbm
    if out.off != t.offset or math.prod(out.shape) != math.prod(t.shape) \
            or not View._contiguous(out.dims):
        raise NotSupported("returning a view of an HBM tensor",
                           "returning whole tensors, reshaped or not")
    if hbm is None:
        return np.full(out.shape, np.nan, numpy_dtype(t.dtype)) \
            if t.dtype in ("fp32", "bf16", "fp16") else np.zeros(out.shape, numpy_dtype(t.dtype))
    raw = hbm[t.offset: t.offset + t.nbytes]
    return raw.view(numpy_dtype(t.dtype)).reshape(out.shape).copy()


@dataclass(frozen=True)
class Latency:
    """``nc_latency``: trngen's predicted time in microseconds at every percentile."""

    microseconds: float

    def get_latency_percentile(self, percentile: int) -> float:
        if percentile not in _PERCENTILES:
            raise NkiError(f"available percentiles are {list(_PERCENTILES)}, not "
                           f"{percentile!r}")
        return self.microseconds


@dataclass(frozen=True)
class BenchmarkResult:
    nc_latency: Latency


def jit(func=None, mode: str = "auto", **kwargs):
    """``@nki.jit`` / ``@nki.jit(mode=...)``: a :class:`Kernel`."""
    if func is None:
        return lambda f: Kernel(f, mode, **kwargs)
    return Kernel(func, mode, **kwargs)


def trace(func=None, **kwargs):
    """``@nki.trace``: a kernel launched by ``nki.simulate_kernel`` or ``nki.baremetal``,
    which may write its results into its arguments."""
    return jit(func, mode="trace", **kwargs)


def simulate_kernel(kernel, *args, **kwargs):
    """Run ``kernel`` with numpy inputs; its outputs."""
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    return k.run(*args, **kwargs)


def simulate(kernel):
    """``nki.simulate(kernel)(*args)``: a numeric run (NKI 0.2's simulator entry)."""
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    return k.run


def baremetal(kernel=None, **kwargs):
    """``@nki.baremetal``: numeric runs."""
    if kernel is None:
        return lambda f: Kernel(f, "baremetal")
    return Kernel(kernel, "baremetal")


def benchmark(kernel=None, *, warmup: int = 10, iters: int = 100, save_trace_name=None,
              **kwargs):
    """``@nki.benchmark(warmup=, iters=, save_trace_name=)``: timing-only runs (warm-up and
    iterations are the same on a deterministic model), the trace written where asked."""
    opts = {"save_trace_name": save_trace_name} if save_trace_name else {}
    if kernel is None:
        return lambda f: Kernel(f, "benchmark", **opts)
    return Kernel(kernel, "benchmark", **opts)


def profile(func=None, *, working_directory=None, save_neff_name=None, save_trace_name=None,
            overwrite=False, profile_nth=1, additional_compile_opt=None, **kwargs):
    """``@nki.profile(working_directory=..., save_trace_name=...)``: timing-only runs that
    write a Perfetto trace of each (:meth:`Kernel.profile`)."""
    opts = {"working_directory": working_directory, "save_trace_name": save_trace_name,
            "overwrite": overwrite}
    if func is None:
        return lambda f: Kernel(f, "profile", **opts)
    return Kernel(func, "profile", **opts)


def parse_shapes(text: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """``"a=128x512:bf16,b=512:fp32"`` -> {name: (shape, ISA dtype)} (dtype default fp32;
    NKI's names such as ``bfloat16`` too)."""
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, eq, rest = item.partition("=")
        dims, _, dt = rest.partition(":")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            shape = ()
        if not eq or not name or not shape or any(d < 1 for d in shape):
            raise KernelError(f"--shape items read NAME=DxD...[:DTYPE], not {item!r}")
        dt = dt or "fp32"
        out[name] = (shape, dt if dt in _ISA_NAMES else isa_dtype(_NKI_NAMES.get(dt, dt)))
    return out


_ISA_NAMES = ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "tf32", "int8", "int32",
              "uint8", "uint32")
_NKI_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16",
              "float8_e4m3": "fp8_e4m3", "float8_e5m2": "fp8_e5m2", "tfloat32": "tf32"}


def run_file(path, kernel: str | None = None, shapes: dict | None = None, *,
             target: str | None = None, timing_only: bool = False, trace: bool = False,
             seed: int = 0, scale: str = "full", keep: bool = False,
             spill: bool = True) -> list[Launch]:
    """Run the NKI kernel file ``path`` with the interface installed: as ``__main__``
    (its own script launches), or with ``kernel`` that one kernel on random normal inputs
    of ``shapes`` (:func:`parse_shapes`), traced for the core at ``scale``, each launch
    keeping its programs and initial HBM with ``keep``, SBUF that does not fit spilling to
    HBM with ``spill``. The launches it made."""
    import runpy
    import sys

    from . import installed

    before = (SESSION.target, SESSION.timing_only, SESSION.trace, SESSION.scale, SESSION.keep,
              SESSION.spill)
    SESSION.target, SESSION.timing_only, SESSION.trace = target, timing_only, trace
    SESSION.scale, SESSION.keep, SESSION.spill = scale, keep, spill
    SESSION.launches = []
    argv, syspath = sys.argv, list(sys.path)
    sys.argv = [str(path)]
    sys.path.insert(0, os.path.dirname(os.path.abspath(str(path))))  # as `python FILE` does
    try:
        with installed():
            if kernel is None:
                scope = runpy.run_path(str(path), run_name="__main__")
                if not SESSION.launches:
                    names = sorted(n for n, v in scope.items() if isinstance(v, Kernel))
                    raise NkiError(f"launched no kernel when run; its kernels: "
                                   f"{', '.join(names) or 'none'} (launch one with --kernel "
                                   f"NAME --shape ...)", where=str(path))
                return SESSION.launches
            scope = runpy.run_path(str(path), run_name="__nki__")
            fn = scope.get(kernel)
            if fn is None or not callable(fn):
                names = sorted(n for n, v in scope.items() if isinstance(v, Kernel))
                raise NkiError(f"no kernel {kernel!r}; its kernels: {', '.join(names) or 'none'}",
                               where=str(path))
            k = fn if isinstance(fn, Kernel) else Kernel(fn)
            params = list(inspect.signature(k.func).parameters)
            shapes = shapes or {}
            unknown = [n for n in shapes if n not in params]
            if unknown:
                raise NkiError(f"{kernel} takes {', '.join(params)}; --shape names "
                               f"{', '.join(unknown)}")
            rng = np.random.default_rng(seed)
            args = {}
            for name, (shape, dt) in shapes.items():
                if timing_only:
                    args[name] = TensorType(shape, numpy_dtype(dt))
                else:
                    args[name] = rng.standard_normal(shape).astype(numpy_dtype(dt))
            k.run(**args)
            return SESSION.launches
    finally:
        sys.argv = argv
        sys.path[:] = syspath
        (SESSION.target, SESSION.timing_only, SESSION.trace, SESSION.scale, SESSION.keep,
         SESSION.spill) = before
