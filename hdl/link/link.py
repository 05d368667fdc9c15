"""NeuronLink-style link port: framing, CRC-32, credit flow control, go-back-N replay.

A link joins a transmitter (:class:`LinkTx`) on one chip to a receiver (:class:`LinkRx`) on
the other through two lanes:

- the **flit lane** (transmitter to receiver): one ``width``-bit flit per cycle with ``valid``
  and the packet delimiters ``first`` and ``last``. The delimiters stand for the physical
  layer's framing symbols and are taken as error free; the flit data may be corrupted.
- the **status lane** (receiver to transmitter): every cycle a status word {next expected
  sequence number, count of receive-buffer words freed, NAK epoch} followed by its CRC-32.
  Every field is cumulative, so a corrupted status word (dropped on a bad CRC) only delays
  the next one.

A packet on the flit lane is ``H`` header flits, ``L`` payload flits and ``C`` CRC flits
(``H = ceil(header bits / width)``, ``C = ceil(32 / width)``). The header (zero-padded to ``H``
flits, least significant bits first) packs {type, dest, src, seq, length}. The CRC is CRC-32
(IEEE 802.3, reflected, as ``zlib.crc32``) over the header and payload flits taken as
little-endian bytes, sent least significant bits first.

Flow control: the receive buffer holds ``credits`` payload words. The transmitter starts a
packet only when the receiver has room for all its payload words (used minus freed, as last
reported by the status lane). The receiver writes payload speculatively and commits a packet
when its CRC, length and sequence number check out; otherwise it rolls the write pointer back
and counts the words as freed at once.

Replay: the transmitter keeps every packet in its replay buffer (``replay_depth`` words) until
the status lane acknowledges it. A receiver that sees a bad packet (bad CRC or length, or a
sequence number ahead of the expected one) discards it and everything after it until the
expected one arrives, and bumps the NAK epoch once per such episode; the transmitter then goes
back to the oldest unacknowledged packet (go-back-N). The transmitter also goes back when
no acknowledgement has arrived for ``ack_timeout`` cycles while packets are outstanding.
Replays start between packets, never in the middle of one.

User side: :class:`LinkTx` takes a stream of words {data, last, dest, type} (``dest`` and
``type`` are sampled on the last word of a packet); packets longer than ``max_packet`` are cut
into pieces of ``max_packet`` words. :class:`LinkRx` delivers {data, first, last, dest, src,
type}.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

CRC32_POLY = 0xEDB88320  # IEEE 802.3, reflected
CRC32_INIT = 0xFFFFFFFF
CRC32_XOROUT = 0xFFFFFFFF
NAK_BITS = 2


def _positive_int(name: str, value: object, minimum: int = 1) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
        raise ValueError(f"{name} must be an integer of at least {minimum}, not {value!r}")


@dataclass(frozen=True, kw_only=True)
class LinkParams:
    """Parameters of one link port.

    Parameters
    ----------
    width : datapath width in bits: one flit crosses the lane per cycle, and one payload word
        per cycle enters and leaves the user side (so the flit size is the datapath width).
        A multiple of 8.
    credits : receive-buffer depth in payload words (one credit per word); at least
        ``max_packet``.
    max_packet : longest packet in payload words.
    replay_depth : transmit replay-buffer depth in payload words; at least ``max_packet``.
    ack_timeout : cycles without acknowledgement progress, while packets are outstanding,
        after which the transmitter replays.
    node_bits : width of the destination and source node fields of the header.
    """

    width: int = 64
    credits: int = 32
    max_packet: int = 16
    replay_depth: int = 64
    ack_timeout: int = 512
    node_bits: int = 4

    def __post_init__(self):
        _positive_int("width", self.width, 8)
        if self.width % 8:
            raise ValueError(f"width must be a multiple of 8, not {self.width!r}")
        _positive_int("max_packet", self.max_packet)
        _positive_int("credits", self.credits)
        if self.credits < self.max_packet:
            raise ValueError(f"credits must be at least max_packet ({self.max_packet}), "
                             f"not {self.credits!r}")
        _positive_int("replay_depth", self.replay_depth)
        if self.replay_depth < self.max_packet:
            raise ValueError(f"replay_depth must be at least max_packet ({self.max_packet}), "
                             f"not {self.replay_depth!r}")
        _positive_int("ack_timeout", self.ack_timeout)
        _positive_int("node_bits", self.node_bits)

    # Derived widths (one place, used by the RTL and the golden model alike).
    @property
    def seq_bits(self) -> int:
        """Sequence-number width: the window (at most ``replay_depth`` packets) fits twice."""
        return self.replay_depth.bit_length() + 1

    @property
    def len_bits(self) -> int:
        return self.max_packet.bit_length()

    @property
    def count_bits(self) -> int:
        """Width of the cumulative freed-word counter on the status lane."""
        return self.credits.bit_length() + 1

    @property
    def header_bits(self) -> int:
        return 2 + 2 * self.node_bits + self.seq_bits + self.len_bits

    @property
    def header_flits(self) -> int:
        return math.ceil(self.header_bits / self.width)

    @property
    def crc_flits(self) -> int:
        return math.ceil(32 / self.width)

    @property
    def status_fields_bits(self) -> int:
        return self.seq_bits + self.count_bits + NAK_BITS

    @property
    def status_bits(self) -> int:
        return self.status_fields_bits + 32

    def header_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "type": 2,
            "dest": self.node_bits,
            "src": self.node_bits,
            "seq": self.seq_bits,
            "length": self.len_bits,
        })

    def status_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "ack": self.seq_bits,
            "freed": self.count_bits,
            "nak": NAK_BITS,
        })

    def tx_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "data": self.width, "last": 1, "dest": self.node_bits, "type": 2})

    def rx_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "data": self.width, "first": 1, "last": 1,
            "dest": self.node_bits, "src": self.node_bits, "type": 2})


# --- CRC-32 as a linear map over GF(2) --------------------------------------------------------

def crc32_update_bits(state: int, value: int, nbits: int) -> int:
    """Reference: feed ``nbits`` bits of ``value`` (least significant first) into ``state``."""
    for i in range(nbits):
        bit = (value >> i) & 1
        state = (state >> 1) ^ (CRC32_POLY if (state ^ bit) & 1 else 0)
    return state


@cache
def crc32_masks(nbits: int) -> tuple[tuple[int, int], ...]:
    """For each of the 32 next-state bits: (state mask, data mask) whose parity gives it."""
    cols_state = [crc32_update_bits(1 << j, 0, nbits) for j in range(32)]
    cols_data = [crc32_update_bits(0, 1 << j, nbits) for j in range(nbits)]
    masks = []
    for i in range(32):
        ms = sum(1 << j for j, col in enumerate(cols_state) if (col >> i) & 1)
        md = sum(1 << j for j, col in enumerate(cols_data) if (col >> i) & 1)
        masks.append((ms, md))
    return tuple(masks)


def crc32_next(state, value, nbits: int):
    """Amaranth expression of the CRC-32 state after ``nbits`` bits of ``value``."""
    bits = []
    for ms, md in crc32_masks(nbits):
        bits.append((state & Const(ms, 32)).xor() ^ (value & Const(md, nbits)).xor())
    return Cat(*bits)


def _ceil_log2(n: int) -> int:
    return max(1, (n - 1).bit_length())


# --- Lane signatures ---------------------------------------------------------------------------

def flit_signature(params: LinkParams) -> wiring.Signature:
    """Flit lane, transmitter's view."""
    return wiring.Signature({
        "valid": Out(1), "first": Out(1), "last": Out(1), "data": Out(params.width)})


def status_signature(params: LinkParams) -> wiring.Signature:
    """Status lane, receiver's view."""
    return wiring.Signature({"valid": Out(1), "data": Out(params.status_bits)})


def _in_window(x, base, limit_bits: int):
    """(x - base) modulo 2**limit_bits, as an unsigned value."""
    return (x - base)[:limit_bits]


class TxState(enum.Enum, shape=2):
    IDLE = 0
    HEADER = 1
    PAYLOAD = 2
    CRC = 3


class LinkTx(wiring.Component):
    """Transmitter: replay buffer, framing, CRC generation, credits, go-back-N replay.

    Ports: ``sink`` (user stream in), ``node_id`` (this node, the header's source field),
    ``flits`` (flit lane out), ``status`` (status lane in), ``replay`` (high for one cycle
    when a replay is decided).
    """

    def __init__(self, params: LinkParams):
        if not isinstance(params, LinkParams):
            raise TypeError(f"params must be a LinkParams, not {params!r}")
        self.params = params
        super().__init__({
            "sink": In(stream.Signature(params.tx_layout())),
            "node_id": In(params.node_bits),
            "flits": Out(flit_signature(params)),
            "status": In(status_signature(params)),
            "replay": Out(1),
        })

    def elaborate(self, platform):
        p = self.params
        m = Module()
        w, sb, lb, cb = p.width, p.seq_bits, p.len_bits, p.count_bits
        ra = _ceil_log2(p.replay_depth)
        pw = ra + 1
        hdr_layout = p.header_layout()

        rmem = Memory(shape=w, depth=2 ** ra, init=[])
        desc_layout = data.StructLayout({
            "start": pw, "length": lb, "dest": p.node_bits, "type": 2})
        dmem = Memory(shape=desc_layout, depth=2 ** sb, init=[])
        m.submodules.rmem = rmem
        m.submodules.dmem = dmem
        r_wr = rmem.write_port()
        r_rd = rmem.read_port(domain="comb")
        d_wr = dmem.write_port()
        d_send = dmem.read_port(domain="comb")
        d_ack = dmem.read_port(domain="comb")

        # --- status lane in: check the CRC, keep the last good word -------------------------
        st_layout = p.status_layout()
        st_in = self.status.data[:p.status_fields_bits]
        st_crc = self.status.data[p.status_fields_bits:]
        st_ok = Signal()
        m.d.comb += st_ok.eq(crc32_next(Const(CRC32_INIT, 32), st_in, p.status_fields_bits)
                             == (st_crc ^ CRC32_XOROUT))
        st = Signal(st_layout)
        with m.If(self.status.valid & st_ok):
            m.d.sync += st.eq(st_in)

        # --- user side into the replay buffer -----------------------------------------------
        wr_ptr = Signal(pw)
        ack_ptr = Signal(pw)
        in_seq = Signal(sb)
        in_len = Signal(lb)     # words of the packet being written so far
        occupancy = Signal(pw)
        m.d.comb += [
            occupancy.eq(wr_ptr - ack_ptr),
            self.sink.ready.eq(occupancy < p.replay_depth),
        ]
        beat = self.sink.payload
        ends = Signal()
        m.d.comb += ends.eq(beat.last | (in_len == p.max_packet - 1))
        m.d.comb += [
            r_wr.addr.eq(wr_ptr[:ra]),
            r_wr.data.eq(beat.data),
            d_wr.addr.eq(in_seq),
            d_wr.data.start.eq(wr_ptr - in_len),
            d_wr.data.length.eq(in_len + 1),
            d_wr.data.dest.eq(beat.dest),
            d_wr.data.type.eq(beat.type),
        ]
        with m.If(self.sink.valid & self.sink.ready):
            m.d.comb += r_wr.en.eq(1)
            m.d.sync += wr_ptr.eq(wr_ptr + 1)
            with m.If(ends):
                m.d.comb += d_wr.en.eq(1)
                m.d.sync += [in_seq.eq(in_seq + 1), in_len.eq(0)]
            with m.Else():
                m.d.sync += in_len.eq(in_len + 1)

        # --- acknowledgements, credits, NAK and timeout ---------------------------------------
        ack_seq = Signal(sb)
        send_seq = Signal(sb)
        used = Signal(cb)
        nak_seen = Signal(NAK_BITS)
        timer = Signal(range(p.ack_timeout + 1))
        state = Signal(TxState)
        acked = Signal()
        m.d.comb += [
            acked.eq(st.ack != ack_seq),
            d_ack.addr.eq(st.ack - 1),
            d_send.addr.eq(send_seq),
        ]
        with m.If(acked):
            m.d.sync += [
                ack_seq.eq(st.ack),
                ack_ptr.eq(d_ack.data.start + d_ack.data.length),
            ]
        credits_free = Signal(range(p.credits + 1))
        m.d.comb += credits_free.eq(p.credits - (used - st.freed)[:cb])

        outstanding = Signal()
        m.d.comb += outstanding.eq((send_seq != ack_seq) | (state != TxState.IDLE))
        timed_out = Signal()
        m.d.comb += timed_out.eq(timer == p.ack_timeout)
        want_replay = Signal()
        m.d.comb += want_replay.eq((st.nak != nak_seen) | timed_out)

        # --- framing state machine ------------------------------------------------------------
        cur_seq = Signal(sb)
        cur_len = Signal(lb)
        cur_dest = Signal(p.node_bits)
        cur_type = Signal(2)
        cur_ptr = Signal(pw)
        count = Signal(range(max(p.header_flits, p.crc_flits, p.max_packet) + 1))
        crc = Signal(32)

        header = Signal(hdr_layout)
        m.d.comb += [
            header.type.eq(cur_type), header.dest.eq(cur_dest), header.src.eq(self.node_id),
            header.seq.eq(cur_seq), header.length.eq(cur_len),
        ]
        hdr_flits = Signal(p.header_flits * w)
        m.d.comb += hdr_flits.eq(header.as_value())
        crc_out = Signal(p.crc_flits * w)
        m.d.comb += crc_out.eq(crc ^ CRC32_XOROUT)
        m.d.comb += r_rd.addr.eq(cur_ptr[:ra])

        flit = self.flits
        with m.Switch(state):
            with m.Case(TxState.HEADER):
                m.d.comb += [flit.valid.eq(1), flit.first.eq(count == 0)]
                with m.Switch(count):
                    for k in range(p.header_flits):
                        with m.Case(k):
                            m.d.comb += flit.data.eq(hdr_flits.word_select(k, w))
            with m.Case(TxState.PAYLOAD):
                m.d.comb += [flit.valid.eq(1), flit.data.eq(r_rd.data)]
            with m.Case(TxState.CRC):
                m.d.comb += [flit.valid.eq(1), flit.last.eq(count == p.crc_flits - 1)]
                with m.Switch(count):
                    for k in range(p.crc_flits):
                        with m.Case(k):
                            m.d.comb += flit.data.eq(crc_out.word_select(k, w))

        with m.If((state == TxState.HEADER) | (state == TxState.PAYLOAD)):
            m.d.sync += crc.eq(crc32_next(crc, flit.data, w))

        with m.Switch(state):
            with m.Case(TxState.HEADER):
                m.d.sync += count.eq(count + 1)
                with m.If(count == p.header_flits - 1):
                    m.d.sync += [state.eq(TxState.PAYLOAD), count.eq(0)]
            with m.Case(TxState.PAYLOAD):
                m.d.sync += [count.eq(count + 1), cur_ptr.eq(cur_ptr + 1)]
                with m.If(count == cur_len - 1):
                    m.d.sync += [state.eq(TxState.CRC), count.eq(0)]
            with m.Case(TxState.CRC):
                m.d.sync += count.eq(count + 1)
                with m.If(count == p.crc_flits - 1):
                    m.d.sync += [state.eq(TxState.IDLE), count.eq(0)]

        boundary = Signal()
        m.d.comb += boundary.eq((state == TxState.IDLE)
                                | ((state == TxState.CRC) & (count == p.crc_flits - 1)))
        start = Signal()
        do_replay = Signal()
        m.d.comb += [
            do_replay.eq(boundary & want_replay),
            start.eq(boundary & ~want_replay & (send_seq != in_seq)
                     & (credits_free >= d_send.data.length)),
            self.replay.eq(do_replay),
        ]
        with m.If(start):
            m.d.sync += [
                state.eq(TxState.HEADER), count.eq(0), crc.eq(CRC32_INIT),
                cur_seq.eq(send_seq), cur_len.eq(d_send.data.length),
                cur_dest.eq(d_send.data.dest), cur_type.eq(d_send.data.type),
                cur_ptr.eq(d_send.data.start),
                used.eq(used + d_send.data.length),
            ]
        with m.If(do_replay):
            m.d.sync += nak_seen.eq(st.nak)

        # Next packet to send: the next one, or back to the oldest unacknowledged on a replay;
        # never behind what the receiver has already acknowledged.
        send_next = Signal(sb)
        with m.If(do_replay):
            m.d.comb += send_next.eq(st.ack)
        with m.Elif(start):
            m.d.comb += send_next.eq(send_seq + 1)
        with m.Else():
            m.d.comb += send_next.eq(send_seq)
        with m.If(_in_window(st.ack, ack_seq, sb) > _in_window(send_next, ack_seq, sb)):
            m.d.sync += send_seq.eq(st.ack)
        with m.Else():
            m.d.sync += send_seq.eq(send_next)

        with m.If(acked | do_replay | ~outstanding):
            m.d.sync += timer.eq(0)
        with m.Elif(~timed_out):
            m.d.sync += timer.eq(timer + 1)
        return m


class LinkRx(wiring.Component):
    """Receiver: deframing, CRC check, receive buffer with commit/rollback, status lane.

    Ports: ``flits`` (flit lane in), ``source`` (user stream out), ``status`` (status lane
    out), ``dropped`` (high for one cycle when a packet is discarded).
    """

    def __init__(self, params: LinkParams):
        if not isinstance(params, LinkParams):
            raise TypeError(f"params must be a LinkParams, not {params!r}")
        self.params = params
        super().__init__({
            "flits": In(flit_signature(params)),
            "source": Out(stream.Signature(params.rx_layout())),
            "status": Out(status_signature(params)),
            "dropped": Out(1),
        })

    def elaborate(self, platform):
        p = self.params
        m = Module()
        w, sb, cb = p.width, p.seq_bits, p.count_bits
        H, C = p.header_flits, p.crc_flits
        ba = _ceil_log2(p.credits)
        pw = ba + 1
        hdr_layout = p.header_layout()
        word_layout = data.StructLayout({
            "data": w, "last": 1, "dest": p.node_bits, "src": p.node_bits, "type": 2})
        bmem = Memory(shape=word_layout, depth=2 ** ba, init=[])
        m.submodules.bmem = bmem
        b_wr = bmem.write_port()
        b_rd = bmem.read_port(domain="comb")

        wp = Signal(pw)      # speculative write pointer
        wc = Signal(pw)      # committed write pointer
        rd = Signal(pw)
        expected = Signal(sb)
        freed = Signal(cb)
        nak = Signal(NAK_BITS)
        in_error = Signal()

        # --- deframing ------------------------------------------------------------------------
        f = self.flits
        pos = Signal(range(H + C + 1))          # flits seen in this packet, saturating at H+C
        hdr_reg = Signal(H * w)
        delay = [Signal(w, name=f"delay{i}") for i in range(C)]   # delay[0] is the oldest
        crc = Signal(32)
        hdr = Signal(hdr_layout)

        # The header of this packet, including a header flit arriving now.
        idx = Signal(range(H + C + 1))
        m.d.comb += idx.eq(pos)
        with m.If(f.first):
            m.d.comb += idx.eq(0)
        hdr_now = Signal(H * w)
        m.d.comb += hdr_now.eq(hdr_reg)
        with m.Switch(idx):
            for k in range(H):
                with m.Case(k):
                    parts = [hdr_reg.word_select(j, w) if j != k else f.data for j in range(H)]
                    m.d.comb += hdr_now.eq(Cat(*parts))
        m.d.comb += hdr.eq(hdr_now[:p.header_bits])

        crc_base = Signal(32)
        m.d.comb += crc_base.eq(Const(CRC32_INIT, 32))
        with m.If(~f.first):
            m.d.comb += crc_base.eq(crc)
        is_hdr = Signal()
        pops = Signal()       # a flit leaves the delay line as payload
        m.d.comb += [
            is_hdr.eq(f.valid & (idx < H)),
            pops.eq(f.valid & (idx >= H + C)),
        ]
        crc_in = Signal(w)
        m.d.comb += crc_in.eq(Mux(is_hdr, f.data, delay[0]))
        crc_next = Signal(32)
        m.d.comb += crc_next.eq(crc_base)
        with m.If(is_hdr | pops):
            m.d.comb += crc_next.eq(crc32_next(crc_base, crc_in, w))
        with m.If(f.valid):
            m.d.sync += [
                crc.eq(crc_next),
                hdr_reg.eq(hdr_now),
                pos.eq(Mux(idx == H + C, idx, idx + 1)),
            ]
            with m.If(idx >= H):
                m.d.sync += delay[-1].eq(f.data)
                for i in range(C - 1):
                    m.d.sync += delay[i].eq(delay[i + 1])

        wp_next = Signal(pw)
        m.d.comb += [
            b_wr.addr.eq(wp[:ba]),
            b_wr.en.eq(pops),
            b_wr.data.data.eq(delay[0]),
            b_wr.data.last.eq(f.last),
            b_wr.data.dest.eq(hdr.dest),
            b_wr.data.src.eq(hdr.src),
            b_wr.data.type.eq(hdr.type),
            wp_next.eq(wp + pops),
        ]

        # --- end of packet: check and commit or roll back -------------------------------------
        received_crc = Signal(C * w)
        tail = [delay[i] for i in range(1, C)] + [f.data]
        m.d.comb += received_crc.eq(Cat(*tail))
        words = Signal(pw)
        m.d.comb += words.eq(wp_next - wc)
        crc_good = Signal()
        length_good = Signal()
        m.d.comb += [
            crc_good.eq((crc_next ^ CRC32_XOROUT) == received_crc[:32]),
            length_good.eq((hdr.length == words) & (words != 0)),
        ]
        if C * w > 32:
            m.d.comb += crc_good.eq(((crc_next ^ CRC32_XOROUT) == received_crc[:32])
                                    & (received_crc[32:] == 0))
        behind = Signal()
        dist = Signal(sb)
        m.d.comb += [
            dist.eq(hdr.seq - expected),
            behind.eq(dist >= 2 ** (sb - 1)),
        ]
        end = Signal()
        good = Signal()
        m.d.comb += [
            end.eq(f.valid & f.last),
            good.eq(crc_good & length_good & (dist == 0)),
        ]
        discard = Signal(pw)
        pop_out = Signal()
        with m.If(end & good):
            m.d.sync += [wc.eq(wp_next), wp.eq(wp_next), expected.eq(expected + 1),
                         in_error.eq(0)]
        with m.Elif(end):
            m.d.comb += [discard.eq(words), self.dropped.eq(1)]
            m.d.sync += wp.eq(wc)
            # A clean duplicate (sequence number behind) is harmless; anything else opens an
            # error episode, signalled once by a new NAK epoch.
            with m.If(~(crc_good & length_good & behind) & ~in_error):
                m.d.sync += [in_error.eq(1), nak.eq(nak + 1)]
        with m.Else():
            m.d.sync += wp.eq(wp_next)

        # --- user side out --------------------------------------------------------------------
        first = Signal(init=1)
        src = self.source
        m.d.comb += [
            b_rd.addr.eq(rd[:ba]),
            src.valid.eq(rd != wc),
            src.payload.data.eq(b_rd.data.data),
            src.payload.last.eq(b_rd.data.last),
            src.payload.first.eq(first),
            src.payload.dest.eq(b_rd.data.dest),
            src.payload.src.eq(b_rd.data.src),
            src.payload.type.eq(b_rd.data.type),
            pop_out.eq(src.valid & src.ready),
        ]
        with m.If(pop_out):
            m.d.sync += [rd.eq(rd + 1), first.eq(b_rd.data.last)]
        m.d.sync += freed.eq(freed + pop_out + discard)

        # --- status lane out ------------------------------------------------------------------
        fields = Signal(p.status_layout())
        m.d.comb += [fields.ack.eq(expected), fields.freed.eq(freed), fields.nak.eq(nak)]
        st_crc = Signal(32)
        m.d.comb += st_crc.eq(crc32_next(Const(CRC32_INIT, 32), fields.as_value(),
                                         p.status_fields_bits) ^ CRC32_XOROUT)
        m.d.comb += [
            self.status.valid.eq(1),
            self.status.data.eq(Cat(fields.as_value(), st_crc)),
        ]
        return m


class LinkPort(wiring.Component):
    """One chip's port: a transmitter and a receiver sharing a node id.

    ``flits_out`` and ``status_out`` go to the far end (its ``flits_in`` and ``status_in``):
    the flits of this port's transmitter, and the status of this port's receiver.
    """

    def __init__(self, params: LinkParams):
        if not isinstance(params, LinkParams):
            raise TypeError(f"params must be a LinkParams, not {params!r}")
        self.params = params
        super().__init__({
            "sink": In(stream.Signature(params.tx_layout())),
            "source": Out(stream.Signature(params.rx_layout())),
            "node_id": In(params.node_bits),
            "flits_out": Out(flit_signature(params)),
            "flits_in": In(flit_signature(params)),
            "status_out": Out(status_signature(params)),
            "status_in": In(status_signature(params)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.tx = tx = LinkTx(self.params)
        m.submodules.rx = rx = LinkRx(self.params)
        wiring.connect(m, wiring.flipped(self.sink), tx.sink)
        wiring.connect(m, rx.source, wiring.flipped(self.source))
        wiring.connect(m, tx.flits, wiring.flipped(self.flits_out))
        wiring.connect(m, wiring.flipped(self.flits_in), rx.flits)
        wiring.connect(m, rx.status, wiring.flipped(self.status_out))
        wiring.connect(m, wiring.flipped(self.status_in), tx.status)
        m.d.comb += tx.node_id.eq(self.node_id)
        return m


__all__ = ["LinkParams", "LinkTx", "LinkRx", "LinkPort", "crc32_next", "crc32_update_bits",
           "crc32_masks", "flit_signature", "status_signature"]
