"""Parameters of the tensor engine's systolic array, shared by the RTL and the golden model."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from amaranth.utils import bits_for

__all__ = ["SystolicParams"]


def _check_positive(field: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{field} must be a positive integer, not {value!r}")


@dataclass(frozen=True, kw_only=True)
class SystolicParams:
    """One weight-stationary systolic array.

    Parameters
    ----------
    rows : int
        PE rows: the contraction (partition) axis K of one pass. With ``double_rate`` each row
        takes two contraction indices, so one pass contracts ``2 * rows``.
    cols : int
        PE columns: the stationary free size M, which becomes the partition axis of the result.
    fmt : str
        Input format of both operands, a name known to
        :func:`hdl.numerics.formats.format_by_name` (``"int8"``, ``"bf16"``, ``"fp8_e4m3"``,
        ``"cfp8_e5m2_b12"``, ...). Floats accumulate in fp32, int8 in wrapping int32.
    moving_max : int
        Largest moving free size N of one multiply: the depth of the PSUM bank.
    double_rate : bool
        Two products per PE per cycle (PE row r holds contraction indices 2r and 2r+1);
        8-bit float formats only.
    load_columns : int
        Stationary columns one LoadStationary beat carries: the load path's speed against a
        multiply, which takes one moving column per cycle (at most ``cols`` are used).
    """

    rows: int
    cols: int
    fmt: str
    moving_max: int = 512
    double_rate: bool = False
    load_columns: int = 4

    def __post_init__(self):
        _check_positive("rows", self.rows)
        _check_positive("cols", self.cols)
        _check_positive("moving_max", self.moving_max)
        _check_positive("load_columns", self.load_columns)
        from hdl.numerics.formats import format_by_name

        try:
            fmt = format_by_name(self.fmt)
        except ValueError as err:  # name the field, keep the list of legal formats
            raise ValueError(f"fmt{str(err).removeprefix('format')}") from None
        if not isinstance(self.double_rate, bool):
            raise ValueError(f"double_rate must be a bool, not {self.double_rate!r}")
        if self.double_rate and not (fmt.is_float and fmt.bits == 8):
            raise ValueError(f"fmt must be an 8-bit float format with double_rate, "
                             f"not {self.fmt!r}")

    @cached_property
    def format(self):
        """The format descriptor of :attr:`fmt`."""
        from hdl.numerics.formats import format_by_name

        return format_by_name(self.fmt)

    @property
    def is_float(self) -> bool:
        return self.format.is_float

    @property
    def width(self) -> int:
        """Bits of one input element."""
        return self.format.bits

    @property
    def lanes(self) -> int:
        """Products per PE per cycle."""
        return 2 if self.double_rate else 1

    @property
    def k_max(self) -> int:
        """Largest contraction K of one pass."""
        return self.lanes * self.rows

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
    def depth(self) -> int:
        """Pipeline stages from a moving beat's acceptance to its aligned column sums."""
        return self.rows + self.cols
