"""The event stream on every backend: order, seq, live delivery, projections, cancel, abandoning.

Liveness is proven with ``threading.Event`` hand-offs, never with timing: a
node waits for something the consumer does only after it has received an
event, so a stream that delivered late would deadlock and fail the wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from ilmek import (
    START,
    Checkpointer,
    IlmekError,
    RetryPolicy,
    StreamPart,
    channel,
    graph,
    resume_keyed_stream,
    resume_stream,
    run,
    stream,
    stream_modes,
)
from ilmek.events import CustomEvent

pytestmark = pytest.mark.timeout(60)

# Long enough never to elapse on a loaded machine, short enough to fail fast if it does.
WAIT = 10.0


def types(events: list[Any]) -> list[str]:
    """The type of each event, in order."""
    return [event.type for event in events]


def assert_one_gapless_run(events: list[Any]) -> None:
    """seq is 1..n, one run id, one thread, root namespace; run_start first and run_end last."""
    assert list(range(1, len(events) + 1)) == [event.seq for event in events]
    assert 1 == len({event.run_id for event in events})
    assert 1 == len({event.thread_id for event in events})
    assert all(() == event.ns for event in events)
    assert "run_start" == events[0].type
    assert "run_end" == events[-1].type


def fetch_then_approve() -> Any:
    """fetch emits progress and fails once before succeeding; approve pauses for a person."""
    attempts: list[int] = []

    def fetch(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        attempts.append(1)
        ctx.emit({"attempt": len(attempts)})
        if len(attempts) == 1:
            raise ConnectionError("flaky upstream")
        return {"data": "fetched"}

    def approve(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"answer": ctx.interrupt({"ship": state["data"]})}

    return (
        graph("flow", {"data": channel.last_write(), "answer": channel.last_write()})
        .node("fetch", fetch, retry=RetryPolicy(max_attempts=2, backoff=0))
        .node("approve", approve)
        .edge(START, "fetch")
        .edge("fetch", "approve")
        .compile()
    )


def test_a_run_with_retry_emit_and_pause_yields_the_documented_order(checkpointer: Checkpointer) -> None:
    """SPEC §6: the exact event sequence of a retry, a custom emit and a pause, seq without gaps."""
    events = list(stream(fetch_then_approve(), {}, thread_id="order", checkpointer=checkpointer))
    assert [
        "run_start",
        "state",
        "checkpoint",
        "step_start",
        "node_start",
        "custom",
        "node_retry",
        "custom",
        "node_end",
        "state",
        "checkpoint",
        "step_start",
        "node_start",
        "checkpoint",
        "interrupt",
        "run_end",
    ] == types(events)
    assert_one_gapless_run(events)
    by_type: dict[str, list[Any]] = {}
    for event in events:
        by_type.setdefault(event.type, []).append(event)
    # Superstep indices count from 0, as in the reference.
    assert [(0, ("fetch",)), (1, ("approve",))] == [(e.step, e.tasks) for e in by_type["step_start"]]
    assert [{"attempt": 1}, {"attempt": 2}] == [e.payload for e in by_type["custom"]]
    (retry,) = by_type["node_retry"]
    # node_retry numbers the attempt about to run.
    assert ("fetch", 2, "flaky upstream") == (retry.node, retry.attempt, str(retry.error))
    assert {"data": "fetched"} == by_type["node_end"][0].update
    assert {"data": "fetched"} == by_type["state"][1].channels
    (interrupt,) = by_type["interrupt"]
    assert [("approve:interrupt#0", {"ship": "fetched"})] == [(p.id, p.payload) for p in interrupt.pending]
    assert by_type["checkpoint"][-1].id == events[-1].checkpoint_id
    assert "interrupted" == events[-1].status


def test_a_failing_run_ends_with_node_error_then_run_end(checkpointer: Checkpointer) -> None:
    """A node that fails for good yields node_error, and the run ends with nothing committed for it."""

    def boom(state: dict[str, Any]) -> None:
        raise KeyError("sku-9")

    g = graph("fail", {"x": channel.last_write()}).node("boom", boom).edge(START, "boom").compile()
    events = list(stream(g, {}, thread_id="fail", checkpointer=checkpointer))
    assert_one_gapless_run(events)
    assert ["run_start", "state", "checkpoint", "step_start", "node_start", "node_error", "run_end"] == types(
        events
    )
    assert ("boom", "'sku-9'") == (events[-2].node, str(events[-2].error))
    assert [("boom", events[-2].error)] == list(events[-1].errors)
    assert "error" == events[-1].status
    assert ["input"] == [c.metadata["source"] for c in checkpointer.list("fail")]


def test_resume_stream_is_a_run_of_its_own(checkpointer: Checkpointer) -> None:
    """resume_stream yields a new run: new run_id, seq from 1, run_start to run_end."""
    g = fetch_then_approve()
    first = list(stream(g, {}, thread_id="again", checkpointer=checkpointer))
    second = list(resume_stream(g, "yes", thread_id="again", checkpointer=checkpointer))
    assert_one_gapless_run(second)
    assert first[0].run_id != second[0].run_id
    assert [
        "run_start",
        "step_start",
        "node_start",
        "node_end",
        "state",
        "checkpoint",
        "run_end",
    ] == types(second)
    assert ("done", {"data": "fetched", "answer": "yes"}) == (second[-1].status, second[-1].state)


def test_resume_keyed_stream_is_a_run_of_its_own(checkpointer: Checkpointer) -> None:
    """resume_keyed_stream answers two pauses and yields its own run with seq from 1."""

    def asker(name: str) -> Any:
        return lambda state, ctx: {"answers": {name: ctx.interrupt(f"{name}?")}}

    g = (
        graph("pair", {"answers": channel.merge()})
        .node("left", asker("left"))
        .node("right", asker("right"))
        .edge(START, "left")
        .edge(START, "right")
        .compile()
    )
    first = list(stream(g, {}, thread_id="pair", checkpointer=checkpointer))
    answers = {"left:interrupt#0": "L", "right:interrupt#0": "R"}
    second = list(resume_keyed_stream(g, answers, thread_id="pair", checkpointer=checkpointer))
    assert_one_gapless_run(second)
    assert first[0].run_id != second[0].run_id
    assert {"answers": {"left": "L", "right": "R"}} == second[-1].state


def test_custom_and_retry_events_arrive_while_a_sibling_still_runs(checkpointer: Checkpointer) -> None:
    """The consumer gets custom and node_retry mid-superstep: only then does it let the sibling finish."""
    release = threading.Event()
    failed_once: list[bool] = []

    def talker(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.emit({"thinking": True})
        if not failed_once:
            failed_once.append(True)
            raise TimeoutError("model busy")
        return {"said": "hi"}

    def blocker(state: dict[str, Any]) -> dict[str, Any]:
        return {"released": release.wait(WAIT)}

    g = (
        graph("live", {"said": channel.last_write(), "released": channel.last_write()})
        .node("talker", talker, retry=RetryPolicy(max_attempts=2, backoff=0))
        .node("blocker", blocker)
        .edge(START, "talker")
        .edge(START, "blocker")
        .compile()
    )
    events = []
    for event in stream(g, {}, thread_id="live", checkpointer=checkpointer):
        events.append(event)
        if {"custom", "node_retry"} <= set(types(events)):
            release.set()
    assert {"said": "hi", "released": True} == events[-1].state
    blocker_end = next(e.seq for e in events if e.type == "node_end" and e.node == "blocker")
    assert all(e.seq < blocker_end for e in events if e.type in ("custom", "node_retry"))


def test_a_consumer_that_pauses_midway_skips_nothing(checkpointer: Checkpointer) -> None:
    """Reading up to seq k, stopping, then reading on yields every event once; nothing runs ahead."""
    events = stream(fetch_then_approve(), {}, thread_id="pause", checkpointer=checkpointer)
    head = []
    for event in events:
        head.append(event)
        if event.type == "node_start":
            break
    assert [1, 2, 3, 4, 5] == [event.seq for event in head]
    # The run advances only as it is read: the superstep under way has not committed.
    assert 1 == len(checkpointer.list("pause"))
    tail = list(events)
    assert_one_gapless_run(head + tail)
    assert ["custom", "node_retry", "custom", "node_end"] == types(tail)[:4]
    assert "interrupted" == tail[-1].status


def comparable(event: Any) -> tuple[Any, ...]:
    """An event without the ids that differ between two runs of one flow; errors by type and text."""
    fields = attrs.asdict(event, recurse=False)
    for name in ("run_id", "thread_id", "task_id", "id", "checkpoint_id"):
        fields.pop(name, None)
    for name, value in fields.items():
        if isinstance(value, BaseException):
            fields[name] = (type(value).__name__, str(value))
        elif name == "pending":
            fields[name] = [(p.id, p.node, p.key, p.payload) for p in value]
    return (event.type, sorted(fields.items(), key=lambda item: item[0]))


def test_run_events_are_what_stream_yields(checkpointer: Checkpointer) -> None:
    """run(...).events and stream(...) of the same flow carry the same types and payloads."""
    streamed = list(stream(fetch_then_approve(), {}, thread_id="s", checkpointer=checkpointer))
    collected = run(fetch_then_approve(), {}, thread_id="r", checkpointer=checkpointer)
    assert [comparable(e) for e in streamed] == [comparable(e) for e in collected.events]
    assert collected.events[-1].run_id == collected.run_id


def chatty() -> Any:
    """Two supersteps: write streams tokens and a custom payload; review updates another channel."""

    def write(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.emit_token("Hel")
        ctx.emit({"stage": "drafting"})
        ctx.emit_token("lo", {"model": "m"})
        return {"draft": "Hello"}

    return (
        graph("chatty", {"draft": channel.last_write(), "reviewed": channel.last_write(False)})
        .node("write", write)
        .node("review", lambda state: {"reviewed": True})
        .edge(START, "write")
        .edge("write", "review")
        .compile()
    )


def test_stream_modes_project_each_mode_keeping_seq(checkpointer: Checkpointer) -> None:
    """values, custom, messages and debug each project their events, at the event's seq."""
    events = list(stream(chatty(), {}, thread_id="modes", checkpointer=checkpointer))

    def parts(mode: str) -> list[tuple[Any, int]]:
        projected = list(stream_modes(events, mode))
        assert all(mode == part.mode for part in projected)
        return [(part.data, part.seq) for part in projected]

    assert [(e.channels, e.seq) for e in events if e.type == "state"] == parts("values")
    assert [
        {"reviewed": False},
        {"draft": "Hello", "reviewed": False},
        {"draft": "Hello", "reviewed": True},
    ] == [data for data, _ in parts("values")]
    customs = [(e.payload, e.seq) for e in events if e.type == "custom"]
    assert 3 == len(customs)
    assert customs == parts("custom")
    tokens = [(payload, seq) for payload, seq in customs if payload.get("type") == "token"]
    assert [
        {"type": "token", "text": "Hel", "meta": None},
        {"type": "token", "text": "lo", "meta": {"model": "m"}},
    ] == [payload for payload, _ in tokens]
    assert tokens == parts("messages")
    assert [(e, e.seq) for e in events] == parts("debug")


def test_stream_modes_updates_are_node_keyed(checkpointer: Checkpointer) -> None:
    """updates yields {node: update} for each finished task, at that node_end's seq."""
    events = list(stream(chatty(), {}, thread_id="updates", checkpointer=checkpointer))
    ends = [e for e in events if e.type == "node_end"]
    assert [({"write": {"draft": "Hello"}}, ends[0].seq), ({"review": {"reviewed": True}}, ends[1].seq)] == [
        (part.data, part.seq) for part in stream_modes(events, "updates")
    ]


def test_several_modes_interleave_by_event_and_keep_ns(checkpointer: Checkpointer) -> None:
    """With a list of modes, each event yields its parts in the order asked; ns travels along."""
    events = [
        attrs.evolve(e, ns=("support:t1",))
        for e in stream(chatty(), {}, thread_id="several", checkpointer=checkpointer)
    ]
    got = list(stream_modes(iter(events), ["messages", "custom", "updates"]))
    expected = []
    for event in events:
        if event.type == "custom":
            if event.payload.get("type") == "token":
                expected.append(("messages", event.payload, event.seq))
            expected.append(("custom", event.payload, event.seq))
        elif event.type == "node_end":
            expected.append(("updates", {event.node: event.update}, event.seq))
    assert expected == [(part.mode, part.data, part.seq) for part in got]
    assert all(("support:t1",) == part.ns for part in got)
    assert all(isinstance(part, StreamPart) for part in got)


@pytest.mark.parametrize(
    ("payload", "is_message"),
    [
        ({"type": "token", "text": "Hel"}, True),
        ({"type": "token", "text": "", "meta": None}, True),
        ({"type": "token", "text": "lo", "meta": {"model": "m"}}, True),
        ({"type": "token", "text": 5}, False),
        ({"type": "token", "text": None}, False),
        ({"type": "token", "text": ["a"]}, False),
        ({"type": "token"}, False),
        ({"type": "tokens", "text": "x"}, False),
        ({"text": "x"}, False),
        ("token", False),
        (["token", "x"], False),
    ],
)
def test_messages_are_only_well_formed_tokens(payload: Any, is_message: bool) -> None:
    """MODEL §10.2: a message is a custom payload {"type": "token", "text": str, "meta"?}, nothing else."""
    event = CustomEvent(run_id="r", thread_id="t", seq=7, payload=payload, node="n", task_id="t:root:n")
    expected = [("messages", payload, 7)] if is_message else []
    assert expected == [(p.mode, p.data, p.seq) for p in stream_modes([event], "messages")]
    assert [("custom", payload, 7)] == [(p.mode, p.data, p.seq) for p in stream_modes([event], "custom")]


def test_an_unknown_mode_is_a_value_error_before_any_event_is_read() -> None:
    """A mistyped mode fails at once, naming it, without consuming the stream."""
    consumed: list[int] = []

    def source() -> Iterator[Any]:
        consumed.append(1)
        yield from ()

    with pytest.raises(ValueError, match="unknown stream mode 'tokens'"):
        list(stream_modes(source(), ["values", "tokens"]))
    assert [] == consumed


def counting_loop(calls: list[int], stop_at: int = 10) -> Any:
    def tick(state: dict[str, Any]) -> dict[str, Any]:
        calls.append(state["n"])
        return {"n": state["n"] + 1}

    return (
        graph("loop", {"n": channel.last_write(0)})
        .node("tick", tick)
        .edge(START, "tick")
        .edge("tick", "tick", when={"channel": "n", "lt": stop_at})
        .compile()
    )


def test_cancel_during_a_long_loop_aborts_at_the_next_boundary(checkpointer: Checkpointer) -> None:
    """Set while the third superstep runs, cancel lets it commit, then ends aborted; run(None) finishes."""
    calls: list[int] = []
    g = counting_loop(calls)
    cancel = threading.Event()
    events = []
    for event in stream(g, {}, thread_id="cancel", checkpointer=checkpointer, cancel=cancel):
        events.append(event)
        if event.type == "step_start" and event.step == 2:
            cancel.set()
    end = events[-1]
    assert ("aborted", {"n": 3}) == (end.status, end.state)
    assert "aborted" == end.abort_reason
    assert ["node_start", "node_end", "state", "checkpoint", "run_end"] == types(events)[-5:]
    latest = checkpointer.get("cancel")
    assert latest is not None
    assert (events[-2].id, {"n": 3}, "unfinished") == (latest.id, dict(latest.channels), latest.status)
    finished = run(g, None, thread_id="cancel", checkpointer=checkpointer)
    assert ("done", {"n": 10}) == (finished.status, finished.state)
    assert list(range(10)) == calls


def test_a_node_waiting_on_ctx_cancel_wakes_when_it_is_set(checkpointer: Checkpointer) -> None:
    """ctx.cancel is the run's event: a node passing it to its wait stops waiting, the run aborts."""
    cancel = threading.Event()

    def wait(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"interrupted_wait": ctx.cancel.wait(WAIT)}

    g = (
        graph("wait", {"interrupted_wait": channel.last_write()})
        .node("wait", wait)
        .node("after", lambda state: None)
        .edge(START, "wait")
        .edge("wait", "after")
        .compile()
    )
    events = []
    for event in stream(g, {}, thread_id="wait", checkpointer=checkpointer, cancel=cancel):
        events.append(event)
        if event.type == "node_start":
            cancel.set()
    assert ("aborted", {"interrupted_wait": True}) == (events[-1].status, events[-1].state)


def test_cancel_during_a_retry_backoff_stops_the_retries(checkpointer: Checkpointer) -> None:
    """A cancel set while a node sleeps before its next attempt ends the retries at once."""
    attempts: list[int] = []
    cancel = threading.Event()

    def fail(state: dict[str, Any]) -> None:
        attempts.append(1)
        raise ConnectionError("down")

    g = (
        graph("backoff", {"x": channel.last_write()})
        .node("fail", fail, retry=RetryPolicy(max_attempts=5, backoff=WAIT * 3))
        .edge(START, "fail")
        .compile()
    )
    started = time.monotonic()
    events = []
    for event in stream(g, {}, thread_id="backoff", checkpointer=checkpointer, cancel=cancel):
        events.append(event)
        if event.type == "node_retry":
            cancel.set()
    assert time.monotonic() - started < WAIT
    assert [1] == attempts
    assert 1 == types(events).count("node_retry")
    latest = checkpointer.get("backoff")
    assert latest is not None
    assert "unfinished" == latest.status


def test_cancel_during_a_retry_backoff_ends_the_run_with_the_last_error(checkpointer: Checkpointer) -> None:
    """Cancel during a retry's backoff stops the retries: the node failed with its last error (reference)."""
    cancel = threading.Event()

    def fail(state: dict[str, Any]) -> None:
        raise ConnectionError("down")

    g = (
        graph("backoff", {"x": channel.last_write()})
        .node("fail", fail, retry=RetryPolicy(max_attempts=5, backoff=WAIT * 3))
        .edge(START, "fail")
        .compile()
    )
    events = []
    for event in stream(g, {}, thread_id="aborted", checkpointer=checkpointer, cancel=cancel):
        events.append(event)
        if event.type == "node_retry":
            cancel.set()
    assert "error" == events[-1].status
    ((node, error),) = events[-1].errors
    assert ("fail", "down") == (node, str(error))


def test_abandoning_a_stream_releases_the_thread_and_writes_nothing_more(
    checkpointer: Checkpointer,
) -> None:
    """Closing the stream while a node is blocked frees the thread; the late node records nothing."""
    inside, release, gone = threading.Event(), threading.Event(), threading.Event()
    charges: list[str] = []
    late_errors: list[BaseException] = []

    def pay(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        first = not inside.is_set()
        if first:
            inside.set()
            ctx.emit("blocked")
            release.wait(WAIT)
        try:
            receipt = ctx.step("charge", lambda: charges.append(ctx.run_id) or "r-1")
        except BaseException as error:
            late_errors.append(error)
            raise
        finally:
            if first:
                gone.set()
        return {"receipt": receipt}

    g = graph("abandon", {"receipt": channel.last_write()}).node("pay", pay).edge(START, "pay").compile()
    events = stream(g, {}, thread_id="abandon", checkpointer=checkpointer)
    # The custom event comes while pay is blocked, so the stream is suspended mid-superstep.
    abandoned_task = next(e.task_id for e in events if e.type == "custom")
    assert inside.is_set()
    events.close()  # type: ignore[attr-defined]

    again = run(g, None, thread_id="abandon", checkpointer=checkpointer)
    assert ("done", {"receipt": "r-1"}) == (again.status, again.state)
    written = [c.id for c in checkpointer.list("abandon")]

    release.set()
    assert gone.wait(WAIT)
    assert written == [c.id for c in checkpointer.list("abandon")]
    assert () == tuple(checkpointer.get_journal(abandoned_task))
    (late,) = late_errors
    assert isinstance(late, IlmekError)
    assert "closed" in str(late)


def test_every_event_kind_is_exported_at_the_top_level_and_is_an_event() -> None:
    """ilmek.CustomEvent and its siblings are the ilmek.events classes; every event a run yields is one."""
    import ilmek
    from ilmek import events

    kinds = [
        getattr(ilmek, name) for name in events.__all__ if name not in ("Event", "StreamPart", "stream_modes")
    ]
    assert all(kind is getattr(events, kind.__name__) for kind in kinds)
    assert ilmek.CustomEvent is CustomEvent
    result = run(fetch_then_approve(), {})
    assert all(isinstance(event, ilmek.Event) for event in result.events)
    assert {"custom"} == {e.type for e in result.events if isinstance(e, ilmek.CustomEvent)}
    # Each kind's type is fixed per class, so `event.type == "custom"` tells the kind.
    assert len(kinds) - 1 == len(
        {attrs.fields(kind).type.default for kind in kinds if kind is not ilmek.EventBase}
    )


def test_a_pause_is_an_interrupt_update(checkpointer: Checkpointer) -> None:
    """updates yields {"__interrupt__": pending} when the run pauses, as LangGraph's updates mode does."""

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"answer": ctx.interrupt({"question": "Ship?"})}

    g = (
        graph("asks", {"answer": channel.last_write()})
        .node("ask", ask)
        .edge(START, "ask")
        .compile(checkpointer=checkpointer)
    )
    events = list(stream(g, {}, thread_id="pause-update"))
    pause = next(e for e in events if e.type == "interrupt")
    parts = list(stream_modes(events, "updates"))
    assert [({"__interrupt__": pause.pending}, pause.seq)] == [(p.data, p.seq) for p in parts]
    assert "Ship?" == parts[0].data["__interrupt__"][0].payload["question"]
    answered = list(stream_modes(resume_stream(g, "yes", thread_id="pause-update"), "updates"))
    assert [{"ask": {"answer": "yes"}}] == [p.data for p in answered]
