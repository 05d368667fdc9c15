# amaranth: UnusedElaboratable=no
# (Amaranth's documented lint option: the flat array made here for its signature stands for
# the emitted one, and is never elaborated.)
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
ports; :func:`array_instance` stands for it inside a larger Amaranth design (the core's
tensor engine), so that the array is elaborated as these few modules and not cell by cell.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from hdl.emitted import Emitted, module_text

from .datapath import PsumColumn, SystolicRow
from .params import SystolicParams
from .pe import ProcessingElement, ctl_layout
from .sequencer import SystolicControl, SystolicGroup
from .signatures import cmd_layout, meta_layout, stationary_layout
from .systolic import SystolicArray

__all__ = ["ARRAY_TOP", "LEVELS", "UNIT_TOP", "array_instance", "array_modules", "module_names",
           "verilog_modules"]

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
        return module_text(ProcessingElement(params), names["pe"])
    if level == "row":
        return module_text(SystolicRow(params, pe_module=names["pe"]), names["row"],
                            no_inline=False)
    if level == "column":
        return module_text(PsumColumn(params), names["column"])
    if level == "group":
        return module_text(SystolicGroup(params), names["group"], no_inline=False)
    if level == "control":
        return module_text(SystolicControl(params, group_module=names["group"]),
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


def array_modules(params: SystolicParams, top: str) -> dict[str, Callable[[], str]]:
    """The array's modules by name (:data:`hdl.emitted.Modules`), leaves first, ``top``
    last: each elaborated (by :func:`verilog_modules`) only when its text is asked for."""
    if not isinstance(params, SystolicParams):
        raise TypeError(f"params must be a SystolicParams, not {params!r}")
    return {name: functools.partial(_text, params, top, level)
            for level, name in module_names(top).items()}


def array_instance(params: SystolicParams, top: str) -> Emitted:
    """An instance of the emitted array ``top`` of ``params`` (:func:`array_modules`), with
    the ports of :class:`~hdl.tensor.systolic.SystolicArray` (whose signature it takes; the
    flat array itself is not elaborated)."""
    return Emitted(SystolicArray(params), top, name="array",
                   modules=array_modules(params, top))
