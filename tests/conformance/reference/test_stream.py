"""Ported from the reference's ``ts/packages/core/test/stream.test.ts``.

The event envelope (``seq``, ``ns``), the projection modes, the token
convention and cancellation. The reference's ``AbortSignal`` is a
``threading.Event`` passed as ``cancel=`` (its reason an attribute ``reason``).
"""

from __future__ import annotations

import threading
from typing import Any

from ilmek import (
    END,
    START,
    Checkpointer,
    channel,
    graph,
    resume_stream,
    run,
    stream,
    stream_modes,
)
from ilmek.events import NodeEnd, RunEnd
from tests.support.reference import linear

# --- the envelope -----------------------------------------------------------------------------


def test_every_event_carries_a_monotonic_one_based_seq_and_a_root_ns() -> None:
    """stream.test.ts · "every event carries a monotonic 1-based seq and a root ns"."""
    events = list(stream(linear("env", lambda state: {"log": ["hi"]})))

    assert events
    assert list(range(1, len(events) + 1)) == [e.seq for e in events]
    assert all(() == e.ns for e in events)


def test_seq_is_unique_per_run_so_a_reconnect_can_resume_after_its_last_seen_seq() -> None:
    """stream.test.ts · "seq is unique per run — a reconnect can resume after its last-seen seq"."""

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.emit("a")
        ctx.emit("b")
        return {"log": ["done"]}

    events = list(stream(linear("reconnect", work)))
    seqs = [e.seq for e in events]
    assert len(seqs) == len(set(seqs))

    tail = [e for e in events if e.seq > 3]
    assert tail
    assert 4 == tail[0].seq


# --- projection modes ---------------------------------------------------------------------------


def _proj_graph() -> Any:
    def a(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.emit({"note": "from a"})
        return {"log": ["a"], "n": 1}

    return (
        graph("proj")
        .channel("log", channel.append())
        .channel("n", channel.last_write(0))
        .node("a", a)
        .node("b", lambda state: {"log": ["b"], "n": 2})
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
    )


def test_updates_mode_yields_one_node_update_per_node_that_ran() -> None:
    """stream.test.ts · "updates: one { [node]: update } per node that ran"."""
    parts = list(stream_modes(stream(_proj_graph(), {}), ["updates"]))

    assert [{"a": {"log": ["a"], "n": 1}}, {"b": {"log": ["b"], "n": 2}}] == [p.data for p in parts]
    assert all("updates" == p.mode for p in parts)


def test_values_mode_yields_the_full_channel_state_after_each_superstep() -> None:
    """stream.test.ts · "values: full channel state after each superstep".

    Beyond ilmek/1 (SPEC §7) the input is committed before any node runs, so
    Python may lead with one more snapshot: the input's state.
    """
    data = [p.data for p in stream_modes(stream(_proj_graph(), {}), ["values"])]

    assert [{"log": ["a"], "n": 1}, {"log": ["a", "b"], "n": 2}] == data[-2:]
    assert [{"log": [], "n": 0}] * (len(data) - 2) == data[:-2]
    assert len(data) <= 3


def test_custom_mode_yields_every_emitted_payload() -> None:
    """stream.test.ts · "custom: every emitted payload"."""
    parts = list(stream_modes(stream(_proj_graph(), {}), ["custom"]))

    assert [{"note": "from a"}] == [p.data for p in parts]


def test_debug_mode_yields_every_event_unchanged_rewrapped() -> None:
    """stream.test.ts · "debug: every event, unchanged, rewrapped"."""
    parts = list(stream_modes(stream(_proj_graph(), {}), ["debug"]))
    raw = list(stream(_proj_graph(), {}))

    assert len(raw) == len(parts)
    assert "run_start" == parts[0].data.type


def test_multiple_modes_multiplex_through_one_pass_tagged_and_seq_ordered() -> None:
    """stream.test.ts · "multiple modes multiplex through one pass, tagged and seq-ordered"."""
    parts = list(stream_modes(stream(_proj_graph(), {}), ["updates", "custom"]))

    assert ["custom", "updates"] == sorted({p.mode for p in parts})
    seqs = [p.seq for p in parts]
    assert sorted(seqs) == seqs


def test_projecting_a_buffered_event_is_pure_and_reusable() -> None:
    """stream.test.ts · "project() is pure and reusable on a buffered event".

    Python's projection is ``stream_modes`` over any iterable of events.
    """
    event = NodeEnd(run_id="r", thread_id="t", seq=7, node="x", update={"log": ["z"]}, task_id="x")

    first = [(p.mode, p.seq, p.ns, p.data) for p in stream_modes([event], ["updates", "custom"])]
    again = [(p.mode, p.seq, p.ns, p.data) for p in stream_modes([event], ["updates", "custom"])]

    assert [("updates", 7, (), {"x": {"log": ["z"]}})] == first
    assert first == again


def test_projection_composes_with_resume_stream_not_just_fresh_runs(ref_checkpointer: Checkpointer) -> None:
    """stream.test.ts · "projected() composes with resumeStream, not just fresh runs"."""
    opts: dict[str, Any] = {"thread_id": "t-proj-resume", "checkpointer": ref_checkpointer}

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.interrupt({"q": "?"})
        return {"log": ["resumed"]}

    paused = linear("pauser", work)
    assert "interrupted" == run(paused, {}, **opts).status

    parts = list(stream_modes(resume_stream(paused, "yes", **opts), ["updates"]))
    assert [{"work": {"log": ["resumed"]}}] == [p.data for p in parts]


# --- token streaming ------------------------------------------------------------------------------


def test_emit_token_rides_the_custom_channel_and_messages_mode_keeps_only_tokens() -> None:
    """stream.test.ts · "emitToken rides the custom channel and messages mode filters it out"."""

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.emit({"progress": 0.5})
        ctx.emit_token("Hel")
        ctx.emit_token("lo", {"model": "x"})
        return {"log": ["done"]}

    g = linear("tok", work)
    messages = list(stream_modes(stream(g, {}), ["messages"]))

    assert ["Hel", "lo"] == [p.data["text"] for p in messages]
    assert {"model": "x"} == messages[1].data["meta"]
    assert 3 == len(list(stream_modes(stream(g, {}), ["custom"])))


def test_messages_mode_keys_off_the_token_shape() -> None:
    """stream.test.ts · "token() / isToken() are the shape messages mode keys off".

    Python has no public ``token()``/``isToken()``; the shape is what
    ``ctx.emit_token`` builds and what messages mode picks out of ``ctx.emit``.
    """

    def work(state: Any, ctx: Any) -> None:
        ctx.emit_token("hi")
        ctx.emit({"type": "token", "text": "hi"})
        ctx.emit({"type": "token"})
        ctx.emit({"text": "hi"})
        ctx.emit("hi")

    messages = [p.data for p in stream_modes(stream(linear("shapes", work)), ["messages"])]

    assert [("token", "hi"), ("token", "hi")] == [(m.get("type"), m.get("text")) for m in messages]


def test_tokens_are_not_journaled(ref_checkpointer: Checkpointer) -> None:
    """stream.test.ts · "tokens are NOT journaled — a resumed node re-streams them"."""
    opts: dict[str, Any] = {"thread_id": "t-tok-replay", "checkpointer": ref_checkpointer}

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.emit_token("draft")
        return {"log": [ctx.step("commit", lambda: "committed")]}

    parts = stream_modes(stream(linear("streamer", work), {}, **opts), ["messages"])
    assert ["draft"] == [p.data["text"] for p in parts]


def test_across_an_interrupt_tokens_re_stream_but_journaled_steps_do_not_re_run(
    ref_checkpointer: Checkpointer,
) -> None:
    """stream.test.ts · "across an interrupt, tokens re-stream but journaled steps do not re-run"."""
    opts: dict[str, Any] = {"thread_id": "t-tok-hitl", "checkpointer": ref_checkpointer}
    commits = [0]

    def commit() -> str:
        commits[0] += 1
        return "done"

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.emit_token("thinking…")
        ctx.step("commit", commit)
        ctx.interrupt({"q": "ok?"})
        return {"log": ["end"]}

    g = linear("hitl-streamer", work)
    pass1 = [p.data["text"] for p in stream_modes(stream(g, {}, **opts), ["messages"])]
    pass2 = [p.data["text"] for p in stream_modes(resume_stream(g, "yes", **opts), ["messages"])]

    assert ["thinking…"] == pass1
    assert ["thinking…"] == pass2
    assert 1 == commits[0]


# --- cancellation ------------------------------------------------------------------------------------


def _cancel(reason: str | None = None) -> threading.Event:
    """A cancel event, as an AbortController is; ``reason`` rides on it as the engine reads it."""
    event = threading.Event()
    if reason is not None:
        event.reason = reason  # type: ignore[attr-defined]
    return event


def test_an_already_cancelled_run_stops_before_any_node_runs() -> None:
    """stream.test.ts · "an already-aborted signal stops the run before any node runs"."""
    ran = [False]

    def work(state: Any) -> dict[str, Any]:
        ran[0] = True
        return {"log": ["x"]}

    cancel = _cancel("user closed the tab")
    cancel.set()

    result = run(linear("never", work), {}, cancel=cancel)
    assert "aborted" == result.status
    assert "user closed the tab" == result.abort_reason
    assert not ran[0]


def test_cancelling_between_supersteps_stops_at_the_boundary() -> None:
    """stream.test.ts · "aborting between supersteps stops at the boundary"."""
    cancel = _cancel()
    ran: list[str] = []

    def a(state: Any) -> dict[str, Any]:
        ran.append("a")
        cancel.set()
        return {"log": ["a"]}

    def b(state: Any) -> dict[str, Any]:
        ran.append("b")
        return {"log": ["b"]}

    g = (
        graph("multi")
        .channel("log", channel.append())
        .node("a", a)
        .node("b", b)
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
    )

    result = run(g, {}, cancel=cancel)
    assert "aborted" == result.status
    assert ["a"] == ran


def test_ctx_cancel_is_the_same_event_so_nodes_can_forward_it() -> None:
    """stream.test.ts · "ctx.signal is the same signal, so nodes can forward it to their own awaits"."""
    cancel = _cancel()
    seen: list[Any] = []

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        seen.append(ctx.cancel)
        return {"log": ["x"]}

    run(linear("forward", work), {}, cancel=cancel)
    assert [cancel] == seen
    assert seen[0] is cancel


def test_a_cancelled_runs_last_checkpoint_stands_and_it_continues_cleanly(
    ref_checkpointer: Checkpointer,
) -> None:
    """stream.test.ts · "an aborted run's last checkpoint stands — it resumes cleanly, not rolled back".

    As the reference: cancel on the first ``checkpoint`` event, then continue
    with ``run(g, {}, ...)``. In Python that first checkpoint is the committed
    input (SPEC §7, beyond ilmek/1), so ``a`` has not run yet when it stops.
    """
    cancel = _cancel("stop")
    g = (
        graph("resumable")
        .channel("log", channel.append())
        .node("a", lambda state: {"log": ["a"]})
        .node("b", lambda state: {"log": ["b"]})
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
    )

    events = []
    for event in stream(g, {}, thread_id="t-abort-resume", checkpointer=ref_checkpointer, cancel=cancel):
        events.append(event)
        if "checkpoint" == event.type:
            cancel.set()
    end = events[-1]
    assert isinstance(end, RunEnd)
    assert "aborted" == end.status

    done = run(g, {}, thread_id="t-abort-resume", checkpointer=ref_checkpointer)
    assert "done" == done.status
    assert "b" in done.state["log"]
