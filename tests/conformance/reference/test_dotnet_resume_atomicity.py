"""Ported from the .NET port's ``dotnet/test/Ilmek.Core.Tests/ResumeAtomicityTests.cs``.

A resume never strands a thread (MODEL §6): a keyed resume that answers only
some of several pauses records nothing, and a resume whose superstep did not
commit (its node failed, or the run was cancelled) leaves the pause open, to
be answered again with the same answer. Python documents the second in its
README ("Forks keep paid-for steps": "resume again with the same answer (a
different one is refused ...) or fork"). Every case runs on memory, SQLite
and Postgres; the .NET ``CancellationToken`` is a set ``threading.Event``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    Checkpointer,
    CompiledGraph,
    ResumeError,
    channel,
    graph,
    pending_interrupts,
    resume,
    resume_keyed,
    run,
)
from tests.support.helpers import Calls
from tests.support.reference import dotnet_opts

pytestmark = pytest.mark.timeout(120)


def _two_pauses() -> CompiledGraph:
    """Graph "two-pauses": ``a`` and ``b`` pause in one superstep, each logging ``<node>=<answer>``."""
    return (
        graph("two-pauses", {"log": channel.append()})
        .node("a", lambda state, ctx: {"log": "a=" + ctx.interrupt({"q": "a?"})})
        .node("b", lambda state, ctx: {"log": "b=" + ctx.interrupt({"q": "b?"})})
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", END)
        .edge("b", END)
        .compile()
    )


def test_a_keyed_resume_missing_an_answer_is_refused_and_records_nothing(
    ref_checkpointer: Checkpointer,
) -> None:
    """ResumeAtomicityTests.PartialKeyedResumeIsAtomic: "a keyed resume missing one answer is refused, names
    the missing id, and writes nothing"."""
    g = _two_pauses()
    opts = dotnet_opts(ref_checkpointer, "t-partial")
    paused = run(g, None, **opts)
    assert 2 == len(paused.pending)

    with pytest.raises(ResumeError, match="no answer supplied") as refused:
        resume_keyed(g, {"a:interrupt#0": "A"}, **opts)

    assert "'b:interrupt#0'" in str(refused.value)
    (a_task,) = [p.task_id for p in paused.pending if p.node == "a"]
    (entry,) = [e for e in ref_checkpointer.get_journal(a_task) if e.key == "interrupt#0"]
    assert not entry.answered
    finished = resume_keyed(g, {"a:interrupt#0": "A", "b:interrupt#0": "B"}, **opts)
    assert "done" == finished.status
    assert ["a=A", "b=B"] == sorted(finished.state["log"])


def test_answers_for_ids_that_are_not_open_pauses_are_ignored(ref_checkpointer: Checkpointer) -> None:
    """ResumeAtomicityTests.ExtraAnswerIdsAreIgnored: "answers for ids that are not pending are ignored, as in
    the TypeScript reference"."""
    g = _two_pauses()
    opts = dotnet_opts(ref_checkpointer, "t-extra")
    run(g, None, **opts)

    finished = resume_keyed(
        g,
        {
            "a:interrupt#0": "A",
            "b:interrupt#0": "B",
            "c:interrupt#0": "nobody asked",
            "a:interrupt#1": "not yet asked",
        },
        **opts,
    )

    assert "done" == finished.status
    assert ["a=A", "b=B"] == sorted(finished.state["log"])


def _fails_once_after_answer(prepare: Callable[[], Any], should_fail: Callable[[], bool]) -> CompiledGraph:
    """Graph "fails-after-answer": ``work`` steps ``prepare``, asks "go?", and may fail after the answer."""

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        ctx.step("prepare", prepare)
        answer = ctx.interrupt({"q": "go?"})
        if should_fail():
            raise RuntimeError("post-answer boom")
        return {"log": [answer]}

    return (
        graph("fails-after-answer", {"log": channel.append()})
        .node("work", work)
        .edge(START, "work")
        .edge("work", END)
        .compile()
    )


def _once() -> Callable[[], bool]:
    """True the first time it is called, then False."""
    calls = Calls()

    def first_time() -> bool:
        calls.hit("asked")
        return calls["asked"] == 1

    return first_time


def test_a_resume_whose_node_fails_can_be_retried_with_the_same_answer(
    ref_checkpointer: Checkpointer,
) -> None:
    """ResumeAtomicityTests.FailedResumeRetriesWithSameAnswer: "a resume whose node fails can be retried
    with the same answer"."""
    calls = Calls()
    g = _fails_once_after_answer(lambda: calls.hit("prepare"), _once())
    opts = dotnet_opts(ref_checkpointer, "t-retry-resume")
    assert "interrupted" == run(g, None, **opts).status

    failed = resume(g, "yes", **opts)

    assert "error" == failed.status
    assert "post-answer boom" == str(failed.errors[0][1])
    assert 1 == len(pending_interrupts(ref_checkpointer, "t-retry-resume"))
    finished = resume(g, "yes", **opts)
    assert ("done", ["yes"]) == (finished.status, finished.state["log"])
    assert 1 == calls["prepare"]


def test_a_resume_cancelled_before_its_superstep_can_be_retried_with_the_same_answer(
    ref_checkpointer: Checkpointer,
) -> None:
    """ResumeAtomicityTests.CancelledResumeRetriesWithSameAnswer: "a resume cancelled before its first
    superstep can be retried with the same answer".

    The reason of a cancel event set without one is ``"aborted"`` in Python
    (as for a reason-less abort in the TypeScript reference); the .NET token
    reports ``"cancelled"``.
    """
    calls = Calls()
    g = _fails_once_after_answer(lambda: calls.hit("prepare"), lambda: False)
    assert "interrupted" == run(g, None, **dotnet_opts(ref_checkpointer, "t-cancel-resume")).status
    cancel = threading.Event()
    cancel.set()

    aborted = resume(g, "yes", **dotnet_opts(ref_checkpointer, "t-cancel-resume", cancel=cancel))

    assert ("aborted", "aborted") == (aborted.status, aborted.abort_reason)
    finished = resume(g, "yes", **dotnet_opts(ref_checkpointer, "t-cancel-resume"))
    assert ("done", ["yes"]) == (finished.status, finished.state["log"])
    assert 1 == calls["prepare"]


def test_after_a_resume_that_did_not_commit_a_different_answer_is_refused(
    ref_checkpointer: Checkpointer,
) -> None:
    """ResumeAtomicityTests.ChangedAnswerAfterFailedResumeIsRefused: "after a resume that did not commit, a
    DIFFERENT answer is refused and the original still works"."""
    g = _fails_once_after_answer(lambda: 0, _once())
    opts = dotnet_opts(ref_checkpointer, "t-changed")
    run(g, None, **opts)
    assert "error" == resume(g, "yes", **opts).status

    with pytest.raises(ResumeError, match="already answered") as refused:
        resume(g, "no", **opts)

    assert "'yes'" in str(refused.value)
    assert "same answer" in str(refused.value)
    finished = resume(g, "yes", **opts)
    assert ("done", ["yes"]) == (finished.status, finished.state["log"])


def test_the_same_answer_is_compared_by_value(ref_checkpointer: Checkpointer) -> None:
    """ResumeAtomicityTests.SameAnswerComparesStructurally: "the same-answer check compares structurally, so
    an equal object answer is accepted".

    The reference gets back the very instance answered first; Python's
    stores keep encoded JSON, so it comes back equal to it.
    """
    fail = _once()

    def work(state: Any, ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt({"q": "go?"})
        if fail():
            raise RuntimeError("boom")
        return {"log": [answer]}

    g = graph("object-answer", {"log": channel.append()}).node("work", work).edge(START, "work").compile()
    opts = dotnet_opts(ref_checkpointer, "t-object")
    run(g, None, **opts)
    first = {"approved": True, "note": "ok"}
    assert "error" == resume(g, first, **opts).status

    finished = resume(g, {"approved": True, "note": "ok"}, **opts)

    assert ("done", [first]) == (finished.status, finished.state["log"])


def test_after_a_failed_keyed_resume_of_two_pauses_the_same_answers_complete_it(
    ref_checkpointer: Checkpointer,
) -> None:
    """ResumeAtomicityTests.FailedConcurrentResumeRetries: "after a failed keyed resume of concurrent
    pauses, the same answers complete the thread"."""
    b_fails = _once()

    def b(state: Any, ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt()
        if b_fails():
            raise RuntimeError("b boom")
        return {"log": ["b=" + answer]}

    g = (
        graph("concurrent-fail", {"log": channel.append()})
        .node("a", lambda state, ctx: {"log": ["a=" + ctx.interrupt()]})
        .node("b", b)
        .edge(START, "a")
        .edge(START, "b")
        .edge("a", END)
        .edge("b", END)
        .compile()
    )
    opts = dotnet_opts(ref_checkpointer, "t-conc-fail")
    run(g, None, **opts)
    answers = {"a:interrupt#0": "A", "b:interrupt#0": "B"}

    failed = resume_keyed(g, answers, **opts)

    assert "error" == failed.status
    assert ["b"] == [node for node, _ in failed.errors]
    finished = resume_keyed(g, answers, **opts)
    assert "done" == finished.status
    assert ["a=A", "b=B"] == sorted(finished.state["log"])
