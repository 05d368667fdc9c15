"""Emit the tensor engine's Verilog: each kind of cell once, instantiated by the level above
(:mod:`hdl.tensor.structural`: the modules, and why the top is structural Verilog), with
Verilator waivers and a file list. A 128 x 128 array is emitted in seconds. The elaborated
(flat) :class:`hdl.tensor.systolic.SystolicArray` is the same circuit; the cocotb testbench
runs both and checks them against the golden model.
"""

from __future__ import annotations

from pathlib import Path

from hdl.tensor.params import SystolicParams
from hdl.tensor.structural import ARRAY_TOP as TOP
from hdl.tensor.structural import module_names as _module_names
from hdl.tensor.structural import verilog_modules as _verilog_modules

from .output import verilator_waivers
from .output import write_if_changed as _write

__all__ = ["TOP", "emit", "module_names", "verilog_modules"]

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
    return _module_names(top)


def verilog_modules(params: SystolicParams, top: str = TOP) -> dict[str, str]:
    """Verilog text of each module (file name -> text, leaves first), before any header."""
    return _verilog_modules(params, top)


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
