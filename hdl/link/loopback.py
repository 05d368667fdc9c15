"""Two link ports back to back through a lossy, delaying channel, with traffic in hardware.

Simulation fixture for the link (never part of a chip): :class:`LinkChannel` delays both lanes
by ``latency`` cycles and flips one data bit of a flit or status word with a set probability;
:class:`LinkLoopback` joins a transmitter and a receiver through it and adds, in hardware, a
traffic generator on the transmitter's user side and a checker on the receiver's, both driven
by xorshift32 generators whose seeds are ports. So a testbench runs thousands of packets with
one ``await`` and reads counters at the end; :mod:`sim.golden.link` mirrors the generators.

xorshift32: ``x ^= x << 13; x ^= x >> 17; x ^= x << 5`` (32 bits). A coin with threshold
``thr`` (0..256) comes up when ``(x & 0xff) < thr``; every coin generator steps once a cycle
while ``run`` is high. Packet lengths are ``len_min + (x & len_mask)`` from a generator that
steps once per packet; the first packet uses the seed itself. Words carry a running count;
a packet's dest and type are the low bits of the packet count.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.link.link import LinkParams, LinkRx, LinkTx, flit_signature, status_signature

TX_NODE = 5


def xorshift32(x):
    """Amaranth expression of one xorshift32 step."""
    a = (x ^ (x << 13))[:32]
    b = a ^ (a >> 17)
    return (b ^ (b << 5))[:32]


class _Lfsr:
    def __init__(self, m: Module, name: str, seed, run):
        self.state = Signal(32, name=name)
        with m.If(run):
            m.d.sync += self.state.eq(xorshift32(self.state))
        with m.Else():
            m.d.sync += self.state.eq(seed)

    def coin(self, thr):
        return self.state[:8] < thr


class LinkChannel(wiring.Component):
    """Both lanes of a link, delayed by ``latency`` cycles, with random single-bit flips.

    A valid flit (status word) has one bit flipped when the lane's 32-bit generator value is
    below ``flit_flip_thr`` (``status_flip_thr``); the bit index is taken from the next
    generator value. The framing delimiters (valid, first, last) pass untouched.
    """

    def __init__(self, params: LinkParams, latency: int):
        if not (isinstance(latency, int) and latency >= 1):
            raise ValueError(f"latency must be an integer of at least 1, not {latency!r}")
        self.params = params
        self.latency = latency
        super().__init__({
            "tx_flits": In(flit_signature(params)),
            "rx_flits": Out(flit_signature(params)),
            "rx_status": In(status_signature(params)),
            "tx_status": Out(status_signature(params)),
            "run": In(1),
            "seed_flit": In(32),
            "seed_status": In(32),
            "flit_flip_thr": In(32),
            "status_flip_thr": In(32),
        })

    def _flip(self, m, name, data, valid, seed, thr, width):
        gen = _Lfsr(m, name, seed, self.run)
        nxt = xorshift32(gen.state)
        index = ((nxt[:16] * width) >> 16)[:max(1, (width - 1).bit_length())]
        hit = valid & (gen.state < thr) & self.run
        return Mux(hit, data ^ (1 << index)[:width], data)

    def elaborate(self, platform):
        p = self.params
        m = Module()
        f = self.tx_flits
        flit = Cat(f.valid, f.first, f.last,
                   self._flip(m, "flit_gen", f.data, f.valid, self.seed_flit,
                              self.flit_flip_thr, p.width))
        s = self.rx_status
        status = Cat(s.valid, self._flip(m, "status_gen", s.data, s.valid, self.seed_status,
                                         self.status_flip_thr, p.status_bits))
        for _ in range(self.latency):
            f_reg = Signal(len(flit))
            s_reg = Signal(len(status))
            m.d.sync += [f_reg.eq(flit), s_reg.eq(status)]
            flit, status = f_reg, s_reg
        o = self.rx_flits
        t = self.tx_status
        m.d.comb += [
            Cat(o.valid, o.first, o.last, o.data).eq(flit),
            Cat(t.valid, t.data).eq(status),
        ]
        return m


class LinkLoopback(wiring.Component):
    """Transmitter -> channel -> receiver, with a hardware traffic generator and checker.

    With ``ext`` high the user sides are the ``ext_*`` and ``out_*`` ports instead (for a
    testbench driver and monitor). Counters stop when ``cycles`` reaches ``stop_at``;
    ``window_words`` counts the words delivered from cycle ``warmup`` on. A nonzero
    ``corrupt_at`` flips bit 0 of the ``corrupt_at``-th delivered word on its way to the
    checker: a fault after the receiver, which no CRC sees, to show the checker catches it.
    """

    def __init__(self, params: LinkParams, latency: int):
        self.params = params
        self.latency = latency
        nb = params.node_bits
        super().__init__({
            "run": In(1), "ext": In(1),
            "seed_len": In(32), "seed_valid": In(32), "seed_ready": In(32),
            "seed_flit": In(32), "seed_status": In(32),
            "len_min": In(16), "len_mask": In(16),
            "valid_thr": In(9), "ready_thr": In(9),
            "flit_flip_thr": In(32), "status_flip_thr": In(32),
            "stop_at": In(32), "warmup": In(32), "corrupt_at": In(32),
            "ext_valid": In(1), "ext_ready": Out(1), "ext_data": In(params.width),
            "ext_last": In(1), "ext_dest": In(nb), "ext_type": In(2),
            "out_valid": Out(1), "out_ready": In(1), "out_data": Out(params.width),
            "out_first": Out(1), "out_last": Out(1), "out_dest": Out(nb), "out_src": Out(nb),
            "out_type": Out(2),
            "cycles": Out(32), "words": Out(32), "packets": Out(32), "mismatches": Out(32),
            "replays": Out(32), "drops": Out(32), "flits": Out(32), "window_words": Out(32),
        })

    def elaborate(self, platform):
        p = self.params
        nb = p.node_bits
        m = Module()
        m.submodules.tx = tx = LinkTx(p)
        m.submodules.rx = rx = LinkRx(p)
        m.submodules.channel = ch = LinkChannel(p, self.latency)
        wiring.connect(m, tx.flits, ch.tx_flits)
        wiring.connect(m, ch.rx_flits, rx.flits)
        wiring.connect(m, rx.status, ch.rx_status)
        wiring.connect(m, ch.tx_status, tx.status)
        m.d.comb += [
            tx.node_id.eq(TX_NODE % 2 ** nb),
            ch.run.eq(self.run), ch.seed_flit.eq(self.seed_flit),
            ch.seed_status.eq(self.seed_status), ch.flit_flip_thr.eq(self.flit_flip_thr),
            ch.status_flip_thr.eq(self.status_flip_thr),
        ]
        counting = Signal()
        m.d.comb += counting.eq(self.run & (self.cycles < self.stop_at))
        with m.If(counting):
            m.d.sync += self.cycles.eq(self.cycles + 1)

        # --- traffic generator ----------------------------------------------------------------
        def lengths(name):
            gen = Signal(32, name=name)
            length = Signal(17, name=f"{name}_length")
            m.d.comb += length.eq(self.len_min + (gen[:16] & self.len_mask))
            return gen, length

        g_len_state, g_len = lengths("gen_len")
        g_valid_gen = _Lfsr(m, "gen_valid", self.seed_valid, self.run)
        g_valid = Signal()
        g_word = Signal(p.width)
        g_pos = Signal(17)
        g_pkt = Signal(32)
        g_last = Signal()
        m.d.comb += g_last.eq(g_pos == g_len - 1)
        sink = tx.sink
        g_acc = Signal()
        m.d.comb += g_acc.eq(g_valid & sink.ready & ~self.ext)
        with m.If(~self.run):
            m.d.sync += [g_len_state.eq(self.seed_len), g_valid.eq(0)]
        with m.Else():
            with m.If(~g_valid | g_acc):
                m.d.sync += g_valid.eq(g_valid_gen.coin(self.valid_thr))
            with m.If(g_acc):
                m.d.sync += [g_word.eq(g_word + 1), g_pos.eq(g_pos + 1)]
                with m.If(g_last):
                    m.d.sync += [g_pos.eq(0), g_pkt.eq(g_pkt + 1),
                                 g_len_state.eq(xorshift32(g_len_state))]
        with m.If(self.ext):
            m.d.comb += [
                sink.valid.eq(self.ext_valid), sink.payload.data.eq(self.ext_data),
                sink.payload.last.eq(self.ext_last), sink.payload.dest.eq(self.ext_dest),
                sink.payload.type.eq(self.ext_type), self.ext_ready.eq(sink.ready),
            ]
        with m.Else():
            m.d.comb += [
                sink.valid.eq(g_valid), sink.payload.data.eq(g_word),
                sink.payload.last.eq(g_last), sink.payload.dest.eq(g_pkt[:nb]),
                sink.payload.type.eq(g_pkt[nb:nb + 2]),
            ]

        # --- checker --------------------------------------------------------------------------
        c_len_state, c_len = lengths("chk_len")
        c_ready_gen = _Lfsr(m, "chk_ready", self.seed_ready, self.run)
        c_word = Signal(p.width)
        c_pos = Signal(17)
        c_pkt = Signal(32)
        src = rx.source
        pl = src.payload
        m.d.comb += [
            self.out_valid.eq(src.valid), self.out_data.eq(pl.data),
            self.out_first.eq(pl.first), self.out_last.eq(pl.last),
            self.out_dest.eq(pl.dest), self.out_src.eq(pl.src), self.out_type.eq(pl.type),
        ]
        with m.If(self.ext):
            m.d.comb += src.ready.eq(self.out_ready)
        with m.Else():
            m.d.comb += src.ready.eq(self.run & c_ready_gen.coin(self.ready_thr))
        pop = Signal()
        m.d.comb += pop.eq(src.valid & src.ready)
        c_last = Signal()
        m.d.comb += c_last.eq(c_pos == c_len - 1)
        checked = Signal(32)
        seen = Signal(p.width)
        m.d.comb += seen.eq(pl.data ^ ((self.corrupt_at != 0)
                                       & (checked + 1 == self.corrupt_at)))
        wrong = Signal()
        m.d.comb += wrong.eq(
            (seen != c_word) | (pl.first != (c_pos == 0)) | (pl.last != c_last)
            | (pl.dest != c_pkt[:nb]) | (pl.type != c_pkt[nb:nb + 2])
            | (pl.src != TX_NODE % 2 ** nb))
        with m.If(~self.run):
            m.d.sync += c_len_state.eq(self.seed_len)
        with m.Elif(pop & ~self.ext):
            m.d.sync += [c_word.eq(c_word + 1), c_pos.eq(c_pos + 1), checked.eq(checked + 1)]
            with m.If(c_last):
                m.d.sync += [c_pos.eq(0), c_pkt.eq(c_pkt + 1),
                             c_len_state.eq(xorshift32(c_len_state))]
        with m.If(counting):
            with m.If(pop):
                m.d.sync += self.words.eq(self.words + 1)
                with m.If(pl.last):
                    m.d.sync += self.packets.eq(self.packets + 1)
                with m.If(self.cycles >= self.warmup):
                    m.d.sync += self.window_words.eq(self.window_words + 1)
                with m.If(wrong & ~self.ext):
                    m.d.sync += self.mismatches.eq(self.mismatches + 1)
            with m.If(tx.replay):
                m.d.sync += self.replays.eq(self.replays + 1)
            with m.If(rx.dropped):
                m.d.sync += self.drops.eq(self.drops + 1)
            with m.If(tx.flits.valid):
                m.d.sync += self.flits.eq(self.flits + 1)
        return m
