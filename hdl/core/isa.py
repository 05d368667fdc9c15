"""The NeuronCore instruction set: one definition for the core simulator and the RTL decoder.

A program is one instruction stream per engine: ``tensor``, ``vector``, ``scalar``,
``gpsimd`` and the DMA queues ``dma0`` .. ``dmaN``. Streams run concurrently and synchronise
only through semaphores (:class:`SemSignal`, :class:`SemWait`).

Operands are access patterns (:class:`AP`) over a memory: a first partition and a partition
count, a byte offset inside each partition, and up to three free dimensions, each a size and a
stride in elements. In HBM, which has no partitions, the partition axis is one more dimension
with a stride in bytes (``pstride``).

Every instruction is one fixed-width word of :data:`WORD_BITS` bits. Its layout is data: the
opcode in the low :data:`OPCODE_BITS` bits, then the instruction's fields in the order of its
``FIELDS`` table, least significant first; an access pattern is the sub-table
:data:`AP_FIELDS`, an absent one has zero partitions. :func:`encode` and :func:`decode` walk
those tables; :func:`format_instruction` and :func:`parse` give the readable text form, and
``decode(encode(i)) == i == parse(format_instruction(i))``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import MISSING, dataclass, fields, replace
from typing import ClassVar

from hdl.vector.ops import BITWISE_OPS, Reduce, VectorOp

__all__ = [
    "AP", "AP_BITS", "AP_FIELDS", "AffineSelect", "DMA_ADD_DTYPES", "DMA_CAST_DTYPES",
    "DTYPES", "ENGINE_OPS", "FREE_MAX", "GPSIMD_CORE_PARTITIONS", "INSTRUCTIONS",
    "MX_DTYPES", "MX_GROUP_PARTITIONS", "MX_QUAD", "MX_QUADRANT", "OPCODE_BITS",
    "QUANTIZE_MX_DTYPES", "SPACES",
    "TF32_SHIFT", "WORD_BITS", "Activation", "DmaCompute", "DmaCopy", "Dropout", "FindIndex8",
    "GatherFlattened", "Instruction", "IsaError", "Iota", "LocalGather", "MatchReplace8",
    "Max8", "NonzeroWithCount", "QuantizeMx", "Random",
    "LoadStationary", "Memset", "MultiplyMoving", "SHUFFLE_KEEP", "SHUFFLE_LANES",
    "RangeSelect", "SemSignal", "SequenceBounds",
    "SemWait", "StreamShuffle", "TensorCopy",
    "TensorCopyDynamic", "TensorReduce", "TensorScalar", "TensorTensor", "TensorTensorScan",
    "Transpose", "decode",
    "double_row_order", "draws_random", "encode", "engine_kind", "field_positions",
    "format_instruction", "input_format", "integer_words", "mx_scale_partition", "parse", "reach",
]


class IsaError(ValueError):
    """An instruction that cannot be encoded, decoded or parsed."""


#: Memory spaces an access pattern can address.
SPACES = ("hbm", "sbuf", "psum")
#: Largest free size of a vector/scalar/GpSimd tile, elements per partition [NKI2].
FREE_MAX = {"sbuf": 64 * 1024, "psum": 4 * 1024}
#: Element types of access patterns: name -> (code, bytes). Float formats are the names of
#: :mod:`hdl.numerics.formats`; ``int32``/``uint32``/``uint8`` are plain words.
#:
#: * The vector, scalar and GpSimd engines compute in fp32 and cast their inputs to it and
#:   their results from it, each by its value [NKI2]: an integer (int8, uint8, int32,
#:   uint32) to the nearest fp32 (ties to even), an fp32 to the nearest integer (ties to
#:   even, saturated, NaN 0).
#:   A bitwise operation (:func:`integer_words`) reads and writes its ``int32`` and
#:   ``uint32`` elements as the words they are instead. A copy between two ``int32`` tiles
#:   is by value too, so exact up to 2**24, where NKI documents the vector and GpSimd
#:   engines' copy between equal types as bit-accurate.
#:
#: * ``tf32`` (sign, 8 exponent bits, 10 mantissa bits) is stored in 32 bits, as NKI's
#:   ``tfloat32`` ("32-bit floating-point number (1S,8E,10M)" [NKI-DT]): its 19
#:   bits are the top of the word, where fp32 has the same fields, and the low 13 bits are
#:   written as zero and never read.
#: * ``mxfp8_x4``, ``mxfp8_e5m2_x4`` and ``mxfp4_x4`` are the quad types of the block-scaled
#:   MX formats (NKI's ``float8_e4m3fn_x4``, ``float8_e5m2_x4`` and ``float4_e2m1fn_x4``
#:   [NKI-DT, NKI4, NKI-MX]): one
#:   element holds four element codes of :data:`MX_DTYPES`' format along the contraction
#:   axis, code ``i`` in byte ``i`` (fp8) or nibble ``i`` (fp4, low nibble first), so a
#:   tile of ``P`` partitions contracts ``4 * P`` elements, ``4 * p + i`` the index of code
#:   ``i`` of partition ``p``. Each 32 of them (8 partitions) share an E8M0 scale, one
#:   ``uint8`` of the tile's scale operand (``scale`` of :class:`LoadStationary` and
#:   :class:`MultiplyMoving`, see there).
DTYPES = {"fp32": (0, 4), "bf16": (1, 2), "fp16": (2, 2), "fp8_e4m3": (3, 1),
          "fp8_e5m2": (4, 1), "fp8_e4m3fn": (5, 1), "int8": (6, 1), "int32": (7, 4),
          "uint32": (8, 4), "tf32": (9, 4), "mxfp8_x4": (10, 4), "mxfp4_x4": (11, 2),
          "uint8": (12, 1), "uint16": (13, 2), "mxfp8_e5m2_x4": (14, 4)}
_DTYPE_BY_CODE = {code: name for name, (code, _) in DTYPES.items()}
#: The MX quad types: name -> the tensor engine's format of their elements.
MX_DTYPES = {"mxfp8_x4": "mxfp8", "mxfp8_e5m2_x4": "mxfp8_e5m2", "mxfp4_x4": "mxfp4"}
#: The MX quad types :class:`QuantizeMx` writes (the 8-bit ones) [NKI ``quantize_mx``].
QUANTIZE_MX_DTYPES = ("mxfp8_x4", "mxfp8_e5m2_x4")
#: Element codes in one element of an MX quad type.
MX_QUAD = 4
#: Partitions of an MX tile that share one scale (with the quad: 32 contraction elements),
#: and partitions of the quadrant whose first partitions hold their scales [NKI4, NKI-MX].
MX_GROUP_PARTITIONS = 8
MX_QUADRANT = 32
#: The low bits of a tf32 word below its 19-bit code.
TF32_SHIFT = 13


def input_format(dtype: str) -> str:
    """The tensor engine's format of element type ``dtype``: an MX quad type's MX format,
    any other type itself."""
    return MX_DTYPES.get(dtype, dtype)


def mx_scale_partition(group: int) -> int:
    """The partition, counted from the scale operand's first, that holds the scale of
    scale group ``group`` of an MX tile (its partitions ``8 * group .. 8 * group + 7``): the
    scales of a quadrant's four groups sit in that quadrant's first four partitions."""
    q, j = divmod(group, MX_QUADRANT // MX_GROUP_PARTITIONS)
    return q * MX_QUADRANT + j


def double_row_order(partitions: int) -> list[int]:
    """The contraction indices of a double row of ``partitions`` (P) partitions in the order
    the array adds their products: PE row ``p``'s pair 0 (index ``p``), then its pair 1
    (index ``P + p``), for ``p`` = 0 .. P - 1 (:class:`LoadStationary`)."""
    return [i * partitions + p for p in range(partitions) for i in range(2)]


#: The roundings of an instruction's cast to a narrower type: to nearest even, or
#: stochastic, from the generators of the engine's unit (``sim.core.data.unit_beats``).
ROUNDINGS = ("rne", "stochastic")

WORD_BITS = 1024
OPCODE_BITS = 8
MAX_DIMS = 3
#: Partitions of a quadrant, which :class:`StreamShuffle` moves data within, and the entry
#: of its ``shuffle`` that leaves a partition as it is.
SHUFFLE_LANES = 32
SHUFFLE_KEEP = 255

#: Field layout of an access pattern: (name, bits, signed).
AP_FIELDS = (
    ("space", 2, False), ("dtype", 4, False), ("partition", 8, False),
    ("partitions", 8, False), ("offset", 40, False), ("pstride", 32, False),
    ("n0", 16, False), ("s0", 24, True), ("n1", 16, False), ("s1", 24, True),
    ("n2", 16, False), ("s2", 24, True),
)
AP_BITS = sum(b for _, b, _ in AP_FIELDS)


@dataclass(frozen=True, slots=True)
class AP:
    """An access pattern: ``partitions`` rows from ``partition``, ``offset`` bytes into each
    (in HBM: the byte address of row 0, rows ``pstride`` bytes apart), and free dimensions
    ``dims`` = ((size, stride), ...) outermost first, strides in elements."""

    space: str
    dtype: str
    partition: int
    partitions: int
    offset: int
    dims: tuple[tuple[int, int], ...]
    pstride: int = 0

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype][1]

    @property
    def free(self) -> int:
        """Elements per partition."""
        n = 1
        for size, _ in self.dims:
            n *= size
        return n

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.partitions,) + tuple(size for size, _ in self.dims)

    @property
    def nbytes(self) -> int:
        return self.partitions * self.free * self.itemsize


def _ap_text(ap: AP | None) -> str:
    if ap is None:
        return "-"
    rows = f"{ap.partition}:{ap.partition + ap.partitions}"
    if ap.pstride:
        rows += f"/{ap.pstride}"
    dims = ",".join(f"{n}x{s}" for n, s in ap.dims)
    return f"{ap.space}.{ap.dtype}[{rows}]@{ap.offset:#x}{{{dims}}}"


_AP_RE = re.compile(r"(\w+)\.(\w+)\[(\d+):(\d+)(?:/(\d+))?\]@(0x[0-9a-f]+|\d+)\{([-\dx,]*)\}$")


def _ap_parse(text: str) -> AP | None:
    if text == "-":
        return None
    m = _AP_RE.match(text)
    if not m:
        raise IsaError(f"operand must read SPACE.DTYPE[P0:P1]@OFFSET{{NxS,...}}, not {text!r}")
    space, dtype, p0, p1, ps, off, dims = m.groups()
    out = []
    for d in filter(None, dims.split(",")):
        n, _, s = d.partition("x")
        out.append((int(n), int(s)))
    return AP(space, dtype, int(p0), int(p1) - int(p0), int(off, 0), tuple(out),
              int(ps) if ps else 0)


def _f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


# --- instructions ---------------------------------------------------------------------------
# A FIELDS entry is (name, kind, bits): kind "u"/"s" (unsigned/signed integer), "f32" (an
# IEEE binary32 immediate), "ap" (an access pattern, AP_BITS wide, optional: None is
# encoded as zero partitions), "op" (VectorOp), "reduce" (Reduce), "rounding", "func" (an
# index into the core's activation functions).

class Instruction:
    """Base of every instruction; subclasses are frozen dataclasses with an ``OPCODE``, a
    ``MNEMONIC`` and a ``FIELDS`` table that fixes their binary layout."""

    OPCODE: ClassVar[int]
    MNEMONIC: ClassVar[str]
    FIELDS: ClassVar[tuple[tuple[str, str, int], ...]]

    def operands(self) -> tuple[tuple[str, AP, bool], ...]:
        """(field, access pattern, written) for every access pattern present."""
        return tuple((name, getattr(self, name), name in _WRITTEN)
                     for name, kind, _ in self.FIELDS
                     if kind == "ap" and getattr(self, name) is not None)

    def __str__(self) -> str:
        return format_instruction(self)


_WRITTEN = ("dst", "reduce_dst", "dst_idx")


@dataclass(frozen=True, slots=True)
class LoadStationary(Instruction):
    """Load a K x M stationary tile (``src``: K partitions, M elements) into the array at
    tile position (``row``, ``col``) in PE rows and columns.

    An MX tile (``src`` of an MX quad type) comes with ``scale``: its E8M0 scales, ``uint8``
    in SBUF, M elements per partition. The scale of the tile's partitions ``8g .. 8g + 7``
    and column ``m`` is element ``m`` of ``scale``'s partition :func:`mx_scale_partition`
    (``g``): a quadrant's scales sit in its own first four partitions. ``scale`` has the
    tile's K partitions, or (K at most 32) one per group of 8, as NKI allocates MX scales
    [NKI-MX]. Other tiles take no ``scale``.

    ``double_row`` (a double-rate format of the array: fp8) contracts ``2P`` indices on
    ``P`` PE rows [NKI3]: ``src`` is ``[P, 2, M]``, its outermost free dimension the pair
    axis (size 2, any stride; the documented layout puts it slowest, ``M`` elements apart),
    the rest of it the ``M`` columns. Pair ``i`` of partition ``p`` holds contraction index
    ``i * P + p``: the pairs are the contraction's first and second halves. PE row ``p``
    holds both elements of its pair; the array adds its pair 0 product, then its pair 1
    product, row by row (:func:`double_row_order`). The double row takes the array's whole
    width (no column tiling) and has no transpose."""

    OPCODE: ClassVar[int] = 1
    MNEMONIC: ClassVar[str] = "ldst"
    FIELDS: ClassVar = (("src", "ap", AP_BITS), ("row", "u", 8), ("col", "u", 8),
                        ("scale", "ap", AP_BITS), ("double_row", "u", 1))
    src: AP
    row: int = 0
    col: int = 0
    scale: AP | None = None
    double_row: bool = False


@dataclass(frozen=True, slots=True)
class MultiplyMoving(Instruction):
    """Stream the K x N moving tile ``src`` through the loaded stationary; ``dst`` (PSUM,
    fp32, M partitions, N elements: the bank and offset are its address) receives the sum,
    added to it with ``accumulate``. The input format is ``src``'s element type; an MX
    moving tile comes with ``scale``, laid out as :class:`LoadStationary`'s (N elements per
    partition). With ``double_row`` (on a double-row stationary) ``src`` is ``[P, 2, N]``,
    paired as the stationary's: the moving tile of a contraction of ``2P``."""

    OPCODE: ClassVar[int] = 2
    MNEMONIC: ClassVar[str] = "matmul"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS),
                        ("accumulate", "u", 1), ("row", "u", 8), ("col", "u", 8),
                        ("scale", "ap", AP_BITS), ("double_row", "u", 1))
    dst: AP
    src: AP
    accumulate: bool = False
    row: int = 0
    col: int = 0
    scale: AP | None = None
    double_row: bool = False


@dataclass(frozen=True, slots=True)
class Transpose(Instruction):
    """``dst[f, p] = src[p, f]``, bit for bit: on the tensor engine its array's transpose pass
    into PSUM; on the vector engine a tile of at most ``vector_transpose`` partitions and
    free elements, SBUF or PSUM to either."""

    OPCODE: ClassVar[int] = 3
    MNEMONIC: ClassVar[str] = "transpose"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS))
    dst: AP
    src: AP


@dataclass(frozen=True, slots=True)
class Activation(Instruction):
    """``dst = cast(func(src * scale + bias))``; ``bias`` one value per partition (or none);
    ``reduce_dst`` (optional) receives the sum along the free axis, one value per partition."""

    OPCODE: ClassVar[int] = 4
    MNEMONIC: ClassVar[str] = "act"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS), ("bias", "ap", AP_BITS),
                        ("reduce_dst", "ap", AP_BITS), ("func", "func", 5),
                        ("scale", "f32", 32), ("rounding", "rounding", 1))
    dst: AP
    src: AP
    func: int
    bias: AP | None = None
    reduce_dst: AP | None = None
    scale: float = 1.0
    rounding: str = "rne"


@dataclass(frozen=True, slots=True)
class TensorTensor(Instruction):
    """``dst = cast(op(a, b))`` element by element."""

    OPCODE: ClassVar[int] = 5
    MNEMONIC: ClassVar[str] = "tt"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("a", "ap", AP_BITS), ("b", "ap", AP_BITS),
                        ("op", "op", 5), ("rounding", "rounding", 1))
    dst: AP
    a: AP
    b: AP
    op: VectorOp
    rounding: str = "rne"


@dataclass(frozen=True, slots=True)
class TensorScalar(Instruction):
    """``dst = cast(op1(op0(src, s0), s1))``: ``s0``/``s1`` the per-partition values of
    ``operand0``/``operand1`` (one element per partition) or, where absent, the immediates
    ``imm0``/``imm1``. ``op1`` COPY skips the second step."""

    OPCODE: ClassVar[int] = 6
    MNEMONIC: ClassVar[str] = "ts"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS),
                        ("operand0", "ap", AP_BITS), ("op0", "op", 5), ("imm0", "f32", 32),
                        ("operand1", "ap", AP_BITS), ("op1", "op", 5), ("imm1", "f32", 32),
                        ("rounding", "rounding", 1))
    dst: AP
    src: AP
    op0: VectorOp
    operand0: AP | None = None
    imm0: float = 0.0
    op1: VectorOp = VectorOp.COPY
    operand1: AP | None = None
    imm1: float = 0.0
    rounding: str = "rne"


@dataclass(frozen=True, slots=True)
class TensorTensorScan(Instruction):
    """A scan along the free axis, per partition: ``r[i] = op1(op0(a[i], r[i - 1]),
    b[i])`` for ``i`` over the flat free index, ``r[-1]`` the per-partition value of
    ``initial`` (one element per partition) or, where absent, the immediate ``imm``;
    ``reverse0`` / ``reverse1`` swap the operands of ``op0`` / ``op1``. The inputs are
    widened to fp32 and ``r`` is kept in fp32; each ``r[i]`` is cast into ``dst`` [ISA]."""

    OPCODE: ClassVar[int] = 14
    MNEMONIC: ClassVar[str] = "scan"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("a", "ap", AP_BITS), ("b", "ap", AP_BITS),
                        ("initial", "ap", AP_BITS), ("imm", "f32", 32), ("op0", "op", 5),
                        ("op1", "op", 5), ("reverse0", "u", 1), ("reverse1", "u", 1),
                        ("rounding", "rounding", 1))
    dst: AP
    a: AP
    b: AP
    op0: VectorOp
    op1: VectorOp
    initial: AP | None = None
    imm: float = 0.0
    reverse0: bool = False
    reverse1: bool = False
    rounding: str = "rne"


@dataclass(frozen=True, slots=True)
class TensorReduce(Instruction):
    """``dst[p] = reduce(op(src[p, :]))`` along the whole free axis (one element per
    partition); ``op`` COPY, ABS or SQUARE, ``reduce`` SUM or MAX."""

    OPCODE: ClassVar[int] = 7
    MNEMONIC: ClassVar[str] = "reduce"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS), ("op", "op", 5),
                        ("reduce", "reduce", 2))
    dst: AP
    src: AP
    reduce: Reduce
    op: VectorOp = VectorOp.COPY


@dataclass(frozen=True, slots=True)
class TensorCopy(Instruction):
    """``dst = cast(src)``."""

    OPCODE: ClassVar[int] = 8
    MNEMONIC: ClassVar[str] = "copy"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS),
                        ("rounding", "rounding", 1))
    dst: AP
    src: AP
    rounding: str = "rne"


@dataclass(frozen=True, slots=True)
class Memset(Instruction):
    """Every element of ``dst`` = ``value`` (cast to ``dst``'s type, RNE)."""

    OPCODE: ClassVar[int] = 9
    MNEMONIC: ClassVar[str] = "memset"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("value", "f32", 32))
    dst: AP
    value: float = 0.0


@dataclass(frozen=True, slots=True)
class Iota(Instruction):
    """``dst[p, i] = base + p * pstep + i * step`` (``i`` the flat free index), an integer
    written as ``dst``'s type."""

    OPCODE: ClassVar[int] = 10
    MNEMONIC: ClassVar[str] = "iota"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("base", "s", 32), ("pstep", "s", 32),
                        ("step", "s", 32))
    dst: AP
    base: int = 0
    pstep: int = 0
    step: int = 1


@dataclass(frozen=True, slots=True)
class AffineSelect(Instruction):
    """``dst[p, i]`` = ``src[p, i]`` (through the unit's copy: a NaN canonical) where
    ``op(base + p * pstep + i * step, 0)`` holds, ``i`` the flat free index and the value an
    integer as :class:`Iota` computes it, else ``fill`` (as ``dst``'s type), on GpSimd; its
    ``base``, ``pstep`` and ``step`` where :class:`Iota` has them [NKI ``affine_select``:
    "the predicate tile is calculated on-the-fly in the engine by evaluating an affine
    expression element-by-element"]."""

    OPCODE: ClassVar[int] = 26
    MNEMONIC: ClassVar[str] = "aselect"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("base", "s", 32), ("pstep", "s", 32),
                        ("step", "s", 32), ("src", "ap", AP_BITS), ("op", "op", 5),
                        ("fill", "f32", 32))
    dst: AP
    base: int
    pstep: int
    step: int
    src: AP
    op: VectorOp
    fill: float = 0.0


#: Partitions of each GpSimd core: core ``g`` reads and writes partitions 16 g .. 16 g + 15
#: [NKI ``local_gather``, ``nonzero_with_count``: "each of the eight GpSimd cores connects to
#: 16 contiguous SBUF partitions"].
GPSIMD_CORE_PARTITIONS = 16


@dataclass(frozen=True, slots=True)
class NonzeroWithCount(Instruction):
    """On GpSimd, for the first partition of each core's 16 (:data:`GPSIMD_CORE_PARTITIONS`,
    counted from the tile's first, which the start-partition rule puts at a core's first):
    ``dst[p, :N]`` = the positions ``i`` (the flat free
    index) where ``src[p, i]`` is not zero, in order, plus ``offset``; then ``padding`` up to
    ``dst[p, T - 1]``; ``dst[p, T]`` = ``N``, for ``T`` elements of ``src`` (fp32 or int32;
    -0.0 is zero, a NaN is not) and ``T + 1`` of ``dst`` (int32, as integers). The other
    partitions of ``dst`` keep what they hold [NKI ``nonzero_with_count``]."""

    OPCODE: ClassVar[int] = 27
    MNEMONIC: ClassVar[str] = "nonzero"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS), ("offset", "s", 32),
                        ("padding", "s", 32))
    dst: AP
    src: AP
    offset: int = 0
    padding: int = -1


@dataclass(frozen=True, slots=True)
class QuantizeMx(Instruction):
    """On the vector engine (NeuronCore-v4 on), ``src`` (bf16 or fp16, ``P`` partitions a
    multiple of :data:`MX_QUADRANT`, ``4F`` elements) into the MX tile ``dst``
    (``mxfp8_x4`` or ``mxfp8_e5m2_x4``, ``P x F``: element ``[p, j]`` holds ``src[p, 4j + i]``
    in code ``i``) and its E8M0 scales ``scale`` (``uint8``, ``F`` a partition, laid out as
    :class:`LoadStationary` reads them: group ``g`` of 8 partitions at partition
    :func:`mx_scale_partition` (``g``); ``P`` partitions, or ``P / 8`` for ``P`` of 32). A
    group of 32 values (8 partitions by the 4 of an element) takes the scale ``2^X``,
    ``X = floor(log2(amax)) - (emax - 1)`` for ``amax`` its largest finite magnitude and
    ``emax`` the element format's (8 of E4M3, 15 of E5M2: twice the OCP MX scale, so that the
    largest values round without saturating), ``X = -127`` for a group of zeros; each value
    divided by it and rounded to nearest even into the element format (a NaN: NaN; an
    infinity: NaN in E4M3, which has none, an infinity in E5M2) [NKI ``quantize_mx``]. Scale
    partitions outside the groups' keep what they hold."""

    OPCODE: ClassVar[int] = 29
    MNEMONIC: ClassVar[str] = "qmx"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS),
                        ("scale", "ap", AP_BITS))
    dst: AP
    src: AP
    scale: AP


@dataclass(frozen=True, slots=True)
class DmaCopy(Instruction):
    """Copy ``src`` to ``dst`` element for element (same shape and type).

    An indirect copy (``index`` given: ``int32`` or ``uint32`` in SBUF, a partition for each
    of the copy's) takes the rows of its HBM side (``dst`` where ``index_dst``, else
    ``src``) from the index: the copy's partition ``p`` moves that side's row
    ``index[p]`` (the partition's first element), at ``offset + index[p] * pstride`` of its
    access pattern, where it would move row ``p``. ``rows`` is the indexed tensor's: a row
    outside ``0 .. rows - 1`` is an error, or with ``skip`` is not moved [NKI indirect
    DMA]. With ``index_stride`` (bytes, not 0) the index is one value, read once (NKI's
    ``scalar_offset``, "a single dynamic offset applied uniformly to all partitions"): the
    indexed side moves as its access pattern says, at ``index * index_stride`` bytes past
    it; an index outside ``0 .. rows - 1`` is an error, or with ``skip`` the copy moves
    nothing.

    ``src`` and ``dst`` of two types (both of :data:`DMA_CAST_DTYPES`) convert each element:
    ``src``'s value widened to fp32 (an integer to the nearest fp32, ties to even), then cast
    to ``dst``'s type (a float type to nearest even; an integer type to the nearest integer,
    ties to even, saturated, NaN 0) [NKI-DMA]. Of one type, the copy moves the bits as
    they are.

    With ``add`` the copy adds ``src`` to what ``dst`` holds (a read-modify-write of
    floating-point elements, ``dst`` of :data:`DMA_ADD_DTYPES`: both widened to fp32, the
    sum rounded to ``dst``'s type to nearest even), rows an index names twice adding twice
    [NKI ``dst_rmw_op``]."""

    OPCODE: ClassVar[int] = 11
    MNEMONIC: ClassVar[str] = "dma"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS),
                        ("index", "ap", AP_BITS), ("index_dst", "u", 1), ("rows", "u", 32),
                        ("skip", "u", 1), ("add", "u", 1), ("index_stride", "u", 32))
    dst: AP
    src: AP
    index: AP | None = None
    index_dst: bool = False
    rows: int = 0
    skip: bool = False
    add: bool = False
    index_stride: int = 0


@dataclass(frozen=True, slots=True)
class DmaCompute(Instruction):
    """``dst`` = ``a + b`` (``+ c``) element for element on a DMA queue: each element widened
    to fp32 by value (as :class:`DmaCopy` converts), summed in fp32 in that order (each sum
    rounded to nearest even, as the vector unit's fp32 adder), the total cast to ``dst``'s
    type once; every operand of :data:`DMA_CAST_DTYPES` and of one shape [NKI
    ``dma_compute``: "The DMA engines perform all computations in float32 precision
    internally ... the final float32 result is cast to the output data type"]."""

    OPCODE: ClassVar[int] = 28
    MNEMONIC: ClassVar[str] = "dmac"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("a", "ap", AP_BITS), ("b", "ap", AP_BITS),
                        ("c", "ap", AP_BITS))
    dst: AP
    a: AP
    b: AP
    c: AP | None = None

    @property
    def sources(self) -> tuple[AP, ...]:
        return (self.a, self.b) + ((self.c,) if self.c is not None else ())


@dataclass(frozen=True, slots=True)
class StreamShuffle(Instruction):
    """Move partitions within each quadrant of 32 on the vector engine: ``dst``'s partition
    ``32 q + i`` (counted from its first) takes ``src``'s partition ``32 q + shuffle[i]``
    (counted from its first) element for element, its bits as they are, or with
    ``shuffle[i]`` = :data:`SHUFFLE_KEEP` keeps its own; ``shuffle`` has 32 entries
    [NKI ``nc_stream_shuffle``]."""

    OPCODE: ClassVar[int] = 15
    MNEMONIC: ClassVar[str] = "shuffle"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS),
                        ("shuffle", "bytes", 8 * SHUFFLE_LANES))
    dst: AP
    src: AP
    shuffle: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TensorCopyDynamic(Instruction):
    """``dst = cast(src)`` as :class:`TensorCopy`, ``src`` moved at run time along one of
    its partitions' dimensions: by ``v * stride`` elements, ``v`` the integer ``offset``
    holds (one int32 or uint32 in SBUF), which must be one of ``0 .. count - 1``
    [NKI ``tensor_copy_dynamic_src``]."""

    OPCODE: ClassVar[int] = 22
    MNEMONIC: ClassVar[str] = "copyd"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS),
                        ("offset", "ap", AP_BITS), ("stride", "s", 32), ("count", "u", 32))
    dst: AP
    src: AP
    offset: AP
    stride: int
    count: int


@dataclass(frozen=True, slots=True)
class SequenceBounds(Instruction):
    """For each element of the one partition of ``src`` (segment ids, compared by value),
    where its segment starts and where it ends (one past its last), into ``dst``'s
    partition: the ``N`` starts, then the ``N`` ends; an id of 0 (padding) gets ``N`` and
    -1 [NKI ``sequence_bounds``]."""

    OPCODE: ClassVar[int] = 23
    MNEMONIC: ClassVar[str] = "bounds"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS))
    dst: AP
    src: AP


@dataclass(frozen=True, slots=True)
class RangeSelect(Instruction):
    """``dst`` = ``src`` (through the vector unit's copy: a NaN canonical) where ``op0(i,
    bound0)`` and ``op1(i, bound1)`` hold for the element's place ``i`` = ``start`` + its
    free index (in fp32, the bounds one fp32 a partition), else ``fill`` [NKI
    ``range_select``, NeuronCore-v3 on; its reduction is a :class:`TensorReduce` after it,
    the word holding four operands at most]."""

    OPCODE: ClassVar[int] = 24
    MNEMONIC: ClassVar[str] = "rselect"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS),
                        ("bound0", "ap", AP_BITS), ("bound1", "ap", AP_BITS),
                        ("op0", "op", 5), ("op1", "op", 5), ("start", "s", 32),
                        ("fill", "f32", 32))
    dst: AP
    src: AP
    bound0: AP
    bound1: AP
    op0: VectorOp
    op1: VectorOp
    start: int = 0
    fill: float = 0.0


@dataclass(frozen=True, slots=True)
class LocalGather(Instruction):
    """Each group of 16 partitions gathers from itself, as each GpSimd core from its 16:
    the group's uint16 ``indices`` read partition first (column by column), the first
    ``valid`` of them; for each, ``per`` elements of each partition of ``src`` from that
    element offset (free elements flattened), in turn into ``dst`` [NKI ``local_gather``]."""

    OPCODE: ClassVar[int] = 25
    MNEMONIC: ClassVar[str] = "lgather"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS),
                        ("indices", "ap", AP_BITS), ("per", "u", 8), ("valid", "u", 16))
    dst: AP
    src: AP
    indices: AP
    per: int = 1
    valid: int = 0


@dataclass(frozen=True, slots=True)
class Max8(Instruction):
    """The 8 largest elements of each partition of ``src`` (its free elements flattened,
    compared as fp32 through the vector unit's copy: a NaN canonical and below every other),
    largest first, equal ones in their order in ``src``, into ``dst``'s 8 [NKI ``max8``]."""

    OPCODE: ClassVar[int] = 16
    MNEMONIC: ClassVar[str] = "max8"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS))
    dst: AP
    src: AP


@dataclass(frozen=True, slots=True)
class FindIndex8(Instruction):
    """For each of the 8 elements of a partition of ``vals``, the index (from 0, over the
    partition's free elements of ``data`` flattened) of its first occurrence there, into
    ``dst``; an absent value gives 2**32 - 1 [NKI ``nc_find_index8``: undefined]."""

    OPCODE: ClassVar[int] = 17
    MNEMONIC: ClassVar[str] = "find8"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("data", "ap", AP_BITS),
                        ("vals", "ap", AP_BITS))
    dst: AP
    data: AP
    vals: AP


@dataclass(frozen=True, slots=True)
class MatchReplace8(Instruction):
    """``dst`` = ``data`` (through the vector unit's copy: a NaN canonical) with, for each of
    the 8 elements of a partition of ``vals`` in turn, its first occurrence in what is left
    of that partition replaced by ``imm``;
    ``dst_idx`` (if given) takes where each was found (0 where it was not)
    [NKI ``nc_match_replace8``]."""

    OPCODE: ClassVar[int] = 18
    MNEMONIC: ClassVar[str] = "replace8"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("data", "ap", AP_BITS),
                        ("vals", "ap", AP_BITS), ("imm", "f32", 32),
                        ("dst_idx", "ap", AP_BITS))
    dst: AP
    data: AP
    vals: AP
    imm: float = 0.0
    dst_idx: AP | None = None


@dataclass(frozen=True, slots=True)
class Random(Instruction):
    """``dst`` filled with numbers uniform in [0, 1): each element ``(w >> 8) * 2**-24``
    for the next word ``w`` of its lane's generator, the unit's that stochastic rounding
    draws from [NKI ``nl.rand``]."""

    OPCODE: ClassVar[int] = 19
    MNEMONIC: ClassVar[str] = "rand"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS),)
    dst: AP


@dataclass(frozen=True, slots=True)
class Dropout(Instruction):
    """``dst`` = ``src`` where the element's draw (as :class:`Random` draws) is at least
    the drop probability, ``prob``'s element of the partition (or ``imm``), else 0
    [NKI ``dropout``]."""

    OPCODE: ClassVar[int] = 20
    MNEMONIC: ClassVar[str] = "dropout"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS),
                        ("prob", "ap", AP_BITS), ("imm", "f32", 32))
    dst: AP
    src: AP
    prob: AP | None = None
    imm: float = 0.0


@dataclass(frozen=True, slots=True)
class GatherFlattened(Instruction):
    """``dst``'s element ``j`` of each partition = that partition's element ``indices[j]``
    of ``src`` (free elements flattened), bits as they are; an index past the partition's
    elements gives 0 [NKI ``nl.gather_flattened``: garbage]."""

    OPCODE: ClassVar[int] = 21
    MNEMONIC: ClassVar[str] = "gather"
    FIELDS: ClassVar = (("dst", "ap", AP_BITS), ("src", "ap", AP_BITS),
                        ("indices", "ap", AP_BITS))
    dst: AP
    src: AP
    indices: AP


@dataclass(frozen=True, slots=True)
class SemSignal(Instruction):
    """Add ``count`` to semaphore ``sem`` once every earlier instruction of the stream has
    completed."""

    OPCODE: ClassVar[int] = 12
    MNEMONIC: ClassVar[str] = "signal"
    FIELDS: ClassVar = (("sem", "u", 8), ("count", "u", 16))
    sem: int
    count: int = 1


@dataclass(frozen=True, slots=True)
class SemWait(Instruction):
    """Stall the stream until semaphore ``sem`` reaches ``value``."""

    OPCODE: ClassVar[int] = 13
    MNEMONIC: ClassVar[str] = "wait"
    FIELDS: ClassVar = (("sem", "u", 8), ("value", "u", 32))
    sem: int
    value: int


INSTRUCTIONS: dict[int, type[Instruction]] = {
    cls.OPCODE: cls for cls in (LoadStationary, MultiplyMoving, Transpose, Activation,
                                TensorTensor, TensorScalar, TensorReduce, TensorCopy, Memset,
                                Iota, DmaCopy, SemSignal, SemWait, TensorTensorScan,
                                StreamShuffle, Max8, FindIndex8, MatchReplace8, Random,
                                Dropout, GatherFlattened, TensorCopyDynamic,
                                SequenceBounds, RangeSelect, LocalGather, AffineSelect,
                                NonzeroWithCount, DmaCompute, QuantizeMx)}
_BY_MNEMONIC = {cls.MNEMONIC: cls for cls in INSTRUCTIONS.values()}
_SYNC = (SemSignal, SemWait)

#: The element types a DMA adds into (``DmaCopy.add``; its src of any type of
#: :data:`DMA_CAST_DTYPES`): the sum in fp32 by the vector unit's adder, rounded to nearest
#: even into the type.
DMA_ADD_DTYPES = ("fp32", "bf16", "fp16")
#: The element types a DMA converts between (``DmaCopy`` with src and dst of two types):
#: those the engines read and write by value; no MX type [NKI-DMA].
DMA_CAST_DTYPES = ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fn", "tf32",
                   "int8", "uint8", "int32", "uint32")

#: Which instructions each kind of engine runs [ISA].
ENGINE_OPS: dict[str, tuple[type[Instruction], ...]] = {
    "tensor": (LoadStationary, MultiplyMoving, Transpose) + _SYNC,
    "vector": (TensorTensor, TensorScalar, TensorReduce, TensorCopy, Memset,
               TensorTensorScan, Transpose, StreamShuffle, Max8, FindIndex8, MatchReplace8,
               Random, Dropout, TensorCopyDynamic, RangeSelect, QuantizeMx,
               Activation) + _SYNC,
    "scalar": (Activation, TensorScalar, TensorCopy, TensorCopyDynamic) + _SYNC,
    "gpsimd": (Iota, TensorTensor, TensorScalar, TensorCopy, Memset, GatherFlattened,
               TensorCopyDynamic, SequenceBounds, LocalGather, AffineSelect,
               NonzeroWithCount) + _SYNC,
    "dma": (DmaCopy, DmaCompute) + _SYNC,
}


def draws_random(ins: Instruction) -> bool:
    """Whether ``ins`` takes numbers from its unit's generators: a stochastic rounding, a
    :class:`Random` or a :class:`Dropout` (two such instructions alike give different
    results)."""
    return isinstance(ins, Random | Dropout) or getattr(ins, "rounding", "rne") == "stochastic"


def reach(ins: Instruction) -> tuple[tuple[str, AP, bool], ...]:
    """(field, access pattern, written) of every access pattern of ``ins``, as the bytes it
    may touch: an indirect copy's indexed side (:class:`DmaCopy`) spans all its ``rows``
    (of one index: its pattern at each), a dynamic copy's source
    (:class:`TensorCopyDynamic`) every place its offset may name."""
    out = ins.operands()
    if isinstance(ins, DmaCopy) and ins.index is not None:
        side = "dst" if ins.index_dst else "src"
        out = tuple((n, (replace(ap, dims=((ins.rows, ins.index_stride // ap.itemsize),)
                                 + ap.dims) if ins.index_stride
                         else replace(ap, partitions=ins.rows)) if n == side else ap, w)
                    for n, ap, w in out)
    if isinstance(ins, TensorCopyDynamic):  # every place the offset may move src to
        out = tuple((n, replace(ap, dims=((ins.count, ins.stride),) + ap.dims)
                     if n == "src" else ap, w) for n, ap, w in out)
    return out


def integer_words(ins: Instruction) -> bool:
    """Whether ``ins`` reads and writes its ``int32`` and ``uint32`` elements (and scalar
    operands) as their words, not by value: a bitwise operation."""
    return any(getattr(ins, name, None) in BITWISE_OPS for name in ("op", "op0", "op1"))


def engine_kind(stream: str) -> str:
    """The kind of engine a stream name runs on (``dma3`` -> ``dma``)."""
    if stream.startswith("dma") and stream[3:].isdigit():
        return "dma"
    if stream in ENGINE_OPS:
        return stream
    raise IsaError(f"stream must be one of tensor, vector, scalar, gpsimd, dma<N>, "
                   f"not {stream!r}")


for _cls in INSTRUCTIONS.values():
    _used = OPCODE_BITS + sum(bits for _, _, bits in _cls.FIELDS)
    if _used > WORD_BITS:  # the layout tables themselves are wrong: fail at import
        raise AssertionError(f"{_cls.__name__} needs {_used} bits")


# --- binary form ----------------------------------------------------------------------------

def _put(word: int, pos: int, value: int, bits: int, signed: bool, what: str) -> int:
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not isinstance(value, int) or isinstance(value, bool) and bits != 1 or \
            not lo <= int(value) <= hi:
        raise IsaError(f"{what} must be an integer in {lo} .. {hi}, not {value!r}")
    return word | ((int(value) & ((1 << bits) - 1)) << pos)


def _get(word: int, pos: int, bits: int, signed: bool) -> int:
    v = (word >> pos) & ((1 << bits) - 1)
    return v - (1 << bits) if signed and v >> (bits - 1) else v


def _encode_ap(ap: AP | None, what: str) -> int:
    if ap is None:
        return 0
    if ap.space not in SPACES:
        raise IsaError(f"{what}.space must be one of {', '.join(SPACES)}, not {ap.space!r}")
    if ap.dtype not in DTYPES:
        raise IsaError(f"{what}.dtype must be one of {', '.join(DTYPES)}, not {ap.dtype!r}")
    if ap.partitions < 1:
        raise IsaError(f"{what}.partitions must be at least 1, not {ap.partitions!r}")
    if len(ap.dims) > MAX_DIMS:
        raise IsaError(f"{what} must have at most {MAX_DIMS} free dimensions, "
                       f"not {len(ap.dims)}")
    values = {"space": SPACES.index(ap.space), "dtype": DTYPES[ap.dtype][0],
              "partition": ap.partition, "partitions": ap.partitions, "offset": ap.offset,
              "pstride": ap.pstride}
    for i in range(MAX_DIMS):
        n, s = ap.dims[i] if i < len(ap.dims) else (0, 0)
        values[f"n{i}"], values[f"s{i}"] = n, s
    word, pos = 0, 0
    for name, bits, signed in AP_FIELDS:
        word = _put(word, pos, values[name], bits, signed, f"{what}.{name}")
        pos += bits
    return word


def _decode_ap(word: int) -> AP | None:
    v, pos = {}, 0
    for name, bits, signed in AP_FIELDS:
        v[name] = _get(word, pos, bits, signed)
        pos += bits
    if v["partitions"] == 0:
        return None
    if v["space"] >= len(SPACES) or v["dtype"] not in _DTYPE_BY_CODE:
        raise IsaError(f"access pattern has an unknown space {v['space']} or type "
                       f"{v['dtype']}")
    dims = tuple((v[f"n{i}"], v[f"s{i}"]) for i in range(MAX_DIMS) if v[f"n{i}"])
    return AP(SPACES[v["space"]], _DTYPE_BY_CODE[v["dtype"]], v["partition"],
              v["partitions"], v["offset"], dims, v["pstride"])


def field_positions(cls: type[Instruction]) -> dict[str, tuple[int, int, str]]:
    """Where each field of ``cls`` sits in the word: name -> (first bit, bits, kind), the
    table an RTL decoder slices by (the same walk as :func:`encode`)."""
    out, pos = {}, OPCODE_BITS
    for name, kind, bits in cls.FIELDS:
        out[name] = (pos, bits, kind)
        pos += bits
    return out


def encode(ins: Instruction) -> bytes:
    """The instruction word, :data:`WORD_BITS` // 8 bytes, little-endian."""
    cls = type(ins)
    word, pos = _put(0, 0, cls.OPCODE, OPCODE_BITS, False, "opcode"), OPCODE_BITS
    for name, kind, bits in cls.FIELDS:
        value = getattr(ins, name)
        what = f"{cls.MNEMONIC}.{name}"
        if kind == "ap":
            word |= _encode_ap(value, what) << pos
        elif kind == "f32":
            word |= struct.unpack("<I", struct.pack("<f", value))[0] << pos
        elif kind in ("op", "reduce"):
            word = _put(word, pos, int(value.value), bits, False, what)
        elif kind == "rounding":
            if value not in ROUNDINGS:
                raise IsaError(f"{what} must be one of {', '.join(ROUNDINGS)}, not {value!r}")
            word |= ROUNDINGS.index(value) << pos
        elif kind == "bytes":
            if len(value) != bits // 8:
                raise IsaError(f"{what} must have {bits // 8} entries, not {len(value)}")
            for i, b in enumerate(value):
                word = _put(word, pos + 8 * i, int(b), 8, False, f"{what}[{i}]")
        else:
            word = _put(word, pos, int(value), bits, kind == "s", what)
        pos += bits
    return word.to_bytes(WORD_BITS // 8, "little")


def decode(data: bytes) -> Instruction:
    """The instruction of one word (inverse of :func:`encode`)."""
    if len(data) != WORD_BITS // 8:
        raise IsaError(f"an instruction word must be {WORD_BITS // 8} bytes, not {len(data)}")
    word = int.from_bytes(data, "little")
    opcode = word & ((1 << OPCODE_BITS) - 1)
    cls = INSTRUCTIONS.get(opcode)
    if cls is None:
        raise IsaError(f"opcode must be one of {sorted(INSTRUCTIONS)}, not {opcode}")
    pos, args = OPCODE_BITS, {}
    for name, kind, bits in cls.FIELDS:
        raw = _get(word, pos, bits, kind == "s")
        if kind == "ap":
            args[name] = _decode_ap(raw)
        elif kind == "f32":
            args[name] = struct.unpack("<f", struct.pack("<I", raw))[0]
        elif kind == "op":
            args[name] = VectorOp(raw)
        elif kind == "reduce":
            args[name] = Reduce(raw)
        elif kind == "rounding":
            args[name] = ROUNDINGS[raw]
        elif kind == "bytes":
            args[name] = tuple((raw >> (8 * i)) & 0xFF for i in range(bits // 8))
        elif bits == 1:
            args[name] = bool(raw)
        else:
            args[name] = raw
        pos += bits
    return cls(**args)


# --- text form ------------------------------------------------------------------------------

def _value_text(kind: str, value) -> str:
    if kind == "ap":
        return _ap_text(value)
    if kind in ("op", "reduce"):
        return value.name.lower()
    if kind == "f32":
        return repr(_f32(value))
    if kind == "bytes":
        return ",".join(str(int(b)) for b in value)
    if isinstance(value, bool):
        return str(int(value))
    return str(value)


def format_instruction(ins: Instruction) -> str:
    """``mnemonic field=value ...``, every field in table order."""
    cls = type(ins)
    parts = [cls.MNEMONIC]
    for name, kind, _ in cls.FIELDS:
        parts.append(f"{name}={_value_text(kind, getattr(ins, name))}")
    return " ".join(parts)


def parse(text: str) -> Instruction:
    """The instruction of one line of text form (inverse of :func:`format_instruction`)."""
    mnemonic, *items = text.split()
    cls = _BY_MNEMONIC.get(mnemonic)
    if cls is None:
        raise IsaError(f"mnemonic must be one of {', '.join(sorted(_BY_MNEMONIC))}, "
                       f"not {mnemonic!r}")
    kinds = {name: (kind, bits) for name, kind, bits in cls.FIELDS}
    args = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or name not in kinds:
            raise IsaError(f"{mnemonic} takes fields {', '.join(kinds)}, not {item!r}")
        kind, bits = kinds[name]
        try:
            if kind == "ap":
                args[name] = _ap_parse(value)
            elif kind == "op":
                args[name] = VectorOp[value.upper()]
            elif kind == "reduce":
                args[name] = Reduce[value.upper()]
            elif kind == "f32":
                args[name] = _f32(float(value))
            elif kind == "rounding":
                args[name] = value
            elif kind == "bytes":
                args[name] = tuple(int(b) for b in value.split(","))
            elif bits == 1:
                args[name] = bool(int(value))
            else:
                args[name] = int(value)
        except (KeyError, ValueError) as err:
            if isinstance(err, IsaError):
                raise
            raise IsaError(f"{mnemonic}.{name} cannot be {value!r}") from None
    missing = [f.name for f in fields(cls) if f.name not in args and f.default is MISSING]
    if missing:
        raise IsaError(f"{mnemonic} needs {', '.join(missing)}")
    return cls(**args)
