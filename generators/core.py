"""NeuronCore generator: the core's Verilog and its Verilator waivers, for `gen chip`.

The core (:class:`hdl.core.core.NeuronCore`) is elaborated once; the lanes of its engines are
modules emitted apart and instantiated per partition (``Instance``), each written to a file
of its own name. A lane module that another unit of the chip has already written into the same
directory (the vector engine's ``vector_lane``) must be the same text, and is then shared:
one definition per module name in the chip's file list.
"""

from __future__ import annotations

import functools
import re
from contextlib import contextmanager
from pathlib import Path

from hdl.core.params import CoreParams

from .output import verilator_waivers
from .output import write_if_changed as _write

TOP = "neuron_core"

#: ``verilator --lint-only -Wall`` warnings waived for the emitted core, each a habit of
#: Amaranth's Verilog backend, not of the design. Written beside the core as
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
    "PROCASSINIT": "registers are initialised where they are declared",
    "DECLFILENAME": "submodules are named by hierarchy (neuron_core.dma) and share their "
                    "parent's file",
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


@contextmanager
def uninitialised_memories():
    """Within this context, Amaranth emits memories whose initial contents are all zero
    without them: no ``$meminit`` cell, no ``initial`` block, a memory that starts undefined,
    as an SRAM does.

    Amaranth gives every memory an initial value and emits it bit by bit: for the full-scale
    core's SBUF (128 partitions x 224 KiB) that is 235 million bits, each a netlist object,
    which takes many minutes and gigabytes before Yosys sees it. The simulation benches
    emit the core without this (their SBUF and PSUM start at zero, as the core simulator's
    do).
    """
    from amaranth.back import rtlil

    original = rtlil.ModuleEmitter.emit_memory

    def emit_memory(self, cell_idx, cell):
        if any(cell.init):
            original(self, cell_idx, cell)

    rtlil.ModuleEmitter.emit_memory = emit_memory
    try:
        yield
    finally:
        rtlil.ModuleEmitter.emit_memory = original


@functools.cache
def verilog_texts(params: CoreParams) -> tuple[str, tuple[str, ...]]:
    """The core's own Verilog (memories uninitialised) and its lane modules' (each a text),
    elaborated once per parameter set in a process."""
    from amaranth.back import verilog

    from hdl.core.core import NeuronCore

    core = NeuronCore(params)
    with uninitialised_memories():
        top = verilog.convert(core, name=TOP, emit_src=False)
    return top, tuple(core.verilog_dependencies())


def emit(params: CoreParams, rtl_dir: Path, header: str) -> list[Path]:
    """Write the core's Verilog into ``rtl_dir``: each lane module its own file (leaves first),
    then ``neuron_core.v`` (its SBUF and PSUM uninitialised: :func:`uninitialised_memories`)
    and ``neuron_core.vlt`` (:data:`WAIVERS`). Deterministic, and a
    file is only rewritten when its content changes. Returns the paths written.

    Raises ``ValueError`` when a lane module's file is already there with another text (two
    units of one chip would define one module twice).
    """
    rtl_dir = Path(rtl_dir)
    rtl_dir.mkdir(parents=True, exist_ok=True)
    prefix = _comment(header)
    top, dependencies = verilog_texts(params)
    paths = []
    for text in dependencies:
        path = rtl_dir / f"{module_name(text)}.v"
        if path.is_file() and path.read_text() != prefix + text:
            raise ValueError(f"{path.name}: the core's {path.stem} differs from the module "
                             f"of that name another unit wrote")
        paths.append(_write(path, prefix + text))
    paths.append(_write(rtl_dir / f"{TOP}.v", prefix + top))
    paths.append(_write(rtl_dir / f"{TOP}.vlt", verilator_waivers(WAIVERS, header)))
    return paths
