"""The systolic array as emitted Verilog: each kind of cell once, instantiated by the level
above.

Modules, emitted by Amaranth: ``<top>_pe`` (one processing element), ``<top>_row`` (``cols``
PE instances plus one stage of the input skew), ``<top>_column`` (one PSUM column with its
read-modify-write and one stage of the output deskew), ``<top>_group`` (one row group's
runner, instantiated ``ways`` times by the sequencer) and ``<top>_control`` (the sequencer).
``<top>`` itself is structural Verilog from a jinja2 template (``tensor_array.v.j2``):
generate loops instantiate ``rows`` rows and ``cols`` columns, so its text does not grow with
the array, and its emission time grows with ``cols`` (the row module) only. It is the same
circuit as the elaborated (flat) :class:`~hdl.tensor.systolic.SystolicArray`, with the same
ports; :class:`ArrayInstance` stands for it inside a larger Amaranth design (the core's
tensor engine), so that the array is elaborated as these few modules and not cell by cell.
"""

from __future__ import annotations

import functools
from pathlib import Path

from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.vector.lanes import lane_verilog

from .datapath import PsumColumn, SystolicRow
from .params import SystolicParams
from .pe import ProcessingElement, ctl_layout
from .sequencer import SystolicControl, SystolicGroup
from .signatures import (
    cmd_layout,
    meta_layout,
    moving_signature,
    out_signature,
    stationary_layout,
)

__all__ = ["ARRAY_TOP", "LEVELS", "UNIT_TOP", "ArrayInstance", "module_names", "verilog_modules"]

#: The top module's name in `gen chip`'s files (the tensor unit), which the core's tensor
#: engine instantiates, so that the chip's file list defines the array once.
UNIT_TOP = "tensor"
#: The top module's name of the array emitted on its own (:mod:`generators.tensor`'s files,
#: and the array the testbench's harness instantiates).
ARRAY_TOP = "tensor_systolic"
TEMPLATE = Path(__file__).parent / "tensor_array.v.j2"


#: The levels of the array's modules, leaves first.
LEVELS = ("pe", "row", "column", "group", "control", "top")


def module_names(top: str) -> dict[str, str]:
    """Verilog module names of the levels (:data:`LEVELS`)."""
    return {level: top if level == "top" else f"{top}_{level}" for level in LEVELS}


def _array_text(params: SystolicParams, names: dict[str, str]) -> str:
    import jinja2

    template = jinja2.Environment(undefined=jinja2.StrictUndefined,
                                  keep_trailing_newline=True).from_string(TEMPLATE.read_text())
    return template.render(
        top=names["top"], control=names["control"], row=names["row"],
        column=names["column"], rows=params.rows, cols=params.cols,
        formats=", ".join(params.formats), double=", ".join(params.double_rate),
        quarter=", ".join(params.quarter_rate),
        mov_width=params.rows * params.width, ctl_width=params.ways * ctl_layout(params).size,
        meta_width=params.ways * meta_layout(params).size, cmd_width=cmd_layout(params).size,
        ways=params.ways, tiled=params.ways > 1, group_rows=params.group_rows,
        group_cols=params.group_cols, wk_bits=params.wk_bits,
        mk_width=params.ways * params.k_bits, wlo_bits=params.beat_columns.bit_length(),
        stat_width=stationary_layout(params).size,
        wave_width=params.rows * params.beat_columns * params.width,
        skip_bits=params.skip_bits)


@functools.cache
def _text(params: SystolicParams, top: str, level: str) -> str:
    names = module_names(top)
    # The PE and the column carry Verilator's no_inline_module: rows x cols copies of the
    # PE's floating-point logic would otherwise make a Verilator build slow.
    if level == "pe":
        return lane_verilog(ProcessingElement(params), names["pe"])
    if level == "row":
        return lane_verilog(SystolicRow(params, pe_module=names["pe"]), names["row"],
                            no_inline=False)
    if level == "column":
        return lane_verilog(PsumColumn(params), names["column"])
    if level == "group":
        return lane_verilog(SystolicGroup(params), names["group"], no_inline=False)
    if level == "control":
        return lane_verilog(SystolicControl(params, group_module=names["group"]),
                            names["control"], no_inline=False)
    if level == "top":
        return _array_text(params, names)
    raise ValueError(f"level must be one of {LEVELS}, not {level!r}")


def verilog_modules(params: SystolicParams, top: str, levels: tuple[str, ...] = LEVELS
                    ) -> dict[str, str]:
    """Verilog text of each module of ``levels`` (file name -> text, leaves first),
    elaborated once per parameter set, name and level in a process."""
    if not isinstance(params, SystolicParams):
        raise TypeError(f"params must be a SystolicParams, not {params!r}")
    names = module_names(top)
    return {f"{names[level]}.v": _text(params, top, level) for level in levels}


class ArrayInstance(wiring.Component):
    """An instance of the emitted array ``top`` of ``params`` (:func:`verilog_modules`),
    with the ports of :class:`~hdl.tensor.systolic.SystolicArray`; its Verilog texts are
    :meth:`verilog_dependencies`."""

    def __init__(self, params: SystolicParams, top: str):
        if not isinstance(params, SystolicParams):
            raise TypeError(f"params must be a SystolicParams, not {params!r}")
        self.params, self.top = params, top
        super().__init__({
            "cmd": In(stream.Signature(cmd_layout(params))),
            "stationary": In(stream.Signature(stationary_layout(params))),
            "moving": In(moving_signature(params)),
            "out": Out(out_signature(params)),
        })

    def verilog_dependencies(self) -> list[str]:
        return list(verilog_modules(self.params, self.top).values())

    def dependency_names(self) -> list[str]:
        """The names of :meth:`verilog_dependencies`' modules, in order, elaborating
        nothing."""
        return list(module_names(self.top).values())

    def elaborate(self, platform):
        m = Module()
        ports = {"i_clk": ClockSignal(), "i_rst": ResetSignal()}
        for name in ("cmd", "stationary", "moving", "out"):
            port = getattr(self, name)
            given = "i" if name != "out" else "o"
            taken = "o" if name != "out" else "i"
            ports[f"{given}_{name}__payload"] = port.payload.as_value()
            ports[f"{given}_{name}__valid"] = port.valid
            ports[f"{taken}_{name}__ready"] = port.ready
        m.submodules.array = Instance(self.top, **ports)
        return m
