"""The core's instruction set: binary and text forms round-trip, bad words are refused."""

import dataclasses

import numpy as np
import pytest

from hdl.core import isa
from hdl.core.isa import AP, DTYPES, INSTRUCTIONS, SPACES, IsaError
from hdl.vector.ops import Reduce, VectorOp


def _ap(rng):
    space = SPACES[rng.integers(len(SPACES))]
    dims = tuple((int(rng.integers(1, 1 << 16)), int(rng.integers(-(1 << 23), 1 << 23)))
                 for _ in range(rng.integers(0, 4)))
    return AP(space, list(DTYPES)[rng.integers(len(DTYPES))], int(rng.integers(256)),
              int(rng.integers(1, 256)), int(rng.integers(1 << 40)), dims,
              int(rng.integers(1 << 32)))


def _random(cls, rng):
    args = {}
    for name, kind, bits in cls.FIELDS:
        if kind == "ap":
            args[name] = None if name not in ("dst", "src", "a", "b") and rng.random() < 0.4 \
                else _ap(rng)
        elif kind == "op":
            args[name] = VectorOp(int(rng.integers(len(VectorOp))))
        elif kind == "reduce":
            args[name] = Reduce(int(rng.integers(len(Reduce))))
        elif kind == "rounding":
            args[name] = isa.ROUNDINGS[rng.integers(2)]
        elif kind == "f32":
            args[name] = float(np.float32(rng.standard_normal() * 10.0 ** rng.integers(-30, 30)))
        elif kind == "bytes":
            args[name] = tuple(int(b) for b in rng.integers(256, size=bits // 8))
        elif bits == 1:
            args[name] = bool(rng.integers(2))
        elif kind == "s":
            args[name] = int(rng.integers(-(1 << (bits - 1)), 1 << (bits - 1)))
        else:
            args[name] = int(rng.integers(1 << bits))
    return cls(**args)


def test_round_trip_random(seed):
    rng = np.random.default_rng(seed)
    for _ in range(300):
        cls = INSTRUCTIONS[list(INSTRUCTIONS)[rng.integers(len(INSTRUCTIONS))]]
        ins = _random(cls, rng)
        word = isa.encode(ins)
        assert len(word) == isa.WORD_BITS // 8
        assert isa.decode(word) == ins
        text = isa.format_instruction(ins)
        assert isa.parse(text) == ins
        assert isa.format_instruction(isa.parse(text)) == text


def test_layout_is_a_table():
    # the opcode sits in the low bits, the first field right above it, as the table says
    ap = AP("sbuf", "bf16", 32, 16, 0x400, ((4, 512),))
    word = int.from_bytes(isa.encode(isa.LoadStationary(src=ap, row=1, col=2)), "little")
    assert word & 0xFF == isa.LoadStationary.OPCODE
    fields = (word >> isa.OPCODE_BITS) & ((1 << isa.AP_BITS) - 1)
    assert fields & 0b11 == SPACES.index("sbuf")
    assert (fields >> 2) & 0xF == DTYPES["bf16"][0]
    assert (fields >> 6) & 0xFF == 32
    assert (word >> (isa.OPCODE_BITS + isa.AP_BITS)) & 0xFF == 1


def test_text_form_example():
    ins = isa.MultiplyMoving(dst=AP("psum", "fp32", 0, 128, 2048, ((512, 1),)),
                             src=AP("sbuf", "bf16", 0, 128, 0, ((512, 1),)), accumulate=True)
    assert str(ins) == ("matmul dst=psum.fp32[0:128]@0x800{512x1} "
                        "src=sbuf.bf16[0:128]@0x0{512x1} accumulate=1 row=0 col=0 scale=- "
                        "double_row=0")


@pytest.mark.parametrize("make, message", [
    (lambda: isa.encode(isa.SemWait(sem=256, value=1)), r"wait.sem must be an integer in 0 "
                                                        r"\.\. 255, not 256"),
    (lambda: isa.encode(isa.Memset(dst=AP("l2", "fp32", 0, 1, 0, ()), value=0.0)),
     r"memset.dst.space must be one of hbm, sbuf, psum, not 'l2'"),
    (lambda: isa.decode(bytes(isa.WORD_BITS // 8)), r"opcode must be one of"),
    (lambda: isa.decode(b"\x01"), r"must be 128 bytes, not 1"),
    (lambda: isa.parse("fly sem=1"), r"mnemonic must be one of"),
    (lambda: isa.parse("wait sem=1"), r"wait needs value"),
    (lambda: isa.parse("wait sem=1 value=x"), r"wait.value cannot be 'x'"),
    (lambda: isa.parse("copy dst=sbuf[0] src=-"), r"operand must read"),
])
def test_bad_words(make, message):
    with pytest.raises(IsaError, match=message):
        make()


def test_every_instruction_has_a_home():
    placed = {cls for ops in isa.ENGINE_OPS.values() for cls in ops}
    assert placed == set(INSTRUCTIONS.values())
    assert isa.engine_kind("dma7") == "dma"
    with pytest.raises(IsaError, match="stream must be one of"):
        isa.engine_kind("npu")
    assert dataclasses.is_dataclass(isa.Activation)
