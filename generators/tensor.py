"""Emit the tensor engine's Verilog: each kind of cell once, instantiated by the level above.

Modules, emitted by Amaranth: ``<top>_pe`` (one processing element), ``<top>_row`` (``cols``
PE instances plus one stage of the input skew), ``<top>_column`` (one PSUM column with its
read-modify-write and one stage of the output deskew) and ``<top>_control`` (the sequencer).
``<top>`` itself is structural Verilog from a jinja2 template: generate loops instantiate
``rows`` rows and ``cols`` columns, so its text does not grow with the array. Emission time
grows with ``cols`` (the row module) only, and a 128 x 128 array is emitted in seconds. The
elaborated (flat) :class:`hdl.tensor.systolic.SystolicArray` is the same circuit; the cocotb
testbench runs both and checks them against the golden model.
"""

from __future__ import annotations

import re
from pathlib import Path

from hdl.tensor.params import SystolicParams
from hdl.tensor.pe import ProcessingElement, ctl_layout
from hdl.tensor.systolic import (
    PsumColumn,
    SystolicControl,
    SystolicRow,
    cmd_layout,
    meta_layout,
    stationary_layout,
)

from .output import verilator_waivers
from .output import write_if_changed as _write

__all__ = ["TOP", "emit", "module_names", "verilog_modules"]

TOP = "tensor_systolic"
TEMPLATES = Path(__file__).parent / "templates"

# Verilator -Wall findings in the Verilog that Amaranth (through Yosys) emits, each justified:
WAIVERS = {
    "WIDTHEXPAND": "Yosys writes operands at their own widths and relies on Verilog's "
                   "context-determined extension; Amaranth has already fixed every width",
    "WIDTHTRUNC": "as WIDTHEXPAND, for results assigned to narrower nets (Amaranth's slices)",
    "UNUSEDSIGNAL": "carry bits of Amaranth's widened arithmetic temporaries, dropped by the "
                    "truncation the design asks for; ports a given size leaves unread",
    "DECLFILENAME": "Amaranth emits a module's submodules (named '<module>.<child>') into the "
                    "module's own file",
    "PROCASSINIT": "Amaranth gives each register its reset value as a declaration "
                   "initialiser (the power-up state) and assigns it in its clocked process",
}


def module_names(top: str = TOP) -> dict[str, str]:
    """Verilog module names of the levels."""
    return {"pe": f"{top}_pe", "row": f"{top}_row", "column": f"{top}_column",
            "control": f"{top}_control", "top": top}


def _array_text(params: SystolicParams, names: dict[str, str]) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.get_template("tensor_array.v.j2").render(
        top=names["top"], control=names["control"], row=names["row"],
        column=names["column"], rows=params.rows, cols=params.cols,
        formats=", ".join(params.formats), double=", ".join(params.double_rate),
        quarter=", ".join(params.quarter_rate),
        mov_width=params.rows * params.width, ctl_width=ctl_layout(params).size,
        meta_width=meta_layout(params).size, cmd_width=cmd_layout(params).size,
        stat_width=stationary_layout(params).size,
        wave_width=params.rows * params.beat_columns * params.width,
        skip_bits=params.skip_bits, k_bits=params.k_bits)


def verilog_modules(params: SystolicParams, top: str = TOP) -> dict[str, str]:
    """Verilog text of each module (file name -> text, leaves first), before any header."""
    from amaranth.back import verilog

    if not isinstance(params, SystolicParams):
        raise TypeError(f"params must be a SystolicParams, not {params!r}")
    names = module_names(top)
    parts = {
        "pe": ProcessingElement(params),
        "row": SystolicRow(params, pe_module=names["pe"]),
        "column": PsumColumn(params),
        "control": SystolicControl(params),
    }
    texts = {}
    for level, component in parts.items():
        text = verilog.convert(component, name=names[level], emit_src=False)
        if level in ("pe", "column"):
            text = _no_inline(text, names[level])
        texts[f"{names[level]}.v"] = text
    texts[f"{top}.v"] = _array_text(params, names)
    return texts


def _no_inline(text: str, module: str) -> str:
    """Ask Verilator to keep ``module`` one C++ class instead of inlining every instance:
    rows x cols copies of the PE's floating-point logic otherwise make its C++ build slow."""
    head = re.search(rf"^module {re.escape(module)}\(.*?\);\n", text, flags=re.M | re.S)
    if head is None:
        raise ValueError(f"module {module!r} must be in the emitted text")
    return text[:head.end()] + "  /*verilator no_inline_module*/\n" + text[head.end():]


def _comment(header: str) -> str:
    lines = header.rstrip("\n").splitlines() if header else []
    return "".join(line + "\n" if line.startswith("//") else f"// {line}\n".replace(" \n", "\n")
                   for line in lines)


def emit(params: SystolicParams, rtl_dir: Path, header: str, top: str = TOP) -> list[Path]:
    """Write the array's Verilog, a Verilator waiver file and a file list into ``rtl_dir``.

    Files are written only when their content changes; the output is deterministic (no
    timestamps, no paths). Returns the files in compile order (leaves first), then
    ``<top>.vlt`` and ``<top>.f``.
    """
    rtl_dir = Path(rtl_dir)
    rtl_dir.mkdir(parents=True, exist_ok=True)
    prefix = _comment(header)
    written = [_write(rtl_dir / name, prefix + text)
               for name, text in verilog_modules(params, top).items()]
    written.append(_write(rtl_dir / f"{top}.vlt", prefix + verilator_waivers(WAIVERS)))
    file_list = "".join(f"{path.name}\n" for path in written[:-1])
    written.append(_write(rtl_dir / f"{top}.f", prefix.replace("//", "#") + file_list))
    return written
