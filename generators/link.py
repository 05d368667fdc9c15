"""Emit the link port (:class:`hdl.link.link.LinkPort`) as Verilog.

``link_port.v``, the port with its transmitter and receiver as submodules, and
``link_port.vlt``, the Verilator configuration that waives the lint rules listed in
:data:`LINT_WAIVERS` (each a habit of the emitted text, not of the design). The text depends
only on the parameters and the header (no timestamps, no paths), and a file is written only
when its content changes.
"""

from __future__ import annotations

from pathlib import Path

from amaranth.back import verilog

from hdl.link.link import LinkParams, LinkPort

from .output import verilator_waivers, write_if_changed

TOPLEVEL = "link_port"

#: ``verilator --lint-only -Wall`` warnings waived for the emitted text, with the reason.
LINT_WAIVERS = {
    "DECLFILENAME": "the submodules link_port.tx and link_port.rx share the port's file",
    "UNUSEDSIGNAL": "the backend keeps the unused upper bits of sliced intermediate values and "
                    "the flattened copies of interface members",
    "WIDTHEXPAND": "the backend writes operands at their own widths and relies on Verilog's "
                   "context-determined extension; Amaranth has already fixed every width",
    "WIDTHTRUNC": "as WIDTHEXPAND, and `!x` for a multi-bit x == 0 test",
    "CASEINCOMPLETE": "case statements over a state or a counter without a default arm, whose "
                      "unlisted values assign nothing, as intended",
    "PROCASSINIT": "registers carry their reset value as a declaration initialiser",
}


def verilog_text(params: LinkParams, header: str = "") -> str:
    """The Verilog of a link port for ``params``, with ``header`` as a leading comment."""
    text = verilog.convert(LinkPort(params), name=TOPLEVEL, emit_src=False)
    lines = [f"// {line}".rstrip() for line in header.splitlines()]
    return "\n".join(lines) + ("\n" if lines else "") + text


def emit(params: LinkParams, rtl_dir: Path, header: str) -> list[Path]:
    """Write ``link_port.v`` under ``rtl_dir``; return the files written or already current."""
    if not isinstance(params, LinkParams):
        raise TypeError(f"params must be a LinkParams, not {params!r}")
    rtl_dir = Path(rtl_dir)
    rtl_dir.mkdir(parents=True, exist_ok=True)
    return [
        write_if_changed(rtl_dir / f"{TOPLEVEL}.v", verilog_text(params, header)),
        write_if_changed(rtl_dir / f"{TOPLEVEL}.vlt", verilator_waivers(LINT_WAIVERS, header)),
    ]
