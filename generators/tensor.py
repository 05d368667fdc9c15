"""Emit the tensor engine's Verilog: the PE once, one PE row, and the array around them.

The array is a three-level hierarchy, each level emitted once as its own Verilog module and
instantiated by the level above: ``<top>_pe`` (one processing element), ``<top>_row`` (``cols``
PE instances) and ``<top>`` (``rows`` row instances, the sequencer, skew, deskew and PSUM).
Emission therefore grows with ``rows + cols``, not ``rows * cols``, and a 128 x 128 array is
emitted in seconds. The elaborated (flat) :class:`hdl.tensor.systolic.SystolicArray` is the
same circuit; the cocotb testbench runs both and checks them against the golden model.
"""

from __future__ import annotations

from pathlib import Path

from hdl.tensor.params import SystolicParams
from hdl.tensor.pe import ProcessingElement
from hdl.tensor.systolic import SystolicArray, SystolicRow

__all__ = ["TOP", "emit", "module_names", "verilog_modules"]

TOP = "tensor_systolic"

# Verilator -Wall findings in the Verilog that Amaranth (through Yosys) emits, each justified:
WAIVERS = {
    "WIDTHEXPAND": "Yosys writes operands at their own widths and relies on Verilog's "
                   "context-determined extension; Amaranth has already fixed every width",
    "WIDTHTRUNC": "as WIDTHEXPAND, for results assigned to narrower nets (Amaranth's slices)",
    "UNUSEDSIGNAL": "carry bits of Amaranth's widened arithmetic temporaries, dropped by the "
                    "truncation the design asks for; ports a given size leaves unread",
    "PROCASSINIT": "Amaranth gives each register its reset value as a declaration "
                   "initialiser (the power-up state) and assigns it in its clocked process",
}


def module_names(top: str = TOP) -> dict[str, str]:
    """Verilog module names of the three levels."""
    return {"pe": f"{top}_pe", "row": f"{top}_row", "top": top}


def verilog_modules(params: SystolicParams, top: str = TOP) -> dict[str, str]:
    """Verilog text of each level (file name -> text), before any header."""
    from amaranth.back import verilog

    if not isinstance(params, SystolicParams):
        raise TypeError(f"params must be a SystolicParams, not {params!r}")
    names = module_names(top)
    parts = {
        "pe": ProcessingElement(params),
        "row": SystolicRow(params, pe_module=names["pe"]),
        "top": SystolicArray(params, row_module=names["row"]),
    }
    return {f"{names[level]}.v": verilog.convert(component, name=names[level], emit_src=False)
            for level, component in parts.items()}


def _comment(header: str) -> str:
    lines = header.rstrip("\n").splitlines() if header else []
    return "".join(line + "\n" if line.startswith("//") else f"// {line}\n".replace(" \n", "\n")
                   for line in lines)


def _write(path: Path, text: str) -> Path:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


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
    waivers = "".join(f"// {rule}: {why}\nlint_off -rule {rule}\n"
                      for rule, why in WAIVERS.items())
    written.append(_write(rtl_dir / f"{top}.vlt", f"{prefix}`verilator_config\n{waivers}"))
    file_list = "".join(f"{path.name}\n" for path in written[:-1])
    written.append(_write(rtl_dir / f"{top}.f", prefix.replace("//", "#") + file_list))
    return written
