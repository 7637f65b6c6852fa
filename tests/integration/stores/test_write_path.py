"""The cheaper write path, attacked where it cut corners.

A run that starts with input takes its hold in the input's commit (it reads
without it first); a superstep checks the hold in the statement that moves
the thread and extends the lease only now and then; appending to a list
claims the next index of the log instead of rewriting the log's row; a
one-task superstep of ``run()`` runs on the caller's thread. Each test below
tries to make one of those lose a write, run something twice, or take a
thread that is held, on a SQLite file and on Postgres.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from ilmek import END, START, ResumeError, ThreadBusyError, channel, graph, resume, run, stream
from ilmek.errors import CorruptCheckpointError
from ilmek.types import task_id_for
from tests.support.helpers import Calls
from tests.support.stores import LEASE, Store, execute, rows_of, store_fixture  # noqa: F401 - the store fixture

pytestmark = pytest.mark.timeout(90)


def chat(calls: Calls, pause: threading.Event | None = None) -> Any:
    """One node that counts its runs and appends a reply; it can wait on ``pause`` first."""

    def reply(state: dict[str, Any]) -> dict[str, Any]:
        calls.hit("reply")
        if pause is not None:
            pause.wait(10)
        return {"log": [f"reply to {state['log'][-1]}"]}

    return (
        graph("chat", {"log": channel.append()}).node("reply", reply).edge(START, "reply").edge("reply", END)
    )


def after_first_call(checkpointer: Any, method: str, meanwhile: Callable[[], None]) -> list[int]:
    """Make ``meanwhile`` run right after the checkpointer's first call of ``method`` returns, so
    what that call read goes stale. Returns how many calls there were: a one-item list."""
    plain = getattr(checkpointer, method)
    calls = [0]

    def then_meanwhile(*args: Any, **kwargs: Any) -> Any:
        found = plain(*args, **kwargs)
        calls[0] += 1
        if calls[0] == 1:
            meanwhile()
        return found

    setattr(checkpointer, method, then_meanwhile)
    return calls


@pytest.mark.parametrize("read", ["load", "_remembered_latest"], ids=["read", "remembered"])
def test_a_run_whose_read_went_stale_before_its_input_landed_reads_again_and_loses_nothing(
    store: Store, read: str
) -> None:
    """Another run finishes the thread between this run's read and its input's commit: the input
    lands on top of the other run's work, each node runs once per run, nothing is lost. Whether the
    run read the thread (another process wrote it last) or started from the checkpoint its own
    process last wrote, which it then finds gone stale."""
    calls = Calls()
    g = chat(calls).compile()
    checkpointer, other = store.open(), store.open()
    run(g, {"log": ["first"]}, thread_id="t", checkpointer=checkpointer if read != "load" else other)
    reads = after_first_call(
        checkpointer, read, lambda: run(g, {"log": ["meanwhile"]}, thread_id="t", checkpointer=other)
    )
    result = run(g, {"log": ["late"]}, thread_id="t", checkpointer=checkpointer)

    assert "done" == result.status
    assert [
        "first",
        "reply to first",
        "meanwhile",
        "reply to meanwhile",
        "late",
        "reply to late",
    ] == result.state["log"]
    assert {"reply": 3} == dict(calls)
    # It read again (once it held the thread, after a read; at once, after a guess).
    assert reads[0] >= (2 if read == "load" else 1)


def test_a_second_run_with_input_while_the_first_runs_is_busy_and_writes_nothing(store: Store) -> None:
    """Two runs with input on one thread at once: the second raises ThreadBusyError before any of its
    nodes runs, and its input is nowhere in the thread's history."""
    calls, pause = Calls(), threading.Event()
    g = chat(calls, pause).compile()
    first_cp, second_cp = store.open(), store.open()
    outcome: dict[str, Any] = {}
    first = threading.Thread(
        target=lambda: outcome.update(
            first=run(g, {"log": ["one"]}, thread_id="t", checkpointer=first_cp).status
        )
    )
    first.start()
    deadline = time.monotonic() + 10
    while not calls.get("reply") and time.monotonic() < deadline:
        time.sleep(0.005)
    with pytest.raises(ThreadBusyError):
        run(g, {"log": ["two"]}, thread_id="t", checkpointer=second_cp)
    pause.set()
    first.join(10)

    assert "done" == outcome["first"]
    assert {"reply": 1} == dict(calls)
    values = [value for c in second_cp.list("t") for value in c.channels.get("log", [])]
    assert "two" not in values


def test_a_stream_of_a_busy_thread_yields_nothing_before_its_thread_busy_error(store: Store) -> None:
    """The deferred hold is taken by the input's commit: a stream that cannot take it yields no event."""
    calls, pause = Calls(), threading.Event()
    g = chat(calls, pause).compile()
    first_cp, second_cp = store.open(), store.open()
    first = threading.Thread(
        target=run, args=(g, {"log": ["one"]}), kwargs={"thread_id": "t", "checkpointer": first_cp}
    )
    first.start()
    deadline = time.monotonic() + 10
    while not calls.get("reply") and time.monotonic() < deadline:
        time.sleep(0.005)
    seen: list[str] = []
    events = stream(g, {"log": ["two"]}, thread_id="t", checkpointer=second_cp)
    with pytest.raises(ThreadBusyError):
        seen.extend(event.type for event in events)
    pause.set()
    first.join(10)

    assert [] == seen


def test_many_quick_supersteps_for_three_leases_keep_the_hold_though_few_of_them_renew_it(
    store: Store,
) -> None:
    """run() of a loop whose supersteps take a few ms each, for 3 leases, while another checkpointer
    keeps trying the thread: it never gets it, and every superstep landed."""
    steps = int(LEASE * 3 / 0.004)

    started = threading.Event()

    def tick(state: dict[str, Any]) -> dict[str, Any]:
        started.set()  # the run holds the thread from here on
        time.sleep(0.004)
        return {"n": state["n"] + 1}

    g = (
        graph("ticker", {"n": channel.last_write(0)})
        .node("tick", tick)
        .edge(START, "tick")
        .router("tick", lambda s: END if s["n"] >= steps else "tick", destinations=["tick", END])
        .compile()
    )
    checkpointer, contender = store.open(), store.open()
    taken: list[str] = []
    done = threading.Event()

    def contend() -> None:
        started.wait(10)
        while not done.is_set():
            try:
                with contender.hold("ticks"):
                    latest = contender.get("ticks")
                    if latest is not None and latest.next:
                        taken.append(f"taken at n={latest.channels.get('n')}")
            except ThreadBusyError:
                pass
            time.sleep(0.01)

    watcher = threading.Thread(target=contend)
    watcher.start()
    try:
        result = run(g, {"n": 0}, thread_id="ticks", checkpointer=checkpointer, recursion_limit=steps + 5)
    finally:
        done.set()
        watcher.join()

    assert "done" == result.status
    assert steps == result.state["n"]
    assert [] == taken


def test_a_manifest_pointing_at_another_threads_log_never_appends_to_that_log(store: Store) -> None:
    """Thread b's stored manifest is forged to name thread a's list: b's next run refuses it as
    corrupt (its reads and its appends are scoped to b's own logs), and a's list is untouched."""
    calls = Calls()
    g = chat(calls).compile()
    checkpointer = store.open()
    run(g, {"log": ["a1"]}, thread_id="a", checkpointer=checkpointer)
    run(g, {"log": ["b1"]}, thread_id="b", checkpointer=checkpointer)
    latest = "SELECT max(checkpoint_id) FROM ilmek_checkpoints WHERE thread_id = '{}'"
    execute(
        store,
        "UPDATE ilmek_checkpoints SET manifest = (SELECT manifest FROM ilmek_checkpoints "
        f"WHERE checkpoint_id = ({latest.format('a')})) "
        f"WHERE thread_id = 'b' AND checkpoint_id = ({latest.format('b')})",
    )

    reader = store.open()
    with pytest.raises(CorruptCheckpointError) as refused:
        run(g, {"log": ["b2"]}, thread_id="b", checkpointer=reader)

    assert "b" == refused.value.thread_id
    a_state = store.open().get("a")
    assert a_state is not None
    assert ["a1", "reply to a1"] == a_state.channels["log"]


def test_ctrl_c_in_a_node_run_on_the_callers_thread_stops_the_program_and_frees_the_thread(
    store: Store,
) -> None:
    """KeyboardInterrupt in a node of run() (which runs it on the caller's thread) propagates, records
    nothing as the node's result, and the thread can be taken at once."""

    def interrupted(state: dict[str, Any]) -> dict[str, Any]:
        raise KeyboardInterrupt

    g = (
        graph("ctrl-c", {"log": channel.append()})
        .node("n", interrupted)
        .edge(START, "n")
        .edge("n", END)
        .compile()
    )
    checkpointer = store.open()
    with pytest.raises(KeyboardInterrupt):
        run(g, {"log": ["x"]}, thread_id="t", checkpointer=checkpointer)
    with store.open().hold("t"):
        pass  # not held any more
    latest = checkpointer.get("t")
    assert latest is not None
    assert ["n"] == [task.node for task in latest.next]  # the plan stands, to continue later


def test_steps_from_threads_a_node_starts_are_recorded_when_the_node_runs_on_the_callers_thread(
    store: Store,
) -> None:
    """run() runs the one task on the caller's thread; steps its own worker threads record must not
    wait for that (busy) thread: each is stored before it returns."""
    calls = Calls()
    checkpointer, reader = store.open(), store.open()
    seen: list[int] = []

    def fan(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        def work(n: int) -> None:
            ctx.step(f"s{n}", calls.hit, f"s{n}")
            seen.append(len(reader.get_journals([ctx.task_id])[ctx.task_id]))

        workers = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(20)
        return {"log": ["fanned"]}

    g = graph("fan", {"log": channel.append()}).node("fan", fan).edge(START, "fan").edge("fan", END).compile()
    result = run(g, {"log": ["go"]}, thread_id="t", checkpointer=checkpointer)

    assert "done" == result.status
    assert 4 == len(seen)
    assert all(count >= 1 for count in seen)
    assert {f"s{n}": 1 for n in range(4)} == dict(calls)


def test_a_branch_that_appends_where_another_branch_already_grew_the_list_keeps_both_lists(
    store: Store,
) -> None:
    """Run 3 turns, fork from the first turn's end and append there: the list's next index is taken
    by the other branch, so the branch gets a list of its own; each branch reads back exactly its
    own items, through a checkpointer with nothing cached."""
    calls = Calls()
    g = chat(calls).compile()
    checkpointer = store.open()
    first = run(g, {"log": ["one"]}, thread_id="t", checkpointer=checkpointer)
    run(g, {"log": ["two"]}, thread_id="t", checkpointer=checkpointer)
    main_branch = run(g, {"log": ["three"]}, thread_id="t", checkpointer=checkpointer)
    fork = run(
        g, {"log": ["other"]}, thread_id="t", checkpointer=checkpointer, checkpoint_id=first.checkpoint_id
    )

    fresh = store.open()
    forked = fresh.get("t", fork.checkpoint_id)
    main = fresh.get("t", main_branch.checkpoint_id)
    assert forked is not None
    assert main is not None
    assert ["one", "reply to one", "other", "reply to other"] == forked.channels["log"]
    assert [
        "one",
        "reply to one",
        "two",
        "reply to two",
        "three",
        "reply to three",
    ] == main.channels["log"]


def test_a_new_list_served_from_this_process_reads_as_the_database_holds_it(store: Store) -> None:
    """A run makes a list of values that JSON changes (a tuple, a set, a datetime...): the
    process that wrote it serves the next run from memory the very values a checkpointer with
    nothing cached reads back, and a node's later changes to its own copy leak into neither."""
    when = datetime.datetime(2026, 12, 1, 5, 0, tzinfo=datetime.UTC)
    kept: list[Any] = []

    def first(state: dict[str, Any]) -> dict[str, Any]:
        return {"log": [("a", 1), {"b": {2, 3}}, when, "plain"]}

    def second(state: dict[str, Any]) -> dict[str, Any]:
        kept.append(list(state["log"]))
        return {}

    g = (
        graph("lists", {"log": channel.append(), "turn": channel.last_write(0)})
        .node("write", lambda state: first(state) if state["turn"] == 1 else second(state))
        .edge(START, "write")
        .edge("write", END)
        .compile()
    )
    checkpointer = store.open()
    written = run(g, {"turn": 1}, thread_id="t", checkpointer=checkpointer)
    written.state["log"][1]["b"].add(99)  # the caller's copy, changed after the run
    run(g, {"turn": 2}, thread_id="t", checkpointer=checkpointer)
    fresh = store.open().get("t", written.checkpoint_id)
    assert fresh is not None
    assert [[("a", 1), {"b": {2, 3}}, when, "plain"]] == kept
    assert list(fresh.channels["log"]) == kept[0]


def test_supersteps_that_record_steps_leave_no_journal_rows_and_a_pause_keeps_its_own(store: Store) -> None:
    """A loop whose node records a step every superstep (on Postgres each superstep's commit drops
    the journal it spent, and a pause's commit records its entries, in the same call): no journal
    row outlives its superstep but a pause's, and each step ran once."""
    calls = Calls()

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        n = len(state["log"])
        ctx.step(f"effect {n}", calls.hit, f"effect {n}")
        if n == 3:
            ctx.interrupt({"q": "go on?"})
        return {"log": [f"did {n}"]}

    g = (
        graph("stepping", {"log": channel.append()})
        .node("work", work)
        .edge(START, "work")
        .router("work", lambda s: END if len(s["log"]) >= 6 else "work", destinations=["work", END])
        .compile()
    )
    checkpointer = store.open()
    paused = run(g, {"log": ["start"]}, thread_id="t", checkpointer=checkpointer)
    assert "interrupted" == paused.status
    done = resume(g, "yes", thread_id="t", checkpointer=checkpointer)
    assert "done" == done.status
    assert {f"effect {n}": 1 for n in range(1, 6)} == dict(calls)

    history = checkpointer.list("t")
    [pause] = [c for c in history if c.pending]
    journals = store.open().get_journals([task_id_for("t", c.id, "work") for c in history])
    # Only the paused superstep's (its step and pause, under its base) and the
    # answer's (under the pause) stay, readable with the pause.
    assert {task_id_for("t", pause.parent_id or "", "work"), task_id_for("t", pause.id, "work")} == {
        task_id for task_id, entries in journals.items() if entries
    }
    assert 3 == rows_of(store, "t")["journals"]  # the step and the pause; the answer


def test_values_replaced_every_superstep_read_back_the_same_without_a_cache(store: Store) -> None:
    """A loop that replaces a value and appends to a list each superstep (stored as new values and
    new items, on Postgres in one statement): a checkpointer with nothing cached reads every
    checkpoint back exactly as the run saw it."""

    def count(state: dict[str, Any]) -> dict[str, Any]:
        n = state["n"] + 1
        return {"n": n, "log": [f"item {n}"], "last": {"n": n, "label": f"step {n}"}}

    g = (
        graph(
            "counter", {"n": channel.last_write(0), "log": channel.append(), "last": channel.last_write(None)}
        )
        .node("count", count)
        .edge(START, "count")
        .router("count", lambda s: END if s["n"] >= 6 else "count", destinations=["count", END])
        .compile()
    )
    checkpointer = store.open()
    result = run(g, {"n": 0}, thread_id="t", checkpointer=checkpointer)
    assert 6 == result.state["n"]

    fresh = store.open()
    seen = {c.channels["n"]: c.channels for c in fresh.list("t") if c.channels.get("n")}
    assert set(range(1, 7)) == set(seen)
    for n, channels in seen.items():
        assert [f"item {k}" for k in range(1, n + 1)] == channels["log"]
        assert {"n": n, "label": f"step {n}"} == channels["last"]


def test_a_resume_whose_read_of_the_pause_went_stale_answers_nothing_and_charges_once(store: Store) -> None:
    """A second resume reads the pause, then the first resume answers it and finishes before the
    second records its answer: the second reads again under the hold, finds the pause it read
    answered, and raises ResumeError saying so; the charge after the pause ran once, with the first
    answer."""
    calls = Calls()

    def approve(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt({"q": "charge?"})
        ctx.step("charge", calls.hit, f"charge {answer}")
        return {"log": [answer]}

    g = graph("approve", {"log": channel.append()}).node("approve", approve).edge(START, "approve").compile()
    first_cp, second_cp = store.open(), store.open()
    assert "interrupted" == run(g, {"log": []}, thread_id="t", checkpointer=first_cp).status

    def let_the_first_resume_finish() -> None:
        assert "done" == resume(g, "yes", thread_id="t", checkpointer=first_cp).status

    after_first_call(second_cp, "load", let_the_first_resume_finish)
    with pytest.raises(ResumeError, match="already answered"):
        resume(g, "no", thread_id="t", checkpointer=second_cp)

    assert {"charge yes": 1} == dict(calls)
    latest = store.open().get("t")
    assert latest is not None
    assert ["yes"] == latest.channels["log"]


def stale_journals_resume(store: Store, calls: Calls, *, act_first: bool) -> tuple[Any, Any, str]:
    """A paused approval graph whose second checkpointer's first read of the pause's journals goes
    stale: right after it, the first resume answers "yes" (and, with ``act_first``, charges) and
    fails without moving the thread. Returns the graph, the second checkpointer and the pause's id."""
    failing = threading.Event()

    def approve(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt({"q": "charge?"})
        if failing.is_set() and not act_first:
            raise RuntimeError("the first resume's process died before the charge")
        ctx.step("charge", calls.hit, f"charge {answer}")
        if failing.is_set():
            raise RuntimeError("the first resume's process died after the charge")
        return {"log": [answer]}

    g = graph("approve", {"log": channel.append()}).node("approve", approve).edge(START, "approve").compile()
    first_cp, second_cp = store.open(), store.open()
    paused = run(g, {"log": []}, thread_id="t", checkpointer=first_cp)
    assert "interrupted" == paused.status

    def let_the_first_resume_answer_and_fail() -> None:
        failing.set()
        assert "error" == resume(g, "yes", thread_id="t", checkpointer=first_cp).status
        failing.clear()

    after_first_call(second_cp, "load_journals", let_the_first_resume_answer_and_fail)
    assert paused.checkpoint_id is not None
    return g, second_cp, paused.checkpoint_id


@pytest.mark.parametrize("act_first", [True, False], ids=["charged", "answered only"])
def test_a_resume_whose_read_of_the_journals_went_stale_never_overwrites_another_answer(
    store: Store, act_first: bool
) -> None:
    """A second resume reads the pause and its journals; before it records its answer, the first
    resume answers "yes" (and charges, or not) and fails without moving the thread. The second
    must not replace "yes" with "no", under a charge made for "yes" or not: it reads again under
    the hold and refuses as already answered; the charge ran at most once."""
    calls = Calls()
    g, second_cp, pause_id = stale_journals_resume(store, calls, act_first=act_first)

    with pytest.raises(ResumeError, match="already answered with 'yes'") as refused:
        resume(g, "no", thread_id="t", checkpointer=second_cp)

    assert repr("t") in str(refused.value)
    assert ({"charge yes": 1} if act_first else {}) == dict(calls)
    reader = store.open()
    assert pause_id == reader.get("t").id  # type: ignore[union-attr]
    # The answer that stands finishes the thread, charging only if it was not charged yet.
    assert "done" == resume(g, "yes", thread_id="t", checkpointer=reader).status
    assert {"charge yes": 1} == dict(calls)


def test_a_resume_whose_read_went_stale_with_the_same_answer_finishes_without_charging_again(
    store: Store,
) -> None:
    """As above, but the second resume answers "yes" too: it reads again under the hold, finds its
    own answer and the charge recorded, and finishes without charging again."""
    calls = Calls()
    g, second_cp, _ = stale_journals_resume(store, calls, act_first=True)

    finished = resume(g, "yes", thread_id="t", checkpointer=second_cp)

    assert "done" == finished.status
    assert ["yes"] == finished.state["log"]
    assert {"charge yes": 1} == dict(calls)


def test_an_answer_reaches_the_node_as_the_database_gives_it_back(store: Store) -> None:
    """A resume hands the node the journals its answers' write returned instead of reading them
    again: the node must see the answer as a read of the database gives it back (Postgres's
    jsonb orders an object's keys its own way), so a replay of the pause behaves the same."""
    seen: list[list[str]] = []
    failing = threading.Event()

    def approve(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt("which items?")
        seen.append(list(answer))
        if failing.is_set():
            raise RuntimeError("failed after the pause was answered")
        return {"log": [list(answer)]}

    g = graph("approve", {"log": channel.append()}).node("approve", approve).edge(START, "approve").compile()
    checkpointer = store.open()
    assert "interrupted" == run(g, {"log": []}, thread_id="t", checkpointer=checkpointer).status
    answer = {"zz": 1, "a": 2, "mm": 3, "b": 4}
    failing.set()
    assert "error" == resume(g, answer, thread_id="t", checkpointer=checkpointer).status
    failing.clear()

    reader = store.open()
    pause = reader.get("t")
    assert pause is not None
    assert pause.pending
    [stored] = [e for e in reader.load_journals(pause, ["approve"])["approve"] if e.answered]
    assert answer == stored.value
    assert list(stored.value) == seen[0]
    # A later resume replays the pause from what is stored, and sees the same.
    assert "done" == resume(g, answer, thread_id="t", checkpointer=reader).status
    assert [seen[0], seen[0]] == seen
