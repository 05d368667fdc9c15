# amaranth: UnusedElaboratable=no
# (Amaranth's documented lint option: the elaboratables made here for their signatures are
# emitted apart, as modules of their own, and never elaborated where they are made.)
"""The NeuronCore: SBUF and PSUM, one sequencer per instruction stream, hardware semaphores,
the DMA engine on an AXI4 port, the tensor, vector, scalar (activation) and GpSimd engines,
and a host port.

Sized by :class:`~hdl.core.params.CoreParams` (:func:`hdl.params.core_params`, full or
simulation scale):

* **SBUF**: ``partitions`` banks of ``sbuf_bytes`` each, as one ``amaranth.lib.memory`` whose
  row holds the 32-bit word at one address of every partition, with byte enables (so an
  engine reads a word of every partition in one cycle, the DMA one partition's word).
  **PSUM**: likewise, ``psum_bytes`` per partition (``psum_banks`` banks of accumulation).
* **Streams** (:attr:`NeuronCore.streams`): ``tensor``, ``vector``, ``scalar``, ``gpsimd``
  and the DMA queues ``dma0`` ..; each its :class:`~hdl.core.sequencer.Sequencer`, a ring of
  ``instructions`` words that the host feeds while a longer stream runs, an instance of one
  module (:data:`SEQUENCER_MODULE`). The
  engines: :mod:`hdl.core.tensor`, :mod:`hdl.core.engines` (vector), :mod:`hdl.core.scalar`,
  and for GpSimd a second vector engine (the element-wise operations and memsets it shares
  with the vector engine, and ``Iota``); each engine is a module emitted once
  (:class:`~hdl.emitted.Emitted`).
* **Semaphores**: ``semaphores`` counters of 32 bits (the width of ``SemWait.value``),
  cleared at start; a signal adds its count the cycle after it issues,
  several signals in one cycle add up.
* **Host port**: word reads (data the cycle after the address) and writes at the addresses
  of :class:`HostMap`: control and status, stream lengths, instruction memories,
  per-instruction cycle stamps, and SBUF and PSUM (read while the core is stopped).
* **Deadlock**: status bit ``deadlock`` is set when every running stream waits on a
  semaphore that no running stream can signal any more.
"""

from __future__ import annotations

from collections.abc import Callable

from amaranth.hdl import (
    Array,
    Cat,
    Const,
    Module,
    Mux,
    Signal,
)
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hdl.core.dma import AxiSignature, Dma
from hdl.core.engines import VectorEngine
from hdl.core.isa import WORD_BITS
from hdl.core.params import CoreParams
from hdl.core.scalar import ScalarEngine
from hdl.core.sequencer import CHUNK_BITS, COUNT_BITS, Sequencer
from hdl.core.tensor import TensorEngine, second_read
from hdl.core.timing import StreamRule
from hdl.emitted import Emitted, module_text
from hdl.vector.lanes import add_lane

__all__ = ["HostMap", "NeuronCore"]

HOST_BITS = 32
#: The module of the core's vector engine, which the GpSimd engine instantiates too.
VECTOR_MODULE = "neuron_core_vector_engine"
GPSIMD_MODULE = "neuron_core_gpsimd_engine"
SCALAR_MODULE = "neuron_core_scalar_engine"
TENSOR_MODULE = "neuron_core_tensor_engine"
SEMAPHORE_MODULE = "neuron_core_semaphore"
SEQUENCER_MODULE = "neuron_core_sequencer"
#: The groups of :meth:`NeuronCore.modules`, in order.
DEPENDENCY_GROUPS = ("tensor", "vector", "gpsimd", "scalar", "semaphore", "sequencer")
#: The engines' instruction streams, in host-port order (the DMA queues follow).
ENGINE_STREAMS = ("tensor", "vector", "scalar", "gpsimd")


def _bits(n: int) -> int:
    return max(1, (n - 1).bit_length())


class HostMap:
    """Word addresses of the host port of a core of ``params``: region in the top four
    bits, then the region's fields.

    Registers (region 0): ``START`` (write: start every stream from instruction 0),
    ``STATUS`` (bit 0 running, bit 1 deadlock), ``CYCLES`` (cycles since start),
    ``length(s)`` and ``loaded(s)`` (write: the stream's instructions and those written to
    its ring so far), ``pc(s)`` (the instructions retired), ``waiting(s)`` (bit 0 waiting,
    bits 8.. the semaphore). ``imem(s, i, chunk)`` and ``stamp(s, i, end)`` address slot
    ``i`` of the stream's ring (:class:`~hdl.core.sequencer.Sequencer`).
    """

    REGS, IMEM, STAMP, SBUF, PSUM = range(5)
    START, STATUS, CYCLES = 0, 1, 2

    def __init__(self, params: CoreParams):
        self.streams = ENGINE_STREAMS + tuple(f"dma{q}" for q in range(params.dma_queues))
        self.index_bits = _bits(params.instructions)
        self.chunks = WORD_BITS // CHUNK_BITS
        self.sbuf_words = params.sbuf_bytes // 4
        self.psum_words = params.psum_bytes // 4
        self.sbuf_bits = _bits(self.sbuf_words)
        self.psum_bits = _bits(self.psum_words)
        self.stream_bits = _bits(len(self.streams))
        for region, used in ((self.IMEM, self.stream_bits + self.index_bits + 5),
                             (self.SBUF, _bits(params.partitions) + self.sbuf_bits)):
            if used > HOST_BITS - 4:
                raise ValueError(f"host region {region} needs {used} address bits, more than "
                                 f"{HOST_BITS - 4}")

    @staticmethod
    def _at(region: int, offset: int) -> int:
        return region << (HOST_BITS - 4) | offset

    def reg(self, index: int) -> int:
        return self._at(self.REGS, index)

    def length(self, stream: int) -> int:
        return self._at(self.REGS, 0x100 + stream)

    def pc(self, stream: int) -> int:
        return self._at(self.REGS, 0x200 + stream)

    def waiting(self, stream: int) -> int:
        return self._at(self.REGS, 0x300 + stream)

    def loaded(self, stream: int) -> int:
        return self._at(self.REGS, 0x400 + stream)

    def imem(self, stream: int, index: int, chunk: int) -> int:
        return self._at(self.IMEM, (stream << self.index_bits | index) << 5 | chunk)

    def stamp(self, stream: int, index: int, end: bool) -> int:
        return self._at(self.STAMP, (stream << self.index_bits | index) << 1 | int(end))

    def sbuf(self, partition: int, word: int) -> int:
        return self._at(self.SBUF, partition << self.sbuf_bits | word)

    def psum(self, partition: int, word: int) -> int:
        return self._at(self.PSUM, partition << self.psum_bits | word)


class Semaphore(wiring.Component):
    """Semaphore ``index`` of a core of ``semaphores`` semaphores and ``streams`` streams,
    emitted once as :data:`SEMAPHORE_MODULE` and instantiated per semaphore: ``value``
    clears on ``start``, else adds the count (``signal_count``, 16 bits a stream) of every
    stream that signals it (``signal``, ``signal_sem``, 8 bits a stream) this cycle."""

    def __init__(self, semaphores: int, streams: int):
        self.streams = streams
        super().__init__({"index": In(range(semaphores)), "start": In(1),
                          "signal": In(streams), "signal_sem": In(8 * streams),
                          "signal_count": In(16 * streams), "value": Out(32)})

    def elaborate(self, platform):
        m = Module()
        add = 0
        for s in range(self.streams):
            hit = self.signal[s] & (self.signal_sem.word_select(s, 8) == self.index)
            add = add + hit * self.signal_count.word_select(s, 16)
        with m.If(self.start):
            m.d.sync += self.value.eq(0)
        with m.Else():
            m.d.sync += self.value.eq(self.value + add)
        return m


def host_signature() -> wiring.Signature:
    """The host port from the core's side."""
    return wiring.Signature({"addr": In(HOST_BITS), "wdata": In(HOST_BITS), "we": In(1),
                             "rdata": Out(HOST_BITS)})


class NeuronCore(wiring.Component):
    """One NeuronCore of ``params`` (see the module docstring)."""

    def __init__(self, params: CoreParams):
        if not isinstance(params, CoreParams):
            raise ValueError(f"params must be a CoreParams, not {params!r}")
        self.params = params
        self.map = HostMap(params)
        self.addr_bits = _bits(params.hbm_bytes)
        super().__init__({"host": Out(host_signature()),
                          "m_axi": Out(AxiSignature(self.addr_bits))})
        words = max(self.map.sbuf_words, self.map.psum_words)
        self.vector = Emitted(
            VectorEngine(params.partitions, words, rng=params.rng,
                         transpose=params.vector_transpose), VECTOR_MODULE)
        self.gpsimd = Emitted(
            VectorEngine(params.partitions, words, "gpsimd", rng=params.rng), GPSIMD_MODULE)
        self.scalar = Emitted(
            ScalarEngine(params.partitions, params.activation_lanes, words, params.functions,
                         params.rng), SCALAR_MODULE)
        self.tensor = Emitted(
            TensorEngine(params.partitions, params.tensor, params.formats, words), TENSOR_MODULE)

    @property
    def streams(self) -> tuple[str, ...]:
        return self.map.streams

    def unit_params(self) -> dict[str, object]:
        """The parameters of the chip's units whose modules the engines instantiate, by unit
        (as :mod:`hdl.params` maps a spec onto them): the vector engine's vector unit (its
        lane also GpSimd's and the scalar engine's), the scalar engine's activation unit,
        the tensor engine's array."""
        return {"vector": self.vector.unit.unit.params,
                "scalar": self.scalar.unit.unit.params,
                "tensor": self.tensor.unit.array}

    def taken_units(self, units: tuple[tuple[str, object], ...]) -> tuple[str, ...]:
        """Of ``units`` (the chip's units emitted beside the core: (name, parameters)
        pairs), those whose modules the engines take by name as the unit emits them: those
        whose parameters equal the engine's (:meth:`unit_params`)."""
        own = self.unit_params()
        return tuple(name for name, params in units if name in own and own[name] == params)

    def modules(self, group: str | None = None) -> dict[str, Callable[[], str]]:
        """Every module the core instantiates, each once (:data:`hdl.emitted.Modules`), by
        :data:`DEPENDENCY_GROUPS` (``group``: that group's alone, each group elaborated
        apart): the tensor engine's, the vector engine's (its unit's lane is also the GpSimd
        engine's and the scalar engine's vector unit's: same formats and generator), the
        GpSimd engine's, the scalar engine's, the semaphore, the sequencer (one module for
        every instruction stream). A name two groups give is the first's."""
        if group is None:
            modules: dict[str, Callable[[], str]] = {}
            for g in DEPENDENCY_GROUPS:
                for name, make in self.modules(g).items():
                    modules.setdefault(name, make)  # the PSUM adder is the activation unit's
            return modules
        if group not in DEPENDENCY_GROUPS:
            raise ValueError(f"group must be one of {', '.join(DEPENDENCY_GROUPS)}, "
                             f"not {group!r}")
        vector = self.vector.unit.unit.params
        for unit in (self.gpsimd.unit.unit, self.scalar.unit.alu):
            if (unit.params.formats, unit.params.rng) != (vector.formats, vector.rng):
                raise ValueError("the core's vector units must share their lane module")
        if group == "semaphore":
            semaphore = Semaphore(self.params.semaphores, len(self.streams))
            return {SEMAPHORE_MODULE: lambda: module_text(semaphore, SEMAPHORE_MODULE)}
        if group == "sequencer":
            return Emitted(Sequencer(self.params.instructions), SEQUENCER_MODULE).modules()
        shared = {"gpsimd": {"unit": False}, "scalar": {"alu": False}}.get(group, {})
        return getattr(self, group).modules(**shared)

    def taken_modules(self, group: str, units: tuple[tuple[str, object], ...]
                      ) -> tuple[str, ...]:
        """Of the modules of ``group`` (:meth:`modules`), those the core takes by name as
        the chip's unit emits them, not elaborated again: the modules of the group's
        engine's unit where that unit is one of :meth:`taken_units` (``units``)."""
        if group not in self.taken_units(units):
            return ()
        return tuple(getattr(self, group).unit.unit.modules())

    def elaborate(self, platform):
        m = Module()
        p, hm = self.params, self.map
        n = p.partitions
        host = self.host
        region = host.addr[HOST_BITS - 4:]
        offset = host.addr[:HOST_BITS - 4]

        # --- sequencers, control and semaphores ---------------------------------------------
        start = Signal()
        running, deadlock = Signal(), Signal()
        cycles = Signal(32)
        seqs = []
        for s, name in enumerate(self.streams):
            sequencer = Sequencer(p.instructions)
            m.submodules[f"seq_{name}"] = seq = Emitted(sequencer, SEQUENCER_MODULE)
            seqs.append(seq)
            length = Signal(COUNT_BITS, name=f"length_{name}")
            loaded = Signal(COUNT_BITS, name=f"loaded_{name}")
            with m.If(host.we & (host.addr == hm.length(s))):
                m.d.sync += length.eq(host.wdata)
            with m.If(host.we & (host.addr == hm.loaded(s))):
                m.d.sync += loaded.eq(host.wdata)
            m.d.comb += [
                seq.load_en.eq(host.we & (region == hm.IMEM)
                               & (offset[5 + hm.index_bits:] == s)),
                seq.load_index.eq(offset[5:5 + hm.index_bits]),
                seq.load_chunk.eq(offset[:5]),
                seq.load_data.eq(host.wdata),
                seq.length.eq(length), seq.loaded.eq(loaded), seq.start.eq(start),
                seq.cycle.eq(cycles),
                seq.stamp_index.eq(offset[1:1 + hm.index_bits]),
            ]
        m.d.comb += start.eq(host.we & (host.addr == hm.reg(hm.START)) & host.wdata[0])
        any_running = Cat(*[s.running for s in seqs]).any()
        all_stuck = Cat(*[~s.running | s.waiting for s in seqs]).all()
        with m.If(start):
            m.d.sync += [cycles.eq(0), deadlock.eq(0), running.eq(1)]
        with m.Elif(running):
            m.d.sync += cycles.eq(cycles + 1)
            with m.If(~any_running & (cycles > 0)):
                m.d.sync += running.eq(0)
            with m.If(any_running & all_stuck):
                m.d.sync += [deadlock.eq(1), running.eq(0)]

        sems = Array(Signal(32, name=f"sem{k}") for k in range(p.semaphores))
        signals = {name: Signal(width * len(seqs), name=f"seq_{name}")
                   for name, width in (("signal", 1), ("signal_sem", 8), ("signal_count", 16))}
        m.d.comb += [signal.eq(Cat(*[getattr(seq, name) for seq in seqs]))
                     for name, signal in signals.items()]
        for k in range(p.semaphores):
            add_lane(m, f"sem{k}", None, SEMAPHORE_MODULE,
                     {"index": Const(k, range(p.semaphores)), "start": start, **signals},
                     {"value": sems[k]})
        for seq in seqs:
            m.d.comb += seq.wait_ok.eq(sems[seq.wait_sem] >= seq.wait_value)

        # --- memories ---------------------------------------------------------------------
        m.submodules.dma = dma = Dma(p.dma_queues, n, hm.sbuf_words, self.addr_bits)
        wiring.connect(m, wiring.flipped(self.m_axi), dma.axi)
        m.submodules.vector = vec = self.vector
        m.submodules.scalar = sca = self.scalar
        m.submodules.tensor = ten = self.tensor
        m.submodules.gpsimd = gps = self.gpsimd
        for engine, seq in zip((ten, vec, sca, gps), seqs, strict=False):
            m.d.comb += [engine.issue.eq(seq.issue), engine.word.eq(seq.word),
                         seq.done.eq(engine.done)]
        for kind, seq in zip(ENGINE_STREAMS, seqs, strict=False):
            if kind != "tensor":  # the array's schedule is the tensor engine's time
                m.submodules[f"rule_{kind}"] = rule = StreamRule(p, kind)
                m.d.comb += [rule.word.eq(seq.word), seq.least.eq(rule.cycles)]
        for q in range(p.dma_queues):
            seq = seqs[len(ENGINE_STREAMS) + q]
            m.d.comb += [dma.issue[q].eq(seq.issue), dma.word[q].eq(seq.word),
                         seq.done.eq(dma.done[q])]

        # SBUF and PSUM: one row of every partition's 32-bit word per address, byte enables
        m.submodules.sbuf = sbuf = Memory(shape=32 * n, depth=hm.sbuf_words, init=[])
        m.submodules.psum = psum = Memory(shape=32 * n, depth=hm.psum_words, init=[])
        dma_rpart = Signal.like(dma.sbuf.rpart)
        m.d.sync += dma_rpart.eq(dma.sbuf.rpart)
        d_r = sbuf.read_port()
        m.d.comb += [d_r.addr.eq(dma.sbuf.raddr), d_r.en.eq(dma.sbuf.ren),
                     dma.sbuf.rdata.eq(d_r.data.word_select(dma_rpart, 32))]
        # byte enables as whole rows: a partition mask's bit p is bytes 4p .. 4p + 3
        def bytes_of(mask):
            return Cat(*[mask[part].replicate(4) for part in range(n)])

        d_w = sbuf.write_port(granularity=8)
        m.d.comb += [d_w.addr.eq(dma.sbuf.waddr), d_w.data.eq(dma.sbuf.wdata.replicate(n)),
                     d_w.en.eq(dma.sbuf.wen.replicate(n)
                               & bytes_of((Const(1, n) << dma.sbuf.wpart)[:n]))]
        host_data = {}
        for name, mem, words in (("sbuf", sbuf, hm.sbuf_words), ("psum", psum, hm.psum_words)):
            h = mem.read_port()
            m.d.comb += h.addr.eq(offset[:_bits(words)])
            host_data[name] = h.data
        for name, engine, port in (("tensor", ten, "r"), ("tensor", ten, "q"),
                                   ("vector", vec, "a"), ("vector", vec, "b"),
                                   ("scalar", sca, "r"), ("gpsimd", gps, "a"),
                                   ("gpsimd", gps, "b")):
            addr, en = getattr(engine, f"{port}_addr"), getattr(engine, f"{port}_en")
            is_psum = Signal(name=f"{name}_{port}_psum")
            with m.If(en):
                m.d.sync += is_psum.eq(getattr(engine, f"{port}_psum"))
            rs, rp = sbuf.read_port(), psum.read_port()
            m.d.comb += [rs.addr.eq(addr), rs.en.eq(en), rp.addr.eq(addr), rp.en.eq(en),
                         getattr(engine, f"{port}_data").eq(Mux(is_psum, rp.data, rs.data))]
        if second_read(p.tensor):  # MX scales, a double row's pair 1: SBUF only
            rs = sbuf.read_port()
            m.d.comb += [rs.addr.eq(ten.s_addr), rs.en.eq(ten.s_en), ten.s_data.eq(rs.data)]
        for name, engine in (("tensor", ten), ("vector", vec), ("scalar", sca),
                             ("gpsimd", gps)):
            enables = Signal(4 * n, name=f"{name}_w_en")
            m.d.comb += enables.eq(engine.w_be.replicate(n) & bytes_of(engine.w_part))
            for mem, is_psum in ((sbuf, 0), (psum, 1)):
                w = mem.write_port(granularity=8)
                m.d.comb += [w.addr.eq(engine.w_addr), w.data.eq(engine.w_data),
                             w.en.eq(Mux(engine.w_psum == is_psum, enables, 0))]

        # --- host reads -------------------------------------------------------------------
        h_region = Signal(4)
        h_offset = Signal(HOST_BITS - 4)
        m.d.sync += [h_region.eq(region), h_offset.eq(offset)]
        regs = Signal(HOST_BITS)
        with m.Switch(host.addr):
            with m.Case(hm.reg(hm.STATUS)):
                m.d.sync += regs.eq(Cat(running, deadlock))
            with m.Case(hm.reg(hm.CYCLES)):
                m.d.sync += regs.eq(cycles)
            for s, seq in enumerate(seqs):
                with m.Case(hm.pc(s)):
                    m.d.sync += regs.eq(seq.pc)
                with m.Case(hm.waiting(s)):
                    m.d.sync += regs.eq(Cat(seq.waiting, Const(0, 7), seq.wait_sem))
        stamp_stream = h_offset[1 + hm.index_bits:1 + hm.index_bits + hm.stream_bits]
        stamps = Array(seq.stamp for seq in seqs)[stamp_stream]
        part_s = h_offset[hm.sbuf_bits:hm.sbuf_bits + _bits(n)]
        part_p = h_offset[hm.psum_bits:hm.psum_bits + _bits(n)]
        with m.Switch(h_region):
            with m.Case(hm.REGS):
                m.d.comb += host.rdata.eq(regs)
            with m.Case(hm.STAMP):
                m.d.comb += host.rdata.eq(stamps.word_select(h_offset[0], 32))
            with m.Case(hm.SBUF):
                m.d.comb += host.rdata.eq(host_data["sbuf"].word_select(part_s, 32))
            with m.Case(hm.PSUM):
                m.d.comb += host.rdata.eq(host_data["psum"].word_select(part_p, 32))
        return m
