"""The port suite, idempotent forks: a fork that names the checkpoint it expects (``expect_checkpoint_id``)
is made once; the same fork sent again is refused, runs nothing and charges nothing, on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from ilmek import START, Checkpointer, ResumeError, answers, channel, graph, resume, resume_keyed, run

pytestmark = pytest.mark.timeout(60)


def test_a_fork_sent_twice_makes_one_branch(checkpointer: Checkpointer) -> None:
    """Answer "no", then fork the pause with "yes" expecting the latest checkpoint: charged once; the
    repeat is a ResumeError naming the fork, and the thread stays at the first fork's end."""
    charges: list[str] = []

    def approve(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ok = ctx.interrupt("Charge?", answers=answers.choice("yes", "no"))
        if ok == "yes":
            ctx.step("charge", charges.append, "charged")
        return {"log": [ok]}

    g = graph("once", {"log": channel.append()}).node("approve", approve).edge(START, "approve").compile()
    paused = run(g, {}, thread_id="t", checkpointer=checkpointer)
    seen = resume(g, "no", thread_id="t", checkpointer=checkpointer).checkpoint_id
    fork = {"thread_id": "t", "checkpointer": checkpointer, "checkpoint_id": paused.checkpoint_id}
    first = resume_keyed(g, {"approve:interrupt#0": "yes"}, expect_checkpoint_id=seen, **fork)
    assert ("done", ["charged"]) == (first.status, charges)
    with pytest.raises(ResumeError, match=r"fork from .* was made already") as refused:
        resume_keyed(g, {"approve:interrupt#0": "yes"}, expect_checkpoint_id=seen, **fork)
    assert first.checkpoint_id == refused.value.checkpoint_id
    assert ["charged"] == charges
    latest = checkpointer.get("t")
    assert latest is not None
    assert first.checkpoint_id == latest.id
