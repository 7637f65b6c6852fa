"""The port suite, answer links: ``answer_token`` / ``resume_with_token`` answer one pause once,
recorded ``by="token"``, and refuse tampering, expiry, replay, another thread's pause and another
secret, with nothing recorded; the token never reaches a log record. On every backend.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

import pytest

from ilmek import (
    START,
    AnswerRejectedError,
    Checkpointer,
    ResumeError,
    answer_token,
    answers,
    channel,
    graph,
    history,
    pending_interrupts,
    resume_keyed,
    resume_with_token,
    run,
)

pytestmark = pytest.mark.timeout(60)

SECRET = "s3cret-signing-key"


def _approval(effects: list[str]) -> Any:
    def approve(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("order", effects.append, "order")
        ok = ctx.interrupt("Charge?", answers=answers.choice("yes", "no"))
        if ok == "yes":
            ctx.step("charge", effects.append, "charge")
        return {"log": [ok]}

    return (
        graph("approval", {"log": channel.append()}).node("approve", approve).edge(START, "approve").compile()
    )


def _paused(checkpointer: Checkpointer, thread_id: str, effects: list[str]) -> tuple[Any, str]:
    g = _approval(effects)
    result = run(g, {}, thread_id=thread_id, checkpointer=checkpointer)
    assert result.status == "interrupted"
    return g, result.pending[0].id


def _still_open(checkpointer: Checkpointer, thread_id: str) -> None:
    assert [p.id for p in pending_interrupts(checkpointer, thread_id)] == ["approve:interrupt#0"]


def test_a_token_answers_its_pause_once_by_token(checkpointer: Checkpointer) -> None:
    """A token answers its pause, the answer is recorded by="token", and a second use is refused."""
    effects: list[str] = []
    g, pause_id = _paused(checkpointer, "t", effects)
    token = answer_token(checkpointer, "t", pause_id, secret=SECRET, expires_in=dt.timedelta(hours=1))
    result = resume_with_token(g, token, "yes", secret=SECRET.encode(), checkpointer=checkpointer)
    assert result.status == "done"
    assert result.state == {"log": ["yes"]}
    assert effects == ["order", "charge"]
    by = [c.metadata["answered_by"] for c in history(checkpointer, "t") if "answered_by" in c.metadata]
    assert by == [{pause_id: "token"}]
    with pytest.raises(AnswerRejectedError, match="already answered"):
        resume_with_token(g, token, "yes", secret=SECRET, checkpointer=checkpointer)
    assert effects == ["order", "charge"]


def test_every_altered_byte_is_refused_and_records_nothing(checkpointer: Checkpointer) -> None:
    """Each byte position changed, the token cut short or padded: refused the same way, pause still open."""
    g, pause_id = _paused(checkpointer, "t", [])
    token = answer_token(checkpointer, "t", pause_id, secret=SECRET)
    altered = [token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1 :] for i in range(len(token))]
    altered += [token[:-1], token[: len(token) // 2], token + "A", token + "=", "", "." + token]
    messages = set()
    for bad in altered:
        with pytest.raises(AnswerRejectedError) as caught:
            resume_with_token(g, bad, "yes", secret=SECRET, checkpointer=checkpointer)
        messages.add(str(caught.value))
    assert len(messages) == 1  # never says which byte was wrong
    _still_open(checkpointer, "t")


def test_wrong_secret_expiry_and_a_bad_answer_are_refused(checkpointer: Checkpointer) -> None:
    """Another secret and an expired token are refused; an answer outside the contract is refused;
    none of them records anything, and the right answer then still goes through."""
    g, pause_id = _paused(checkpointer, "t", [])
    token = answer_token(checkpointer, "t", pause_id, secret=SECRET)
    with pytest.raises(AnswerRejectedError, match="not valid"):
        resume_with_token(g, token, "yes", secret="another", checkpointer=checkpointer)
    expired = answer_token(checkpointer, "t", pause_id, secret=SECRET, expires_in=0.05)
    time.sleep(0.1)
    with pytest.raises(AnswerRejectedError, match="expired") as caught:
        resume_with_token(g, expired, "yes", secret=SECRET, checkpointer=checkpointer)
    assert caught.value.reason == "expired"
    with pytest.raises(AnswerRejectedError, match="refused") as refused:
        resume_with_token(g, token, "maybe", secret=SECRET, checkpointer=checkpointer)
    assert refused.value.pause_id == pause_id
    _still_open(checkpointer, "t")
    assert resume_with_token(g, token, "no", secret=SECRET, checkpointer=checkpointer).state == {
        "log": ["no"]
    }


def test_a_token_for_another_threads_pause_answers_only_that_thread(checkpointer: Checkpointer) -> None:
    """A token signed for thread a cannot be turned to thread b (the thread is signed), and answers only a."""
    g, pause_id = _paused(checkpointer, "a", [])
    _paused(checkpointer, "b", [])
    token = answer_token(checkpointer, "a", pause_id, secret=SECRET)
    _body, _, signature = token.partition(".")
    other = answer_token(checkpointer, "b", pause_id, secret=SECRET)
    with pytest.raises(AnswerRejectedError):
        resume_with_token(
            g, other.partition(".")[0] + "." + signature, "yes", secret=SECRET, checkpointer=checkpointer
        )
    resume_with_token(g, token, "yes", secret=SECRET, checkpointer=checkpointer)
    _still_open(checkpointer, "b")
    with pytest.raises(ResumeError, match="no open pause"):
        answer_token(checkpointer, "a", pause_id, secret=SECRET)


def test_a_token_with_other_pauses_open_is_refused_until_they_are_answered(
    checkpointer: Checkpointer,
) -> None:
    """With two pauses open the link says the other must be answered first and records nothing."""

    def ask(name: str) -> Any:
        return lambda state, ctx: {"log": [ctx.interrupt(name, answers=answers.choice("yes", "no"))]}

    both = (
        graph("both", {"log": channel.append()})
        .node("a", ask("a"))
        .node("b", ask("b"))
        .edge(START, "a")
        .edge(START, "b")
        .compile()
    )
    run(both, {}, thread_id="t", checkpointer=checkpointer)
    token = answer_token(checkpointer, "t", "a:interrupt#0", secret=SECRET)
    with pytest.raises(AnswerRejectedError, match=r"'b:interrupt#0'.*answer those first") as caught:
        resume_with_token(both, token, "yes", secret=SECRET, checkpointer=checkpointer)
    assert caught.value.reason == "other pauses are open"
    assert len(pending_interrupts(checkpointer, "t")) == 2
    result = resume_keyed(
        both, {"a:interrupt#0": "yes", "b:interrupt#0": "no"}, thread_id="t", checkpointer=checkpointer
    )
    assert sorted(result.state["log"]) == ["no", "yes"]


def test_no_log_record_ever_holds_the_token(
    checkpointer: Checkpointer, caplog: pytest.LogCaptureFixture
) -> None:
    """Making, using, replaying and tampering with a token logs nothing that contains it."""
    g, pause_id = _paused(checkpointer, "t", [])
    with caplog.at_level(logging.DEBUG):
        token = answer_token(checkpointer, "t", pause_id, secret=SECRET)
        for bad in (token + "A", token):
            with pytest.raises(AnswerRejectedError):
                resume_with_token(g, bad, "maybe", secret=SECRET, checkpointer=checkpointer)
        resume_with_token(g, token, "yes", secret=SECRET, checkpointer=checkpointer)
        with pytest.raises(AnswerRejectedError):
            resume_with_token(g, token, "yes", secret=SECRET, checkpointer=checkpointer)
    assert caplog.records
    signature = token.partition(".")[2]
    for record in caplog.records:
        shown = f"{record.getMessage()} {vars(record)}"
        assert signature not in shown
        assert SECRET not in shown
