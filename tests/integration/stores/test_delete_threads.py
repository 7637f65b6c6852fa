"""delete_threads attacked: the limit, the order, the status filter, the time bound, a live run.

``delete_threads`` promises to delete at most ``limit`` threads, the least
recently updated first, only those updated strictly before ``updated_before``,
and never one a live run holds, even when that thread is the oldest, matches
the filter, or is held from another process. Threads are made one after
another so each has its own ``updated_at``; their ids sort against their
age, so an order by id cannot pass for an order by time.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from ilmek import (
    START,
    Checkpointer,
    CompiledGraph,
    ConcurrentUpdateError,
    IlmekError,
    Result,
    ThreadBusyError,
    channel,
    graph,
    run,
)
from tests.support.stores import STEADY_LEASE, Store, execute, rows_of, store_fixture  # noqa: F401 - the store fixture

pytestmark = pytest.mark.timeout(90)


def quick_graph() -> CompiledGraph:
    """One node, one write: a run of it leaves the thread ``done``."""
    return (
        graph("quick", {"log": channel.append()})
        .node("n", lambda state: {"log": ["x"]})
        .edge(START, "n")
        .compile()
    )


def make_threads(checkpointer: Checkpointer, thread_ids: Sequence[str]) -> None:
    """Run each thread to ``done``, in the order given, each updated after the one before."""
    for thread_id in thread_ids:
        time.sleep(0.005)
        assert "done" == run(quick_graph(), {}, thread_id=thread_id, checkpointer=checkpointer).status
    stamps = [checkpointer.get_thread(t).updated_at for t in thread_ids]  # type: ignore[union-attr]
    assert sorted(stamps) == stamps
    assert len(set(stamps)) == len(stamps)


def ids(checkpointer: Checkpointer) -> set[str]:
    """Every thread the store still has."""
    return {info.id for info in checkpointer.list_threads()}


class HeldRun:
    """A run of ``thread_id`` whose node waits until released: a live run holds the thread meanwhile."""

    def __init__(self, checkpointer: Checkpointer, thread_id: str) -> None:
        self.inside, self.release = threading.Event(), threading.Event()
        self.outcome: list[Result | BaseException] = []

        def wait(state: dict[str, Any]) -> dict[str, Any]:
            self.inside.set()
            assert self.release.wait(30)
            return {"log": ["held"]}

        self.graph = graph("held", {"log": channel.append()}).node("wait", wait).edge(START, "wait").compile()

        def go() -> None:
            try:
                self.outcome.append(run(self.graph, {}, thread_id=thread_id, checkpointer=checkpointer))
            except BaseException as error:
                self.outcome.append(error)

        self.runner = threading.Thread(target=go)

    def __enter__(self) -> HeldRun:
        self.runner.start()
        assert self.inside.wait(30), "the held run never reached its node"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release.set()
        self.runner.join(30)

    def finish(self) -> Result | BaseException:
        """Let the node return; how the run ended."""
        self.release.set()
        self.runner.join(30)
        assert not self.runner.is_alive()
        [outcome] = self.outcome
        return outcome


# --- on every backend --------------------------------------------------------------------------------


def test_limit_deletes_exactly_that_many_oldest_first_never_the_running_one(
    checkpointer: Checkpointer,
) -> None:
    """The oldest thread is held by a run: limit=2 deletes the next two oldest, then 0, 1, the rest."""
    with HeldRun(checkpointer, "a-held") as held:
        make_threads(checkpointer, ["t4", "t3", "t2", "t1", "t0"])  # t4 the oldest after a-held
        assert checkpointer.get_thread("a-held").running  # type: ignore[union-attr]

        assert 2 == checkpointer.delete_threads(limit=2)
        assert {"a-held", "t2", "t1", "t0"} == ids(checkpointer)
        assert 0 == checkpointer.delete_threads(limit=0)
        assert {"a-held", "t2", "t1", "t0"} == ids(checkpointer)
        assert 1 == checkpointer.delete_threads(limit=1)
        assert {"a-held", "t1", "t0"} == ids(checkpointer)
        assert 2 == checkpointer.delete_threads(limit=50)
        assert {"a-held"} == ids(checkpointer)
        assert 0 == checkpointer.delete_threads()
        assert 0 == checkpointer.delete_threads(limit=1)
        outcome = held.finish()
    assert isinstance(outcome, Result)
    assert "done" == outcome.status
    assert {"log": ["held"]} == outcome.state
    assert 1 == checkpointer.delete_threads(limit=1)
    assert set() == ids(checkpointer)


def test_limit_counts_only_threads_the_filters_match(checkpointer: Checkpointer) -> None:
    """limit with status=: the two oldest *done* threads go, not the older failed ones."""

    def fails(state: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("no")

    failing = graph("fails", {"log": channel.append()}).node("n", fails).edge(START, "n").compile()
    for thread_id in ("e1", "e0"):
        assert "error" == run(failing, {}, thread_id=thread_id, checkpointer=checkpointer).status
    make_threads(checkpointer, ["d2", "d1", "d0"])
    assert 2 == checkpointer.delete_threads(status="done", limit=2)
    assert {"e1", "e0", "d0"} == ids(checkpointer)
    assert 2 == checkpointer.delete_threads(status="error", limit=5)
    assert {"d0"} == ids(checkpointer)


def test_status_running_deletes_nothing(checkpointer: Checkpointer) -> None:
    """status='running' with a run holding a thread: 0 deleted, with or without other filters."""
    make_threads(checkpointer, ["old-1", "old-0"])
    with HeldRun(checkpointer, "held") as held:
        everything = ids(checkpointer)
        assert {"old-1", "old-0", "held"} == everything
        assert ["held"] == [i.id for i in checkpointer.list_threads(status="running")]
        assert 0 == checkpointer.delete_threads(status="running")
        assert 0 == checkpointer.delete_threads(status="running", limit=10)
        assert 0 == checkpointer.delete_threads(status="running", updated_before=time.time() + 3600)
        # The held thread is "unfinished" while its node runs: that filter must still spare it.
        assert "unfinished" == checkpointer.get_thread("held").status  # type: ignore[union-attr]
        assert 0 == checkpointer.delete_threads(status="unfinished")
        assert everything == ids(checkpointer)
        outcome = held.finish()
    assert "done" == getattr(outcome, "status", outcome)
    assert 0 == checkpointer.delete_threads(status="running")
    assert {"old-1", "old-0", "held"} == ids(checkpointer)


def test_updated_before_is_a_strict_bound(checkpointer: Checkpointer) -> None:
    """A thread updated exactly at the bound stays; one microsecond later it goes. As datetime and epoch."""
    order = ["t5", "t4", "t3", "t2", "t1", "t0"]
    make_threads(checkpointer, order)
    third = checkpointer.get_thread("t3")
    assert third is not None
    assert 2 == checkpointer.delete_threads(updated_before=third.updated_at)
    assert {"t3", "t2", "t1", "t0"} == ids(checkpointer)
    for thread_id in order[2:]:
        info = checkpointer.get_thread(thread_id)
        assert info is not None
        at = info.updated_at
        assert 0 == checkpointer.delete_threads(updated_before=at), f"{thread_id} updated at {at} deleted"
        assert 0 == checkpointer.delete_threads(updated_before=at.timestamp())
        assert 0 == checkpointer.delete_threads(updated_before=at - _dt.timedelta(microseconds=1))
        assert checkpointer.get_thread(thread_id) is not None
        assert 1 == checkpointer.delete_threads(updated_before=at + _dt.timedelta(microseconds=1))
        assert checkpointer.get_thread(thread_id) is None
    assert set() == ids(checkpointer)


def test_updated_before_and_limit_together(checkpointer: Checkpointer) -> None:
    """Both filters: at most limit threads, all from before the bound, oldest first."""
    make_threads(checkpointer, ["t4", "t3", "t2", "t1", "t0"])
    # Between t2 and t1: the bound's exactness is the test above's business.
    t2, t1 = (checkpointer.get_thread(t).updated_at for t in ("t2", "t1"))  # type: ignore[union-attr]
    bound = t2 + (t1 - t2) / 2
    assert 2 == checkpointer.delete_threads(updated_before=bound, limit=2)
    assert {"t2", "t1", "t0"} == ids(checkpointer)
    assert 1 == checkpointer.delete_threads(updated_before=bound, limit=2)
    assert {"t1", "t0"} == ids(checkpointer)


@pytest.mark.parametrize("stored", [1_700_000_000.1234567, 1_700_000_000.1234563])
def test_a_bound_equal_to_the_reported_time_keeps_a_thread_stored_below_the_microsecond(
    store: Store, stored: float
) -> None:
    """updated_at stored as time.time() writes it (below the microsecond): the reported moment is no bound.

    get_thread reports the time to the microsecond; passing that moment back as
    updated_before must not delete the thread (it was not updated before it),
    whichever way the microsecond was rounded.
    """
    checkpointer = store.open()
    make_threads(checkpointer, ["t"])
    execute(store, f"UPDATE ilmek_threads SET updated_at = {stored!r} WHERE thread_id = 't'")
    at = checkpointer.get_thread("t").updated_at  # type: ignore[union-attr]
    assert _dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=_dt.UTC) < at
    assert 0 == checkpointer.delete_threads(updated_before=at)
    assert 0 == checkpointer.delete_threads(updated_before=at.timestamp())
    assert {"t"} == ids(checkpointer)
    assert 1 == checkpointer.delete_threads(updated_before=at + _dt.timedelta(microseconds=1))
    assert set() == ids(checkpointer)


# --- a run in another process holds a thread --------------------------------------------------------


@pytest.fixture
def two(store: Store) -> tuple[Checkpointer, Checkpointer]:
    """Two checkpointers on one SQLite file or Postgres database: a worker and an operator.

    Their lease is long: these tests race deletes against live runs, and a
    lease a loaded machine lets lapse (a renewal starved past it) would end a
    run for a reason that is not the delete.
    """
    return store.open(lease_seconds=STEADY_LEASE), store.open(lease_seconds=STEADY_LEASE)


def test_delete_threads_from_another_process_spares_the_held_thread_and_the_run_finishes(
    store: Store, two: tuple[Checkpointer, Checkpointer]
) -> None:
    """A run holds one thread; another checkpointer deletes every thread: the held one survives whole."""
    worker, operator = two
    make_threads(worker, ["gone-2", "gone-1", "gone-0"])
    with HeldRun(worker, "held") as held:
        before = rows_of(store, "held")
        assert 3 == operator.delete_threads()
        assert 0 == operator.delete_threads(updated_before=time.time() + 3600)
        assert {"held"} == ids(operator)
        assert before == rows_of(store, "held")
        info = operator.get_thread("held")
        assert info is not None
        assert info.running
        for thread_id in ("gone-2", "gone-1", "gone-0"):
            assert {
                "threads": 0,
                "checkpoints": 0,
                "blobs": 0,
                "logs": 0,
                "journals": 0,
                "holds": 0,
                "items": 0,
            } == rows_of(store, thread_id)
        outcome = held.finish()
    assert isinstance(outcome, Result), outcome
    assert "done" == outcome.status
    assert {"log": ["held"]} == outcome.state
    info = operator.get_thread("held")
    assert info is not None
    assert ("done", False) == (info.status, info.running)
    assert 2 == len(operator.list("held"))
    # No longer held: now it goes too.
    assert 1 == operator.delete_threads()
    assert set() == ids(operator)


def test_delete_threads_with_a_limit_from_another_process_skips_the_held_oldest(
    two: tuple[Checkpointer, Checkpointer],
) -> None:
    """The held thread is the oldest: limit=1 from the other process deletes the oldest *unheld* one."""
    worker, operator = two
    with HeldRun(worker, "held") as held:
        make_threads(worker, ["t1", "t0"])
        assert 1 == operator.delete_threads(limit=1)
        assert {"held", "t0"} == ids(operator)
        outcome = held.finish()
    assert "done" == getattr(outcome, "status", outcome)


# --- delete_idle_thread: one thread, never while a live run holds it ---------------------------------


def test_delete_idle_thread_refuses_a_held_thread_then_deletes_it_once_the_run_ends(
    checkpointer: Checkpointer,
) -> None:
    """Held: ThreadBusyError naming the thread, nothing deleted, the run finishes; then it goes."""
    make_threads(checkpointer, ["other"])
    with HeldRun(checkpointer, "held") as held:
        with pytest.raises(ThreadBusyError) as refused:
            checkpointer.delete_idle_thread("held")
        assert "held" == refused.value.thread_id
        assert {"other", "held"} == ids(checkpointer)
        outcome = held.finish()
    assert isinstance(outcome, Result), outcome
    assert ("done", {"log": ["held"]}) == (outcome.status, outcome.state)
    checkpointer.delete_idle_thread("held")
    assert {"other"} == ids(checkpointer)
    assert [] == checkpointer.list("held")
    checkpointer.delete_idle_thread("held")  # already gone: no error
    checkpointer.delete_idle_thread("never-was")


def test_delete_idle_thread_from_another_process_leaves_every_row_of_the_held_thread(
    store: Store, two: tuple[Checkpointer, Checkpointer]
) -> None:
    """The hold lives in the database: another checkpointer is refused and every row stays, then all go."""
    worker, operator = two
    with HeldRun(worker, "held") as held:
        before = rows_of(store, "held")
        with pytest.raises(ThreadBusyError):
            operator.delete_idle_thread("held")
        assert before == rows_of(store, "held")
        outcome = held.finish()
    assert "done" == getattr(outcome, "status", outcome)
    operator.delete_idle_thread("held")
    assert {"threads": 0, "checkpoints": 0, "blobs": 0, "logs": 0, "journals": 0, "holds": 0, "items": 0} == (
        rows_of(store, "held")
    )


def test_delete_idle_thread_racing_runs_never_pulls_a_thread_from_under_a_run(
    two: tuple[Checkpointer, Checkpointer],
) -> None:
    """Runs and deletes of one thread, over and over: no run ever loses its thread mid-run.

    A delete that checked "not running" and then deleted could land after a
    run's first write (which takes the hold) and before its last, and that
    run would fail at its next write. Here a run may only lose the race before
    its first node starts (ConcurrentUpdateError, nothing written) or find the
    delete holding the thread (ThreadBusyError); any other end fails the test,
    a read that met the delete halfway (values gone under a checkpoint it had
    just read, which once read as corrupt data) included. For ten seconds.
    """
    worker, operator = two
    started = threading.Event()  # the run's input is written and its hold taken

    def first(state: dict[str, Any]) -> dict[str, Any]:
        started.set()
        time.sleep(0.002)
        return {"log": ["a"]}

    def second(state: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.002)
        return {"log": ["b"]}

    chain = (
        graph("chain", {"log": channel.append()})
        .node("a", first)
        .node("b", second)
        .edge(START, "a")
        .edge("a", "b")
        .compile()
    )
    ends: dict[str, int] = {"done": 0, "lost before holding": 0, "busy": 0}
    failures: list[BaseException] = []
    stop = threading.Event()

    def runs() -> None:
        while not stop.is_set():
            started.clear()
            try:
                result = run(chain, {"log": ["in"]}, thread_id="race", checkpointer=worker)
            except (ConcurrentUpdateError, ThreadBusyError) as error:
                if started.is_set():
                    failures.append(error)  # the thread went from under a run that held it
                    return
                ends["busy" if isinstance(error, ThreadBusyError) else "lost before holding"] += 1
            except BaseException as error:
                failures.append(error)
                return
            else:
                assert ["in", "a", "b"] == result.state["log"][-3:]
                ends["done"] += 1

    runner = threading.Thread(target=runs)
    runner.start()
    deleted = 0
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not failures:
            time.sleep(0.001)  # leave the runner its turns (SQLite takes one writer at a time)
            try:
                operator.delete_idle_thread("race")
            except ThreadBusyError:
                continue
            deleted += 1
    finally:
        stop.set()
        runner.join(30)
    assert [] == failures
    assert ends["done"] > 0, (ends, deleted)
    assert deleted > 0, (ends, deleted)


def test_a_run_whose_thread_is_deleted_under_it_says_so_and_writes_nothing_more(
    checkpointer: Checkpointer,
) -> None:
    """delete_thread (the forced delete) mid-run: the run fails naming the thread and the deletion."""
    with HeldRun(checkpointer, "doomed") as held:
        checkpointer.delete_thread("doomed")
        outcome = held.finish()
    assert isinstance(outcome, IlmekError), outcome
    assert "'doomed'" in str(outcome)
    assert "deleted" in str(outcome)
    assert "doomed" not in ids(checkpointer)
    assert [] == checkpointer.list("doomed")
