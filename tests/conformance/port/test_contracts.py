"""The port suite, pauses as contracts: the contract, deadline and kind stored with the pause, answers
checked before anything is written (all or nothing), reviews reaching the node as ``Review``, and who
answered (``by``), on every backend.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

from ilmek import (
    START,
    AnswerRejectedError,
    Checkpointer,
    InvalidArgumentError,
    Review,
    answers,
    channel,
    graph,
    pending_interrupts,
    resume,
    resume_keyed,
    run,
)
from ilmek.types import utc_now

pytestmark = pytest.mark.timeout(60)

LATER = dt.datetime(2100, 1, 2, 3, 4, 5, 250000, tzinfo=dt.UTC)


def _one_node(body: Callable[..., Any], name: str = "ask") -> Any:
    return graph("contracts", {"log": channel.append()}).node(name, body).edge(START, name).compile()


def _charge(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
    ok = ctx.interrupt(
        {"question": "Charge 249.9?"},
        answers=answers.choice("yes", "no"),
        deadline=LATER,
        on_timeout="no",
    )
    return {"log": [ok]}


def test_the_contract_and_deadline_are_stored_with_the_pause(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """A pause's contract (JSON form), deadline, on_timeout, kind and ns read back the same from another
    checkpointer on the store."""
    paused = run(_one_node(_charge), {}, thread_id="stored", checkpointer=checkpointer)
    assert "interrupted" == paused.status
    (pause,) = pending_interrupts(reopen(), "stored")
    assert {"kind": "choice", "options": ["yes", "no"]} == pause.answers
    assert LATER == pause.deadline
    assert ("no", "person", ()) == (pause.on_timeout, pause.kind, pause.ns)
    assert paused.pending == (pause,)


def test_a_timedelta_deadline_counts_from_the_pause(checkpointer: Checkpointer) -> None:
    """deadline=timedelta is stored as the aware time the pause was made plus that much."""

    def ask(state: dict[str, Any], ctx: Any) -> None:
        ctx.interrupt("q", deadline=dt.timedelta(hours=24), on_timeout=None)

    before = utc_now()
    (pause,) = run(_one_node(ask), {}, thread_id="delta", checkpointer=checkpointer).pending
    assert pause.deadline is not None
    assert before + dt.timedelta(hours=24) <= pause.deadline <= utc_now() + dt.timedelta(hours=24)
    assert (None, None) == (pause.answers, pause.on_timeout)


@pytest.mark.parametrize(
    "terms",
    [
        {"deadline": dt.timedelta(hours=1)},
        {"on_timeout": "no"},
        {"deadline": dt.datetime(2100, 1, 1), "on_timeout": "no"},
        {"answers": answers.choice("yes", "no"), "deadline": dt.timedelta(1), "on_timeout": "maybe"},
        {"answers": "yes or no"},
    ],
    ids=["deadline-alone", "on-timeout-alone", "naive-deadline", "unfit-on-timeout", "not-a-shape"],
)
def test_a_malformed_pause_is_refused_when_made(checkpointer: Checkpointer, terms: dict[str, Any]) -> None:
    """A deadline without on_timeout, a naive deadline, an on_timeout the contract refuses, or a contract
    that is no shape fail the node with InvalidArgumentError; no pause is stored."""

    def ask(state: dict[str, Any], ctx: Any) -> None:
        ctx.interrupt("q", **terms)

    result = run(_one_node(ask), {}, thread_id="malformed", checkpointer=checkpointer)
    assert "error" == result.status
    assert isinstance(result.errors[0][1], InvalidArgumentError)
    assert () == pending_interrupts(checkpointer, "malformed")


def test_a_refused_answer_records_nothing_and_the_pause_stays_open(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """An answer outside the contract is AnswerRejectedError naming thread, pause and reason; the journal
    holds no answer, the pause is still open, and a fitting answer then finishes the run."""
    g = _one_node(_charge)
    paused = run(g, {}, thread_id="refused", checkpointer=checkpointer)
    with pytest.raises(AnswerRejectedError) as refused:
        resume(g, "maybe", thread_id="refused", checkpointer=checkpointer)
    error = refused.value
    assert ("refused", "ask:interrupt#0") == (error.thread_id, error.pause_id)
    assert error.reason is not None
    assert "'maybe' is not one of the options" in error.reason
    assert "'refused'" in str(error)
    assert "ask:interrupt#0" in str(error)
    other = reopen()
    assert paused.pending == pending_interrupts(other, "refused")
    assert not any(e.answered for e in other.get_journal(paused.pending[0].task_id))
    finished = resume(g, "yes", thread_id="refused", checkpointer=checkpointer)
    assert ("done", ["yes"]) == (finished.status, finished.state["log"])


def _two_contracts() -> Any:
    def left(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.interrupt("n?", answers=answers.number(minimum=0, integer=True))]}

    def right(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.interrupt("text?", answers=answers.text(max_length=3))]}

    return (
        graph("two", {"log": channel.append()})
        .node("left", left)
        .node("right", right)
        .edge(START, "left")
        .edge(START, "right")
        .compile()
    )


def test_one_refused_answer_of_several_records_none(checkpointer: Checkpointer) -> None:
    """resume_keyed with one fitting and one refused answer records neither; fitting answers then run on."""
    g = _two_contracts()
    paused = run(g, {}, thread_id="several", checkpointer=checkpointer)
    with pytest.raises(AnswerRejectedError, match="right:interrupt#0"):
        resume_keyed(
            g,
            {"left:interrupt#0": 3, "right:interrupt#0": "toolong"},
            thread_id="several",
            checkpointer=checkpointer,
        )
    for pause in paused.pending:
        assert not any(e.answered for e in checkpointer.get_journal(pause.task_id))
    done = resume_keyed(
        g, {"left:interrupt#0": 3, "right:interrupt#0": "ok"}, thread_id="several", checkpointer=checkpointer
    )
    assert ("done", [3, "ok"]) == (done.status, done.state["log"])


@pytest.mark.parametrize(
    ("answer", "received"),
    [
        ({"action": "accept"}, Review(action="accept", value={"body": "Hello"})),
        ({"action": "edit", "value": {"body": "Hi"}}, Review(action="edit", value={"body": "Hi"})),
        (Review(action="reject", reason="too cold"), Review(action="reject", reason="too cold")),
    ],
    ids=["accept", "edit", "reject"],
)
def test_a_review_reaches_the_node_as_a_review(
    checkpointer: Checkpointer, answer: Any, received: Review
) -> None:
    """A review pause's answer (wire form or Review) reaches the node as ilmek.Review: the draft on accept."""
    seen: list[Review] = []

    def reply(state: dict[str, Any], ctx: Any) -> None:
        seen.append(ctx.interrupt("Send this?", answers=answers.review({"body": "Hello"})))

    g = _one_node(reply)
    run(g, {}, thread_id="review", checkpointer=checkpointer)
    assert "done" == resume(g, answer, thread_id="review", checkpointer=checkpointer).status
    assert [received] == seen


def _business_days(day: str) -> str | None:
    return "we do not ship on a weekend" if day in ("sat", "sun") else None


SHIP_DAY = answers.choice("mon", "sat").check(_business_days)


def test_a_python_check_loaded_where_the_resume_runs_refuses_before_writing(
    checkpointer: Checkpointer,
) -> None:
    """A shape's .check(fn), defined in a module, refuses at resume: AnswerRejectedError, nothing recorded."""

    def ship(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.interrupt("day?", answers=SHIP_DAY)]}

    g = _one_node(ship)
    paused = run(g, {}, thread_id="checked", checkpointer=checkpointer)
    assert ["_business_days"] == [n.rsplit(".", 1)[-1] for n in paused.pending[0].answers["checks"]]
    with pytest.raises(AnswerRejectedError, match="not ship on a weekend"):
        resume(g, "sat", thread_id="checked", checkpointer=checkpointer)
    assert not any(e.answered for e in checkpointer.get_journal(paused.pending[0].task_id))
    assert ["mon"] == resume(g, "mon", thread_id="checked", checkpointer=checkpointer).state["log"]


def test_a_python_check_the_resume_cannot_run_refuses_on_replay(checkpointer: Checkpointer) -> None:
    """A check no resume can look up by name (a lambda) still runs when the node replays: the run fails
    with AnswerRejectedError rather than handing the node an answer its contract refuses."""

    def ship(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        shape = answers.choice("mon", "sat").check(lambda day: "no weekends" if day == "sat" else None)
        return {"log": [ctx.interrupt("day?", answers=shape)]}

    g = _one_node(ship)
    run(g, {}, thread_id="replayed", checkpointer=checkpointer)
    result = resume(g, "sat", thread_id="replayed", checkpointer=checkpointer)
    assert "error" == result.status
    error = result.errors[0][1]
    assert isinstance(error, AnswerRejectedError)
    assert "no weekends" == error.reason


def _two_asks(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
    first = ctx.interrupt("first?", key="first")
    second = ctx.interrupt("second?", key="second")
    return {"log": [first, second]}


def test_a_persons_answer_is_recorded_by_person(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """An answer given through resume is stored with by="person", read back by another checkpointer."""
    g = _one_node(_two_asks)
    (first,) = run(g, {}, thread_id="who", checkpointer=checkpointer).pending
    assert "interrupted" == resume(g, "one", thread_id="who", checkpointer=checkpointer).status
    entries = {e.key: e for e in reopen().get_journal(first.task_id)}
    assert ("one", True, "person") == (
        entries["first#0"].value,
        entries["first#0"].answered,
        entries["first#0"].by,
    )
