"""Parameters of the tensor engine's systolic array, shared by the RTL and the golden model."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from amaranth.hdl import Mux, Value
from amaranth.utils import bits_for

from hdl.core.isa import MX_QUAD

__all__ = ["SystolicParams"]


def _choose(cond, yes, no):
    """``yes`` where ``cond`` else ``no``: a Python choice for a bool, a ``Mux`` for a value."""
    return Mux(cond, yes, no) if isinstance(cond, Value) else yes if cond else no


def _check_positive(field: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{field} must be a positive integer, not {value!r}")


@dataclass(frozen=True, kw_only=True)
class SystolicParams:
    """One weight-stationary systolic array that takes its input format per instruction.

    Parameters
    ----------
    rows : int
        PE rows: the contraction (partition) axis K of one pass. With a double-rate format
        each row takes two contraction indices, so one pass contracts ``2 * rows``.
    cols : int
        PE columns: the stationary free size M, which becomes the partition axis of the result.
    formats : tuple of str
        The input formats, names known to :func:`hdl.numerics.formats.input_format_by_name`
        (``"int8"``, ``"bf16"``, ``"fp8_e4m3"``, ``"cfp8_e5m2_b12"``, ``"mxfp8"``, ...). An
        instruction names its format by its position here (its code). Floats accumulate in
        fp32, int8 in wrapping int32.
    double_rate : tuple of str
        The formats of ``formats`` that run two products per PE per cycle (PE row r holds
        contraction indices 2r and 2r+1); 8-bit float formats only, not MX.
    quarter_rate : tuple of str
        The formats of ``formats`` that run at a quarter of a product per PE per cycle: a
        multiply takes one moving column every fourth cycle (fp32, as documented).
    moving_max : int
        Largest moving free size N of one multiply: the depth of the PSUM bank.
    load_columns : int
        Stationary columns one LoadStationary beat carries: the load path's speed against a
        multiply, which takes one moving column per cycle (at most ``cols`` are used).
    tiles : tuple of int
        The ways the array splits into tiles, along its rows and along its columns alike
        (the spec's row tiling, 2x64 and 4x32 of a 128-row array [ISA]): a tile of
        ``rows / w`` PE rows by ``cols / v`` PE columns (``w``, ``v`` in ``tiles``) at a
        position that is a multiple of its size. Tiles on disjoint row groups and disjoint
        column groups of ``rows / max(tiles)`` by ``cols / max(tiles)`` PEs run at once
        (:func:`sim.golden.systolic_cycles.schedule`). Always holds 1, the whole array. The RTL
        runs every tile position and size of its tiling
        (:class:`~hdl.tensor.systolic.SystolicArray`).

    An operand beat carries one word of :attr:`width` bits per PE row: the element in its
    low bits, or with a double-rate format index 2r in bits 0-7 and 2r+1 in bits 8-15.

    The block-scaled MX formats (``mxfp8``, ``mxfp4``) run at the spec's rate 4, four
    products per PE per cycle: a word is one element of the instruction set's MX quad types
    (``mxfp8_x4``, ``mxfp4_x4`` of :mod:`hdl.core.isa`, NKI's ``float8_e4m3fn_x4`` and
    ``float4_e2m1fn_x4``), four element codes along K, code ``i`` in byte ``i`` (mxfp8) or
    nibble ``i`` (mxfp4), so PE row r holds contraction indices ``4r .. 4r + 3``; above
    them, in bits :attr:`mx_scale_lsb` up, the E8M0 scale of their block (one scale per
    ``block`` = 32 indices and column, so per 8 words, as the quad types' ``scale`` operand
    holds it: word r of column c carries ``scales[4 * r // 32, c]``). The ``k`` of an MX
    LoadStationary counts words (quads, the ISA's partitions), at most ``rows``. So a
    stationary word brings its scale into the PE's weight bank with the load, and a moving
    word brings its own along the row; the PE folds both into each product's exponent,
    ``mul32`` of the two elements times ``2**(sw + sx - 254)`` rounded once, NaN where
    either scale is 255 (:func:`sim.golden.systolic.matmul_mx`), and adds the four products
    to the partial sum in index order. Neither the sequencer nor the PEs count blocks; a
    multiply on an MX tile must itself be MX (either MX format), and an MX multiply needs an
    MX tile.
    """

    rows: int
    cols: int
    formats: tuple[str, ...]
    double_rate: tuple[str, ...] = ()
    quarter_rate: tuple[str, ...] = ()
    moving_max: int = 512
    load_columns: int = 4
    tiles: tuple[int, ...] = (1,)

    def __post_init__(self):
        _check_positive("rows", self.rows)
        _check_positive("cols", self.cols)
        _check_positive("moving_max", self.moving_max)
        _check_positive("load_columns", self.load_columns)
        from hdl.numerics.formats import FloatFormat, input_format_by_name

        if not isinstance(self.formats, tuple) or not self.formats:
            raise ValueError(f"formats must be a non-empty tuple of format names, "
                             f"not {self.formats!r}")
        for name in self.formats:
            try:
                input_format_by_name(name)
            except ValueError as err:  # name the field, keep the list of legal formats
                raise ValueError(f"formats{str(err).removeprefix('format')}") from None
        if len(set(self.formats)) != len(self.formats):
            raise ValueError(f"formats must not repeat a format, not {self.formats!r}")
        if not isinstance(self.double_rate, tuple):
            raise ValueError(f"double_rate must be a tuple of format names, "
                             f"not {self.double_rate!r}")
        for name in self.double_rate:
            if name not in self.formats:
                raise ValueError(f"double_rate must name formats of {self.formats!r}, "
                                 f"not {name!r}")
            fmt = input_format_by_name(name)
            if not (isinstance(fmt, FloatFormat) and fmt.bits == 8):
                raise ValueError(f"double_rate must name 8-bit float formats (not MX), "
                                 f"not {name!r}")
        if (not isinstance(self.tiles, tuple) or 1 not in self.tiles
                or len(set(self.tiles)) != len(self.tiles)
                or any(not isinstance(w, int) or isinstance(w, bool) or w < 1
                       or self.rows % w or self.cols % w for w in self.tiles)):
            raise ValueError(f"tiles must be a tuple of distinct ways, 1 among them, each "
                             f"dividing rows ({self.rows}) and cols ({self.cols}), "
                             f"not {self.tiles!r}")
        if not isinstance(self.quarter_rate, tuple):
            raise ValueError(f"quarter_rate must be a tuple of format names, "
                             f"not {self.quarter_rate!r}")
        for name in self.quarter_rate:
            if name not in self.formats or name in self.double_rate:
                raise ValueError(f"quarter_rate must name formats of {self.formats!r} that "
                                 f"are not double-rate, not {name!r}")

    @cached_property
    def format_list(self):
        """The format descriptors of :attr:`formats`, in code order."""
        from hdl.numerics.formats import input_format_by_name

        return tuple(input_format_by_name(name) for name in self.formats)

    def code(self, fmt: str) -> int:
        """The code of input format ``fmt`` (its position in :attr:`formats`)."""
        if fmt not in self.formats:
            raise ValueError(f"fmt must be one of {', '.join(self.formats)}, not {fmt!r}")
        return self.formats.index(fmt)

    def is_double(self, fmt: str) -> bool:
        return fmt in self.double_rate

    def is_quarter(self, fmt: str) -> bool:
        return fmt in self.quarter_rate

    def column_cycles(self, fmt: str | None) -> int:
        """Cycles per moving column of a multiply in ``fmt``: 4 at a quarter rate, else 1
        (None: any format, 1)."""
        return 4 if fmt is not None and self.is_quarter(fmt) else 1

    def is_int(self, fmt: str) -> bool:
        return not self.format_list[self.code(fmt)].is_float

    def is_mx(self, fmt: str) -> bool:
        """Whether ``fmt`` is a block-scaled MX format (its words carry a scale)."""
        from hdl.numerics.formats import MxFormat

        return isinstance(self.format_list[self.code(fmt)], MxFormat)

    def k_limit(self, fmt: str) -> int:
        """Largest ``k`` of a LoadStationary in ``fmt``: contraction indices, two per row at
        double rate; an MX format's words (quads of :data:`MX_QUAD` indices), one per row."""
        return (2 if self.is_double(fmt) else 1) * self.rows

    def contraction(self, fmt: str, k: int) -> int:
        """Contraction indices of a tile of ``k`` in ``fmt`` (``MX_QUAD * k`` for MX)."""
        return MX_QUAD * k if self.is_mx(fmt) else k

    @property
    def has_float(self) -> bool:
        return any(f.is_float for f in self.format_list)

    @property
    def has_int(self) -> bool:
        return any(not f.is_float for f in self.format_list)

    @property
    def has_mx(self) -> bool:
        return any(self.is_mx(f) for f in self.formats)

    @property
    def code_bits(self) -> int:
        return max(1, (len(self.formats) - 1).bit_length())

    @property
    def mx_scale_lsb(self) -> int:
        """The lowest bit of an MX word's scale: above the quad's four elements of the widest
        MX format (32 with mxfp8, 16 with mxfp4 alone)."""
        from hdl.numerics.formats import MxFormat

        return MX_QUAD * max((f.bits for f in self.format_list if isinstance(f, MxFormat)),
                             default=0)

    @property
    def width(self) -> int:
        """Bits of one operand word (one per PE row): the widest format, at least 16 with
        double-rate formats (two 8-bit elements), at least an MX quad and its scale with
        MX formats (40 bits with mxfp8)."""
        widest = max(f.bits for f in self.format_list)
        if self.double_rate:
            widest = max(widest, 16)
        return max(widest, self.mx_scale_lsb + 8) if self.has_mx else widest

    @property
    def lanes(self) -> int:
        """Multipliers per PE: four with MX formats, two with double-rate formats."""
        return MX_QUAD if self.has_mx else 2 if self.double_rate else 1

    @property
    def k_max(self) -> int:
        """Largest ``k`` of a LoadStationary over all formats."""
        return (2 if self.double_rate else 1) * self.rows

    @property
    def k_bits(self) -> int:
        return bits_for(self.k_max)

    @property
    def m_bits(self) -> int:
        return bits_for(self.cols)

    @property
    def n_bits(self) -> int:
        return bits_for(self.moving_max)

    @property
    def index_bits(self) -> int:
        """Bits of a PSUM row index 0 .. moving_max - 1 (at least one)."""
        return max(1, bits_for(self.moving_max - 1))

    @property
    def bank_depth(self) -> int:
        """Rows of a PSUM column's memory: ``moving_max``, at least two so that its address
        is at least one bit wide."""
        return max(2, self.moving_max)

    @property
    def beat_columns(self) -> int:
        """Stationary columns per LoadStationary beat: ``min(load_columns, cols)``."""
        return min(self.load_columns, self.cols)

    @property
    def skip_bits(self) -> int:
        """Bits of a stationary beat's hop count (the last PE column it writes, up to
        ``cols + beat_columns - 2``)."""
        return bits_for(self.cols + self.beat_columns)

    @property
    def ways(self) -> int:
        """The finest split of :attr:`tiles`: the array is ``ways x ways`` groups of PEs."""
        return max(self.tiles)

    @property
    def group_rows(self) -> int:
        """PE rows of one row group, ``rows / ways``."""
        return self.rows // self.ways

    @property
    def group_cols(self) -> int:
        """PE columns of one column group, ``cols / ways``."""
        return self.cols // self.ways

    @property
    def group_bits(self) -> int:
        """Bits of a group index, ``0 .. ways - 1`` (at least one)."""
        return max(1, (self.ways - 1).bit_length())

    @property
    def size_bits(self) -> int:
        """Bits of a tile size in groups, ``1 .. ways``."""
        return bits_for(self.ways)

    @property
    def wk_bits(self) -> int:
        """Bits of a stationary beat's count of contraction indices left, counted from row 0:
        a tile's ``k`` plus a row's count (two at double rate, else one: an MX row holds one
        word) per PE row above its position."""
        return bits_for(self.k_max + self.k_max // self.rows * (self.rows - self.group_rows))

    def tile_groups(self, k, m, double_row=False):
        """The tile of a stationary of ``k`` partitions (PE rows; an MX tile's words) by ``m``
        columns: ``(rows, cols)`` in groups, the smallest sizes of the array's tiling that
        hold ``k`` in its rows and ``m`` in its columns; a ``double_row`` stationary (two
        contraction indices per PE row) takes the array's whole width, and so does one of
        more partitions than the array has rows. ``k``, ``m`` and ``double_row`` are
        integers (the core simulator's placement), or Amaranth values (the core RTL's
        decoder), which give values. The one rule of both."""
        rows = cols = self.ways
        for w in sorted(self.tiles)[1:]:  # ever smaller tiles: the last that holds wins
            rows = _choose(k <= self.rows // w, self.ways // w, rows)
            cols = _choose(m <= self.cols // w, self.ways // w, cols)
        deep = k > self.rows
        return _choose(deep, self.ways, rows), _choose(deep | double_row, self.ways, cols)

    @property
    def depth(self) -> int:
        """Pipeline stages from a moving beat's acceptance to its aligned column sums."""
        return self.rows + self.cols
