"""The checkout flow that ``python -m ilmek demo`` runs: an order, a question, a charge.

It is the example of the spec's "Running" section, made to be watched from a
terminal: each side effect prints a line, so running the demo in two
processes (one that pauses, one that answers) shows the order being created
once and the card charged once.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Final

from . import channel
from .context import NodeContext
from .graph import END, START, CompiledGraph, graph
from .redact import printable

__all__ = ["CART", "PRICES", "build_checkout_graph", "charge", "checkout", "create_order", "question_of"]

CART: Final = ("coffee", "mug")
"""What the demo puts in the cart."""

PRICES: Final = {"coffee": 229.9, "mug": 20.0}
"""What each item of the demo's shop costs."""

_APPROVALS = frozenset({"yes", "y"})


def create_order(cart: Sequence[str]) -> dict[str, Any]:
    """Create an order for the cart (a side effect the journal must not repeat)."""
    # The cart comes from the thread's state, which anyone with the store can write.
    print(printable(f"creating order for {', '.join(map(str, cart))}"), flush=True)
    # Rounded so that the float sum prints as a price, not as 249.89999999999998.
    total = round(sum(PRICES[item] for item in cart), 2)
    return {"id": uuid.uuid4().hex[:8], "items": list(cart), "total": total}


def charge(order: dict[str, Any], answer: Any) -> str:
    """Charge the order if the answer approves it; return what happened."""
    if str(answer).strip().lower() in _APPROVALS:
        print(f"charging {order['total']}", flush=True)
        return f"charged {order['total']}"
    print("not charging", flush=True)
    return "not charged"


def checkout(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
    """Create the order, ask before charging it, then charge it (or not)."""
    order = ctx.step("create_order", create_order, state["cart"])
    answer = ctx.interrupt({"question": f"Charge {order['total']}?"})
    outcome = ctx.step("charge", charge, order, answer)
    return {"order": order, "log": [outcome]}


def build_checkout_graph() -> CompiledGraph:
    """The one-node checkout graph: ``cart`` in, ``order`` and a ``log`` line out."""
    return (
        graph(
            "checkout",
            {
                "cart": channel.last_write([]),
                "order": channel.last_write(None),
                "log": channel.append(),
            },
        )
        .node("checkout", checkout)
        .edge(START, "checkout")
        .edge("checkout", END)
        .compile()
    )


def question_of(payload: Any) -> str:
    """The question a pause of the demo asks, fit to print (any payload reads as something)."""
    if isinstance(payload, dict) and "question" in payload:
        return printable(str(payload["question"]))
    return repr(payload)
