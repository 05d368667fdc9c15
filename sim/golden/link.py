"""Reference model of the link port (:mod:`hdl.link.link`).

Three things the RTL is checked against:

- **What arrives**: the framed image of a packet (:func:`frame`, with the CRC from
  ``zlib.crc32``), and the packet sequence the loopback traffic generator produces
  (:func:`packets`), which the receiver must deliver in order, exactly once.
- **When it arrives**, error free: :func:`schedule` replays the RTL's timing cycle by cycle
  at transaction level (which cycle each packet starts, which cycle each word is delivered)
  for a given traffic pattern, so the words delivered by any cycle are predicted exactly.
- **How fast, in closed form**: :func:`efficiency` gives the steady-state payload words per
  cycle for a fixed packet length as ``L / max(framing, credit, replay periods)`` and an
  estimate for a length distribution; :func:`efficiency_with_errors` adds go-back-N losses.

Timing of the RTL (cycles; ``D`` is the channel latency of each lane), derived from the
register structure and checked against simulation by the tests:

- a packet decided in cycle ``S`` puts its ``n = H + L + C`` flits on the lane in cycles
  ``S+1 .. S+n``; the next decision can be made in cycle ``S+n`` (back to back);
- the receiver commits it at the end of cycle ``S+n+D``; its words can leave from ``S+n+D+1``;
- a word delivered in cycle ``q`` is a free credit at the transmitter from cycle ``q+D+2``;
- the packet's acknowledgement frees its replay-buffer words from cycle ``S+n+2D+3``;
- a user word accepted in cycle ``t`` completes a packet that can start from ``t+1``.
"""

from __future__ import annotations

import math
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from hdl.link.link import LinkParams
from hdl.link.loopback import TX_NODE

MASK32 = 0xFFFFFFFF


def xorshift32(x: int) -> int:
    x ^= (x << 13) & MASK32
    x ^= x >> 17
    x ^= (x << 5) & MASK32
    return x


def crc32_words(words: Sequence[int], width: int) -> int:
    """CRC-32 of ``width``-bit words taken as little-endian bytes (``zlib.crc32``)."""
    nbytes = width // 8
    return zlib.crc32(b"".join(int(w).to_bytes(nbytes, "little") for w in words))


def header_value(params: LinkParams, *, type: int, dest: int, src: int, seq: int,
                 length: int) -> int:
    """The header fields packed as the RTL packs them (type in the least significant bits)."""
    fields = [(type, 2), (dest, params.node_bits), (src, params.node_bits),
              (seq, params.seq_bits), (length, params.len_bits)]
    value, shift = 0, 0
    for v, bits in fields:
        if not 0 <= v < 2 ** bits:
            raise ValueError(f"header field must fit {bits} bits, not {v!r}")
        value |= v << shift
        shift += bits
    return value


def _split(value: int, flits: int, width: int) -> list[int]:
    return [(value >> (k * width)) & ((1 << width) - 1) for k in range(flits)]


def frame(params: LinkParams, payload: Sequence[int], *, type: int, dest: int, src: int,
          seq: int) -> list[int]:
    """The flits of one packet on the lane: header, payload, CRC-32."""
    w = params.width
    head = _split(header_value(params, type=type, dest=dest, src=src, seq=seq,
                               length=len(payload)), params.header_flits, w)
    crc = crc32_words(head + list(payload), w)
    return head + list(payload) + _split(crc, params.crc_flits, w)


# --- traffic of the loopback fixture ----------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Traffic:
    """What the loopback's generator and checker do; mirrors :mod:`hdl.link.loopback`.

    Packet lengths are ``len_min + (x & len_mask)`` from a xorshift32 generator seeded with
    ``seed_len``; the generator offers a word in a cycle with probability ``valid_thr / 256``
    and the receiver's user side is ready with probability ``ready_thr / 256``.
    """

    seed_len: int = 1
    seed_valid: int = 2
    seed_ready: int = 3
    len_min: int = 1
    len_mask: int = 0
    valid_thr: int = 256
    ready_thr: int = 256

    def __post_init__(self):
        for name in ("seed_len", "seed_valid", "seed_ready"):
            v = getattr(self, name)
            if not (isinstance(v, int) and 0 < v <= MASK32):
                raise ValueError(f"{name} must be a non-zero 32-bit integer, not {v!r}")
        if not (isinstance(self.len_min, int) and self.len_min >= 1):
            raise ValueError(f"len_min must be a positive integer, not {self.len_min!r}")
        if not (isinstance(self.len_mask, int) and self.len_mask >= 0
                and (self.len_mask + 1) & self.len_mask == 0 and self.len_mask < 2 ** 16):
            raise ValueError(f"len_mask must be 2**k - 1 below 2**16, not {self.len_mask!r}")
        for name in ("valid_thr", "ready_thr"):
            v = getattr(self, name)
            if not (isinstance(v, int) and 1 <= v <= 256):
                raise ValueError(f"{name} must be an integer in 1..256, not {v!r}")

    @property
    def len_max(self) -> int:
        return self.len_min + self.len_mask

    def check(self, params: LinkParams) -> None:
        if self.len_max > params.max_packet:
            raise ValueError(f"len_min + len_mask must be at most max_packet "
                             f"({params.max_packet}), not {self.len_max!r}")

    def lengths(self, count: int) -> list[int]:
        out, x = [], self.seed_len
        for _ in range(count):
            out.append(self.len_min + (x & 0xFFFF & self.len_mask))
            x = xorshift32(x)
        return out

    def length_distribution(self) -> list[tuple[int, float]]:
        """Packet lengths and their probabilities (uniform over the mask)."""
        k = self.len_mask + 1
        return [(self.len_min + i, 1 / k) for i in range(k)]


@dataclass(frozen=True)
class Packet:
    data: tuple[int, ...]
    dest: int
    src: int
    type: int


def packets(params: LinkParams, traffic: Traffic, count: int) -> list[Packet]:
    """The first ``count`` packets the loopback generator sends (and must be delivered)."""
    nb = params.node_bits
    out, word = [], 0
    for k, length in enumerate(traffic.lengths(count)):
        data = tuple((word + i) % 2 ** params.width for i in range(length))
        word += length
        out.append(Packet(data, k % 2 ** nb, TX_NODE % 2 ** nb, (k >> nb) % 4))
    return out


# --- cycle-exact error-free timing ------------------------------------------------------------

@dataclass(frozen=True)
class Schedule:
    """Error-free timing: ``starts[p]`` (decision cycle of packet p), ``pops`` (cycles in which
    a word was delivered) and ``flits`` (cycles the lane carried a flit), all below ``cycles``."""

    cycles: int
    starts: tuple[int, ...]
    pops: tuple[int, ...]
    flits: int

    def words(self, begin: int = 0, end: int | None = None) -> int:
        end = self.cycles if end is None else end
        return sum(1 for q in self.pops if begin <= q < end)


def schedule(params: LinkParams, traffic: Traffic, latency: int, cycles: int) -> Schedule:
    """Cycle by cycle, at transaction level, what the error-free loopback does.

    Raises ValueError when ``ack_timeout`` would fire without an error (a spurious replay),
    since the timing then depends on it.
    """
    traffic.check(params)
    D = latency
    H, C = params.header_flits, params.crc_flits
    lengths: list[int] = []
    len_state = traffic.seed_len

    def length_of(k: int) -> int:
        nonlocal len_state
        while len(lengths) <= k:
            lengths.append(traffic.len_min + (len_state & 0xFFFF & traffic.len_mask))
            len_state = xorshift32(len_state)
        return lengths[k]

    vstate, rstate = traffic.seed_valid, traffic.seed_ready
    g_valid = False
    wr = 0                 # words accepted from the user
    g_pos = 0              # words of the packet being written
    complete = 0           # packets fully written (visible from the next cycle)
    starts: list[int] = []
    busy_until = 0
    used = 0
    freed_pending: deque[int] = deque()  # cycles from which a freed credit is visible
    freed = 0
    acks: deque[tuple[int, int]] = deque()    # (cycle visible, words)
    acked_words = 0
    commits: deque[tuple[int, int]] = deque()  # (cycle visible, words)
    committed = 0
    rd = 0
    pops: list[int] = []
    flits = 0
    # Timeout mirror: cycles at which the transmitter sees an acknowledgement.
    ack_seen: deque[int] = deque()
    ack_done: deque[int] = deque()
    acked_pkts = 0
    timer = 0
    for t in range(cycles):
        while freed_pending and freed_pending[0] <= t:
            freed_pending.popleft()
            freed += 1
        while acks and acks[0][0] <= t:
            acked_words += acks.popleft()[1]
        while commits and commits[0][0] <= t:
            committed += commits.popleft()[1]
        # Transmitter: decide a packet start.
        busy = bool(starts) and starts[-1] < t <= busy_until
        boundary = t >= busy_until
        if timer == params.ack_timeout:
            raise ValueError(f"ack_timeout {params.ack_timeout} fires without errors at cycle "
                             f"{t}; raise it above the acknowledgement round trip")
        sent = len(starts)
        if boundary and sent < complete:
            length = length_of(sent)
            if params.credits - (used - freed) >= length:
                n = H + length + C
                starts.append(t)
                busy_until = t + n
                used += length
                commits.append((t + n + D + 1, length))
                acks.append((t + n + 2 * D + 3, length))
                ack_seen.append(t + n + 2 * D + 2)
                ack_done.append(t + n + 2 * D + 3)
        # Timer: reset on an acknowledgement or when nothing is outstanding.
        acked_now = False
        while ack_seen and ack_seen[0] <= t:
            ack_seen.popleft()
            acked_now = True
        while ack_done and ack_done[0] <= t:
            ack_done.popleft()
            acked_pkts += 1
        outstanding = sent != acked_pkts or busy
        timer = 0 if (acked_now or not outstanding) else min(timer + 1, params.ack_timeout)
        # User side of the transmitter.
        ready = wr - acked_words < params.replay_depth
        acc = g_valid and ready
        coin_v = (vstate & 0xFF) < traffic.valid_thr
        # Receiver's user side.
        coin_r = (rstate & 0xFF) < traffic.ready_thr
        if coin_r and rd < committed:
            pops.append(t)
            rd += 1
            freed_pending.append(t + D + 2)
        if acc:
            wr += 1
            g_pos += 1
            if g_pos == length_of(complete):
                g_pos = 0
                complete += 1
        if not g_valid or acc:
            g_valid = coin_v
        vstate, rstate = xorshift32(vstate), xorshift32(rstate)
    for k, s in enumerate(starts):
        flits += max(0, min(s + H + length_of(k) + C, cycles - 1) - s)
    return Schedule(cycles, tuple(starts), tuple(pops), flits)


# --- closed form ------------------------------------------------------------------------------

def framing_efficiency(params: LinkParams, length: float) -> float:
    """Payload flits over all flits of a packet of ``length`` words."""
    return length / (params.header_flits + length + params.crc_flits)


def period(params: LinkParams, length: int, latency: int) -> float:
    """Steady-state cycles per packet of a fixed ``length``, source always valid, sink ready.

    The largest of: the packet's own flits ``n``; the credit loop, ``a`` packets of credit
    (``credits = a L + b``) per round trip of ``n + 2D + L - b + 2``; the replay loop,
    ``c`` packets of replay buffer (``replay_depth = c L + e``) per ``n + 2D + L - e + 3``, and
    when ``e > 0`` also ``c + 1`` packets per ``n + 2D + L + 3``.
    """
    if not (isinstance(length, int) and 1 <= length <= params.max_packet):
        raise ValueError(f"length must be an integer in 1..{params.max_packet}, not {length!r}")
    D, L = latency, length
    n = params.header_flits + L + params.crc_flits
    a, b = divmod(params.credits, L)
    c, e = divmod(params.replay_depth, L)
    candidates = [n, (n + 2 * D + L - b + 2) / a, (n + 2 * D + L - e + 3) / c]
    if e:
        candidates.append((n + 2 * D + L + 3) / (c + 1))
    return max(candidates)


def efficiency(params: LinkParams, latency: int, lengths: int | Sequence[tuple[int, float]]
               ) -> float:
    """Payload words per cycle over the raw datapath, in steady state, error free.

    ``lengths`` is one packet length (exact: ``L / period``) or a distribution as
    ``(length, probability)`` pairs (an estimate: mean payload over the mean period, which
    is exact when one term of :func:`period` dominates for every length).
    """
    if isinstance(lengths, int):
        return lengths / period(params, lengths, latency)
    total = sum(p for _, p in lengths)
    if not math.isclose(total, 1.0, rel_tol=1e-9):
        raise ValueError(f"length probabilities must sum to 1, not {total!r}")
    mean_len = sum(L * p for L, p in lengths)
    mean_period = sum(period(params, L, latency) * p for L, p in lengths)
    return mean_len / mean_period


def packet_latency(params: LinkParams, length: int, latency: int) -> int:
    """Cycles from a packet's start decision to the delivery of its first word, unloaded.

    ``n + D + 1``: the receiver forwards a packet only once its CRC has checked out. With the
    link clock this is the per-hop ``alpha`` of the collective model (plus wire time, which
    ``latency`` stands for).
    """
    return params.header_flits + length + params.crc_flits + latency + 1


def packet_error_rate(params: LinkParams, length: float, bit_error_rate: float) -> float:
    """Probability that a packet of ``length`` words has at least one flipped bit."""
    flits = params.header_flits + length + params.crc_flits
    return 1 - (1 - bit_error_rate) ** (flits * params.width)


def flit_error_rate(params: LinkParams, bit_error_rate: float) -> float:
    """Probability that a flit has at least one flipped bit (the channel flips at most one)."""
    return 1 - (1 - bit_error_rate) ** params.width


def efficiency_with_errors(params: LinkParams, latency: int, length: int,
                           bit_error_rate: float) -> float:
    """Go-back-N estimate: each error episode loses the NAK round trip.

    A packet fails with probability ``P``; each failure of the head packet costs the cycles
    from its start until the replay starts, ``n + 2D + 3`` plus half a packet on average (a
    replay waits for the packet in flight), plus one idle cycle. A retransmission that fails
    again is not NAKed (the receiver is already in its error episode) and costs the
    ``ack_timeout`` instead. So the cycles per delivered packet are
    ``T + P/(1-P) * (lost + P * ack_timeout)``.
    """
    if not (0 <= bit_error_rate < 1):
        raise ValueError(f"bit_error_rate must be in [0, 1), not {bit_error_rate!r}")
    T = period(params, length, latency)
    P = packet_error_rate(params, length, bit_error_rate)
    lost = replay_cycles(params, latency, length)
    per_packet = T + P / (1 - P) * (lost + P * params.ack_timeout)
    return length / per_packet


def replay_cycles(params: LinkParams, latency: int, length: int) -> float:
    """Cycles one NAKed packet of ``length`` words costs (the go-back-N round trip of
    :func:`efficiency_with_errors`): ``n + 2D + 4`` plus half a packet period on average.
    A retransmission that fails again costs ``ack_timeout`` on top."""
    n = params.header_flits + length + params.crc_flits
    return n + 2 * latency + 4 + (period(params, length, latency) - 1) / 2
