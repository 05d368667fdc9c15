"""The NKI front end: kernels written against the public Neuron Kernel Interface, traced into
the core's ISA, checked, run and timed by the core simulator.

The interface (facts/nki.md has its sources): :mod:`.language` (``nl``), :mod:`.isa`
(``nisa`` of NKI 0.1, calls that return tiles), :mod:`.isa_dst` (``nisa`` of NKI 0.2 and
later, calls that write ``dst``), :mod:`.typing` (``nt``), :mod:`.compiler` (``ncc``, direct
allocation) and the launch calls of :mod:`.launch`. :func:`install` makes a kernel's own
imports find them: ``neuronxcc.nki``, ``neuronxcc.nki.language``, ``neuronxcc.nki.isa``,
``neuronxcc.nki.typing``, ``neuronxcc.nki.compiler`` (NKI 0.1) and ``nki``,
``nki.language``, ``nki.isa``, ``nki.typing``, ``nki.compiler`` (NKI 0.2), each
``isa.constants`` (the enums) too, and NKI 0.2's ``nki.collectives`` (:mod:`.collectives`:
it imports, its calls are refused), except where a real Neuron SDK is importable, which it
never shadows unless asked. A tensor (:class:`.tracer.View`) has both generations' views:
slicing, ``reshape``, ``.ap`` and, of NKI 0.2, ``slice``, ``select`` (at a run-time index
too), ``vector_select``, ``permute``, ``reshape_dim``, ``flatten_dims``, ``expand_dim``,
``squeeze_dim``, ``broadcast``, ``rearrange`` and ``view``. Loops the engines' sequencers
run on registers (``nl.dynamic_range``, ``nl.fori_loop``, ``nl.while_loop``, bounded by
``nisa.register_alloc``/``register_load``/``register_move``) unroll as they run: a register
loaded from a tensor takes the value the program up to there leaves in it
(:meth:`.tracer.Tracer.register_load`; a launch with the kernel's data on one core). The
``op`` of the element-wise and reduction calls is any operator of NKI's table that the
engines have (:data:`.lower.VECTOR_OPS`: the arithmetic, the comparisons, the logical and
bitwise operators, the shifts, ``abs_max``/``abs_min``, ``power`` on GpSimd), each reduction
NKI allows included, and ``tensor_scalar``'s unary operators (:data:`.lower.UNARY_OPS`:
``abs``, ``square``, ``relu``, the vector engine's ``reciprocal``, GpSimd's ``rsqrt``). An
instruction runs on the engine NKI names for it (:data:`hdl.vector.ops.ENGINE_ONLY_OPS`;
``nisa.exponential`` on the vector engine where the chip's spec says it evaluates exp).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from contextlib import contextmanager

import numpy as np

from . import collectives, compiler, isa, isa_dst, language, typing
from .errors import NkiError, NotSupported
from .launch import (
    SESSION,
    Kernel,
    Launch,
    baremetal,
    benchmark,
    jit,
    profile,
    simulate,
    simulate_kernel,
    trace,
)

__all__ = ["INTERFACES", "SESSION", "Kernel", "Launch", "NkiError", "NotSupported", "baremetal",
           "benchmark", "collectives", "compiler", "install", "installed", "isa", "isa_dst",
           "jit", "language", "profile", "simulate", "simulate_kernel", "trace", "typing",
           "uninstall"]

_LAUNCH = {"jit": jit, "trace": trace, "simulate_kernel": simulate_kernel,
           "simulate": simulate, "baremetal": baremetal, "benchmark": benchmark,
           "profile": profile}


def _package(name: str, isa_module, doc: str) -> types.ModuleType:
    m = types.ModuleType(name, doc)
    m.__path__ = []  # a package, so that `import name.language` resolves
    m.__dict__.update(_LAUNCH, language=language, isa=isa_module, typing=typing,
                      compiler=compiler, errors=sys.modules[__name__ + ".errors"])
    return m


def _modules() -> dict[str, types.ModuleType]:
    old = _package("neuronxcc.nki", isa, "trngen's NKI 0.1 interface")
    new = _package("nki", isa_dst, "trngen's NKI 0.2 interface")
    # the type of a data type, as aws-neuron/nki-library annotates with it: numpy's here
    new.dtype = np.dtype
    new.collectives = collectives
    top = types.ModuleType("neuronxcc", "trngen's stand-in for the Neuron compiler package")
    top.__path__ = []
    top.nki = old
    # the enums of nki.isa, importable as nki.isa.constants too
    constants = types.ModuleType("nki.isa.constants", "trngen's nki.isa enums")
    constants.__dict__.update({n: getattr(isa, n) for n in (
        "engine", "reduce_cmd", "dge_mode", "oob_mode", "nc_version", "matmul_perf_mode",
        "dma_engine")})
    isa.constants = isa_dst.constants = constants
    return {"neuronxcc": top, "neuronxcc.nki": old, "neuronxcc.nki.language": language,
            "neuronxcc.nki.isa": isa, "neuronxcc.nki.isa.constants": constants,
            "neuronxcc.nki.typing": typing, "neuronxcc.nki.compiler": compiler,
            "nki": new, "nki.language": language, "nki.isa": isa_dst,
            "nki.isa.constants": constants, "nki.typing": typing, "nki.compiler": compiler,
            "nki.collectives": collectives}


_INSTALLED: dict[str, object] = {}


def _real(top: str) -> bool:
    """Whether ``top`` is importable as a real package (not ours)."""
    if top in sys.modules and top not in _INSTALLED:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


#: The top-level names a kernel imports the interface by, which :func:`install` provides.
INTERFACES = ("neuronxcc", "nki")


def install(force: bool = False) -> list[str]:
    """Make ``neuronxcc.nki...`` and ``nki...`` import trngen's interface; a top-level name
    that a real package already provides is left alone unless ``force``. The names
    installed."""
    done = []
    modules = _modules()
    for top in INTERFACES:
        if top in _INSTALLED or (not force and _real(top)):
            continue
        for name, module in modules.items():
            if name.split(".")[0] == top:
                _INSTALLED[name] = sys.modules.get(name)
                sys.modules[name] = module
                done.append(name)
    return done


def uninstall(names=None) -> None:
    """Undo :func:`install` (of ``names`` alone, if given: an inner :func:`installed` block
    leaves an outer one's names in place): the modules that were there before come back."""
    for name in list(_INSTALLED) if names is None else names:
        before = _INSTALLED.pop(name)
        if before is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = before


@contextmanager
def installed(force: bool = False):
    """:func:`install` for the duration of a ``with`` block."""
    names = install(force)
    try:
        yield names
    finally:
        uninstall(names)
