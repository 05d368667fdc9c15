"""cocotb testbench of the tensor engine's systolic array (pytest entry points in
``sim/tb/test_systolic.py``; ``gen sim`` calls :func:`simulate`).

The DUT is the array inside :class:`hdl.tensor.harness.SystolicHarness`. The testbench writes a
whole program into the harness memories (driver), lets the RTL run it with the harness's own
stream sources and sink, then reads every output beat and its cycle (monitor). The model is
the golden :func:`sim.golden.systolic.matmul` over a running copy of the PSUM bank; the checker
compares every beat bit for bit and, in the runs without idle cycles or backpressure, every
command and output cycle with :func:`sim.golden.systolic_cycles.schedule`. An MX tile is held as its
operand words, each a quad of elements along K and their block's scale (the layout of
:class:`~hdl.tensor.params.SystolicParams`), the scale the same for the 8 words (32 indices)
of a block; the model splits them again for :func:`sim.golden.systolic.matmul_mx`.
Every program runs twice: once with streams always valid and ready (cycles checked), once with
random idle cycles on the sources and random backpressure on the sink (values checked).
Programs mix the array's input formats: every test covers each format, and consecutive tiles
and multiplies change format.

By default the array is the generator's hierarchical emission (PE and row modules emitted once
and instantiated); ``hierarchical=False`` runs the flat elaboration of the same array.
"""

from __future__ import annotations

import random
from dataclasses import asdict

import numpy as np

from hdl.core.isa import MX_QUAD
from hdl.numerics.formats import MxFormat
from hdl.tensor.harness import HarnessParams, SystolicHarness
from hdl.tensor.params import SystolicParams
from hdl.tensor.signatures import cmd_layout
from sim.golden.systolic import matmul, matmul_mx, to_fp32, transpose
from sim.golden.systolic_cycles import UNMIXED, Load, Multiply, Transpose, schedule
from sim.tb import runner

TOP = "systolic_harness"
PERIOD_NS = 10
TESTS = ["identity_and_zeros", "extremes_and_specials", "accumulation_chain", "hidden_loads",
         "quarter_rate", "transposes", "random_programs", "tiled_programs"]


# ---- parameters ----------------------------------------------------------------------------

def harness_params(params: SystolicParams) -> HarnessParams:
    """Memory depths sized for the programs below (a few tiles per format, or per program)."""
    tiles = max(6, 3 * len(params.formats))
    return HarnessParams(array=params, program_depth=4 * tiles,
                         stationary_depth=tiles * -(-params.cols // params.beat_columns),
                         moving_depth=6 * params.moving_max + 8 * tiles,
                         result_depth=6 * params.moving_max + 8 * tiles)


def _params_from_json(d: dict) -> SystolicParams:
    a = d["array"]  # JSON gives lists where the parameters hold tuples
    return SystolicParams(**{key: tuple(v) if isinstance(v, list) else v
                             for key, v in a.items()})


def simulate(params: SystolicParams, sim: str, seed: int | None = None,
             hierarchical: bool = True) -> runner.RunResult:
    """Run the full cocotb testbench for one parameter set on ``sim``."""
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    tb = {"array": asdict(params), "seed": seed}
    text = runner.stored_verilog(harness_verilog if hierarchical else flat_verilog, params)
    return runner.run_verilog(text, TOP, "sim.tb.systolic", sim, tb, TESTS, seed)


def flat_verilog(params: SystolicParams) -> str:
    """Verilog of the harness around the array, all in one module."""
    return runner.emit_verilog(SystolicHarness(harness_params(params)), TOP)


def harness_verilog(params: SystolicParams) -> str:
    """Verilog of the harness around the hierarchical emission of ``params`` (the modules
    :mod:`generators.tensor` writes)."""
    from amaranth.back import verilog

    from hdl.tensor.structural import ARRAY_TOP, verilog_modules

    text = verilog.convert(SystolicHarness(harness_params(params), dut_module=ARRAY_TOP),
                           name=TOP, emit_src=False)
    return text + "".join(verilog_modules(params, ARRAY_TOP).values())


# ---- operand generation --------------------------------------------------------------------

def one_bits(fmt) -> int:
    """The format's 1 (an MX format: its element 1, to be scaled by 127)."""
    return 1 if not fmt.is_float else fmt.bias << fmt.man_bits


#: E8M0 scales of random MX tiles of each kind: every code (255, NaN, included), near 1
#: (products near 1, where rounding is busy), every code but NaN.
SCALES = {"any": (0, 255), "normal": (124, 130), "finite": (0, 254)}


def random_scales(fmt: MxFormat, rng: np.random.Generator, shape, kind: str) -> np.ndarray:
    """E8M0 scales (ceil(K / block), C) of a K x C tile of ``fmt`` elements."""
    lo, hi = SCALES[kind]
    return rng.integers(lo, hi + 1, size=(-(-shape[0] // fmt.block), shape[1]))


def random_bits(fmt, rng: np.random.Generator, shape, kind: str = "normal") -> np.ndarray:
    """Bit patterns of ``fmt`` (an MX format: its element codes): ``"any"`` (every pattern,
    NaN and infinities included), ``"normal"`` (values within a few binades of 1, where
    rounding is busy), ``"finite"``."""
    bits = rng.integers(0, 1 << fmt.bits, size=shape, dtype=np.int64)
    if not fmt.is_float or kind == "any":
        return bits.astype(np.uint32)
    if kind == "normal":
        lo = max(1, fmt.bias - 3)
        hi = min(fmt.max_exp_field, fmt.bias + 3)
        exp = rng.integers(lo, hi + 1, size=shape)
        man = rng.integers(0, 1 << fmt.man_bits, size=shape)
        sign = rng.integers(0, 2, size=shape)
        bits = (sign << (fmt.bits - 1)) | (exp << fmt.man_bits) | man
        return bits.astype(np.uint32)
    if isinstance(fmt, MxFormat):
        if fmt.nan == "fn":
            bits = np.where(bits & ((1 << (fmt.bits - 1)) - 1) == fmt.max_finite_bits + 1, 0,
                            bits)
        return bits.astype(np.uint32)
    values = to_fp32(bits, fmt)
    return np.where(np.isfinite(values), bits, 0).astype(np.uint32)


def edge_bits(fmt, rng: np.random.Generator, shape) -> np.ndarray:
    """A mix of the format's extremes: zeros of both signs, smallest subnormals, largest
    finite values, infinities and NaN (where the format has them), and ones (an MX format:
    its element codes)."""
    if not fmt.is_float:
        pool = [0, 1, 0x7F, 0x80, 0xFF, 0x81, 0x40]
    else:
        sign = 1 << (fmt.bits - 1)
        one = one_bits(fmt)
        pool = [0, sign, 1, sign | 1, fmt.max_finite_bits, sign | fmt.max_finite_bits,
                one, sign | one, (1 << fmt.man_bits) - 1]
        if fmt.nan != "none":
            pool.append(fmt.nan_bits)
        if fmt.nan == "ieee":
            pool += [fmt.inf_bits, sign | fmt.inf_bits]
    return rng.choice(np.array(pool, dtype=np.uint32), size=shape)


#: Extreme E8M0 scales: 0, 1, 127 (one), 253, 254 and 255 (NaN).
EDGE_SCALES = (0, 1, 127, 253, 254, 255)


def mx_words(params: SystolicParams, fmt: str, codes, scales) -> np.ndarray:
    """The operand words (K / 4, C) of a K x C tile of ``fmt`` element codes (K a multiple
    of 4) and its scales (ceil(K / block), C): word r holds codes ``4r .. 4r + 3`` in its
    bytes (nibbles for mxfp4) and the scale of their block from bit ``mx_scale_lsb``."""
    f = params.format_list[params.code(fmt)]
    codes, scales = np.asarray(codes, np.uint64), np.asarray(scales, np.uint64)
    quad = codes.reshape(codes.shape[0] // MX_QUAD, MX_QUAD, codes.shape[1])
    words = np.zeros((quad.shape[0], codes.shape[1]), np.uint64)
    for i in range(MX_QUAD):
        words |= quad[:, i] << np.uint64(f.bits * i)
    block = np.arange(quad.shape[0]) * MX_QUAD // f.block
    return words | scales[block] << np.uint64(params.mx_scale_lsb)


def mx_split(params: SystolicParams, fmt: str, words) -> tuple[np.ndarray, np.ndarray]:
    """The element codes (K, C) and scales (ceil(K / block), C) of MX words (K / 4, C),
    which must carry one scale per block and column (:func:`mx_words` undone)."""
    f = params.format_list[params.code(fmt)]
    words = np.asarray(words, np.uint64)
    codes = np.stack([(words >> np.uint64(f.bits * i)) & np.uint64((1 << f.bits) - 1)
                      for i in range(MX_QUAD)], axis=1).reshape(MX_QUAD * len(words),
                                                                words.shape[1])
    per = f.block // MX_QUAD
    spread = (words >> np.uint64(params.mx_scale_lsb)) & np.uint64(0xFF)
    scales = spread[::per]
    if not np.array_equal(np.repeat(scales, per, axis=0)[:len(spread)], spread):
        raise ValueError("an MX tile must carry one scale per block and column")
    return codes.astype(np.uint32), scales.astype(np.uint32)


def pack_words(params: SystolicParams, fmt: str, tile: np.ndarray,
               rng: np.random.Generator, row: int = 0) -> np.ndarray:
    """Operand words (rows, columns) of a K x C ``tile`` of ``fmt`` bit patterns at PE row
    ``row`` (its tile position): element k in the low bits of word ``row + k``, or with a
    double-rate format in byte ``k % 2`` of word ``row + k // 2``; an MX tile holds words
    already (:func:`mx_words`). Every bit no element claims (indices >= K, bits above the
    elements, the rows outside the tile) is random: the array must ignore it."""
    w = params.width
    words = rng.integers(0, 1 << w, size=(params.rows, tile.shape[1]), dtype=np.uint64)
    f = params.format_list[params.code(fmt)]
    if params.is_double(fmt):
        per, bits, claimed = 2, 8, 0xFF
    elif params.is_mx(fmt):
        per, bits, claimed = 1, w, (1 << (params.mx_scale_lsb + 8)) - 1
    else:
        per, bits, claimed = 1, f.bits, (1 << f.bits) - 1
    for k in range(tile.shape[0]):
        r, shift = divmod(k, per)
        r += row
        shift *= bits
        mask = np.uint64(claimed << shift)
        words[r] = (words[r] & ~mask) | (tile[k].astype(np.uint64) << np.uint64(shift))
    return words


# ---- the testbench -------------------------------------------------------------------------

_PSUM: dict[str, np.ndarray] = {}  # the bank's contents, kept across the tests of one run


class SystolicTB:
    """Driver, monitor, model and checker around one harness instance."""

    def __init__(self, dut, seed: int):
        import cocotb
        from cocotb.clock import Clock

        config = runner.tb_params()
        self.dut = dut
        self.params = _params_from_json(config)
        self.hp = harness_params(self.params)
        self.rng = np.random.default_rng(seed)
        self.log = dut._log
        self.layout = cmd_layout(self.params)
        if "bank" not in _PSUM:
            _PSUM["bank"] = np.zeros((self.params.moving_max, self.params.cols), np.uint32)
        cocotb.start_soon(Clock(dut.clk, PERIOD_NS, unit="ns").start())

    def fmt(self, name: str):
        return self.params.format_list[self.params.code(name)]

    def partners(self, name: str) -> list[str]:
        """Formats a multiply may use on a tile of ``name`` (same rate, same kind; fp32 and
        tf32 only with themselves)."""
        p = self.params
        if name in UNMIXED:
            return [name]
        return [f for f in p.formats
                if p.is_double(f) == p.is_double(name) and p.is_quarter(f) == p.is_quarter(name)
                and p.is_int(f) == p.is_int(name) and p.is_mx(f) == p.is_mx(name)
                and f not in UNMIXED]

    async def reset(self):
        from cocotb.triggers import ClockCycles

        self.dut.rst.value = 1
        self.dut.start.value = 0
        await ClockCycles(self.dut.clk, 2)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 1)

    # -- driver --
    def _encode_cmd(self, op) -> int:
        p = self.params
        if isinstance(op, Transpose):
            fields = {"op": 2, "n": op.n}
        elif isinstance(op, Load):
            fields = {"op": 0, "fmt": p.code(op.fmt), "k": op.k, "m": op.m,
                      "row": op.row // p.group_rows, "col": op.col // p.group_cols,
                      "rows": (op.row_size or p.rows) // p.group_rows,
                      "cols": (op.col_size or p.cols) // p.group_cols}
        else:
            fields = {"op": 1, "fmt": p.code(op.fmt), "n": op.n,
                      "accumulate": int(op.accumulate), "row": op.row // p.group_rows,
                      "col": op.col // p.group_cols}
        word = 0
        for name, field in self.layout:
            word |= fields.get(name, 0) << field.offset
        return word

    @staticmethod
    def _pack(row, width: int) -> int:
        word = 0
        for i, value in enumerate(row):
            word |= int(value) << (i * width)
        return word

    def _groups(self, first: int, size: int | None, group: int, full: int) -> range:
        size = full if size is None else size
        return range(first // group, (first + size) // group)

    def _placed(self, program):
        """Each command's tile (its Load) in ``program``, as :func:`schedule` places them."""
        tiles, latest, placed = {}, None, []
        p = self.params
        for op, _ in program:
            if isinstance(op, Load):
                rows = set(self._groups(op.row, op.row_size, p.group_rows, p.rows))
                cols = set(self._groups(op.col, op.col_size, p.group_cols, p.cols))
                tiles = {pos: t for pos, t in tiles.items()
                         if not (t[1] & rows and t[2] & cols)}
                tiles[(op.row, op.col)] = latest = (op, rows, cols)
                placed.append(latest)
            elif isinstance(op, Multiply):
                placed.append(tiles[(op.row, op.col)])
            else:
                placed.append(latest)
        return placed

    def _load_program(self, program):
        p, w, bc = self.params, self.params.width, self.params.beat_columns
        ops, stat_beats = [], []
        mov_cols = [[] for _ in range(p.ways)]
        span = p.group_rows
        for (op, tile), (_, rows, _) in zip(program, self._placed(program), strict=True):
            ops.append(op)
            if isinstance(op, Load):
                beats = -(-op.m // bc)
                # Columns >= m: junk the PSUM write must ignore.
                cols = np.concatenate([tile, self.bits(op.fmt, (op.k, beats * bc - op.m),
                                                       "any")], axis=1)
                words = pack_words(p, op.fmt, cols, self.rng, op.row)  # (rows, beats * bc)
                stat_beats.extend(words.T.reshape(beats, bc * p.rows))
            elif isinstance(op, Multiply):
                words = pack_words(p, op.fmt, tile, self.rng, span * min(rows))
                for g in sorted(rows):
                    mov_cols[g].extend(words[g * span:(g + 1) * span].T)
        if (len(ops) > self.hp.program_depth or len(stat_beats) > self.hp.stationary_depth
                or max(map(len, mov_cols)) > self.hp.moving_depth):
            raise ValueError("program must fit the harness memories")
        for i, op in enumerate(ops):
            self.dut.prog[i].value = self._encode_cmd(op)
        for i, beat in enumerate(stat_beats):
            self.dut.stat[i].value = self._pack(beat, w)
        for g, group in enumerate(mov_cols):
            mem = self._memory("mov", g)
            for i, col in enumerate(group):
                mem[i].value = self._pack(col, w)
        return ops

    def _memory(self, name: str, group: int):
        return getattr(self.dut, name if self.params.ways == 1 else f"{name}_{group}")

    # -- model --
    def expected(self, program, sched=None):
        """Per column group, its output beats (each ``cols / ways`` uint32) of ``program``
        and, given the program's :class:`~sim.golden.systolic_cycles.Schedule`, their cycles;
        updates the PSUM copy."""
        p = self.params
        bank, gc = _PSUM["bank"], p.group_cols
        beats = [[] for _ in range(p.ways)]
        stamps = [[] for _ in range(p.ways)]
        tiles, at = {}, 0
        for (op, tile), (load, _, cols) in zip(program, self._placed(program), strict=True):
            if isinstance(op, Load):
                tiles[id(load)] = tile
                continue
            stationary, tile_fmt = tiles[id(load)], load.fmt
            c0, m = load.col, load.m
            if isinstance(op, Transpose):
                bank[:op.n, c0:c0 + m] = transpose(stationary, self.fmt(tile_fmt)).T[:op.n]
            else:
                k = load.k
                before = bank[:op.n, c0:c0 + m].T
                if p.is_mx(tile_fmt):
                    (w, sw), (x, sx) = (mx_split(p, tile_fmt, stationary),
                                        mx_split(p, op.fmt, tile[:k]))
                    after = matmul_mx(w, x, tile_fmt, sw, sx, psum=before,
                                      accumulate=op.accumulate, moving_fmt=op.fmt)
                else:
                    after = matmul(stationary, tile[:k], tile_fmt, psum=before,
                                   accumulate=op.accumulate, moving_fmt=op.fmt)
                bank[:op.n, c0:c0 + m] = after.T
            for h in sorted(cols):
                beats[h].extend(bank[:op.n, h * gc:(h + 1) * gc].copy())
                if sched is not None:
                    stamps[h].extend(sched.outputs[at:at + op.n])
            at += op.n
        return beats, stamps

    def _results(self, group: int, count: int):
        """The first ``count`` beats of column group ``group`` and their cycles."""
        gc, mask = self.params.group_cols, (1 << 32) - 1
        res, stamp = self._memory("res", group), self._memory("res_stamp", group)
        got, cycles = [], []
        for j in range(count):
            word = int(res[j].value)
            got.append(np.array([(word >> (32 * c)) & mask for c in range(gc)], np.uint32))
            cycles.append(int(stamp[j].value))
        return got, cycles

    def _start(self, ops, counts, idle: int, stall: int, seed: int) -> None:
        dut = self.dut
        dut.n_cmds.value = len(ops)
        dut.expect.value = sum(c << (32 * h) for h, c in enumerate(counts))
        dut.seed.value = seed
        dut.idle.value = idle
        dut.stall.value = stall
        dut.start.value = 1

    # -- driver + monitor + checker --
    async def run(self, program, idle: int = 0, stall: int = 0, name: str = "") -> None:
        from cocotb.triggers import RisingEdge, with_timeout

        dut = self.dut
        if idle == 0 and stall == 0:
            # the cycles are checked against schedule(), which starts from an array just
            # reset: no bank holds a tile, where the previous program leaves its banks' state
            await self.reset()
        ops = self._load_program(program)
        sched = schedule(self.params, ops)
        want, want_at = self.expected(program, sched)
        self._start(ops, [len(b) for b in want], idle, stall,
                    int(self.rng.integers(1, 2**32)))
        await RisingEdge(dut.clk)
        dut.start.value = 0
        slack = 1 + 8 * (idle + stall)
        await with_timeout(RisingEdge(dut.done), (sched.total * slack + 100) * PERIOD_NS, "ns")

        errors = total = 0
        base = int(dut.cmd_stamp[0].value)
        for h, group in enumerate(want):
            got, cycles = self._results(h, len(group))
            total += len(group)
            for j, (value, beat) in enumerate(zip(got, group, strict=True)):
                if not np.array_equal(value, beat):
                    errors += 1
                    if errors <= 5:
                        self.log.error("%s column group %d beat %d: got %s want %s", name, h,
                                       j, [f"{v:08x}" for v in value],
                                       [f"{v:08x}" for v in beat])
            if idle == 0 and stall == 0 and errors == 0:
                outputs = tuple(c - base for c in cycles)
                model = tuple(c - sched.accepted[0] for c in want_at[h])
                assert outputs == model, (f"{name}: column group {h} outputs at {outputs}, "
                                          f"model {model}")
        assert errors == 0, f"{name}: {errors} of {total} output beats differ"
        if idle == 0 and stall == 0:
            accepted = tuple(int(dut.cmd_stamp[i].value) - base for i in range(len(ops)))
            want_acc = tuple(c - sched.accepted[0] for c in sched.accepted)
            assert accepted == want_acc, f"{name}: commands at {accepted}, model {want_acc}"
        formats = sorted({op.fmt for op in ops if not isinstance(op, Transpose)})
        self.log.info("%s: %d beats ok (formats %s; idle %d/256, stall %d/256, %d cycles "
                      "modelled)", name, total, ", ".join(formats), idle, stall,
                      sched.total)

    async def run_both(self, program, name: str) -> None:
        """Stall-free (values and cycles), then with random idle cycles and backpressure."""
        await self.run(program, name=f"{name} (streaming)")
        await self.run(program, idle=96, stall=96, name=f"{name} (idle+backpressure)")

    # -- program builders --
    def _dtype(self, fmt: str):
        return np.uint64 if self.params.is_mx(fmt) else np.uint32

    def bits(self, fmt: str, shape, kind: str = "normal") -> np.ndarray:
        """A random (k, C) tile of ``fmt`` (:func:`random_bits`; an MX format: k words, each
        a quad of elements and the scale of its block)."""
        f = self.fmt(fmt)
        if not self.params.is_mx(fmt):
            return random_bits(f, self.rng, shape, kind)
        elements = (MX_QUAD * shape[0], shape[1])
        return mx_words(self.params, fmt, random_bits(f, self.rng, elements, kind),
                        random_scales(f, self.rng, elements, kind))

    def edges(self, fmt: str, shape) -> np.ndarray:
        """A (k, C) tile of ``fmt``'s extremes (:func:`edge_bits`; an MX format: k words,
        scales from :data:`EDGE_SCALES` too)."""
        f = self.fmt(fmt)
        if not self.params.is_mx(fmt):
            return edge_bits(f, self.rng, shape)
        elements = (MX_QUAD * shape[0], shape[1])
        scales = self.rng.choice(np.array(EDGE_SCALES), size=(-(-elements[0] // f.block),
                                                               shape[1]))
        return mx_words(self.params, fmt, edge_bits(f, self.rng, elements), scales)

    def load(self, fmt: str, k: int, m: int, kind: str = "normal", tile=None):
        tile = self.bits(fmt, (k, m), kind) if tile is None else tile
        return Load(k, m, fmt), np.asarray(tile, self._dtype(fmt))

    def multiply(self, fmt: str, k: int, n: int, accumulate: bool = False,
                 kind: str = "normal", tile=None):
        tile = self.bits(fmt, (k, n), kind) if tile is None else tile
        return Multiply(n, accumulate, fmt), np.asarray(tile, self._dtype(fmt))

    def random_format(self) -> str:
        return str(self.rng.choice(self.params.formats))

    def random_partner(self, fmt: str) -> str:
        """Mostly the tile's own format, else another of the same rate and kind."""
        if self.rng.integers(0, 3):
            return fmt
        return str(self.rng.choice(self.partners(fmt)))


def _tb(dut):
    import cocotb

    seed = runner.tb_params()["seed"] ^ (cocotb.RANDOM_SEED & 0xFFFF)
    dut._log.info("testbench seed %d", seed)
    return SystolicTB(dut, seed)


def _cocotb_test(fn):
    import cocotb

    return cocotb.test()(fn)


# ---- cocotb tests (names do not start with test_, so pytest leaves them to cocotb) ---------

@_cocotb_test
async def identity_and_zeros(dut):
    """Per format: an identity tile, then a zero tile against any bit pattern."""
    tb = _tb(dut)
    await tb.reset()
    p = tb.params
    n = min(p.moving_max, 4)
    program = []
    for fmt in p.formats:
        k, m = p.k_limit(fmt), p.cols
        indices = p.contraction(fmt, k)
        eye = np.zeros((indices, m), np.uint32)
        for i in range(min(indices, m)):
            eye[i, i] = one_bits(tb.fmt(fmt))
        if p.is_mx(fmt):  # one scale per block and column: 1 (127) for the zeros too
            eye = mx_words(p, fmt, eye, np.full((-(-indices // tb.fmt(fmt).block), m), 127))
        program += [tb.load(fmt, k, m, tile=eye), tb.multiply(fmt, k, n)]
    await tb.run_both(program, "identity")
    program = []
    for fmt in p.formats:
        k, m = p.k_limit(fmt), p.cols
        program += [tb.load(fmt, k, m, tile=np.zeros((k, m), np.uint32)),
                    tb.multiply(fmt, k, n, kind="any")]
    await tb.run_both(program, "zeros")


@_cocotb_test
async def extremes_and_specials(dut):
    """Per format: extremes, every bit pattern, and (floats) subnormal products."""
    tb = _tb(dut)
    await tb.reset()
    p = tb.params
    n = min(p.moving_max, 4)
    program = []
    for fmt in p.formats:
        f, k, m = tb.fmt(fmt), p.k_limit(fmt), p.cols
        program += [tb.load(fmt, k, m, tile=tb.edges(fmt, (k, m))),
                    tb.multiply(fmt, k, n, tile=tb.edges(fmt, (k, n))),
                    tb.multiply(tb.random_partner(fmt), k, n, accumulate=True, kind="any")]
    await tb.run_both(program, "edges")
    program = []
    for fmt in p.formats:
        f, k, m = tb.fmt(fmt), p.k_limit(fmt), p.cols
        if not f.is_float:
            continue
        # Subnormal products and sums: the smallest magnitudes of the format (MX: scales
        # that put the products among binary32's subnormals).
        indices = p.contraction(fmt, k)
        tiny = tb.rng.integers(0, 4, size=(indices, m)).astype(np.uint32)
        sub = (tb.rng.integers(0, 2, size=(indices, n)) << (f.bits - 1)
               | tb.rng.integers(1, 1 << f.man_bits, size=(indices, n))).astype(np.uint32)
        if isinstance(f, MxFormat):
            blocks = -(-indices // f.block)
            tiny = mx_words(p, fmt, tiny, tb.rng.integers(50, 71, size=(blocks, m)))
            sub = mx_words(p, fmt, sub, tb.rng.integers(50, 71, size=(blocks, n)))
        program += [tb.load(fmt, k, m, tile=tiny), tb.multiply(fmt, k, n, tile=sub)]
    if program:
        await tb.run_both(program, "subnormals")


@_cocotb_test
async def accumulation_chain(dut):
    """Accumulation across tiles of changing formats, the last reusing its tile."""
    tb = _tb(dut)
    await tb.reset()
    p = tb.params
    n = min(p.moving_max, 10)
    fmt = tb.random_format()
    program = [tb.load(fmt, p.k_limit(fmt), p.cols),
               tb.multiply(fmt, p.k_limit(fmt), n)]
    for _ in range(3):
        fmt = tb.random_format()
        k = p.k_limit(fmt)
        program += [tb.load(fmt, k, p.cols),
                    tb.multiply(tb.random_partner(fmt), k, n, accumulate=True)]
    program.append(tb.multiply(tb.random_partner(fmt), p.k_limit(fmt), n, accumulate=True))
    await tb.run_both(program, "accumulation chain")


@_cocotb_test
async def hidden_loads(dut):
    """Loads behind multiplies: a load into the idle bank while a multiply runs, two loads in
    a row (the second waits for the multiply that reads its bank), multiplies of one moving
    column, partial tiles; formats change from tile to tile."""
    tb = _tb(dut)
    await tb.reset()
    p = tb.params
    m, n = p.cols, p.moving_max
    f1, f2, f3, f4 = (tb.random_format() for _ in range(4))
    k1, k2, k3, k4 = (p.k_limit(f) for f in (f1, f2, f3, f4))
    part_m = max(1, m - 1)
    program = [tb.load(f1, k1, m), tb.multiply(f1, k1, n),
               tb.load(f2, max(1, k2 // 2), part_m),
               tb.load(f3, k3, m), tb.multiply(tb.random_partner(f3), k3, 1, accumulate=True),
               tb.load(f4, max(1, k4 // 2), m),
               tb.multiply(f4, max(1, k4 // 2), max(1, n // 2)),
               tb.multiply(tb.random_partner(f4), max(1, k4 // 2), 1, accumulate=True)]
    await tb.run_both(program, "hidden loads")


@_cocotb_test
async def quarter_rate(dut):
    """Each quarter-rate format (fp32) against full-rate neighbours: a multiply of one
    column every fourth cycle, a load hidden behind it, a full-rate tile right after it and
    a quarter-rate one right after that, one-column multiplies."""
    tb = _tb(dut)
    await tb.reset()
    p = tb.params
    if not p.quarter_rate:
        tb.log.info("no quarter-rate format in %s", ", ".join(p.formats))
        return
    m, n = p.cols, p.moving_max
    full = [f for f in p.formats if not p.is_quarter(f)]
    program = []
    for fmt in p.quarter_rate:
        other = str(tb.rng.choice(full)) if full else fmt
        k, ko = p.k_limit(fmt), p.k_limit(other)
        program += [tb.load(fmt, k, m), tb.multiply(fmt, k, n),
                    tb.load(other, ko, max(1, m - 1)),
                    tb.multiply(other, ko, max(1, n // 2), accumulate=True),
                    tb.load(fmt, max(1, k // 2), m),
                    tb.multiply(fmt, max(1, k // 2), 1, accumulate=True),
                    tb.multiply(fmt, max(1, k // 2), 2)]
    await tb.run_both(program, "quarter rate")


@_cocotb_test
async def transposes(dut):
    """The transpose pass against multiplies: per format (not MX), a tile of every bit
    pattern (-0, NaN payloads, subnormals: each must leave as loaded) transposed, then
    multiplied by the same tile's bank, a load hidden behind a transpose, a partial
    transpose, and an accumulating multiply onto transposed rows."""
    tb = _tb(dut)
    await tb.reset()
    p = tb.params
    formats = [f for f in p.formats if not p.is_mx(f)]
    if not formats:
        tb.log.info("no format with a transpose in %s", ", ".join(p.formats))
        return
    program = []
    for i, fmt in enumerate(formats):
        f, k, m = tb.fmt(fmt), p.k_limit(fmt), p.cols
        kt = min(k, p.moving_max)
        tile = edge_bits(f, tb.rng, (kt, m)) if i % 2 else random_bits(f, tb.rng, (kt, m),
                                                                          "any")
        other = formats[(i + 1) % len(formats)]
        ko = p.k_limit(other)
        program += [tb.load(fmt, kt, m, tile=tile), (Transpose(kt), None),
                    tb.multiply(tb.random_partner(fmt), kt, 1),
                    tb.load(other, ko, max(1, m - 1), kind="finite"),
                    (Transpose(max(1, min(ko, p.moving_max) // 2)), None),
                    tb.multiply(tb.random_partner(other), ko, 2, accumulate=True)]
    await tb.run_both(program, "transposes")


@_cocotb_test
async def random_programs(dut):
    """Random mixed-format programs: shapes, formats, accumulation, transposes of some
    tiles before their multiplies, idle and backpressure."""
    tb = _tb(dut)
    await tb.reset()
    p = tb.params
    for case in range(3):
        # moving beats and output beats alike (a transpose's rows come out as results),
        # one kept for the multiply that closes a program ending on a load
        program, budget_k = [], tb.hp.stationary_depth
        budget_n = min(tb.hp.moving_depth, tb.hp.result_depth) - 1
        for _ in range(int(tb.rng.integers(1, 5))):
            fmt = tb.random_format()
            k = int(tb.rng.integers(1, p.k_limit(fmt) + 1))
            m = int(tb.rng.integers(1, p.cols + 1))
            beats = -(-m // p.beat_columns)
            if beats > budget_k:
                break
            budget_k -= beats
            program.append(tb.load(fmt, k, m, kind=str(tb.rng.choice(["normal", "finite"]))))
            if not p.is_mx(fmt) and tb.rng.integers(0, 3) == 0:  # the tile's rows first
                n = int(tb.rng.integers(1, min(k, p.moving_max) + 1))
                if n <= budget_n:
                    budget_n -= n
                    program.append((Transpose(n), None))
            for _ in range(int(tb.rng.integers(1, 3))):
                n = int(tb.rng.integers(1, p.moving_max + 1))
                if n > budget_n:
                    break
                budget_n -= n
                program.append(tb.multiply(tb.random_partner(fmt), k, n,
                                           accumulate=bool(tb.rng.integers(0, 2))))
        if isinstance(program[-1][0], Load):
            last = program[-1][0]
            program.append(tb.multiply(last.fmt, last.k, 1))
        idle, stall = (int(v) for v in tb.rng.integers(0, 200, size=2))
        await tb.run(program, name=f"random {case} (streaming)")
        await tb.run(program, idle=idle, stall=stall, name=f"random {case}")


@_cocotb_test
async def throughput(dut):
    """Simulated cycles per wall-clock second on full tiles (used by benchmarks/tensor.py;
    parameters ``programs``, ``report``, a JSON file to write, and ``format``, the input
    format of its tiles, the array's first when missing). Results are still checked,
    outside the timed part."""
    import json
    import time

    from cocotb.triggers import RisingEdge, with_timeout
    from cocotb.utils import get_sim_time

    config = runner.tb_params()
    tb = _tb(dut)
    await tb.reset()
    p = tb.params
    fmt = config.get("format", p.formats[0])
    k, m, n = p.k_limit(fmt), p.cols, p.moving_max
    program = [tb.load(fmt, k, m), tb.multiply(fmt, k, n), tb.load(fmt, k, m),
               tb.multiply(fmt, k, n, accumulate=True),
               tb.multiply(fmt, k, n, accumulate=True)]
    want_cycles = schedule(p, [op for op, _ in program]).outputs
    wall = cycles = 0.0
    for _ in range(config["programs"]):
        ops = tb._load_program(program)
        want, _ = tb.expected(program)
        tb._start(ops, [len(b) for b in want], 0, 0, 1)
        await RisingEdge(dut.clk)
        dut.start.value = 0
        begin_ns = get_sim_time("ns")
        begin = time.perf_counter()
        await with_timeout(RisingEdge(dut.done), 100 * len(want_cycles) * PERIOD_NS, "ns")
        wall += time.perf_counter() - begin
        cycles += (get_sim_time("ns") - begin_ns) / PERIOD_NS
        for h, group in enumerate(want):
            got, _ = tb._results(h, len(group))
            for j, (value, beat) in enumerate(zip(got, group, strict=True)):
                assert np.array_equal(value, beat), f"column group {h} beat {j} differs"
    with open(config["report"], "w") as fh:
        json.dump({"cycles": cycles, "seconds": wall}, fh)


@_cocotb_test
async def tiled_programs(dut):
    """Random mixed-format programs on random tile positions of every size the array's
    tiling has, along rows and columns apart (double-row tiles of a double-rate format
    among them, as wide as the array): tiles on disjoint row and column groups multiply at
    once, loads take turns and hide behind multiplies that share no bank, a later load
    replaces the tiles it overlaps; multiplies return to earlier tiles still loaded;
    transposes of the latest tile; idle and backpressure."""
    tb = _tb(dut)
    await tb.reset()
    p = tb.params
    if p.ways == 1:
        tb.log.info("the array is not split into tiles (tiles %s)", p.tiles)
        return
    for case in range(4):
        program, live = [], {}
        # moving beats and output beats alike (a transpose's rows come out as results),
        # one kept for the multiply that closes a program ending on a load
        stat_left = tb.hp.stationary_depth
        mov_left = min(tb.hp.moving_depth, tb.hp.result_depth) - 1
        cmd_left = tb.hp.program_depth - 1  # commands, one kept likewise
        for _ in range(int(tb.rng.integers(3, 8))):
            if cmd_left < 1:
                break
            ways = [int(w) for w in tb.rng.choice(p.tiles, size=2)]  # rows, columns
            rs, cs = p.rows // ways[0], p.cols // ways[1]
            row, col = (int(tb.rng.integers(0, w)) for w in ways)
            fmt = tb.random_format()
            k_max = (2 if p.is_double(fmt) and cs == p.cols else 1) * rs
            k, m = int(tb.rng.integers(1, k_max + 1)), int(tb.rng.integers(1, cs + 1))
            beats = -(-m // p.beat_columns)
            if beats > stat_left:
                break
            stat_left -= beats
            cmd_left -= 1
            op, tile = tb.load(fmt, k, m, kind=str(tb.rng.choice(["normal", "finite"])))
            load = Load(k, m, fmt, row * rs, col * cs, rs, cs)
            program.append((load, tile))
            live = {pos: t for pos, t in live.items()
                    if not (t.row < load.row + rs and load.row < t.row + t.row_size
                            and t.col < load.col + cs and load.col < t.col + t.col_size)}
            live[(load.row, load.col)] = load
            if not p.is_mx(fmt) and tb.rng.integers(0, 4) == 0:
                n = int(tb.rng.integers(1, min(k, p.moving_max) + 1))
                if n <= mov_left and cmd_left > 0:
                    mov_left -= n
                    cmd_left -= 1
                    program.append((Transpose(n), None))
            # multiplies on this tile and on others still loaded
            for _ in range(int(tb.rng.integers(1, 4))):
                target = live[list(live)[int(tb.rng.integers(0, len(live)))]]
                n = int(tb.rng.integers(1, p.moving_max + 1))
                if n > mov_left or cmd_left < 1:
                    break
                mov_left -= n
                cmd_left -= 1
                op, tile = tb.multiply(tb.random_partner(target.fmt), target.k, n,
                                       accumulate=bool(tb.rng.integers(0, 2)))
                program.append((Multiply(n, op.accumulate, op.fmt, target.row, target.col),
                                tile))
        if isinstance(program[-1][0], Load):
            last = program[-1][0]
            op, tile = tb.multiply(last.fmt, last.k, 1)
            program.append((Multiply(1, False, last.fmt, last.row, last.col), tile))
        idle, stall = (int(v) for v in tb.rng.integers(0, 200, size=2))
        await tb.run(program, name=f"tiled {case} (streaming)")
        await tb.run(program, idle=idle, stall=stall, name=f"tiled {case}")
