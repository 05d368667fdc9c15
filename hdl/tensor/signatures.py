"""The systolic array's interfaces (:class:`hdl.tensor.systolic.SystolicArray`): the
payloads of its streams and the port signatures of its cells (a PE row, a PSUM column, a
row group's runner, the sequencer), which are also the port lists of their emitted Verilog
modules (a cell is wired by them: :func:`hdl.emitted.place`)."""

from __future__ import annotations

from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .params import SystolicParams
from .pe import ctl_layout

__all__ = ["Op", "cmd_layout", "column_ports", "control_ports", "group_ports",
           "group_stream", "job_layout", "meta_layout", "moving_layout",
           "moving_signature", "out_signature", "row_ports", "stationary_layout", "wlo_bits"]


class Op(enum.Enum, shape=2):
    LOAD = 0
    MULTIPLY = 1
    TRANSPOSE = 2


def cmd_layout(params: SystolicParams) -> data.StructLayout:
    """Payload of the ``cmd`` stream (``fmt``: the input format's code). A tiled array's
    commands also name a tile position, ``row`` and ``col`` in groups (``rows / ways`` PE
    rows, ``cols / ways`` PE columns), and a LOAD the tile's size in groups, ``rows`` and
    ``cols``."""
    fields = {
        "op": Op,
        "fmt": params.code_bits,
        "k": params.k_bits,
        "m": params.m_bits,
        "n": params.n_bits,
        "accumulate": 1,
    }
    if params.ways > 1:
        fields.update({"row": params.group_bits, "col": params.group_bits,
                       "rows": params.size_bits, "cols": params.size_bits})
    return data.StructLayout(fields)


def meta_layout(params: SystolicParams) -> data.StructLayout:
    """What travels with a moving vector to the PSUM columns (``m_left`` counts down one per
    column: column c writes the bank while it is nonzero, i.e. for c < m; ``int``: the sum
    is an int32 one, on an array with int8 only: elsewhere it would be a constant 0 carried
    through every stage of the pipeline). A tiled array carries one per column group."""
    return data.StructLayout({
        "valid": 1,
        "index": params.index_bits,
        "accumulate": 1,
        "m_left": params.m_bits,
        **({"int": 1} if params.has_int else {}),
    })


def wlo_bits(params: SystolicParams) -> int:
    """Bits of a tiled array's ``wlo`` (a stationary beat's first column within its
    group, in beats)."""
    return params.beat_columns.bit_length()


def row_ports(params: SystolicParams) -> dict:
    """Port signature of one PE row (also the port list of its emitted Verilog module)."""
    stat = params.rows * params.beat_columns * params.width
    ctl = ctl_layout(params).size
    w = params.ways
    ports = {
        "en": In(1),
        "mov_in": In(params.rows * params.width),
        "mov_out": Out(params.rows * params.width),
        "ctl_in": In(w * ctl),
        "ctl_out": Out(w * ctl),
        "mk_in": In(w * params.k_bits),
        "mk_out": Out(w * params.k_bits),
        "psum_in": In(32 * params.cols),
        "psum_out": Out(32 * params.cols),
        "stat_in": In(stat),
        "stat_out": Out(stat),
        "wv_in": In(1),
        "wv_out": Out(1),
        "wb_in": In(1),
        "wb_out": Out(1),
        "ws_in": In(params.skip_bits),
        "ws_out": Out(params.skip_bits),
        "wk_in": In(params.wk_bits),
        "wk_out": Out(params.wk_bits),
        "wd_in": In(1),
        "wd_out": Out(1),
    }
    if w > 1:
        ports.update({"wr_in": In(w), "wr_out": Out(w), "wlo_in": In(wlo_bits(params)),
                      "wlo_out": Out(wlo_bits(params)), "last": In(1)})
    return ports


def column_ports(params: SystolicParams) -> dict:
    """Port signature of one PSUM column (also the port list of its emitted Verilog module)."""
    w = params.ways
    ports = {
        "en": In(1),
        "meta_in": In(w * meta_layout(params).size),
        "meta_out": Out(w * meta_layout(params).size),
        "sum_in": In(32),
        "vec_in": In(32 * params.cols),
        "vec_out": Out(32 * params.cols),
    }
    if w > 1:
        ports["last"] = In(1)
    return ports


def stationary_layout(params: SystolicParams) -> data.ArrayLayout:
    """Payload of the ``stationary`` stream: ``beat_columns`` columns of ``rows`` words."""
    return data.ArrayLayout(data.ArrayLayout(params.width, params.rows), params.beat_columns)


def moving_layout(params: SystolicParams) -> data.ArrayLayout:
    """Payload of the ``moving`` stream: one column of ``rows`` words."""
    return data.ArrayLayout(params.width, params.rows)


def group_stream(shape, valid: int, ready: int):
    """A stream whose ``valid`` and ``ready`` have one bit per group: a plain
    :class:`~amaranth.lib.stream.Signature` for one group."""
    if valid == ready == 1:
        return stream.Signature(shape)
    return wiring.Signature({"payload": Out(shape), "valid": Out(valid), "ready": In(ready)})


def moving_signature(params: SystolicParams):
    """The ``moving`` stream: ``rows`` words, a ``valid`` and a ``ready`` per row group (the
    words of row group g are its vector; a multiply over several row groups takes their
    words together)."""
    return group_stream(moving_layout(params), params.ways, params.ways)


def out_signature(params: SystolicParams):
    """The ``out`` stream: ``cols`` words, a ``valid`` per column group, one ``ready``."""
    return group_stream(data.ArrayLayout(32, params.cols), params.ways, 1)


def job_layout(params: SystolicParams) -> data.StructLayout:
    """A multiply or transpose as one row group's runner holds it: ``last`` the index of
    its last vector, ``rows`` and ``cols`` the masks of its tile's groups, ``base`` the
    contraction indices of the tile above this row group, ``primary`` this group is the
    tile's first (its runner gives the vectors' PSUM metadata), ``c0`` the tile's first
    column group; the rest as the PE's control."""
    fields = {"tr": 1, "last": params.index_bits, "acc": 1, "bank": 1, "k": params.k_bits,
              "m": params.m_bits, "wfmt": params.code_bits, "xfmt": params.code_bits,
              "double": 1, "int": 1, "mx": 1, "quarter": 1, "rows": params.ways,
              "cols": params.ways, "base": bits_for(2 * params.rows), "primary": 1,
              "c0": params.group_bits}
    return data.StructLayout(fields)


def group_ports(params: SystolicParams) -> dict:
    """Port signature of one row group's runner (also its emitted Verilog module's)."""
    w = params.ways
    meta = meta_layout(params).size
    return {
        "en": In(1),
        "valid": In(w),
        "payload": In(params.group_rows * params.width),
        "ready": Out(1),
        "start": In(1),
        "job_in": In(job_layout(params).size),
        "job": Out(job_layout(params).size),
        "run": Out(1),
        "inject": Out(1),
        "last": Out(1),
        "index": Out(params.index_bits),
        "mov": Out(params.group_rows * params.width),
        "ctl": Out(ctl_layout(params).size),
        "mk": Out(params.k_bits),
        "meta_in": In(meta),
        "meta_out": Out(meta),
    }


def control_ports(params: SystolicParams) -> dict:
    """Port signature of the sequencer (also the port list of its emitted Verilog module)."""
    w, ways = params.width, params.ways
    ports = {
        "cmd": In(stream.Signature(cmd_layout(params))),
        "stationary": In(stream.Signature(stationary_layout(params))),
        "moving": In(moving_signature(params)),
        "out_valid": Out(ways),
        "out_ready": In(1),
        "last_meta": In(ways * meta_layout(params).size),
        "en": Out(1),
        "mov": Out(params.rows * w),
        "ctl": Out(ways * ctl_layout(params).size),
        "mk": Out(ways * params.k_bits),
        "stat": Out(params.rows * params.beat_columns * w),
        "wv": Out(1),
        "wb": Out(1),
        "ws": Out(params.skip_bits),
        "wk": Out(params.wk_bits),
        "wd": Out(1),
        "meta": Out(ways * meta_layout(params).size),
    }
    if ways > 1:
        ports.update({"wr": Out(ways), "wlo": Out(wlo_bits(params))})
    return ports
