"""Operation codes of the vector engine (shared by the RTL, the golden model and the tb)."""

from amaranth.lib import enum


class VectorOp(enum.Enum, shape=5):
    """Element operation ``r = op(a, b)``; ``b`` is the second tensor or the lane's scalar.

    Arithmetic is fp32 (``add32``/``mul32``, RNE, subnormals kept, NaN canonical).
    ``MAX``/``MIN`` give the canonical NaN if either operand is NaN, else ``b`` if
    ``b > a`` (``b < a``) and ``a`` otherwise (so ties, including -0/+0, give ``a``).
    Comparisons give 1.0 or 0.0 (IEEE: NaN is unordered, -0 == +0). The logical operations
    give 1.0 or 0.0 of the operands' truths, a value being true unless it is +0 or -0 (a NaN
    is true). ``ABS_MAX`` (``ABS_MIN``) gives the canonical NaN if either operand is NaN, else
    ``a`` if ``|a| > |b|`` (``|a| < |b|``) and ``b`` otherwise (so ties give ``b``), each
    with its sign [NKI ``nl.abs_max``: "tie-breaking: returns y when |x| == |y|"]. Bitwise
    operations (:data:`BITWISE_OPS`) act on the 32-bit words as integers: ``LEFT_SHIFT`` and
    ``RIGHT_SHIFT`` shift ``a``'s word by ``b``'s word read as an unsigned count, filling
    with zeros (a logical shift right; NKI has no arithmetic one), 0 from a count of 32 on.
    ``COPY``, ``ABS``, ``SQUARE``, ``RECIPROCAL`` and ``RSQRT`` read ``a`` only.
    ``POWER`` is ``a`` raised to ``b``, numpy's ``power`` in float64 rounded to fp32 (NaN
    canonical): GpSimd's, whose cores compute it in software [NKI ``nki.isa.tensor_tensor``:
    "nl.power (Which runs on the GpSimd engine.)"]. ``RECIPROCAL`` is ``1 / a`` in fp32
    (IEEE's division, correctly rounded), the vector engine's; ``RSQRT`` is ``1 / sqrt(a)``
    in float64 rounded to fp32, GpSimd's: each "at a higher precision" than the scalar
    engine's function, over several cycles an element (the spec's ``core.costs.op_cycles``)
    [NKI's engine selection, nki.api.shared.rst]. None of the three is the lanes':
    :data:`LANE_OPS` are the rest.
    """

    COPY = 0
    ADD = 1
    SUBTRACT = 2
    MULTIPLY = 3
    MAX = 4
    MIN = 5
    IS_EQUAL = 6
    NOT_EQUAL = 7
    GREATER = 8
    GREATER_EQUAL = 9
    LESS = 10
    LESS_EQUAL = 11
    BITWISE_AND = 12
    BITWISE_OR = 13
    BITWISE_XOR = 14
    ABS = 15
    SQUARE = 16
    LOGICAL_AND = 17
    LOGICAL_OR = 18
    LOGICAL_XOR = 19
    ABS_MAX = 20
    ABS_MIN = 21
    LEFT_SHIFT = 22
    RIGHT_SHIFT = 23
    POWER = 24
    RECIPROCAL = 25
    RSQRT = 26


class Reduce(enum.Enum, shape=2):
    """Reduction along the free axis per partition, emitted on the element flagged ``last``.

    ``SUM``: ``acc = add32(acc, r)`` sequentially from the first element, starting at +0.0.
    ``MAX``: ``acc = max(acc, r)`` (the ``MAX`` rule above), starting at -inf.
    """

    NONE = 0
    SUM = 1
    MAX = 2


#: The operations the simulator alone runs, each on one engine kind [NKI]; their costs an
#: element are the spec's ``core.costs.op_cycles`` where it names them.
ENGINE_ONLY_OPS = {VectorOp.POWER: "gpsimd", VectorOp.RECIPROCAL: "vector",
                   VectorOp.RSQRT: "gpsimd"}
#: The operations the engines' lanes compute.
LANE_OPS = tuple(op for op in VectorOp if op not in ENGINE_ONLY_OPS)

#: The operations on 32-bit words as integers (NKI's "bitvec" operators).
BITWISE_OPS = (VectorOp.BITWISE_AND, VectorOp.BITWISE_OR, VectorOp.BITWISE_XOR,
               VectorOp.LEFT_SHIFT, VectorOp.RIGHT_SHIFT)


class Draw(enum.Enum, shape=2):
    """What a lane writes from its generator's word of the beat ``w`` (the one its
    stochastic rounding takes) instead of, or besides, its result ``r``; ``u`` is
    ``(w >> 8) * 2**-24``, uniform in [0, 1) (:func:`hdl.numerics.cast.uniform32`).

    ``NONE``: ``r``. ``UNIFORM``: ``u``. ``DROPOUT``: ``r`` where ``u >= s`` (``s`` the lane's
    scalar, a drop probability), else +0.0. Either is then written in the output format
    as ``r`` would be.
    """

    NONE = 0
    UNIFORM = 1
    DROPOUT = 2
