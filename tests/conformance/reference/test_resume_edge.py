"""Ported from the reference's ``ts/packages/core/test/resume.edge.test.ts``.

The ways a caller can answer a pause wrongly, twice, partially or after a
failure, and the guarantee that none of them corrupts the thread or runs a
journaled effect again. Every test runs on memory, a SQLite file and Postgres.
"""

from __future__ import annotations

import threading
import types
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    CompiledGraph,
    InvalidArgumentError,
    Result,
    ResumeError,
    ThreadBusyError,
    channel,
    graph,
    pending_interrupts,
    resume,
    resume_keyed,
    resume_keyed_stream,
    run,
    thread_state,
)
from tests.support.helpers import Calls
from tests.support.reference_edge import linear, race

pytestmark = pytest.mark.timeout(60)


def two_pauses() -> CompiledGraph:
    """Nodes ``a`` and ``b`` pause in the same superstep, each logging its own answer."""

    def ask(name: str) -> Any:
        def node(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
            return {"log": [f"{name}={ctx.interrupt({'q': f'{name}?'})}"]}

        return node

    return (
        graph("two", {"log": channel.append()})
        .node("a", ask("a"))
        .node("b", ask("b"))
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", END)
        .edge("b", END)
        .compile()
    )


def answer_log(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """A node body that logs the answer to its one pause."""
    return {"log": [ctx.interrupt()]}


# --- resumeKeyed: partial and wrong answers -------------------------------------------


def test_a_partial_keyed_resume_is_refused_naming_the_missing_id(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "answering only some of several pauses is refused and names the missing id"."""
    options: dict[str, Any] = {"thread_id": "t-partial", "checkpointer": ref_checkpointer}
    g = two_pauses()

    assert "interrupted" == run(g, {}, **options).status

    with pytest.raises(ResumeError, match="'b:interrupt#0'"):
        resume_keyed(g, {"a:interrupt#0": "yes"}, **options)


def test_a_refused_partial_resume_writes_nothing(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "a refused partial resume writes nothing, so the full answer still completes"."""
    options: dict[str, Any] = {"thread_id": "t-partial-retry", "checkpointer": ref_checkpointer}
    g = two_pauses()
    run(g, {}, **options)
    with pytest.raises(ResumeError):
        resume_keyed(g, {"a:interrupt#0": "first-try"}, **options)

    finished = resume_keyed(g, {"a:interrupt#0": "A", "b:interrupt#0": "B"}, **options)

    assert "done" == finished.status
    assert ["a=A", "b=B"] == finished.state["log"]


def test_an_answer_keyed_by_the_task_scoped_key_is_refused(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "an answer keyed by the task-scoped key instead of the id is refused"."""
    options: dict[str, Any] = {"thread_id": "t-by-key", "checkpointer": ref_checkpointer}
    g = linear(lambda state, ctx: {"log": [ctx.interrupt({"q": "?"})]})
    run(g, {}, **options)

    with pytest.raises(ResumeError, match="work:interrupt#0"):
        resume_keyed(g, {"interrupt#0": "yes"}, **options)

    assert 1 == len(pending_interrupts(ref_checkpointer, "t-by-key"))
    assert ["yes"] == resume_keyed(g, {"work:interrupt#0": "yes"}, **options).state["log"]


def test_an_empty_answer_map_is_refused_while_a_pause_is_open(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "an empty answer map is refused while a pause is open"."""
    options: dict[str, Any] = {"thread_id": "t-empty", "checkpointer": ref_checkpointer}
    g = linear(answer_log)
    run(g, {}, **options)

    with pytest.raises(ResumeError, match="work:interrupt#0"):
        resume_keyed(g, {}, **options)


def test_answers_for_ids_that_are_not_pending_are_ignored(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "answers for ids that are not pending are ignored alongside the right one"."""
    options: dict[str, Any] = {"thread_id": "t-extra", "checkpointer": ref_checkpointer}
    g = linear(answer_log)
    run(g, {}, **options)

    finished = resume_keyed(g, {"work:interrupt#0": "real", "ghost:interrupt#0": "noise"}, **options)

    assert "done" == finished.status
    assert ["real"] == finished.state["log"]


def test_any_mapping_of_answers_is_accepted(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "a Map of answers is accepted as well as a plain object".

    In Python: any ``Mapping`` (here a read-only one, in the other key order).
    """
    options: dict[str, Any] = {"thread_id": "t-map", "checkpointer": ref_checkpointer}
    g = two_pauses()
    run(g, {}, **options)

    answers = types.MappingProxyType({"b:interrupt#0": "2", "a:interrupt#0": "1"})
    finished = resume_keyed(g, answers, **options)

    assert ["a=1", "b=2"] == finished.state["log"]


def test_a_refused_resume_raises_before_the_stream_yields(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "a refused resume is raised before the stream yields anything"."""
    options: dict[str, Any] = {"thread_id": "t-stream-refused", "checkpointer": ref_checkpointer}
    g = two_pauses()
    run(g, {}, **options)

    events = resume_keyed_stream(g, {"a:interrupt#0": "only-a"}, **options)

    with pytest.raises(ResumeError):
        next(events)


# --- resume: falsy and structured answers -----------------------------------------------


@pytest.mark.parametrize(
    "answer", [None, 0, False, "", [], {"nested": {"deep": [1, 2]}}], ids=lambda answer: repr(answer)
)
def test_the_answer_reaches_the_node_verbatim(ref_checkpointer: Checkpointer, answer: Any) -> None:
    """resume.edge · "the answer <falsy or structured value> reaches the node verbatim"."""
    options: dict[str, Any] = {"thread_id": "t-falsy", "checkpointer": ref_checkpointer}
    g = linear(answer_log)
    run(g, {}, **options)

    finished = resume(g, answer, **options)

    assert "done" == finished.status
    assert [answer] == finished.state["log"]


def test_a_none_answer_is_a_real_answer(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "an undefined answer is a real answer, not a missing one" (undefined is None)."""
    options: dict[str, Any] = {"thread_id": "t-undefined", "checkpointer": ref_checkpointer}
    seen: list[Any] = []

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        seen.append(ctx.interrupt())
        return {}

    g = linear(work)
    run(g, {}, **options)

    assert "done" == resume(g, None, **options).status
    assert [None] == seen


# --- resume: twice, too early, too late -----------------------------------------------------


def test_a_second_resume_is_refused_and_reruns_nothing(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "a second resume of an already-resumed thread is refused and re-runs nothing"."""
    options: dict[str, Any] = {"thread_id": "t-double", "checkpointer": ref_checkpointer}
    calls = Calls()

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("effect", calls.hit, "effect")
        return {"log": [ctx.interrupt()]}

    g = linear(work)
    run(g, {}, **options)
    assert "done" == resume(g, "once", **options).status

    with pytest.raises(ResumeError):
        resume(g, "twice", **options)

    assert {"effect": 1} == dict(calls)
    assert ["once"] == thread_state(g, ref_checkpointer, "t-double")["log"]


def test_resuming_a_thread_that_never_paused_is_refused(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "resuming a thread that finished without ever pausing is refused"."""
    options: dict[str, Any] = {"thread_id": "t-never-paused", "checkpointer": ref_checkpointer}
    g = linear(lambda state: {"log": ["done"]})
    run(g, {}, **options)

    with pytest.raises(ResumeError):
        resume_keyed(g, {}, **options)


def test_resume_without_a_checkpointer_is_refused_and_runs_nothing() -> None:
    """resume.edge · "resume without a checkpointer is refused, it does not run the graph fresh".

    Python SPEC §4 (issue #8): a ``thread_id`` with no checkpointer is a mistake in
    the call, raised before any node runs: ``InvalidArgumentError`` (also a
    ``ValueError``), where the reference raises ``ResumeError``.
    """
    calls = Calls()
    g = linear(lambda state: calls.hit("work"))

    with pytest.raises(
        InvalidArgumentError, match=r"^thread_id='t-none' was given without a checkpointer"
    ) as caught:
        resume(g, "yes", thread_id="t-none")

    assert InvalidArgumentError is type(caught.value)
    assert isinstance(caught.value, ValueError)
    assert {} == dict(calls)


def test_resuming_one_thread_never_answers_another(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "resuming one thread never answers a pause parked on another"."""
    g = linear(answer_log)
    run(g, {}, thread_id="t-left", checkpointer=ref_checkpointer)
    run(g, {}, thread_id="t-right", checkpointer=ref_checkpointer)
    resume(g, "left-answer", thread_id="t-left", checkpointer=ref_checkpointer)

    assert 1 == len(pending_interrupts(ref_checkpointer, "t-right"))
    right = resume(g, "right-answer", thread_id="t-right", checkpointer=ref_checkpointer)
    assert ["right-answer"] == right.state["log"]


# --- resume: a resumed superstep that does not commit -------------------------------------


def test_after_the_resumed_node_fails_the_same_answer_completes(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "after the resumed node throws, resuming again with the same answer completes"."""
    options: dict[str, Any] = {"thread_id": "t-resume-crash", "checkpointer": ref_checkpointer}
    calls = Calls()
    crashes = ["downstream outage"]

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("before", calls.hit, "before")
        answer = ctx.interrupt({"q": "?"})
        if crashes:
            raise RuntimeError(crashes.pop())
        return {"log": [answer]}

    g = linear(work)
    run(g, {}, **options)

    failed = resume(g, "yes", **options)
    assert "error" == failed.status
    assert 1 == len(pending_interrupts(ref_checkpointer, "t-resume-crash"))

    finished = resume(g, "yes", **options)
    assert "done" == finished.status
    assert ["yes"] == finished.state["log"]
    assert {"before": 1} == dict(calls)


def test_a_step_after_the_answer_is_not_repeated_by_the_retry(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "a step that ran after the answer is not repeated by the retried resume"."""
    options: dict[str, Any] = {"thread_id": "t-after-answer", "checkpointer": ref_checkpointer}
    calls = Calls()
    crashes = ["crash after charging"]

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt()
        ctx.step("charge", calls.hit, "charge")
        if crashes:
            raise RuntimeError(crashes.pop())
        return {"log": [answer]}

    g = linear(work)
    run(g, {}, **options)

    assert "error" == resume(g, "go", **options).status
    assert "done" == resume(g, "go", **options).status
    assert {"charge": 1} == dict(calls)


def test_after_a_cancelled_resume_the_same_answer_completes(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "after an aborted resume, resuming again with the same answer completes".

    The TS ``AbortSignal`` is a ``threading.Event`` whose ``reason`` attribute says why.
    """
    options: dict[str, Any] = {"thread_id": "t-resume-abort", "checkpointer": ref_checkpointer}
    g = linear(answer_log)
    run(g, {}, **options)
    cancel = threading.Event()
    cancel.reason = "user went away"  # type: ignore[attr-defined]
    cancel.set()

    aborted = resume(g, "yes", cancel=cancel, **options)
    assert ("aborted", "user went away") == (aborted.status, aborted.abort_reason)

    finished = resume(g, "yes", **options)
    assert "done" == finished.status
    assert ["yes"] == finished.state["log"]


def test_a_different_answer_than_the_recorded_one_is_refused(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "a different answer than the one already recorded is refused, the original works"."""
    options: dict[str, Any] = {"thread_id": "t-changed-mind", "checkpointer": ref_checkpointer}
    crashes = ["boom"]

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt()
        if crashes:
            raise RuntimeError(crashes.pop())
        return {"log": [answer]}

    g = linear(work)
    run(g, {}, **options)
    assert "error" == resume(g, {"approve": True}, **options).status

    with pytest.raises(ResumeError, match="already answered"):
        resume(g, {"approve": False}, **options)

    # Structurally equal (not identical) answers count as the same answer.
    finished = resume(g, {"approve": True}, **options)
    assert [{"approve": True}] == finished.state["log"]


def test_a_retried_keyed_resume_reanswers_one_and_answers_another(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "a retried keyed resume may re-answer one pause and newly answer another"."""
    options: dict[str, Any] = {"thread_id": "t-mixed-retry", "checkpointer": ref_checkpointer}
    crashes = ["a fails once"]

    def node_a(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt()
        if crashes:
            raise RuntimeError(crashes.pop())
        return {"log": [f"a={answer}"]}

    g = (
        graph("mixed", {"log": channel.append()})
        .node("a", node_a)
        .node("b", lambda state, ctx: {"log": [f"b={ctx.interrupt()}"]})
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", END)
        .edge("b", END)
        .compile()
    )
    run(g, {}, **options)
    answers = {"a:interrupt#0": "1", "b:interrupt#0": "2"}

    assert "error" == resume_keyed(g, answers, **options).status
    finished = resume_keyed(g, answers, **options)

    assert "done" == finished.status
    assert ["a=1", "b=2"] == finished.state["log"]


# --- concurrent resumes of one pause ----------------------------------------------------------


def test_racing_resumes_of_one_pause_run_the_earlier_effect_once(ref_checkpointer: Checkpointer) -> None:
    """resume.edge · "concurrent resumes of one pause: the effect journaled before it runs once".

    Python threads race where the reference awaits two promises; a loser gets
    ``ThreadBusyError`` (one run per thread, beyond ilmek/1) or ``ResumeError``.
    """
    options: dict[str, Any] = {"thread_id": "t-race", "checkpointer": ref_checkpointer}
    calls = Calls()

    def work(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("pre", calls.hit, "pre")
        return {"log": [ctx.interrupt()]}

    g = linear(work)
    run(g, {}, **options)

    outcomes = race(lambda: resume(g, "same", **options), lambda: resume(g, "same", **options))

    assert any(isinstance(o, Result) and "done" == o.status for o in outcomes)
    assert all(isinstance(o, Result | ThreadBusyError | ResumeError) for o in outcomes), outcomes
    assert {"pre": 1} == dict(calls)
    assert () == pending_interrupts(ref_checkpointer, "t-race")
