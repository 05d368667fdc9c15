"""The shared event engine (sim/core/events.py) against hand-worked schedules."""

from __future__ import annotations

import pytest

from sim.core.events import Agenda, Resources


def test_agenda_pops_in_time_order_ties_by_process():
    a = Agenda(4)
    for t, p in ((3.0, 0), (1.0, 3), (1.0, 1), (2.0, 2)):
        a.wake(t, p)
    assert [a.pop() for _ in range(5)] == [(1.0, 1, 1), (1.0, 3, 1), (2.0, 2, 1), (3.0, 0, 1), None]


def test_a_later_wake_up_supersedes_the_pending_one():
    a = Agenda(2)
    a.wake(5.0, 0)
    a.wake(1.0, 1)
    a.wake(2.0, 0)  # earlier than the pending 5.0: only 2.0 stays
    a.wake(9.0, 1)  # later than the pending 1.0: only 9.0 stays
    assert [a.pop() for _ in range(3)] == [(2.0, 0, 2), (9.0, 1, 2), None]


def test_resources_serve_first_come_first_served():
    r = Resources()
    # link: uses arriving at 0, 1 and 10, each 4 long -> start 0, 4 (queued), 10 (idle)
    assert [r.serve("link", t, 4.0) for t in (0.0, 1.0, 10.0)] == [0.0, 4.0, 10.0]
    assert r.free["link"] == 14.0
    assert r.busy["link"] == 12.0


def test_a_use_of_several_resources_waits_for_the_last_to_free():
    r = Resources()
    r.serve("a", 0.0, 3.0)
    r.serve("b", 0.0, 7.0)
    assert r.serve_all(("a", "b"), 1.0, 2.0) == 7.0
    assert r.free == {"a": 9.0, "b": 9.0}
    assert r.busy == {"a": 5.0, "b": 9.0}
    assert r.serve_all((), 4.0, 1.0) == 4.0  # nothing shared: starts when it arrives


@pytest.mark.parametrize("n", [1, 50])
def test_agenda_runs_a_chain_of_operations_as_a_hand_worked_pipeline(n):
    """n chunks through two links in series, each 2 long on the first and 3 on the second
    (the slower): the last arrives at 2 + 3 n, the bottleneck's pipeline figure."""
    agenda, res = Agenda(2 * n), Resources()
    for c in range(n):
        agenda.wake(0.0, c)
    end = 0.0
    while (woken := agenda.pop()) is not None:
        t, op, _ = woken
        if op < n:
            agenda.wake(res.serve("first", t, 2.0) + 2.0, n + op)
        else:
            end = max(end, res.serve("second", t, 3.0) + 3.0)
    assert end == 2.0 + 3.0 * n
