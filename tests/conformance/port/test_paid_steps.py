"""The port suite, a step once paid for is not paid again: after an operator's ``update_state`` on a
paused thread, after a result that could not be stored, on a fork. Every backend, each step counted.

The journals a new checkpoint inherits are decided by one rule (``ilmek.journals``) whichever path
makes the checkpoint: a pause, a run's input, a fork, a human edit.
"""

from __future__ import annotations

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
    resume,
    run,
    update_state,
)
from tests.support.helpers import Calls

pytestmark = pytest.mark.timeout(60)


def charge_after_approval(calls: Calls) -> CompiledGraph:
    """Asks to approve, charges (a journaled step), then fails unless an operator fixed the address."""

    def pay(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt({"question": "charge 10?"})
        receipt = ctx.step("charge", calls.hit, "charge")
        if not state["address_ok"]:
            raise RuntimeError("the shipping address is invalid")
        return {"log": [f"{answer}: {receipt}"]}

    return (
        graph("pay", {"address_ok": channel.last_write(False), "log": channel.append()})
        .node("pay", pay)
        .edge(START, "pay")
        .edge("pay", END)
        .compile()
    )


# --- item 3: update_state on a paused thread ------------------------------------------------------------


def test_an_operator_repair_between_two_resumes_charges_once(checkpointer: Checkpointer) -> None:
    """A resume fails after ``charge``; the operator fixes the state; the same answer ends with no charge."""
    calls = Calls()
    g = charge_after_approval(calls)
    opts: dict[str, Any] = {"thread_id": "repair", "checkpointer": checkpointer}
    assert "interrupted" == run(g, {}, **opts).status
    assert "error" == resume(g, "yes", **opts).status

    update_state(g, checkpointer, "repair", {"address_ok": True})
    done = resume(g, "yes", **opts)

    assert "done" == done.status
    assert ["yes: None"] == done.state["log"]
    assert 1 == calls["charge"]


def test_a_different_answer_is_still_refused_after_an_operator_repair(checkpointer: Checkpointer) -> None:
    """An edit does not reopen a pause a failed resume answered: another answer is refused, nothing runs."""
    calls = Calls()
    g = charge_after_approval(calls)
    opts: dict[str, Any] = {"thread_id": "refused", "checkpointer": checkpointer}
    run(g, {}, **opts)
    resume(g, "yes", **opts)
    update_state(g, checkpointer, "refused", {"address_ok": True})

    with pytest.raises(ResumeError, match="already answered with 'yes'"):
        resume(g, "no", **opts)

    assert 1 == calls["charge"]
    assert "done" == resume(g, "yes", **opts).status
    assert 1 == calls["charge"]


def test_an_edit_of_a_pause_nobody_answered_leaves_it_open_to_any_answer(checkpointer: Checkpointer) -> None:
    """With no resume before the edit, the pause takes whatever answer comes, and the charge runs once."""
    calls = Calls()
    g = charge_after_approval(calls)
    opts: dict[str, Any] = {"thread_id": "fresh", "checkpointer": checkpointer}
    run(g, {}, **opts)

    update_state(g, checkpointer, "fresh", {"address_ok": True})
    done = resume(g, "no", **opts)

    assert ["no: None"] == done.state["log"]
    assert 1 == calls["charge"]
