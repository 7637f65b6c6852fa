"""A graph that pauses once with the contract of its choice (:mod:`ilmek.answers`), for the console's tests.

``ASKING`` run with ``{"kind": K}`` pauses at ``ask:interrupt#0`` under
``SHAPES[K]``; its payload carries ``options`` and a ``draft`` as well, which a
console drawing from the contract must show as data, never as buttons. What
the node received is appended to ``got`` (a review as ``[action, value,
reason]``), read back with :func:`got`.
"""

from __future__ import annotations

from typing import Any

from ilmek import START, Checkpointer, Review, answers, channel, graph, thread_state

__all__ = ["ASKING", "DRAFT", "PAUSE", "SHAPES", "got"]

DRAFT = "Dear Ada,\nyour refund of 40 EUR is on its way.\n<b>Thanks</b>"
"""The draft a review pause offers: several lines, and markup that must stay text."""

PAUSE = "ask:interrupt#0"
"""The one pause ``ASKING`` opens."""

SHAPES: dict[str, Any] = {
    "choice": answers.choice("ship", "hold", "cancel"),
    "review": answers.review(DRAFT),
    "text": answers.text(max_length=10),
    "number": answers.number(minimum=1, maximum=5, integer=True),
    "boolean": answers.boolean(),
    "schema": answers.schema({"type": "object", "required": ["qty"]}),
}
"""One contract of each shape, by its kind."""


def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Pause under ``SHAPES[state["kind"]]`` and record what the answer was."""
    kind = state["kind"]
    # options and a draft in the payload too: a contract's pause must not turn them into buttons.
    payload = {"question": f"Your {kind}?", "options": ["approve", "reject"], "draft": "payload draft"}
    answer = ctx.interrupt(payload, answers=SHAPES[kind])
    if isinstance(answer, Review):
        answer = [answer.action, answer.value, answer.reason]
    return {"got": [answer]}


ASKING = (
    graph("asking", {"kind": channel.last_write(), "got": channel.append()})
    .node("ask", ask)
    .edge(START, "ask")
    .compile()
)


def got(checkpointer: Checkpointer, thread_id: str) -> Any:
    """What the thread's node received, as stored (``None`` while it waits)."""
    return thread_state(ASKING, checkpointer, thread_id).get("got")
