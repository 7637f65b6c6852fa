"""How a run fails, attacked on every backend: what it returns, what it stores, what the thread says.

A node that pauses inside a step, a step whose result cannot be stored, a
reducer that refuses a write, a thread whose failure must be forgotten once
it succeeds. Each test checks the run's result, the events, the journal as
stored, the thread's status and error, and that the thread can go on.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    CompiledGraph,
    GraphError,
    ReducerError,
    Result,
    ResumeError,
    SerializationError,
    StepResultNotStoredError,
    channel,
    forget_unstored_steps,
    graph,
    pending_interrupts,
    resume,
    run,
    serde,
    stream,
    thread_state,
)
from ilmek.events import Event, NodeError, NodeStart, RunEnd
from tests.support.helpers import Calls

pytestmark = pytest.mark.timeout(60)


def run_by(how: str, g: CompiledGraph, input: Any, thread_id: str, checkpointer: Checkpointer) -> Result:
    """Run ``g`` with ``run`` (a lone task runs on the calling thread) or ``stream`` (on a worker)."""
    if how == "run":
        return run(g, input, thread_id=thread_id, checkpointer=checkpointer)
    events = list(stream(g, input, thread_id=thread_id, checkpointer=checkpointer))
    end = events[-1]
    assert isinstance(end, RunEnd)
    return Result(
        status=end.status,  # type: ignore[arg-type]
        state=end.state if end.status == "done" else None,  # as run() reports it
        pending=end.pending,
        errors=end.errors,
        thread_id=thread_id,
        run_id=end.run_id,
        checkpoint_id=end.checkpoint_id,
        events=tuple(events),
        graph_name=g.name,
    )


def journal_keys(checkpointer: Checkpointer, thread_id: str, task_key: str) -> list[str]:
    """The journal keys stored for ``task_key`` as it runs from the thread's latest checkpoint."""
    latest = checkpointer.get(thread_id)
    assert latest is not None
    entries = checkpointer.load_journals(latest, [task_key]).get(task_key, ())
    return [entry.key for entry in entries]


def node_errors(events: tuple[Event, ...]) -> list[tuple[str, type[BaseException]]]:
    """Each ``node_error`` event's node and error type, in order."""
    return [(e.node, type(e.error)) for e in events if isinstance(e, NodeError)]


# --- ctx.interrupt inside a ctx.step ----------------------------------------------------------------


def asks_inside_a_step(calls: Calls, nested: bool = False) -> CompiledGraph:
    """Node ``ask`` records a step, then calls ``ctx.interrupt`` from inside a step's function."""

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("before", calls.hit, "before")

        def inner() -> Any:
            calls.hit("inner")
            return ctx.interrupt({"question": "charge?"})

        def outer() -> Any:
            calls.hit("outer")
            return ctx.step("inner", inner) if nested else inner()

        ctx.step("outer", outer)
        calls.hit("after")
        return {"log": ["finished"]}

    return (
        graph("asks", {"log": channel.append()})
        .node("ask", ask)
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
    )


@pytest.mark.parametrize("nested", [False, True], ids=["step", "step-in-step"])
@pytest.mark.parametrize("how", ["run", "stream"])
def test_interrupt_inside_a_step_fails_the_node_with_a_graph_error(
    checkpointer: Checkpointer, how: str, nested: bool
) -> None:
    """ctx.interrupt from a step's function (or a step nested in it): status error, GraphError, no pause."""
    calls = Calls()
    result = run_by(how, asks_inside_a_step(calls, nested), {}, "t", checkpointer)

    assert "error" == result.status
    assert [("ask", GraphError)] == [(node, type(error)) for node, error in result.errors]
    message = str(result.errors[0][1])
    assert "node 'ask' called ctx.interrupt() inside the function of a ctx.step()" in message
    assert "thread 't'" in message
    assert [("ask", GraphError)] == node_errors(result.events)
    assert () == result.pending
    assert "interrupt" not in [e.type for e in result.events]
    # The function ran once and stopped at the refusal; the node did not go on.
    assert {"before": 1, "outer": 1, "inner": 1} == dict(calls)
    # Only the step that finished is stored: no record of the outer step, nor a pause.
    assert ["before#0"] == journal_keys(checkpointer, "t", "ask")
    assert () == pending_interrupts(checkpointer, "t")
    info = checkpointer.get_thread("t")
    assert info is not None
    assert "error" == info.status
    assert info.error is not None
    assert ("ilmek.errors.GraphError", "ask") == (info.error.type, info.error.node)
    with pytest.raises(ResumeError, match="is not interrupted"):
        resume(asks_inside_a_step(calls, nested), "yes", thread_id="t", checkpointer=checkpointer)


def test_interrupt_from_a_thread_the_steps_function_waits_on_is_refused_too(
    checkpointer: Checkpointer,
) -> None:
    """The step's function asks through a worker thread it starts and waits for: still inside the step.

    Were the pause allowed, the step would be recorded only after the answer and its
    effect would run again on resume: the very harm the refusal exists to prevent.
    """
    calls = Calls()

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        def charge() -> Any:
            calls.hit("charge")
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                return pool.submit(ctx.interrupt, {"question": "charge?"}).result()

        return {"log": [ctx.step("charge", charge)]}

    g = (
        graph("asks", {"log": channel.append()})
        .node("ask", ask)
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
    )
    result = run(g, {}, thread_id="t", checkpointer=checkpointer)
    outcome = (result.status, [(node, type(error)) for node, error in result.errors])
    if result.status == "interrupted":
        # Show the harm in the failure: answered, the step's effect runs a second time.
        resume(g, "yes", thread_id="t", checkpointer=checkpointer)
    assert (("error", [("ask", GraphError)]), {"charge": 1}) == (outcome, dict(calls))


def test_the_refusal_ends_with_the_step_a_later_interrupt_pauses(checkpointer: Checkpointer) -> None:
    """The node catches the GraphError of a step; its ctx.interrupt after the step pauses and resumes."""
    calls = Calls()
    refused: list[str] = []

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        try:
            ctx.step("wrong", lambda: ctx.interrupt("too early"))
        except GraphError as error:
            refused.append(str(error))
        answer = ctx.interrupt({"question": "charge?"})

        def charge() -> str:
            calls.hit("charge")
            return f"charged: {answer}"

        return {"log": [ctx.step("charge", charge)]}

    g = (
        graph("asks", {"log": channel.append()})
        .node("ask", ask)
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
    )
    paused = run(g, {}, thread_id="t", checkpointer=checkpointer)
    assert "interrupted" == paused.status
    assert [{"question": "charge?"}] == [p.payload for p in paused.pending]
    done = resume(g, "yes", thread_id="t", checkpointer=checkpointer)
    assert "done" == done.status
    assert {"log": ["charged: yes"]} == done.state
    assert {"charge": 1} == dict(calls)
    # Refused on each pass, before and after the pause.
    assert 2 == len(refused)


def test_interrupt_in_a_step_of_one_parallel_task_fails_only_that_task(checkpointer: Checkpointer) -> None:
    """Two tasks in a superstep, one interrupting inside a step: that one's GraphError, no pause at all."""
    calls = Calls()

    def bad(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("bad-step", lambda: ctx.interrupt("from inside"))
        return {"log": ["bad"]}

    def good(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("good-step", calls.hit, "good")
        return {"log": ["good"]}

    g = (
        graph("pair", {"log": channel.append()})
        .node("bad", bad)
        .node("good", good)
        .edge(START, "bad")
        .edge(START, "good")
        .compile()
    )
    result = run(g, {}, thread_id="t", checkpointer=checkpointer)
    assert "error" == result.status
    assert [("bad", GraphError)] == [(node, type(error)) for node, error in result.errors]
    assert [("bad", GraphError)] == node_errors(result.events)
    assert () == result.pending
    assert [] == journal_keys(checkpointer, "t", "bad")
    assert ["good-step#0"] == journal_keys(checkpointer, "t", "good")


# --- a step whose value cannot be stored ----------------------------------------------------------

UNSTORABLE: dict[str, Callable[[], Any]] = {
    "object": object,
    "nested-deep": lambda: {"order": [1, {"lines": (2, object())}]},
    "function": lambda: print,
    "set-of-objects": lambda: frozenset({object()}),
    "generator": lambda: (n for n in range(3)),
}


def refusing_step_graph(calls: Calls, bad: Callable[[], Any]) -> CompiledGraph:
    """Node ``work``: a storable step, then a step returning ``bad()`` the first time, ``"stored"`` later."""

    def flaky() -> Any:
        calls.hit("flaky")
        return bad() if calls["flaky"] == 1 else "stored"

    def keep() -> str:
        calls.hit("first")
        return "kept"

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        first = ctx.step("first", keep)
        value = ctx.step("flaky", flaky)
        return {"log": [first, value]}

    return (
        graph("refusing", {"log": channel.append()})
        .node("work", work)
        .edge(START, "work")
        .edge("work", END)
        .compile()
    )


@pytest.mark.parametrize("value", sorted(UNSTORABLE))
def test_every_unstorable_value_is_refused_by_serde(value: str) -> None:
    """The values the next test returns from a step are ones ilmek's codec refuses (its premise)."""
    with pytest.raises(SerializationError):
        serde.encode(UNSTORABLE[value]())


@pytest.mark.parametrize("how", ["run", "stream"])
@pytest.mark.parametrize("value", sorted(UNSTORABLE))
def test_a_step_returning_an_unstorable_value_fails_the_run_and_records_that_it_ran(
    checkpointer: Checkpointer, value: str, how: str
) -> None:
    """Status error naming node and step; the step recorded as run (never its value), so a later run
    meets the same error without calling it; once forgotten, the thread continues and runs it again."""
    calls = Calls()
    g = refusing_step_graph(calls, UNSTORABLE[value])
    failed = run_by(how, g, {}, "t", checkpointer)

    assert "error" == failed.status
    [(node, error)] = failed.errors
    assert "work" == node
    assert isinstance(error, StepResultNotStoredError)
    assert "node 'work' ran step 'flaky#0'" in str(error)
    assert isinstance(error.__cause__, SerializationError)
    assert "task 'work' step 'flaky#0'" in str(error.__cause__)
    assert [("work", StepResultNotStoredError)] == node_errors(failed.events)
    # The step that finished is stored; the refused one is recorded as run, and the channel saw nothing.
    assert ["first#0", "flaky#0"] == journal_keys(checkpointer, "t", "work")
    assert failed.state is None  # the state of a failed run is the thread's
    assert {"log": []} == thread_state(g, checkpointer, "t")
    latest = checkpointer.get("t")
    assert latest is not None
    assert ["work"] == [task.node for task in latest.next]
    info = checkpointer.get_thread("t")
    assert info is not None
    assert ("error", "work") == (info.status, info.error.node if info.error else None)

    again = run_by(how, g, None, "t", checkpointer)
    assert [("work", StepResultNotStoredError)] == node_errors(again.events)
    assert {"first": 1, "flaky": 1} == dict(calls)

    assert ("work:flaky#0",) == forget_unstored_steps(g, checkpointer, thread_id="t")
    done = run_by(how, g, None, "t", checkpointer)
    assert "done" == done.status
    assert {"log": ["kept", "stored"]} == done.state
    # The stored step replayed; the forgotten one ran again, as the user said it may.
    assert {"first": 1, "flaky": 2} == dict(calls)
    info = checkpointer.get_thread("t")
    assert info is not None
    assert ("done", None) == (info.status, info.error)


# --- a reducer that refuses a write ------------------------------------------------------------------


def no_negatives(current: Any, new: Any) -> Any:
    """Adds ``new`` to the total (``None`` on the first write); refuses a negative amount."""
    if new < 0:
        raise ValueError(f"refused amount {new}")
    return (current or 0) + new


def totals_graph() -> CompiledGraph:
    """Three parallel writers to ``total``: ``a_good`` (5), ``bad`` (-1), ``z_good`` (7)."""

    def writes(amount: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return lambda state: {"total": amount}

    builder = graph("totals", {"total": channel.reduce(no_negatives, 0)})
    for name, amount in (("a_good", 5), ("bad", -1), ("z_good", 7)):
        builder = builder.node(name, writes(amount)).edge(START, name)
    return builder.compile()


def run_events(how: str, g: CompiledGraph, checkpointer: Checkpointer) -> tuple[Event, ...]:
    """The run's events: ``Result.events`` from ``run``, or what ``stream`` yielded."""
    if how == "run":
        return run(g, {}, thread_id="t", checkpointer=checkpointer).events
    return tuple(stream(g, {}, thread_id="t", checkpointer=checkpointer))


@pytest.mark.parametrize("how", ["run", "stream"])
def test_a_reducer_raising_at_fold_time_is_a_node_error_of_the_node_that_wrote(
    checkpointer: Checkpointer, how: str
) -> None:
    """The reducer refuses bad's write: one node_error, for bad with bad's task id; the run ends error."""
    events = run_events(how, totals_graph(), checkpointer)

    [failure] = [e for e in events if isinstance(e, NodeError)]
    assert "bad" == failure.node
    bad_starts = [e.task_id for e in events if isinstance(e, NodeStart) and e.node == "bad"]
    assert [failure.task_id] == bad_starts
    assert isinstance(failure.error, ReducerError)
    assert ("total", "bad") == (failure.error.channel, failure.error.node)
    assert isinstance(failure.error.__cause__, ValueError)
    assert "refused amount -1" in str(failure.error)
    end = events[-1]
    assert isinstance(end, RunEnd)
    assert "error" == end.status
    assert [("bad", failure.error)] == list(end.errors)
    # Nothing of the superstep was folded: the state is the input's.
    assert {"total": 0} == dict(end.state)
    assert 1 == len(checkpointer.list("t"))
    info = checkpointer.get_thread("t")
    assert info is not None
    assert info.error is not None
    assert ("error", "bad", "ilmek.errors.ReducerError") == (info.status, info.error.node, info.error.type)


def test_a_reducer_refusing_the_input_writes_nothing() -> None:
    """The same reducer refusing the run's input: a ReducerError naming the input, before any node runs."""
    from ilmek import InMemoryCheckpointer

    checkpointer = InMemoryCheckpointer()
    with pytest.raises(ReducerError, match="the input") as caught:
        run(totals_graph(), {"total": -3}, thread_id="t", checkpointer=checkpointer)
    assert caught.value.node is None
    assert "total" == caught.value.channel
    assert checkpointer.get_thread("t") is None


# --- a failed thread that succeeds later -------------------------------------------------------------


class Flaky:
    """A node that raises ``RuntimeError("card declined")`` while ``failing`` is true."""

    def __init__(self) -> None:
        self.failing = True

    def __call__(self, state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if self.failing:
            raise RuntimeError("card declined")
        return {"log": ["charged"]}


def flaky_graph(node: Flaky, pause: bool = False) -> CompiledGraph:
    """``prepare`` then ``charge`` (the flaky node); with ``pause``, ``charge`` asks first."""

    def charge(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if pause:
            ctx.interrupt({"question": "charge?"})
        return node(state, ctx)

    return (
        graph("flaky", {"log": channel.append()})
        .node("prepare", lambda state: {"log": ["prepared"]})
        .node("charge", charge)
        .edge(START, "prepare")
        .edge("prepare", "charge")
        .edge("charge", END)
        .compile()
    )


def thread_status(checkpointers: list[Checkpointer], thread_id: str) -> list[tuple[str, Any]]:
    """The thread's status and error as each checkpointer reads it."""
    infos = [c.get_thread(thread_id) for c in checkpointers]
    return [(i.status, i.error) if i is not None else ("missing", None) for i in infos]


@pytest.mark.parametrize("continue_with", ["none", "new-input"])
def test_a_failed_threads_error_is_cleared_by_a_later_success(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer], continue_with: str
) -> None:
    """After a node raises the thread reads error (node, message); after a success, done with no error."""
    node = Flaky()
    g = flaky_graph(node)
    assert "error" == run(g, {}, thread_id="t", checkpointer=checkpointer).status
    other = reopen()
    for reader in (checkpointer, other):
        info = reader.get_thread("t")
        assert info is not None
        assert "error" == info.status
        assert info.error is not None
        assert ("RuntimeError", "card declined", "charge") == (
            info.error.type,
            info.error.message,
            info.error.node,
        )
    assert ["t"] == [i.id for i in checkpointer.list_threads(status="error")]

    node.failing = False
    again = run(
        g, None if continue_with == "none" else {"log": ["retry"]}, thread_id="t", checkpointer=checkpointer
    )
    assert "done" == again.status
    expected_log = ["prepared", "charged"] if continue_with == "none" else ["prepared", "retry", "charged"]
    assert {"log": expected_log} == again.state
    assert [("done", None), ("done", None)] == thread_status([checkpointer, other], "t")
    assert [] == checkpointer.list_threads(status="error")
    assert ["t"] == [i.id for i in checkpointer.list_threads(status="done")]


def test_a_failed_threads_error_is_cleared_by_a_pause_and_stays_cleared(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """error, then a run that pauses: interrupted with no error; resumed: done with no error."""
    node = Flaky()
    assert "error" == run(flaky_graph(node), {}, thread_id="t", checkpointer=checkpointer).status
    node.failing = False
    g = flaky_graph(node, pause=True)
    assert "interrupted" == run(g, None, thread_id="t", checkpointer=checkpointer).status
    other = reopen()
    assert [("interrupted", None), ("interrupted", None)] == thread_status([checkpointer, other], "t")
    assert "done" == resume(g, "yes", thread_id="t", checkpointer=checkpointer).status
    assert [("done", None), ("done", None)] == thread_status([checkpointer, other], "t")


def test_a_second_failure_replaces_the_first_error(checkpointer: Checkpointer) -> None:
    """Two failures in a row: the thread's error is the second's, not the first's."""

    def fails(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        raise RuntimeError(f"failure {ctx.meta['n']}")

    g = graph("fails", {"log": channel.append()}).node("fails", fails).edge(START, "fails").compile()
    for n in (1, 2):
        assert "error" == run(g, {}, thread_id="t", checkpointer=checkpointer, meta={"n": n}).status
    info = checkpointer.get_thread("t")
    assert info is not None
    assert info.error is not None
    assert ("error", "failure 2") == (info.status, info.error.message)
