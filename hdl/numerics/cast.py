"""Streamed cast from binary32 to a narrower float format, RNE or stochastic rounding.

:class:`Cast` takes beats of ``params.lanes`` binary32 values on the stream ``i`` and gives the
same beats in ``params.fmt`` on the stream ``o``, one register stage later. The golden
counterpart is :func:`sim.golden.numerics.cast_bits` (called with ``cast_params(params)``).

Rounding
--------
Let ``ulp`` be the spacing of the target's values at ``|x|``, on the subnormal grid below the
smallest normal, and ``|x| = q*ulp + f*ulp`` with ``q`` an integer and ``0 <= f < 1``.

* ``"rne"``: round to nearest, ties to even, exactly as ml_dtypes casts float32.
* ``"stochastic"``: with ``N = 23 - fmt.man_bits`` and ``R`` the top ``N`` bits of the lane's
  next random word, round up to ``(q+1)*ulp`` iff ``floor(f * 2**N) + R >= 2**N``, i.e. add a
  uniform random integer below the last kept bit and truncate. The probability of rounding up
  is ``f`` exactly wherever the input and the result are normal numbers, and ``f`` truncated
  to ``N`` bits on the subnormal grid.

Special values, both roundings: a result magnitude above the largest finite value (after
rounding, so a stochastic round-up past the largest finite value counts) is infinity with
the input's sign, or NaN for ``fn`` formats (ml_dtypes' non-saturating behaviour); an infinite
input gives infinity (NaN for ``fn`` formats); a NaN input gives the format's canonical NaN
(``FloatFormat.nan_bits``) with the input's sign; zeros keep their sign.

Random generators (one per lane, advanced once per accepted beat: first step, then read)
-----------------------------------------------------------------------------------------
* ``"lfsr32"``: Galois LFSR of x^32 + x^22 + x^2 + x + 1; one step is
  ``s = (s >> 1) ^ (0x80200003 if s & 1 else 0)``. A beat advances it by 32 steps (so each
  beat's word shares no bit with the previous one) and reads the state as the word.
* ``"xorwow"``: Marsaglia's xorwow (Xorshift RNGs, 2003), state ``x, y, z, w, v, d``:
  ``t = x ^ (x >> 2); x, y, z, w = y, z, w, v; v = (v ^ (v << 4)) ^ (t ^ (t << 1));
  d += 362437``; the word is ``v + d`` (all modulo 2**32).

Seeding (:func:`rng_initial_state`): word ``i`` of lane ``l`` is
``mix32((seed + 0x9E3779B9 * (8*l + i + 1)) mod 2**32)`` with ``mix32`` the MurmurHash3
finaliser; the LFSR takes word 0 (1 if that is 0), xorwow takes x, y, z, w, v, d = words 0..5
(v = 1 if x..v are all 0). ``seed`` is fixed at elaboration (an integer in [0, 2**32)).

Lanes (:class:`CastLane`)
-------------------------
Each lane is a :class:`CastLane`: one value's rounding datapath, its output register and its
generator. The lane's seed words come in on its ``seed`` port (a constant tied by the parent)
instead of being built into the lane, so all lanes of a cast are the same module and can be
emitted once and instantiated per lane (``Cast(params, lane_module=...)``). The generator's
registers hold its state XOR ``seed`` and reset to 0, i.e. every lane resets (and powers up)
with its own seed as the state, without a per-lane reset value.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Mux, ResetSignal, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .constants import CANONICAL_NAN32
from .formats import FP32, FloatFormat
from .fpu import lzc, round_pack

__all__ = ["LFSR_TAPS", "RNGS", "ROUNDINGS", "XORWOW_WEYL", "Cast", "CastLane", "CastParams",
           "FormatCastLane", "check_rng", "lane_seed", "rng_initial_state", "rng_word",
           "roundings", "seed_value", "seed_words", "uniform32"]

ROUNDINGS = ("rne", "stochastic")
RNGS = ("xorwow", "lfsr32")
LFSR_TAPS = 0x8020_0003
XORWOW_WEYL = 362437
_MASK32 = 0xFFFF_FFFF


def check_rng(rng, *, optional: bool = False) -> None:
    """Refuse a generator name not in :data:`RNGS` (None too, unless ``optional``: a unit
    without a generator, which rounds to nearest even only)."""
    if rng in RNGS or (optional and rng is None):
        return
    names = ", ".join(map(repr, RNGS)) + (" or None" if optional else "")
    raise ValueError(f"rng must be one of {names}, not {rng!r}")


def roundings(rng: str | None) -> tuple[str, ...]:
    """The roundings of a unit whose generator is ``rng``: :data:`ROUNDINGS`, or only
    ``"rne"`` without a generator (``rng`` None)."""
    return ROUNDINGS if rng is not None else ("rne",)


def _mix32(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EB_CA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2_AE35) & _MASK32
    return h ^ (h >> 16)


def rng_initial_state(rng: str, seed: int, lane: int) -> tuple[int, ...]:
    """Initial state words of lane ``lane``'s generator (see the module docstring)."""
    words = [_mix32((seed + 0x9E37_79B9 * (8 * lane + i + 1)) & _MASK32) for i in range(6)]
    if rng == "lfsr32":
        return (words[0] or 1,)
    if rng == "xorwow":
        if not any(words[:5]):
            words[4] = 1
        return tuple(words)
    raise ValueError(f"rng must be one of {', '.join(map(repr, RNGS))}, not {rng!r}")


@dataclass(frozen=True, kw_only=True)
class CastParams:
    """Parameters of :class:`Cast`.

    fmt : target format, a FloatFormat narrower than fp32.
    rounding : one of :data:`ROUNDINGS`.
    rng : one of :data:`RNGS` (used by stochastic rounding only).
    seed : generator seed, integer in [0, 2**32).
    lanes : values per stream beat, at least 1.
    """

    fmt: FloatFormat
    rounding: str = "rne"
    rng: str = "xorwow"
    seed: int = 0
    lanes: int = 1

    def __post_init__(self):
        if not isinstance(self.fmt, FloatFormat) or self.fmt.man_bits >= FP32.man_bits:
            raise ValueError(f"fmt must be a FloatFormat narrower than fp32, not {self.fmt!r}")
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"rounding must be one of {', '.join(map(repr, ROUNDINGS))}, "
                             f"not {self.rounding!r}")
        if self.rng not in RNGS:
            raise ValueError(f"rng must be one of {', '.join(map(repr, RNGS))}, "
                             f"not {self.rng!r}")
        if (not isinstance(self.seed, int) or isinstance(self.seed, bool)
                or not 0 <= self.seed <= _MASK32):
            raise ValueError(f"seed must be an integer in [0, 2**32), not {self.seed!r}")
        if not isinstance(self.lanes, int) or isinstance(self.lanes, bool) or self.lanes < 1:
            raise ValueError(f"lanes must be a positive integer, not {self.lanes!r}")


def _cast_lane(m: Module, fmt: FloatFormat, x, rand):
    """Combinational binary32 -> ``fmt`` of one value (``rand``: N random bits or None)."""
    exp = x[23:31]
    man = x[:23]
    sign = x[31]
    sig = Cat(man, exp != 0)
    shift = lzc(sig)
    norm = Signal(24)
    m.d.comb += norm.eq((sig << shift)[:24])
    e_lead = Signal(signed(11))
    m.d.comb += e_lead.eq(Mux(exp == 0, 1, exp) - 127 - shift)
    rounded = round_pack(m, fmt, sign, e_lead, norm, rand=rand)
    overflow_bits = fmt.inf_bits if fmt.has_inf else fmt.nan_bits
    out = Signal(fmt.bits)
    with m.If(exp == 0xFF):
        special = Mux(man == 0, Const(overflow_bits, fmt.bits - 1),
                      Const(fmt.nan_bits, fmt.bits - 1))
        m.d.comb += out.eq(Cat(special, sign))
    with m.Elif(sig == 0):
        m.d.comb += out.eq(Cat(Const(0, fmt.bits - 1), sign))
    with m.Else():
        m.d.comb += out.eq(rounded)
    return out


def seed_words(rng: str) -> int:
    """32-bit words of a lane's generator state (and ``seed`` port)."""
    return 1 if rng == "lfsr32" else 6


def lane_seed(params: CastParams, lane: int) -> int:
    """The value to tie lane ``lane``'s ``seed`` port to (:func:`seed_value`)."""
    return seed_value(params.rng, params.seed, lane)


def seed_value(rng: str, seed: int, lane: int) -> int:
    """Lane ``lane``'s initial state words (:func:`rng_initial_state`) as one integer, word
    ``k`` in bits ``32k .. 32k+31``: the constant its ``seed`` port is tied to."""
    return sum(w << (32 * k) for k, w in enumerate(rng_initial_state(rng, seed, lane)))


class CastLane(wiring.Component):
    """One lane of :class:`Cast`: a binary32 -> ``params.fmt`` cast, its output register and,
    for stochastic rounding, its random generator.

    Ports: ``x`` (32 bits), the value; ``en``, a beat is accepted: ``y`` loads the cast of
    ``x`` and the generator advances (its next word rounds this beat); ``y`` (``fmt.bits``),
    the output register. With stochastic rounding, ``seed`` (32 bits for ``"lfsr32"``, 192
    for ``"xorwow"``) is the lane's initial generator state, :func:`lane_seed`; it must be
    held constant (the generator's registers hold the state XOR ``seed`` and reset to 0).

    Only ``params.fmt``, ``rounding`` and ``rng`` shape the lane; ``seed`` and ``lanes`` are
    the parent's business, so every lane of a cast is the same module.
    """

    def __init__(self, params: CastParams):
        if not isinstance(params, CastParams):
            raise ValueError(f"params must be a CastParams, not {params!r}")
        self.params = params
        ports = {"x": In(32), "en": In(1), "y": Out(params.fmt.bits)}
        if params.rounding == "stochastic":
            ports["seed"] = In(32 * seed_words(params.rng))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        p = self.params
        rand = None
        if p.rounding == "stochastic":
            drop = FP32.man_bits - p.fmt.man_bits
            rand = self._rng(m)[32 - drop:]
        y = _cast_lane(m, p.fmt, self.x, rand)
        with m.If(self.en):
            m.d.sync += self.y.eq(y)
        return m

    def _rng(self, m: Module):
        """The generator: returns the word of its next state (used this beat)."""
        return rng_word(m, self.params.rng, self.seed, self.en)


def rng_word(m: Module, rng: str, seed, en):
    """A lane's random generator (see the module docstring) in module ``m``: its registers
    hold the state XOR ``seed`` and advance when ``en`` is set; returns the word of its next
    state (the word that rounds the beat accepted with ``en``)."""
    seeds = [seed[32 * k:32 * (k + 1)] for k in range(seed_words(rng))]
    if rng == "lfsr32":
        reg = Signal(32, name="lfsr")
        nxt = reg ^ seeds[0]
        for step in range(32):  # one signal per step keeps the expression linear in size
            bit = Signal(32, name=f"lfsr_step{step}")
            m.d.comb += bit.eq(Cat(nxt[1:], Const(0, 1)) ^ Mux(nxt[0], LFSR_TAPS, 0))
            nxt = bit
        with m.If(en):
            m.d.sync += reg.eq(nxt ^ seeds[0])
        return nxt
    regs = [Signal(32, name=f"xorwow_{n}") for n in "xyzwvd"]
    x, y, z, w, v, d = (Signal(32, name=f"{n}_state") for n in "xyzwvd")
    m.d.comb += [s.eq(r ^ k) for s, r, k in zip((x, y, z, w, v, d), regs, seeds, strict=True)]
    t = x ^ (x >> 2)
    new_v = Signal(32, name="xorwow_nv")
    new_d = Signal(32, name="xorwow_nd")
    m.d.comb += [
        new_v.eq(v ^ (v << 4)[:32] ^ t ^ (t << 1)[:32]),
        new_d.eq(d + XORWOW_WEYL),
    ]
    word = Signal(32, name="xorwow_word")
    m.d.comb += word.eq(new_v + new_d)
    with m.If(en):
        m.d.sync += [r.eq(nxt ^ k) for r, nxt, k in zip(regs, (y, z, w, v, new_v, new_d), seeds,
                                                        strict=True)]
    return word


def uniform32(m: Module, word):
    """The fp32 encoding of ``(word >> 8) * 2**-24``, a number uniform in [0, 1) drawn from
    a generator's 32-bit ``word`` (exact: 24 bits; combinational)."""
    top = Signal(24, name="uniform_bits")
    m.d.comb += top.eq(word[8:32])
    lead = Signal(range(32), name="uniform_lead")
    sig = Signal(24, name="uniform_sig")
    m.d.comb += [lead.eq(lzc(top)), sig.eq(top << lead)]
    exp = Signal(8, name="uniform_exp")
    m.d.comb += exp.eq(FP32.bias - 1 - lead)
    return Mux(top == 0, 0, Cat(sig[:23], exp, Const(0, 1)))


class FormatCastLane(wiring.Component):
    """A cast lane whose target format and rounding are chosen at run time.

    ``formats`` is a tuple of :class:`FloatFormat` (fp32 allowed: passed through unchanged,
    every NaN canonical); ``rng`` the generator of stochastic rounding, or None for a lane
    that rounds to nearest even only. Ports: ``x`` (32 bits); ``fmt``, the index of the
    target in ``formats``; ``y`` (32 bits, combinational), the target's bit pattern in its
    low bits, zero above. With a generator also ``stochastic``, stochastic rounding instead
    of round-to-nearest-even; ``en``, a beat is accepted (the generator advances, every
    beat, whatever the format and rounding); ``seed``, as for :class:`CastLane`; ``word``
    (out), the generator's word of this beat, the one its stochastic rounding takes. Each
    narrow target rounds exactly as :class:`CastLane` with that format does, the stochastic
    ones from the top bits of the same word. Without a generator the lane has neither those
    ports nor the stochastic datapaths.
    """

    def __init__(self, formats: tuple, rng: str | None = "xorwow"):
        if (not isinstance(formats, tuple) or not formats
                or not all(isinstance(f, FloatFormat) for f in formats)):
            raise ValueError(f"formats must be a non-empty tuple of FloatFormat, not {formats!r}")
        check_rng(rng, optional=True)
        self.formats = formats
        self.rng = rng
        ports = {"x": In(32), "fmt": In(range(max(len(formats), 2)))}
        if rng is not None:
            ports.update({"stochastic": In(1), "en": In(1), "seed": In(32 * seed_words(rng)),
                          "word": Out(32)})
        super().__init__(ports | {"y": Out(32)})

    def elaborate(self, platform):
        m = Module()
        word = None if self.rng is None else rng_word(m, self.rng, self.seed, self.en)
        if word is not None:
            m.d.comb += self.word.eq(word)
        x = self.x
        with m.Switch(self.fmt):
            for index, fmt in enumerate(self.formats):
                with m.Case(index):
                    if fmt == FP32:
                        nan = (x[23:31] == 0xFF) & (x[:23] != 0)
                        m.d.comb += self.y.eq(Mux(nan, CANONICAL_NAN32, x))
                        continue
                    rne = _cast_lane(m, fmt, x, None)
                    if word is None:
                        m.d.comb += self.y.eq(rne)
                        continue
                    drop = FP32.man_bits - fmt.man_bits
                    sto = _cast_lane(m, fmt, x, word[32 - drop:])
                    m.d.comb += self.y.eq(Mux(self.stochastic, sto, rne))
        return m


class Cast(wiring.Component):
    """Streamed binary32 -> ``params.fmt`` cast (see the module docstring).

    Ports: ``i``, a stream of ``ArrayLayout(32, lanes)``; ``o``, a stream of
    ``ArrayLayout(fmt.bits, lanes)``. One output register: ``i.ready`` is high while the
    output register is empty or being read, so a full-rate stream passes one beat a cycle.

    Each lane is a :class:`CastLane`, a submodule, or with ``lane_module`` an ``Instance`` of
    the module of that name (ports ``clk``, ``rst``, ``x``, ``en``, ``y`` and ``seed``), which
    the caller emits once from ``CastLane(params)``: the lanes differ only in the constant
    tied to ``seed``.
    """

    def __init__(self, params: CastParams, *, lane_module: str | None = None):
        if not isinstance(params, CastParams):
            raise ValueError(f"params must be a CastParams, not {params!r}")
        self.params = params
        self.lane_module = lane_module
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(32, params.lanes))),
            "o": Out(stream.Signature(data.ArrayLayout(params.fmt.bits, params.lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        accept = self.i.valid & self.i.ready
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        stochastic = p.rounding == "stochastic"
        for lane in range(p.lanes):
            inputs = {"x": self.i.payload[lane], "en": accept}
            if stochastic:
                inputs["seed"] = Const(lane_seed(p, lane), 32 * seed_words(p.rng))
            if self.lane_module is None:
                m.submodules[f"lane{lane}"] = unit = CastLane(p)
                m.d.comb += [getattr(unit, port).eq(value) for port, value in inputs.items()]
                m.d.comb += self.o.payload[lane].eq(unit.y)
            else:
                ports = {f"i_{port}": value for port, value in inputs.items()}
                m.submodules[f"lane{lane}"] = Instance(
                    self.lane_module, i_clk=ClockSignal(), i_rst=ResetSignal(),
                    o_y=self.o.payload[lane], **ports)
        with m.If(accept):
            m.d.sync += self.o.valid.eq(1)
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m
