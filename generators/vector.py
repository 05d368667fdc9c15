"""Vector and scalar (activation) engine generator.

* :func:`accuracy_table` measures each function's maximum relative error over the whole fp32
  domain, of the bit-exact fp32 evaluation, against the exact function in float64 (numpy /
  scipy.special); the fitting itself lives in :mod:`hdl.vector.fitting`.
* :func:`emit` writes the Verilog of both engines.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np

from hdl.vector.fitting import EXACT_FUNCTIONS, accuracy_points, activation_table
from hdl.vector.functions import FunctionSpec
from specs.files import locked, replace_atomically

from .output import verilator_waivers
from .output import write_if_changed as _write

#: ``verilator --lint-only -Wall`` warnings waived for the emitted vector engine (its top and
#: its lanes), with the reason: each a habit of Amaranth's Verilog backend, not
#: of the design. Written beside the engine as ``vector.vlt``.
VECTOR_WAIVERS = {
    "UNUSEDSIGNAL": "every intermediate wire of an expression is declared even when only "
                    "some of its bits are read",
    "WIDTHEXPAND": "arithmetic is sized by Amaranth's rules, with implicit extension at "
                   "assignments",
    "WIDTHTRUNC": "as WIDTHEXPAND, with implicit truncation",
    "CASEINCOMPLETE": "case statements have a default-assignment prologue instead of a "
                      "default arm",
    "CASEOVERLAP": "If/Elif chains (the special encodings of a format, e.g. fp8_e4m3fn's NaN "
                   "among its finite codes) are emitted as priority casez with overlapping "
                   "patterns",
    "PROCASSINIT": "registers are initialised where they are declared",
    "DECLFILENAME": "submodules are named by hierarchy (vector_lane.a_widen_bf16) and share "
                    "their parent's file",
}
#: The same for the scalar (activation) engine, written as ``activation.vlt``.
ACTIVATION_WAIVERS = {
    **VECTOR_WAIVERS,
    "UNSIGNED": "the range checks of the function table compare unsigned fields with 0",
}
#: The waiver list of each emitted engine, by its top module.
LINT_WAIVERS = {"vector": VECTOR_WAIVERS, "activation": ACTIVATION_WAIVERS}


#: How the reduced functions that do not reduce on the fp32 exponent reduce their argument.
REDUCTIONS = {"sin": "modulo pi/2", "cos": "modulo pi/2", "arctan": "1/x above 1"}


def accuracy_table(functions: tuple[FunctionSpec, ...] | None = None) -> list[dict]:
    """Each function's maximum relative error over the whole fp32 domain.

    The fp32 evaluation (:func:`sim.golden.activation.evaluate`, bit-exact to the RTL) is
    compared with the exact function in float64 at :func:`~hdl.vector.fitting.accuracy_points`
    (every binade of fp32, both signs, and every segment of the table), wherever the exact
    result is a normal fp32 number: ``|y - f| / |f|``. ``functions`` is a tuple of specs or
    anything with a ``functions`` field (``ActivationParams``). ``rom_rows`` is the rows the
    function adds to the ROM, ``rom_shared`` the function whose rows it reads instead.
    """
    from hdl.vector.functions import DEFAULT_FUNCTIONS
    from sim.golden.activation import evaluate

    if functions is None:
        functions = DEFAULT_FUNCTIONS
    functions = getattr(functions, "functions", functions)
    tiny, huge = 2.0**-126, float(np.finfo(np.float32).max)
    rows = []
    tables = activation_table(functions)
    for index, spec in enumerate(functions):
        x = accuracy_points(spec)
        y = evaluate(functions, index, x.view(np.uint32)).view(np.float32).astype(np.float64)
        with np.errstate(all="ignore"):
            ref = EXACT_FUNCTIONS[spec.name](x.astype(np.float64))
        normal = (np.abs(ref) >= tiny) & (np.abs(ref) <= huge)
        x, y, ref = x[normal], y[normal], ref[normal]
        rel = np.abs(y - ref) / np.abs(ref)
        worst = int(np.argmax(rel))
        exact = spec.mode == "exact"
        rows.append({
            "function": spec.name,
            "reduction": REDUCTIONS.get(spec.name, "exponent" if spec.reduced else "-"),
            "mode": spec.mode,
            "range": None if exact else (spec.lo, spec.hi),
            "segments": 0 if exact else spec.segments,
            "rom_rows": tables[index].rows,
            "rom_shared": tables[index].shared,
            "degree": 0 if exact else spec.degree,
            "points": int(x.size),
            "max_rel_error": float(rel.max()),
            "worst_x": float(x[worst]),
        })
    return rows


#: Where `gen chip` keeps, for one run, the texts of the modules the vector and scalar
#: engines' lanes share (:func:`hdl.vector.lanes.shared_verilog`), so that the second engine
#: emitted, in another worker process, reads them instead of elaborating them again
#: (:func:`sharing`); None: each emission elaborates its own.
_shared_dir: Path | None = None


@contextmanager
def sharing(directory: Path) -> Iterator[None]:
    """Within the body (and in the worker processes forked in it), :func:`emit` keeps the
    texts of the lanes' shared modules in ``directory`` and takes them from there: one
    elaboration of each per run where both engines are emitted. Each text is written whole
    (renamed into place), by name, which holds every parameter of the text."""
    global _shared_dir
    before, _shared_dir = _shared_dir, Path(directory)
    try:
        yield
    finally:
        _shared_dir = before


def _shared_texts(formats: tuple[str, ...], rng: str | None) -> dict[str, str]:
    """The shared modules of a lane of ``formats`` and ``rng`` by name
    (:func:`hdl.vector.lanes.shared_verilog`), from :data:`_shared_dir` where they are
    there, else elaborated (and kept there)."""
    from hdl.vector.lanes import shared_verilog

    texts = {}
    for name, make in shared_verilog(formats, rng).items():
        kept = None if _shared_dir is None else _shared_dir / f"{name}.v"
        # a worker that needs a module another is elaborating waits for its text
        with nullcontext() if kept is None else locked(kept.with_suffix(".lock")):
            if kept is not None and kept.is_file():
                texts[name] = kept.read_text(encoding="utf-8")
                continue
            texts[name] = make()
            if kept is not None:
                replace_atomically(kept, lambda tmp, text=texts[name]: tmp.write_text(
                    text, encoding="utf-8"))
    return texts


def _commented(header: str) -> str:
    return "".join(f"// {line}".rstrip() + "\n" for line in header.splitlines())


def emit(params, rtl_dir: Path, header: str) -> list[Path]:
    """Write the Verilog of the engines described by ``params`` into ``rtl_dir``.

    ``params`` is a :class:`~hdl.vector.vector.VectorParams`, an
    :class:`~hdl.vector.activation.ActivationParams`, or a sequence of them. Each engine
    gives the top (``vector.v`` / ``activation.v``) and its lane, emitted once and instantiated
    per partition (``vector_lane.v`` / ``activation_lane.v``), the fp32 adder and multiplier
    the lane instantiates (``numerics_add32.v``, ``numerics_mul32.v``,
    :data:`~hdl.vector.lanes.FP_MODULES`: one file each for both engines) and its output cast
    (``output_cast_<formats>_<generator>.v``, :func:`~hdl.vector.lanes.cast_module`: one file
    for both engines where their casts are equal); then the Verilator configuration with the
    engine's lint waivers (``vector.vlt`` / ``activation.vlt``, from :data:`LINT_WAIVERS`).
    The text is deterministic (``header`` prepended as comments, no timestamps or paths); a
    file is only rewritten when its content changes. Returns the paths written.
    """
    from amaranth.back import verilog

    from hdl.emitted import texts
    from hdl.vector.activation import Activation, ActivationParams
    from hdl.vector.vector import Vector, VectorParams

    items = params if isinstance(params, list | tuple) else [params]
    rtl_dir = Path(rtl_dir)
    rtl_dir.mkdir(parents=True, exist_ok=True)
    prefix = _commented(header)
    paths = []
    for item in items:
        if isinstance(item, VectorParams):
            top, name = Vector(item, lane_instances=True), "vector"
        elif isinstance(item, ActivationParams):
            top, name = Activation(item, lane_instances=True), "activation"
        else:
            raise ValueError(f"params must be VectorParams or ActivationParams, not {item!r}")
        modules = texts(top.modules(shared=False)) | _shared_texts(item.formats, item.rng)
        text = verilog.convert(top, name=name, emit_src=False)
        paths.append(_write(rtl_dir / f"{name}.v", prefix + text))
        for module, module_text in modules.items():
            paths.append(_write(rtl_dir / f"{module}.v", prefix + module_text))
        paths.append(_write(rtl_dir / f"{name}.vlt", verilator_waivers(LINT_WAIVERS[name],
                                                                      header)))
    return paths
