"""An answer goes to the pause it was meant for, attacked with the double click of an agent loop whose
every pause has the same id: a second answer to an answered pause is refused, never applied to the pause
that opened after it. Callers say which pause they answer with ``expect_checkpoint_id=``; without it a
resume answers the pause it first read. Messages say what was wrong, in one vocabulary.

On real stores: a SQLite file and a fresh Postgres database, each opened twice as two processes would.
"""

from __future__ import annotations

from typing import Any

import pytest

from ilmek import END, START, ResumeError, channel, graph, resume, resume_keyed, run
from tests.support.helpers import Calls
from tests.support.stores import Store, store_fixture  # noqa: F401 - the store fixture

pytestmark = pytest.mark.timeout(60)


def agent_loop(calls: Calls, tools: int = 3) -> Any:
    """An agent asking to approve each tool call in turn; every pause has the id ``approve:interrupt#0``."""

    def approve(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        tool = len(state["done"]) + 1
        answer = ctx.interrupt({"approve tool": tool})
        if answer == "approve":
            ctx.step("call", calls.hit, f"tool #{tool}")
        return {"done": [f"tool #{tool}: {answer}"]}

    return (
        graph("agent", {"done": channel.append()})
        .node("approve", approve)
        .edge(START, "approve")
        .router("approve", lambda state: END if len(state["done"]) >= tools else "approve")
        .compile()
    )


def after_first_call(checkpointer: Any, method: str, meanwhile: Any) -> None:
    """Run ``meanwhile`` right after the checkpointer's first call of ``method`` (its read goes stale)."""
    plain = getattr(checkpointer, method)
    calls = [0]

    def then_meanwhile(*args: Any, **kwargs: Any) -> Any:
        found = plain(*args, **kwargs)
        calls[0] += 1
        if calls[0] == 1:
            meanwhile()
        return found

    setattr(checkpointer, method, then_meanwhile)


def test_a_double_clicked_approve_never_approves_the_next_pause(store: Store) -> None:
    """Two approves of tool #1 race (two processes): the second read the pause, then the first approved
    it and the loop paused again, at tool #2, under the same pause id. The second is refused; tool #2 is
    not approved and not called; the thread waits for its answer."""
    calls = Calls()
    g = agent_loop(calls)
    first, second = store.open(), store.open()
    paused = run(g, {}, thread_id="loop", checkpointer=first)
    assert ("interrupted", "approve:interrupt#0") == (paused.status, paused.pending[0].id)

    def the_first_click_lands() -> None:
        again = resume(g, "approve", thread_id="loop", checkpointer=first)
        assert ("interrupted", {"approve tool": 2}) == (again.status, again.pending[0].payload)

    after_first_call(second, "load", the_first_click_lands)
    with pytest.raises(ResumeError, match="already answered") as refused:
        resume(g, "approve", thread_id="loop", checkpointer=second)
    assert "'loop'" in str(refused.value)
    assert {"tool #1": 1} == dict(calls)
    latest = store.open().get("loop")
    assert latest is not None
    assert [{"approve tool": 2}] == [pause.payload for pause in latest.pending]
    assert ["tool #1: approve"] == latest.channels["done"]


def test_an_answer_names_the_pause_it_answers_and_a_second_one_is_refused(store: Store) -> None:
    """``expect_checkpoint_id=`` the paused run's checkpoint: the first answer lands; the same answer
    sent again (a double click, even much later) is a ResumeError saying the pause was answered; the
    pause that opened after it stays open."""
    calls = Calls()
    g = agent_loop(calls)
    checkpointer = store.open()
    paused = run(g, {}, thread_id="named", checkpointer=checkpointer)
    assert paused.checkpoint_id is not None
    seen = paused.checkpoint_id
    again = resume(g, "approve", thread_id="named", checkpointer=checkpointer, expect_checkpoint_id=seen)
    assert "interrupted" == again.status
    with pytest.raises(ResumeError, match="already answered"):
        resume(g, "approve", thread_id="named", checkpointer=checkpointer, expect_checkpoint_id=seen)
    with pytest.raises(ResumeError, match="already answered"):
        resume_keyed(
            g, {"approve:interrupt#0": "approve"}, thread_id="named", checkpointer=checkpointer,
            expect_checkpoint_id=seen,
        )  # fmt: skip
    assert {"tool #1": 1} == dict(calls)
    # The pause the caller does see is answered as usual.
    last = resume(
        g, "reject", thread_id="named", checkpointer=checkpointer, expect_checkpoint_id=again.checkpoint_id
    )
    assert ("interrupted", ["tool #1: approve", "tool #2: reject"]) == (
        last.status,
        checkpointer.get("named").channels["done"],  # type: ignore[union-attr]
    )


def test_a_run_that_expects_a_checkpoint_the_thread_left_writes_nothing(store: Store) -> None:
    """``run(..., expect_checkpoint_id=)`` on a thread that moved on: a ResumeError, nothing written."""
    counter = (
        graph("count", {"n": channel.append()})
        .node("add", lambda state: {"n": [len(state["n"])]})
        .edge(START, "add")
        .compile()
    )
    checkpointer = store.open()
    first = run(counter, {"n": [0]}, thread_id="count", checkpointer=checkpointer)
    run(counter, {"n": [1]}, thread_id="count", checkpointer=checkpointer)
    before = [c.id for c in checkpointer.list("count")]
    with pytest.raises(ResumeError, match="moved on from checkpoint"):
        run(
            counter,
            {"n": [2]},
            thread_id="count",
            checkpointer=checkpointer,
            expect_checkpoint_id=first.checkpoint_id,
        )
    assert before == [c.id for c in checkpointer.list("count")]


def test_answering_an_unknown_pause_id_says_the_id_is_not_open(store: Store) -> None:
    """resume_keyed with a mistyped id: the error names the open id it lacks and the given id as not open."""
    g = agent_loop(Calls())
    checkpointer = store.open()
    run(g, {}, thread_id="typo", checkpointer=checkpointer)
    with pytest.raises(ResumeError) as refused:
        resume_keyed(g, {"aprove:interrupt#0": "approve"}, thread_id="typo", checkpointer=checkpointer)
    message = str(refused.value)
    assert "'approve:interrupt#0'" in message
    assert "'aprove:interrupt#0', which is not an open pause" in message


def test_paused_and_waiting_mean_interrupted_where_a_status_is_typed(store: Store) -> None:
    """One vocabulary: the status is ``interrupted``; ``paused`` and ``waiting`` are accepted for it."""
    g = agent_loop(Calls())
    checkpointer = store.open()
    run(g, {}, thread_id="waits", checkpointer=checkpointer)
    expected = [t.id for t in checkpointer.list_threads(status="interrupted")]
    assert ["waits"] == expected
    assert expected == [t.id for t in checkpointer.list_threads(status="paused")]
    assert expected == [t.id for t in checkpointer.list_threads(status="waiting")]
    with pytest.raises(ResumeError, match="is interrupted at checkpoint"):
        run(g, {}, thread_id="waits", checkpointer=checkpointer)
