# amaranth: UnusedElaboratable=no
# (Amaranth's documented lint option: the elaboratables made here for their signatures are
# emitted apart, as modules of their own, and never elaborated where they are made.)
"""NeuronCore generator: the core's Verilog and its Verilator waivers, for `gen chip`.

The core (:class:`hdl.core.core.NeuronCore`) is elaborated once; its engines, their lanes
and processing elements are modules emitted apart and instantiated by name
(:mod:`hdl.emitted`), each written to a file of its own name. A module that another unit of
the chip has already written into the same directory is shared when it is the same text, and
renamed for the core when it is not: one definition per module name in the chip's file
list.
"""

from __future__ import annotations

import re
from contextlib import nullcontext
from pathlib import Path

from hdl.core.core import DEPENDENCY_GROUPS
from hdl.core.params import CoreParams

from .amaranth_internals import unchecked_comb_cycles, uninitialised_memories
from .output import verilator_waivers
from .output import write_if_changed as _write
from .vector import ACTIVATION_WAIVERS, VECTOR_WAIVERS

TOP = "neuron_core"

#: ``verilator --lint-only -Wall`` warnings waived for the emitted core, each a habit of
#: Amaranth's Verilog backend, not of the design (nine rules: no more are raised at either
#: scale, benchmarks/core_rtl.md). Written beside the core as
#: ``neuron_core.vlt``.
WAIVERS = {
    "UNUSEDSIGNAL": "every intermediate wire of an expression is declared even when only "
                    "some of its bits are read (the host port's address fields, the "
                    "instruction word's unused fields)",
    "WIDTHEXPAND": "arithmetic is sized by Amaranth's rules, with implicit extension at "
                   "assignments",
    "WIDTHTRUNC": "as WIDTHEXPAND, with implicit truncation",
    "CASEINCOMPLETE": "case statements have a default-assignment prologue instead of a "
                      "default arm",
    "CASEOVERLAP": VECTOR_WAIVERS["CASEOVERLAP"] + " (the widening of scalar operands in "
                   "the engines' slices)",
    "PROCASSINIT": "registers are initialised where they are declared",
    "DECLFILENAME": "submodules are named by hierarchy (neuron_core.dma) and share their "
                    "parent's file",
    "UNSIGNED": ACTIVATION_WAIVERS["UNSIGNED"] + " (the scalar engine's activation unit)",
    "VARHIDDEN": "a submodule's input is declared in its parent under the port's name, which "
                 "can repeat an instance name above it (the scalar engine's vector unit's "
                 "port scalar, in the engine instance scalar)",
}


def _comment(header: str) -> str:
    return "".join(f"// {line}".rstrip() + "\n" for line in header.splitlines())


def module_name(text: str) -> str:
    """The top module of an emitted text: the one module whose name is not hierarchical
    (Amaranth names a submodule ``\\top.sub``)."""
    names = [n for n in re.findall(r"^module\s+(\\\S+|[A-Za-z_][\w$]*)", text, re.M)
             if "." not in n]
    if len(names) != 1:
        raise ValueError(f"an emitted text must have one top module, not {names!r}")
    return names[0]


#: The parts of the core's Verilog, each elaborated apart (so that `gen chip`'s workers
#: share them out): the core's own module, then the modules it instantiates by group
#: (:meth:`hdl.core.core.NeuronCore.modules`).
PARTS = ("top", *DEPENDENCY_GROUPS)

#: The parts whose memories :func:`part_texts` leaves uninitialised: the core's own (SBUF,
#: PSUM) and the sequencer's (its instructions and cycle stamps).
UNINITIALISED = ("top", "sequencer")

#: A part's modules by name, leaves first: each its text, or None for a module the core
#: takes as the chip's unit wrote it (:func:`hdl.emitted.texts`).
Texts = dict[str, str | None]

_parts: dict[tuple[CoreParams, str, tuple], Texts] = {}
#: The core of each parameter set whose parts this process elaborates: built once (its four
#: engines' signatures), not once per part.
_cores: dict[CoreParams, object] = {}
_taken: dict[tuple[CoreParams, str], Texts] = {}


def part_texts(params: CoreParams, part: str,
               units: tuple[tuple[str, object], ...] = ()) -> Texts:
    """The modules of one of the core's :data:`PARTS` (the memories of those of
    :data:`UNINITIALISED` uninitialised), by name: for "top" the core's own module
    (:data:`TOP`), else the modules of that group, None for a module of a unit of ``units``
    (the chip's units emitted beside the core, (name, parameters) pairs) that the core
    takes by name (:meth:`hdl.core.core.NeuronCore.taken_modules`); elaborated once per
    parameter set in a process, every part from one :class:`~hdl.core.core.NeuronCore`
    (:data:`_cores`)."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS)}, not {part!r}")
    units = tuple(units) if part != "top" else ()
    if (params, part, units) not in _parts:
        from amaranth.back import verilog

        from hdl.core.core import NeuronCore
        from hdl.emitted import texts

        core = _cores.get(params)
        if core is None:
            core = _cores[params] = NeuronCore(params)
        with unchecked_comb_cycles(), (
                uninitialised_memories() if part in UNINITIALISED else nullcontext()):
            if part == "top":
                found = {TOP: verilog.convert(core, name=TOP, emit_src=False)}
            else:
                # the modules as every other unit emits them (the tensor array's PSUM
                # columns have zero-initialised banks), so that equal texts are shared
                found = texts(core.modules(part), core.taken_modules(part, units))
        _parts[params, part, units] = found
    return _parts[params, part, units]


def take_parts(params: CoreParams, texts: dict[str, Texts]) -> None:
    """Keep ``texts`` (part -> its modules, from :func:`part_texts` in another process) as
    the parts of the core of ``params`` that :func:`emit` writes in this process."""
    for part, value in texts.items():
        if part not in PARTS:
            raise ValueError(f"part must be one of {', '.join(PARTS)}, not {part!r}")
        _taken[params, part] = dict(value)


def verilog_texts(params: CoreParams) -> Texts:
    """Every module of the core by name, each once (a name two parts give is the first's),
    leaves first and the core's own (:data:`TOP`, its memories uninitialised) last, from
    its :data:`PARTS` (given by :func:`take_parts`, else elaborated)."""
    modules: Texts = {}
    for part in (*PARTS[1:], PARTS[0]):
        for name, text in (_taken.get((params, part)) or part_texts(params, part)).items():
            modules.setdefault(name, text)
    return modules


def rename_module(texts: list[str], old: str, new: str) -> list[str]:
    """``texts`` with the module ``old`` renamed ``new`` wherever its name stands alone or
    begins a hierarchical name (``old``, ``\\old.sub``): its definition, its submodules' and
    every instance of it."""
    pattern = re.compile(rf"(?<![\w$]){re.escape(old)}(?![\w$])")
    return [pattern.sub(new, text) for text in texts]


def emit(params: CoreParams, rtl_dir: Path, header: str) -> list[Path]:
    """Write the core's Verilog into ``rtl_dir``: each module it instantiates its own file
    (leaves first), then ``neuron_core.v`` (its SBUF and PSUM uninitialised:
    :func:`uninitialised_memories`), ``neuron_core.vlt`` (:data:`WAIVERS`) and the file list
    ``neuron_core.f`` (the ``.v`` files in compile order). Deterministic, and a file is only
    rewritten when its content changes. Returns the paths written.

    A module whose file another unit of the chip has already written into ``rtl_dir`` is
    shared when the texts are equal, and renamed ``neuron_core_<name>`` when they are not
    (the core's engine may be parameterised apart from the chip's), so that the chip's file
    list defines each module once. A module the core takes by name (None in
    :func:`verilog_texts`) is the file its unit wrote.
    """
    rtl_dir = Path(rtl_dir)
    rtl_dir.mkdir(parents=True, exist_ok=True)
    prefix = _comment(header)
    modules = verilog_texts(params)
    for name in [name for name, text in modules.items() if text is None]:
        if not (rtl_dir / f"{name}.v").is_file():
            raise ValueError(f"the core takes the module {name} as the chip's unit emits it, "
                             f"but {rtl_dir / name}.v is not written")
    names = [name for name, text in modules.items() if text is not None]
    texts = [modules[name] for name in names]
    for k, name in enumerate(names[:-1]):
        path = rtl_dir / f"{name}.v"
        if path.is_file() and path.read_text() != prefix + texts[k]:
            texts = rename_module(texts, name, f"{TOP}_{name}")
    own = dict(zip(names, texts, strict=True))
    paths = []
    for name, text in modules.items():
        if text is None:
            paths.append(rtl_dir / f"{name}.v")
        else:
            paths.append(_write(rtl_dir / f"{module_name(own[name])}.v", prefix + own[name]))
    file_list = "".join(f"{path.name}\n" for path in paths)
    paths.append(_write(rtl_dir / f"{TOP}.vlt", verilator_waivers(WAIVERS, header)))
    paths.append(_write(rtl_dir / f"{TOP}.f", prefix.replace("//", "#") + file_list))
    return paths


#: Rules a port-only declaration (:func:`port_only`) waives for itself: its outputs are
#: driven and its inputs read by the body it stands for, which is linted apart.
PORT_ONLY_WAIVERS = ("UNDRIVEN", "UNUSEDSIGNAL")


def port_only(text: str, name: str) -> str:
    """The module ``name`` of the Verilog ``text`` as a port-only declaration: its port list,
    its port declarations and the parameters their widths use, no body.

    Verilator takes such a module as a leaf, so that a lint of a design above it does not
    elaborate what is inside (the full-scale core's 128 x 128 tensor array, whose 16,384 PEs
    Verilator cannot hold in this machine's memory); the module itself is linted on its own.
    The rules of :data:`PORT_ONLY_WAIVERS` are waived within the declaration only.
    """
    header = re.search(rf"^module\s+{re.escape(name)}\s*\(([^)]*)\)\s*;", text, re.M)
    if header is None:
        raise ValueError(f"no module {name!r} in the text")
    body = text[header.end():text.index("endmodule", header.end())]
    ports = [m.group(0).strip() for m in
             re.finditer(r"^\s*(?:input|output|inout)\b[^;]*;", body, re.M)]
    ports = [re.sub(r"\s*=[^;]*;$", ";", re.sub(r"\b(?:reg|wire)\s+", "", p)) for p in ports]
    used = " ".join(ports)
    params = [m.group(0).strip() for m in
              re.finditer(r"^\s*(?:localparam|parameter)\s+(\w+)[^;]*;", body, re.M)
              if re.search(rf"\b{m.group(1)}\b", used)]
    off = "".join(f"// verilator lint_off {rule}\n" for rule in PORT_ONLY_WAIVERS)
    on = "".join(f"// verilator lint_on {rule}\n" for rule in PORT_ONLY_WAIVERS)
    lines = "".join(f"  {line}\n" for line in [*params, *ports])
    return (f"// {name}: port-only declaration, its body linted apart\n{off}"
            f"module {name}({' '.join(header.group(1).split())});\n{lines}endmodule\n{on}")


def lint_parts(rtl_dir: Path) -> dict[str, list[Path]]:
    """The emitted core's lint (``verilator --lint-only -Wall`` with ``neuron_core.vlt``) in
    parts, one for each module of ``neuron_core.f``: the module's top name -> its files, the
    module's own file after a port-only declaration (:func:`port_only`) of every other module
    of the list, so that each part elaborates one module's own logic and checks its
    instances' connections against the ports of the modules they instantiate.

    At full scale the core as one design does not fit in memory (the 16,384 PEs of the
    tensor array, and the engines' 128 lanes each, inlined: benchmarks/core_rtl.md section
    8). The port-only declarations are written into ``rtl_dir/ports``.
    """
    rtl_dir = Path(rtl_dir)
    listed = [rtl_dir / line for line in (rtl_dir / f"{TOP}.f").read_text().splitlines()
              if line and not line.startswith("#")]
    texts = {path: path.read_text() for path in listed}
    names = {path: module_name(text) for path, text in texts.items()}
    ports = rtl_dir / "ports"
    ports.mkdir(exist_ok=True)
    stubs = {path: _write(ports / path.name, port_only(texts[path], names[path]))
             for path in listed}
    return {names[path]: [*(stubs[p] for p in listed if p != path), path] for path in listed}
