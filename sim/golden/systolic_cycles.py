"""The cycle model of the tensor engine's systolic array, exact to the cycle of
:class:`hdl.tensor.systolic.SystolicArray` (its results are :mod:`sim.golden.systolic`'s).

:func:`schedule` replays the array's sequencer cycle by cycle for a program of instructions
with every stream always valid and ready, giving the cycle of every command and every output
beat; :func:`cycles` derives the per-instruction figures from it. :class:`Sequencer` is its
closed form one command at a time (the core simulator's tensor engine); :func:`tile_interval`,
:func:`stream_tail` and :func:`matmul_cycles` are the closed forms of a stream of tiles
(the system model and exploration, element-wise on numpy arrays). :func:`place` and
:func:`check_formats` are the array's rules for a tile's position and size and for the
formats a multiply may read a tile in.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hdl.tensor.params import SystolicParams

__all__ = ["UNMIXED", "Load", "Multiply", "Schedule", "Sequencer", "Transpose", "check_formats",
           "cycles", "load_beats", "matmul_cycles", "place", "schedule", "stream_tail",
           "tile_interval", "transpose_cycles"]

# Formats a matmul never mixes with another: "FP32/TF32 not mixed with others" [ISA].
UNMIXED = ("fp32", "tf32")


@dataclass(frozen=True)
class Load:
    """LoadStationary of a K x M tile in input format ``fmt`` (a name of the array's
    ``formats``; None: any, for timing alone, as no load's cycle depends on the format).
    ``k`` counts contraction indices, or for an MX format words of four (quads, one per PE
    row: :class:`~hdl.tensor.params.SystolicParams`), which makes MX run at rate 4.

    ``row``, ``col``: the tile position, the first PE row and column the tile occupies;
    ``row_size``, ``col_size``: the tile size in PE rows and columns (None: the whole
    array), each ``rows / w`` or ``cols / w`` for a way ``w`` of the array's ``tiles``, the
    position a multiple of the size (``tile_position`` and ``tile_size`` [ISA])."""

    k: int
    m: int
    fmt: str | None = None
    row: int = 0
    col: int = 0
    row_size: int | None = None
    col_size: int | None = None


@dataclass(frozen=True)
class Multiply:
    """MultiplyMoving of a K x N tile (K from the tile) in input format ``fmt`` (None:
    any format at one moving column per cycle, for timing alone), on the latest tile loaded
    at tile position (``row``, ``col``)."""

    n: int
    accumulate: bool = False
    fmt: str | None = None
    row: int = 0
    col: int = 0


@dataclass(frozen=True)
class Transpose:
    """The transpose pass of the latest tile: ``n`` output beats, beat j holding row j of
    the K x M tile (its ``m`` columns; j < K), at one beat per cycle in every format."""

    n: int


@dataclass(frozen=True)
class Schedule:
    """Cycle of each command's acceptance and of each output beat's transfer (the beats in
    program order: a multiply's beats before those of the next multiply)."""

    accepted: tuple[int, ...]
    outputs: tuple[int, ...]

    @property
    def total(self) -> int:
        """Cycles from the first command's acceptance to the last output beat, inclusive."""
        return max(self.outputs) - self.accepted[0] + 1


@dataclass(frozen=True)
class _Tile:
    """Where a loaded tile sits: its row groups, column groups (and so its quads, the
    (row group, column group) pairs it covers) and size."""

    k: int
    m: int
    fmt: str | None
    row_groups: tuple[int, ...]
    col_groups: tuple[int, ...]
    quads: frozenset = frozenset()


def place(params: SystolicParams, load: Load) -> _Tile:
    """The tile of ``load``, its position and size checked against the array's tiling."""
    groups = {}
    for axis, pos, size, full, group in (
            ("row", load.row, load.row_size, params.rows, params.group_rows),
            ("col", load.col, load.col_size, params.cols, params.group_cols)):
        size = full if size is None else size
        sizes = sorted({full // w for w in params.tiles})
        if size not in sizes:
            raise ValueError(f"{axis}_size must be one of {', '.join(map(str, sizes))} (the "
                             f"array split {' or '.join(map(str, sorted(params.tiles)))} "
                             f"ways), not {size!r}")
        if not isinstance(pos, int) or pos < 0 or pos % size or pos + size > full:
            raise ValueError(f"{axis} must be a multiple of the tile's {axis}_size {size} "
                             f"below {full}, not {pos!r}")
        groups[axis] = (tuple(range(pos // group, (pos + size) // group)), size)
    (row_groups, row_size), (col_groups, col_size) = groups["row"], groups["col"]
    double = load.fmt is not None and params.is_double(load.fmt)
    k_max = (2 if double or load.fmt is None and params.double_rate else 1) * row_size
    if not 1 <= load.k <= k_max:
        raise ValueError(f"k must be in 1 .. {k_max}, not {load.k!r}")
    if not 1 <= load.m <= col_size:
        raise ValueError(f"m must be in 1 .. {col_size}, not {load.m!r}")
    if load.k > row_size and col_size != params.cols:
        raise ValueError(f"a double-row tile (k = {load.k} > its {row_size} rows) must take "
                         f"the array's whole width, not col_size {col_size}")
    return _Tile(load.k, load.m, load.fmt, row_groups, col_groups,
                 frozenset((r, c) for r in row_groups for c in col_groups))


def check_formats(params: SystolicParams, tile: str, fmt: str) -> None:
    """Refuse a multiply in format ``fmt`` on a tile loaded in ``tile`` (names of the
    array's ``formats``) unless both have one rate (double, single or quarter) and kind
    (int8, float or block-scaled MX), and neither is fp32 or tf32 (:data:`UNMIXED`) unless
    both are the same."""
    if (params.is_double(tile) != params.is_double(fmt)
            or params.is_quarter(tile) != params.is_quarter(fmt)
            or params.is_int(tile) != params.is_int(fmt)
            or params.is_mx(tile) != params.is_mx(fmt)):
        raise ValueError(f"fmt of a multiply must match its tile's {tile!r} in rate and kind, "
                         f"not {fmt!r}")
    if fmt != tile and (tile in UNMIXED or fmt in UNMIXED):
        raise ValueError(f"fmt of a multiply must be its tile's {tile!r} when either is one "
                         f"of {', '.join(UNMIXED)} (not mixed with others), not {fmt!r}")


def _check_program(params: SystolicParams, program) -> None:
    """Refuse what the array cannot run: fields out of range, unknown formats, tile
    positions and sizes the array's tiling does not have, a multiply at a position where no
    tile is loaded (or whose tile a later load at an overlapping position replaced), a
    multiply whose format differs from its tile's in rate (double, single or quarter) or in
    kind (int8, float or block-scaled MX), fp32 or tf32 mixed with another format, a
    transpose with no tile, of an MX tile or of more rows than the tile has."""
    tiles: dict[tuple[int, int], _Tile] = {}
    latest = None
    for op in program:
        if isinstance(op, (Load, Multiply)) and op.fmt is not None:
            params.code(op.fmt)  # the error names the legal formats
        if isinstance(op, Load):
            latest = place(params, op)
            tiles = {pos: t for pos, t in tiles.items() if not (t.quads & latest.quads)}
            tiles[(op.row, op.col)] = latest
        elif isinstance(op, Multiply):
            if not 1 <= op.n <= params.moving_max:
                raise ValueError(f"n must be in 1 .. {params.moving_max}, not {op.n!r}")
            held = tiles.get((op.row, op.col))
            if held is None:
                raise ValueError(f"a multiply at tile position ({op.row}, {op.col}) needs a "
                                 f"tile loaded there (and not since overlapped by another)")
            if held.fmt is not None and op.fmt is not None:
                check_formats(params, held.fmt, op.fmt)
        elif isinstance(op, Transpose):
            if latest is None:
                raise ValueError("a transpose must follow a Load (it reads the latest tile)")
            if latest.fmt is not None and params.is_mx(latest.fmt):
                raise ValueError(f"a transpose must not read an MX tile, not {latest.fmt!r}")
            if not 1 <= op.n <= min(latest.k, params.moving_max):
                raise ValueError(f"n of a transpose must be in 1 .. "
                                 f"{min(latest.k, params.moving_max)} (the tile's k, at most "
                                 f"moving_max), not {op.n!r}")
        else:
            raise ValueError(f"program entries must be Load, Multiply or Transpose, "
                             f"not {op!r}")


class _Run:
    """A running multiply or transpose: its groups, bank, pace and beats left."""

    __slots__ = ("row_groups", "col_groups", "quads", "bank", "slow", "left", "phase", "out")

    def __init__(self, tile: _Tile, bank: int, slow: int, n: int, out: list):
        self.row_groups, self.col_groups = set(tile.row_groups), set(tile.col_groups)
        self.quads = tile.quads
        self.bank, self.slow, self.left, self.phase, self.out = bank, slow, n, 0, out


def schedule(params: SystolicParams, program) -> Schedule:
    """Replay the sequencer of :class:`hdl.tensor.systolic.SystolicArray` for ``program``.

    Every source is always valid and the sink always ready; cycle 0 is the first cycle the
    first command is offered. Commands are accepted in order, one a cycle at most. The array
    is ``ways x ways`` groups of PEs (``ways = max(params.tiles)``; one group without
    tiling); a tile covers the groups of its position and size. Each PE has two weight
    banks; each ``LOAD`` fills, in every group of its tile, the bank that the latest tile of
    its first group does not use, and each multiply reads the bank of its own tile. A
    multiply (or transpose) takes moving beats for its row groups and gives output beats on
    its column groups, so multiplies on disjoint row groups and disjoint column groups run
    at once. The rules (per cycle, from the state at its start):

    * a running multiply takes a moving beat every cycle (every fourth at a quarter rate,
      after three idle cycles), which leaves ``rows + cols + 2`` cycles later on ``out``; a
      transpose runs as a multiply of ``n`` beats at one a cycle, its vectors made by the
      sequencer;
    * a stationary beat (``beat_columns`` columns of the tile) is taken every cycle of a
      load, except while a running multiply that shares a group with the load and reads the
      bank being filled has moving beats to take before this cycle's (its last beat and the
      first stationary beat may share a cycle: both waves cross every PE in the same order,
      the weight write just behind the read);
    * ``LOAD`` is accepted when no load runs or the running one takes its last beat now;
      ``MULTIPLY`` and ``TRANSPOSE`` when, in the same sense, no load runs and no running
      multiply shares a row group or a column group with it.
    """
    _check_program(params, program)
    depth, bc = params.depth, params.beat_columns
    program = list(program)
    beats_of = [[] for _ in program]
    accepted = []
    qbank: dict[tuple[int, int], int] = {}
    tiles: dict[tuple[int, int], tuple[_Tile, int]] = {}
    latest = None
    load_left, load_bank, load_quads = 0, 0, frozenset()
    runs: list[_Run] = []
    cycle = 0
    while len(accepted) < len(program) or runs or load_left:
        vectors = [r for r in runs if r.phase == r.slow - 1]
        last = [r for r in vectors if r.left == 1]
        beat = load_left > 0 and all(
            r.bank != load_bank or not (r.quads & load_quads) or r in last for r in runs)
        last_beat = beat and load_left == 1
        nxt_load = load_left - 1 if beat else load_left
        for r in vectors:
            r.out.append(cycle + depth + 2)
        done = set(map(id, last))
        started = None
        if len(accepted) < len(program):
            op = program[len(accepted)]
            load_free = load_left == 0 or last_beat
            if isinstance(op, Load) and load_free:
                accepted.append(cycle)
                tile = place(params, op)
                quads = sorted(tile.quads)
                bank = 1 - qbank.get(quads[0], 0)
                for q in quads:
                    qbank[q] = bank
                tiles = {pos: t for pos, t in tiles.items() if not (t[0].quads & tile.quads)}
                tiles[(op.row, op.col)] = (tile, bank)
                latest = (tile, bank)
                nxt_load, load_bank, load_quads = -(-op.m // bc), bank, tile.quads
            elif isinstance(op, (Multiply, Transpose)) and load_free:
                tile, bank = tiles[(op.row, op.col)] if isinstance(op, Multiply) else latest
                busy = any(id(r) not in done and (r.row_groups & set(tile.row_groups)
                                                  or r.col_groups & set(tile.col_groups))
                           for r in runs)
                if not busy:
                    index = len(accepted)
                    accepted.append(cycle)
                    slow = params.column_cycles(op.fmt) if isinstance(op, Multiply) else 1
                    started = _Run(tile, bank, slow, op.n, beats_of[index])
        for r in runs:
            if r.phase == r.slow - 1:
                r.left, r.phase = r.left - 1, 0
            else:
                r.phase += 1
        runs = [r for r in runs if r.left > 0]
        if started is not None:
            runs.append(started)
        load_left = nxt_load
        cycle += 1
    return Schedule(tuple(accepted), tuple(c for beats in beats_of for c in beats))


class Sequencer:
    """The closed form of :func:`schedule`, one command at a time: :meth:`issue` gives the
    cycle a command is accepted and the cycle after its last beat, when each command is
    offered from a given cycle on (in program order) and the operand streams are always
    valid, as the core simulator's tensor engine offers its instructions. With every
    command offered at cycle 0 it is exactly :func:`schedule` (the tests pin the two):

    * a load is accepted at the earliest when the previous command was accepted a cycle
      before and the previous load takes its last beat; its beats follow from the next
      cycle, but not before the last moving beat of the latest multiply that shares a group
      with it and reads the bank it fills;
    * a multiply or transpose is accepted at the earliest when the previous command was
      accepted a cycle before, the latest load takes its last beat, and the latest
      multiplies on its row groups and column groups take their last moving beats; its
      beats follow every ``slow`` cycles, each leaving ``rows + cols + 2`` cycles later.
    """

    def __init__(self, params: SystolicParams):
        self.params = params
        self._next = 0  # earliest acceptance of the next command
        self._load_last = 0  # the latest load's last beat
        self._rows = [0] * params.ways  # last moving beat of the latest multiply per group
        self._cols = [0] * params.ways
        self._reads = ({}, {})  # per bank: quad -> last moving beat reading it
        self._qbank: dict[tuple[int, int], int] = {}
        self._tiles: dict[tuple[int, int], tuple[_Tile, int]] = {}
        self._latest = None
        self._placed: dict[Load, tuple] = {}
        self._slow: dict[str | None, int] = {}

    def issue(self, op, offered=0):
        """(accepted, done) cycles of ``op`` (a :class:`Load`, :class:`Multiply` or
        :class:`Transpose`) offered from cycle ``offered``: ``done`` is the cycle after its
        last stationary beat (a load) or after its last output beat. Refuses what
        :func:`schedule` refuses of a program (not the format pairing rules)."""
        if isinstance(op, Load):
            return self.load(op, offered)
        if isinstance(op, (Multiply, Transpose)):
            return self.multiply(op, offered)
        raise ValueError(f"op must be a Load, Multiply or Transpose, not {op!r}")

    def load(self, op: Load, offered=0):
        """:meth:`issue` of a :class:`Load`."""
        placed = self._placed.get(op)
        if placed is None:
            tile = place(self.params, op)
            placed = self._placed[op] = (tile, sorted(tile.quads),
                                         -(-op.m // self.params.beat_columns))
        tile, quads, beats = placed
        qbank = self._qbank
        bank = 1 - qbank.get(quads[0], 0)
        accept = offered if offered > self._next else self._next
        if self._load_last > accept:
            accept = self._load_last
        first = accept + 1
        reads = self._reads[bank]
        for q in quads:
            read = reads.get(q, 0)
            if read > first:
                first = read
            qbank[q] = bank
        tiles, pos = self._tiles, (op.row, op.col)
        held = tiles.get(pos)
        if len(tiles) != 1 or held is None or held[0] is not tile:
            self._tiles = tiles = {at: t for at, t in tiles.items()
                                   if not (t[0].quads & tile.quads)}
        tiles[pos] = self._latest = (tile, bank)
        self._load_last = last = first + beats - 1
        self._next = accept + 1
        return accept, last + 1

    def multiply(self, op: Multiply | Transpose, offered=0):
        """:meth:`issue` of a :class:`Multiply` or :class:`Transpose`."""
        p = self.params
        if op.__class__ is Multiply:
            held = self._tiles.get((op.row, op.col))
            if held is None:
                raise ValueError(f"a multiply at tile position ({op.row}, {op.col}) needs a "
                                 f"tile loaded there (and not since overlapped by another)")
            slow = self._slow.get(op.fmt)
            if slow is None:
                slow = self._slow[op.fmt] = p.column_cycles(op.fmt)
        else:
            if self._latest is None:
                raise ValueError("a transpose must follow a Load (it reads the latest tile)")
            held, slow = self._latest, 1
        if not 1 <= op.n <= p.moving_max:
            raise ValueError(f"n must be in 1 .. {p.moving_max}, not {op.n!r}")
        tile, bank = held
        rows, cols = self._rows, self._cols
        accept = offered if offered > self._next else self._next
        if self._load_last > accept:
            accept = self._load_last
        for g in tile.row_groups:
            if rows[g] > accept:
                accept = rows[g]
        for g in tile.col_groups:
            if cols[g] > accept:
                accept = cols[g]
        last = accept + slow * op.n
        for g in tile.row_groups:
            rows[g] = last
        for g in tile.col_groups:
            cols[g] = last
        reads = self._reads[bank]
        for q in tile.quads:
            reads[q] = last
        self._next = accept + 1
        return accept, last + p.depth + 3


def load_beats(m, load_columns):
    """Beats of a LoadStationary of ``m`` columns, ``ceil(m / load_columns)`` (the same as with
    :attr:`~hdl.tensor.params.SystolicParams.beat_columns`, as ``m <= cols``); numpy-friendly.
    """
    return _ceil_div(m, load_columns)


def _ceil_div(a, b):
    """``ceil(a / b)`` of non-negative whole numbers: exact integer division for integers, and
    for float arrays (exploration's design points) ``np.ceil(a / b)``, which is exact for whole
    numbers below 2**40 and faster than floor division of floats."""
    a = np.asarray(a)
    if a.dtype.kind == "f":
        return np.ceil(a / b)
    return -(-a // b)


def _divmod(a, b):
    """``divmod`` of non-negative whole numbers, the float case as in :func:`_ceil_div`."""
    a = np.asarray(a)
    if a.dtype.kind == "f" or np.asarray(b).dtype.kind == "f":
        q = np.floor(a / b)
        return q, a - q * b
    return np.divmod(a, b)


def tile_interval(m, n, load_columns, slow=1, ways=1):
    """Steady-state cycles per LoadStationary + MultiplyMoving pair of ``m`` stationary columns
    and ``n`` moving columns: ``max(slow * n, ways * (load_beats(m) + 1)) / ways``, whatever
    ``k`` and the array's size (the load fills the idle bank while the previous multiply
    runs); ``slow`` is the multiply's cycles per moving column (4 at a quarter rate).
    ``ways`` pairs run at once on tile positions of disjoint row and column groups (the
    ``ways`` diagonal tiles of an array split ``ways`` ways), taking their turns on the one
    load path: a round of ``ways`` pairs costs ``max(slow * n, ways * (load_beats + 1))``.
    The closed form of :func:`schedule`, which the tests pin to it; element-wise on numpy
    arrays."""
    rounds = np.maximum(slow * np.asarray(n), ways * (load_beats(m, load_columns) + 1))
    return rounds if ways == 1 else rounds / ways


def stream_tail(first_m, first_n, rows, cols, load_columns, slow=1, ways=1):
    """Cycles of a stream of tiles that :func:`tile_interval` does not count: the first
    tile's load (``first_m`` stationary columns) and the pipeline's drain after the last
    multiply (``first_n`` moving columns, ``slow`` cycles each), with ``ways`` pairs at once,
    ``min(ways * (load_beats + 1), slow * first_n) + rows + cols + 2`` (one way:
    ``min(load_beats, slow * first_n - 1) + rows + cols + 3``). Element-wise on numpy
    arrays."""
    return (np.minimum(ways * (load_beats(first_m, load_columns) + 1),
                       slow * np.asarray(first_n)) + rows + cols + 2)


def matmul_cycles(m, k, n, rows, cols, rate, moving_max, load_columns, tiles=(1,)):
    """Tensor-engine cycles of an ``m x k`` by ``k x n`` matmul tiled onto one array.

    The contraction ``k`` is cut into passes of ``rows * max(rate, 1)`` (double-rate formats
    contract two indices per PE row), ``m`` into stationary tiles of ``cols`` and ``n`` into
    moving tiles of ``moving_max``; one LoadStationary + MultiplyMoving pair per tile, back to
    back, each costing :func:`tile_interval` with ``1 / rate`` cycles per moving column for
    formats below one MAC per PE per cycle (FP32 at a quarter), plus what the stream does
    not hide: :func:`stream_tail` of the largest tile. Where ``k`` fits in one tile of
    ``rows / w`` rows for a way ``w`` of the array's ``tiles`` (the spec's row tiling),
    ``m`` is cut into tiles of ``cols / w`` columns instead and ``w`` pairs run at once; the
    figure is the fastest of the ways. Exactly :func:`schedule`'s total where every tile has
    the same shape and, with ``w`` ways, their number is a multiple of ``w``. Element-wise
    on numpy arrays.
    """
    rate = np.asarray(rate, dtype=float)
    slow = 1.0 / np.minimum(rate, 1.0)
    best = None
    for ways in sorted(set(tiles) | {1}):
        t_rows, t_cols = rows // ways, cols // ways
        k_tiles = np.ceil(k / (rows * np.maximum(rate, 1.0))) if ways == 1 else 1
        m_full, m_rest = _divmod(m, t_cols)
        n_full, n_rest = _divmod(n, moving_max)
        pairs = 0
        for mt, mc in ((t_cols, m_full), (m_rest, 1)):
            for nt, nc in ((moving_max, n_full), (n_rest, 1)):
                pairs = pairs + np.where((mt > 0) & (nt > 0) & (mc > 0) & (nc > 0),
                                         mc * nc * tile_interval(np.maximum(mt, 1), nt,
                                                                 load_columns, slow, ways), 0)
        first_m, first_n = np.minimum(m, t_cols), np.minimum(n, moving_max)
        total = k_tiles * pairs + stream_tail(first_m, first_n, rows, cols, load_columns,
                                              slow, ways)
        if ways == 1:
            best = total
        else:
            best = np.where(np.asarray(k) <= t_rows, np.minimum(best, total), best)
    return best


@lru_cache(maxsize=4096)
def cycles(params: SystolicParams, k: int, m: int, n: int,
           fmt: str | None = None) -> dict[str, int]:
    """Cycle figures of one ``k x m`` stationary, ``k x n`` moving matmul in ``fmt`` (None:
    at one moving column per cycle) on an idle array.

    Returns
    -------
    dict with
        ``load``: LoadStationary, from its acceptance to that of the following multiply;
        ``multiply``: MultiplyMoving issue, from its acceptance to that of a following
        multiply on the same stationary tile;
        ``latency``: from the multiply's acceptance to its last output beat;
        ``matmul``: LoadStationary + MultiplyMoving from the load's acceptance to the last
        output beat, inclusive;
        ``interval``: steady-state cycles per matmul when load/multiply pairs run back to back
        (the load overlaps the previous multiply), :func:`tile_interval`;
        ``macs``: useful multiply-accumulates, ``k * m * n``.
    """
    load, mul = Load(k, m, fmt), Multiply(n, fmt=fmt)
    one = schedule(params, [load, mul, mul])
    pairs = schedule(params, [load, mul] * 4)
    interval = pairs.accepted[7] - pairs.accepted[5]
    return {
        "load": one.accepted[1] - one.accepted[0],
        "multiply": one.accepted[2] - one.accepted[1],
        "latency": one.outputs[n - 1] - one.accepted[1],
        "matmul": one.outputs[n - 1] - one.accepted[0] + 1,
        "interval": interval,
        "macs": k * m * n,
    }


@lru_cache(maxsize=4096)
def transpose_cycles(params: SystolicParams, k: int, m: int) -> dict[str, int]:
    """Cycle figures of the transpose pass of a ``k x m`` tile (a Load, then a Transpose of
    its ``k`` rows) on an idle array, from :func:`schedule`.

    Returns
    -------
    dict with
        ``issue``: from the load's acceptance to that of a following multiply (the array's
        occupancy);
        ``latency``: from the transpose's acceptance to its last output beat;
        ``total``: from the load's acceptance to the last output beat, inclusive.
    """
    one = schedule(params, [Load(k, m), Transpose(k), Multiply(1)])
    return {"issue": one.accepted[2] - one.accepted[0],
            "latency": one.outputs[k - 1] - one.accepted[1],
            "total": one.outputs[k - 1] - one.accepted[0] + 1}
