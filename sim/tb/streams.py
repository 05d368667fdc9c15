"""Valid/ready stream driver and monitor for cocotb benches, bound to a port prefix.

One model of a stream for every bench (in the manner of cocotbext-axi's AXI-Stream source,
sink and monitor, whose ``tdata``/``tvalid``/``tready`` naming Amaranth's ports do not follow):

- :class:`StreamBus` finds a stream's ports by prefix: Amaranth's ``<prefix>__valid``,
  ``<prefix>__ready``, ``<prefix>__payload``, or hand-named ports ``<prefix>_valid``,
  ``<prefix>_ready`` and one ``<prefix>_<field>`` per payload field.
- :class:`StreamSource` drives beats from a queue; :class:`StreamSink` takes them under
  backpressure; :class:`StreamMonitor` only watches the handshake. A beat is an ``int`` on a
  bus with one payload field, a ``dict`` of field values on one with several.
- Idle cycles and backpressure come from pause generators (an iterator of booleans, one per
  cycle, True: pause): :func:`random_pause` and :func:`no_pause`; :data:`PAUSES` names the
  combinations every stream test runs with.
- :func:`nothing_left_over` is the end-of-test check: every queued beat was sent and every
  received beat was taken by the checker.

Handshake: the driving side updates its outputs just after a rising edge, reads the other
side's at ``ReadOnly`` of that step, and counts a transfer where both valid and ready are
high (the edge that follows takes it). A source keeps a beat and ``valid`` until the beat is
taken, as the stream protocol requires; a pause only delays the next beat.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Iterator

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

__all__ = [
    "PAUSES",
    "StreamBus",
    "StreamMonitor",
    "StreamSink",
    "StreamSource",
    "no_pause",
    "nothing_left_over",
    "random_pause",
]

#: (idle probability of a source, stall probability of a sink): a stream test runs under each.
PAUSES = {"free": (0.0, 0.0), "idle": (0.3, 0.0), "backpressure": (0.0, 0.3),
          "both": (0.3, 0.3)}


def no_pause() -> Iterator[bool]:
    """Never pause."""
    while True:
        yield False


def random_pause(rng: random.Random, probability: float) -> Iterator[bool]:
    """Pause each cycle with ``probability``, drawn from ``rng`` (seeded by the bench)."""
    if not 0.0 <= probability < 1.0:
        raise ValueError(f"probability must be in [0, 1), not {probability!r}")
    while True:
        yield rng.random() < probability


class StreamBus:
    """The handles of one stream: ``valid``, ``ready`` and the payload fields by name."""

    def __init__(self, valid, ready, fields: dict):
        if not fields:
            raise ValueError("fields must name at least one payload port")
        self.valid, self.ready, self.fields = valid, ready, dict(fields)

    @classmethod
    def from_prefix(cls, dut, prefix: str, fields: Iterable[str] = ("payload",)) -> StreamBus:
        """The stream ``prefix`` of ``dut``: ``<prefix>__<name>`` (Amaranth) where the DUT has
        ``<prefix>__valid``, else ``<prefix>_<name>``."""
        sep = "__" if hasattr(dut, f"{prefix}__valid") else "_"

        def port(name):
            try:
                return getattr(dut, f"{prefix}{sep}{name}")
            except AttributeError:
                raise AttributeError(f"{dut._name} has no port {prefix}{sep}{name} (stream "
                                     f"{prefix!r}, fields {', '.join(fields)})") from None

        return cls(port("valid"), port("ready"), {f: port(f) for f in fields})

    def read(self):
        """The payload now: an int for one field, else a dict of ints."""
        values = {name: int(h.value) for name, h in self.fields.items()}
        return next(iter(values.values())) if len(values) == 1 else values

    def write(self, beat) -> None:
        if len(self.fields) == 1:
            next(iter(self.fields.values())).value = beat
            return
        if not isinstance(beat, dict) or set(beat) != set(self.fields):
            raise ValueError(f"beat must be a dict of {', '.join(self.fields)}, not {beat!r}")
        for name, h in self.fields.items():
            h.value = beat[name]


class _Clocked:
    """The one coroutine that runs every stream end of a clock: after each rising edge it
    lets each end drive its outputs, and at ``ReadOnly`` of that step lets each end sample.

    One coroutine for all ends, rather than one each, wakes the simulator's scheduler twice a
    cycle however many streams a bench has, and reads each reset once a cycle. An end added
    or stopped while the clock runs takes effect from the next rising edge."""

    _groups: dict = {}

    def __init__(self, clock):
        self.ends: list[_End] = []
        self._task = cocotb.start_soon(self._run(clock))

    @classmethod
    def join(cls, end: _End) -> None:
        group = cls._groups.get(end.clock)
        if group is None or group._task.done():     # none yet, or ended with its cocotb test
            group = cls._groups[end.clock] = cls(end.clock)
        group.ends.append(end)
        end._group = group

    def leave(self, end: _End) -> None:
        self.ends.remove(end)

    async def _run(self, clock):
        edge, read_only = RisingEdge(clock), ReadOnly()
        while True:
            await edge
            ends = list(self.ends)
            resets: dict = {}
            for end in ends:
                reset = end.reset
                if reset is None:
                    end._rise(False)
                    continue
                if reset not in resets:
                    resets[reset] = int(reset.value) == 1
                end._rise(resets[reset])
            await read_only
            for end in ends:
                if end._group is self:
                    end._sample()


class _End:
    def __init__(self, bus: StreamBus, clock, reset=None, pause: Iterator[bool] | None = None):
        self.bus, self.clock, self.reset = bus, clock, reset
        self.pause = pause if pause is not None else no_pause()
        self._in_reset = False
        self._group: _Clocked | None = None
        _Clocked.join(self)

    def stop(self) -> None:
        """Stop driving and watching the stream (from the next rising edge)."""
        if self._group is not None:
            self._group.leave(self)
            self._group = None


class StreamSource(_End):
    """Drives queued beats onto a stream; ``send`` queues, ``sent`` counts transfers."""

    def __init__(self, bus: StreamBus, clock, reset=None, pause: Iterator[bool] | None = None):
        self.queue: deque = deque()
        self.sent = 0
        self._valid = self._shown = False      # a beat is held; what valid shows
        bus.valid.value = 0
        super().__init__(bus, clock, reset, pause)

    def send(self, beats: Iterable) -> None:
        self.queue.extend(beats)

    @property
    def idle(self) -> bool:
        """Nothing left to send."""
        return not self.queue

    def _rise(self, in_reset: bool) -> None:
        if in_reset:
            self._valid = False
        elif not self._valid and self.queue and not next(self.pause):
            self.bus.write(self.queue[0])
            self._valid = True
        if self._valid != self._shown:
            self._shown = self._valid
            self.bus.valid.value = int(self._valid)

    def _sample(self) -> None:
        if self._valid and int(self.bus.ready.value):
            self.queue.popleft()
            self.sent += 1
            self._valid = False


class StreamMonitor(_End):
    """Records every transfer of a stream, driving nothing; ``received`` is the queue the
    checker takes beats from."""

    def __init__(self, bus: StreamBus, clock, reset=None, pause: Iterator[bool] | None = None):
        self.received: deque = deque()
        self.count = 0
        super().__init__(bus, clock, reset, pause)

    def _rise(self, in_reset: bool) -> None:
        self._in_reset = in_reset

    def _ready(self) -> bool:
        return bool(int(self.bus.ready.value))

    def _sample(self) -> None:
        if not self._in_reset and int(self.bus.valid.value) and self._ready():
            self.received.append(self.bus.read())
            self.count += 1

    def take(self, n: int | None = None) -> list:
        """The beats received and not yet taken (at most ``n``), oldest first."""
        n = len(self.received) if n is None else min(n, len(self.received))
        return [self.received.popleft() for _ in range(n)]


class StreamSink(StreamMonitor):
    """Takes beats off a stream, holding ``ready`` low on the cycles its pause generator
    says (backpressure)."""

    def __init__(self, bus: StreamBus, clock, reset=None, pause: Iterator[bool] | None = None):
        self._driven = False
        bus.ready.value = 0
        super().__init__(bus, clock, reset, pause)

    def _rise(self, in_reset: bool) -> None:
        self._in_reset = in_reset
        ready = not in_reset and not next(self.pause)
        if ready != self._driven:
            self._driven = ready
            self.bus.ready.value = int(ready)

    def _ready(self) -> bool:
        return self._driven


def nothing_left_over(*ends) -> None:
    """The end-of-test check: every source sent its whole queue and the checker took every
    beat every monitor or sink received. Raises AssertionError naming what was left."""
    left = []
    for end in ends:
        if isinstance(end, StreamSource) and end.queue:
            left.append(f"{len(end.queue)} beats not sent (sent {end.sent})")
        elif isinstance(end, StreamMonitor) and end.received:
            left.append(f"{len(end.received)} beats received and not checked, first "
                        f"{end.received[0]!r}")
    if left:
        raise AssertionError("left over at the end of the test: " + "; ".join(left))
