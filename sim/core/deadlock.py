"""Deadlock: every unfinished stream waiting, reported with the wait graph
(:func:`diagnose`)."""

from __future__ import annotations

from hdl.core.isa import SemSignal

from .rules import fail

__all__ = ["diagnose"]


def diagnose(streams, code, pc, blocked, sems) -> None:
    """Raise the :class:`~sim.core.rules.ProgramError` of a deadlock: the
    ``blocked`` streams (indices into ``streams``) wait at their ``pc`` in ``code``,
    ``sems`` the visible times of each semaphore's increments. The message names
    each wait, the count it is at and the streams that still signal it."""
    edges = []
    for s in blocked:
        ins = code[s][pc[s]]
        signallers = sorted({streams[o] for o in range(len(streams))
                             for later in code[o][pc[o]:]
                             if isinstance(later, SemSignal) and later.sem == ins.sem})
        by = ("signalled later by " + ", ".join(signallers) if signallers
              else "nothing left signals it")
        edges.append(f"{streams[s]}[{pc[s]}] waits for S[{ins.sem}] to reach {ins.value} "
                     f"(at {len(sems.get(ins.sem, ()))}; {by})")
    s = blocked[0]
    fail(streams[s], pc[s], code[s][pc[s]], "deadlock",
         "every unfinished stream waits: " + "; ".join(edges))
