"""Ported from the reference's ``ts/packages/core/test/ilmek.test.ts``.

Its MODEL §12 cases (§12.1 to §12.5, §12.7 and the concurrent-pauses case) are
conformance scenarios 1 to 5, 7 and 8: they live, once, in
``test_conformance_scenarios.py``. Here are the rest: the basics, strict mode
switched off, and the ergonomics of resuming.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    GraphError,
    IlmekError,
    ResumeError,
    channel,
    graph,
    pending_interrupts,
    resume,
    resume_keyed,
    run,
    stream,
)
from ilmek.events import CustomEvent, StateEvent
from tests.support.reference import linear, pausing, wobbly

# --- basics -------------------------------------------------------------------------------


def test_a_graph_runs_to_completion_without_a_checkpointer() -> None:
    """ilmek.test.ts · "a graph runs to completion without a checkpointer"."""
    result = run(linear("plain", lambda state: {"log": ["hi"]}))

    assert "done" == result.status
    assert ["hi"] == result.state["log"]


def test_append_accumulates_across_supersteps() -> None:
    """ilmek.test.ts · "reducers fold updates: append accumulates across supersteps"."""
    g = (
        graph("chain")
        .channel("log", channel.append())
        .node("a", lambda state: {"log": ["a"]})
        .node("b", lambda state: {"log": ["b"]})
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .compile()
    )

    assert ["a", "b"] == run(g).state["log"]


def test_a_node_sees_the_input_folded_through_its_channels_reducer() -> None:
    """ilmek.test.ts · "a node sees the input folded through its channel's reducer"."""
    g = linear("echo", lambda state: {"log": [f"saw:{state['log'][0]}"]})

    assert ["in", "saw:in"] == run(g, {"log": ["in"]}).state["log"]


def test_a_node_may_return_nothing() -> None:
    """ilmek.test.ts · "a node may return nothing"."""
    assert "done" == run(linear("silent", lambda state: None)).status


def test_a_router_picks_the_branch() -> None:
    """ilmek.test.ts · "a router picks the branch"."""
    g = (
        graph("route")
        .channel("log", channel.append())
        .channel("intent", channel.last_write())
        .node("classify", lambda state: {"intent": "buy"})
        .node("buy", lambda state: {"log": ["bought"]})
        .node("browse", lambda state: {"log": ["browsed"]})
        .edge(START, "classify")
        .router("classify", lambda state: "buy" if state["intent"] == "buy" else "browse")
        .edge("buy", END)
        .edge("browse", END)
        .compile()
    )

    assert ["bought"] == run(g).state["log"]


def test_writing_an_undeclared_channel_fails_loudly_attributed_to_its_node() -> None:
    """ilmek.test.ts · "writing an undeclared channel fails loudly, attributed to its node".

    The reference raises a GraphError; SPEC §2 only asks for a node error naming
    node and channel, so the class is left open (Python raises ReducerError).
    """
    result = run(linear("typo", lambda state: {"lgo": ["oops"]}))

    assert "error" == result.status
    node, error = result.errors[0]
    assert "work" == node
    assert isinstance(error, IlmekError)
    assert "'lgo'" in str(error)


def test_ctx_emit_reaches_the_stream_live_before_the_superstep_settles() -> None:
    """ilmek.test.ts · "ctx.emit reaches the stream live, before the superstep settles"."""

    def emitter(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.emit({"token": "hel"})
        ctx.emit({"token": "lo"})
        return {"log": ["done"]}

    events = list(stream(linear("emitter", emitter)))
    customs = [e for e in events if isinstance(e, CustomEvent)]
    reduced = next(e for e in events if isinstance(e, StateEvent) and e.channels.get("log") == ["done"])

    assert [{"token": "hel"}, {"token": "lo"}] == [e.payload for e in customs]
    assert all(e.seq < reduced.seq for e in customs)


def test_interrupt_without_a_checkpointer_explains_itself_instead_of_hanging() -> None:
    """ilmek.test.ts · "interrupt without a checkpointer explains itself instead of hanging".

    SPEC §4 (issue #8): the run ends ``error`` with a ResumeError saying a
    checkpointer is needed to answer a pause.
    """
    result = run(linear("no-cp", lambda state, ctx: ctx.interrupt({"q": "?"})))

    assert "error" == result.status
    _, error = result.errors[0]
    assert isinstance(error, ResumeError)
    assert "checkpointer" in str(error)


def _failure(g: Any) -> BaseException:
    """What went wrong in ``run(g)``: raised out of it, or the run's first error."""
    try:
        result = run(g)
    except Exception as error:
        return error
    assert "error" == result.status
    return result.errors[0][1]


@pytest.mark.parametrize("call", ["step", "interrupt"])
def test_a_guard_cannot_step_or_interrupt_it_has_no_journal(call: str) -> None:
    """ilmek.test.ts · "a guard cannot step or interrupt — it has no journal".

    The reference calls ``ctx.step`` from a guard and gets a GraphError saying
    it is not available in a router or guard; ``ctx.interrupt`` likewise
    (issue #8: a clear error, plan-time code has no journal).
    """

    def guard(state: Any, ctx: Any) -> bool:
        if call == "step":
            return bool(ctx.step("nope", lambda: 1))
        return bool(ctx.interrupt({"q": "?"}))

    g = (
        graph("impure-guard")
        .channel("log", channel.append())
        .node("a", lambda state: {"log": ["a"]})
        .node("b", lambda state: {"log": ["b"]})
        .edge(START, "a")
        .edge("a", "b", when=guard)
        .edge("b", END)
        .compile()
    )

    error = _failure(g)
    assert isinstance(error, GraphError)
    assert call in str(error)
    assert re.search(r"router|guard", str(error))


# --- strict mode ----------------------------------------------------------------------------


def test_strict_mode_can_be_turned_off_for_a_run(ref_checkpointer: Checkpointer) -> None:
    """ilmek.test.ts · "strict mode can be turned off for a run"."""
    take_branch = [True]
    g = wobbly(take_branch)
    opts: dict[str, Any] = {"thread_id": "t-lax", "checkpointer": ref_checkpointer, "strict": False}

    assert "interrupted" == run(g, {}, **opts).status
    take_branch[0] = False
    assert "done" == resume(g, "yes", **opts).status


# --- resume ergonomics ----------------------------------------------------------------------


def test_an_object_answer_to_a_single_interrupt_is_the_answer_not_a_key_map(
    ref_checkpointer: Checkpointer,
) -> None:
    """ilmek.test.ts · "an object answer to a single interrupt is the answer, not a key map"."""
    opts: dict[str, Any] = {"thread_id": "t-obj", "checkpointer": ref_checkpointer}

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt({"q": "?"})
        return {"log": [f"approved={answer['approved']}"]}

    g = linear("obj", work)
    assert "interrupted" == run(g, {}, **opts).status

    done = resume(g, {"approved": True}, **opts)
    assert "done" == done.status
    assert ["approved=True"] == done.state["log"]


def test_resume_keyed_works_for_the_single_pause_case_too(ref_checkpointer: Checkpointer) -> None:
    """ilmek.test.ts · "resumeKeyed works for the single-pause case too, so generic UIs need no
    special case"."""
    opts: dict[str, Any] = {"thread_id": "t-keyed", "checkpointer": ref_checkpointer}
    g = pausing("keyed")

    assert "interrupted" == run(g, {}, **opts).status
    assert "done" == resume_keyed(g, {"work:interrupt#0": "yes"}, **opts).status


def test_new_input_on_a_parked_thread_is_refused_not_silently_dropped(ref_checkpointer: Checkpointer) -> None:
    """ilmek.test.ts · "new input on a parked thread is refused, not silently dropped"."""
    opts: dict[str, Any] = {"thread_id": "t-guard-1", "checkpointer": ref_checkpointer}

    assert "interrupted" == run(pausing("g1"), {}, **opts).status
    with pytest.raises(ResumeError, match="waiting"):
        run(pausing("g1"), {"log": ["new"]}, **opts)


def test_resuming_a_thread_with_no_checkpoint_is_refused(ref_checkpointer: Checkpointer) -> None:
    """ilmek.test.ts · "resuming a thread with no checkpoint is refused"."""
    with pytest.raises(ResumeError, match="no checkpoint"):
        resume(pausing("g2"), "yes", thread_id="t-nothing", checkpointer=ref_checkpointer)


def test_pending_interrupts_reports_what_a_thread_is_waiting_on(ref_checkpointer: Checkpointer) -> None:
    """ilmek.test.ts · "pendingInterrupts reports what a thread is waiting on"."""
    opts: dict[str, Any] = {"thread_id": "t-guard-2", "checkpointer": ref_checkpointer}

    assert "interrupted" == run(pausing("g3"), {}, **opts).status

    pending = pending_interrupts(ref_checkpointer, "t-guard-2")
    assert "interrupt#0" == pending[0].key
    assert "work" == pending[0].node
    assert {"q": "?"} == pending[0].payload
