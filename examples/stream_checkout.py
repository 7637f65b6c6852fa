"""Watch a checkout run as it happens: one line per event, the assistant's tokens inline.

From the root of a clone, with the project's interpreter (``bash
scripts/demo`` or ``bash scripts/test`` makes ``.venv``; a ``python`` without
ilmek installed cannot import it)::

    .venv/bin/python examples/stream_checkout.py               # pauses at the question, answers "yes"
    .venv/bin/python examples/stream_checkout.py --answer no   # ... or declines: nothing is charged
    .venv/bin/python examples/stream_checkout.py --db shop.db  # keep the thread in a SQLite file

The flow: ``quote`` creates the order (a journaled step) and streams a
message token by token; ``confirm`` pauses for a person; ``charge`` calls a
payment gateway that fails once, so the node is retried, and the charge
itself happens exactly once. The script answers the pause itself with
``resume_stream``, which is a run of its own (its ``seq`` starts at 1 again).
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from ilmek import (
    END,
    START,
    Checkpointer,
    CompiledGraph,
    Event,
    InMemoryCheckpointer,
    RetryPolicy,
    channel,
    graph,
    pending_interrupts,
    resume_stream,
    stream,
)
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from ilmek.events import CustomEvent, RunEnd

PRICES = {"coffee": 229.9, "mug": 20.0}
THREAD_ID = "checkout-stream"

# Side effects print from the run's worker threads while the stream prints from
# the main thread: one lock keeps their lines whole.
_OUTPUT = threading.Lock()


def say(text: str, end: str = "\n") -> None:
    """Write ``text`` to the terminal in one piece."""
    with _OUTPUT:
        sys.stdout.write(text + end)
        sys.stdout.flush()


class FlakyGateway:
    """A payment gateway whose first ``failures`` calls time out."""

    def __init__(self, failures: int = 1) -> None:
        self.failures = failures

    def charge(self, total: float) -> str:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("payment gateway timed out")
        say(f"      (charging {total})")
        return f"charged {total}"


def create_order(cart: Sequence[str]) -> dict[str, Any]:
    say(f"      (creating an order for {', '.join(cart)})")
    # Rounded so the float sum prints as a price.
    return {"items": list(cart), "total": round(sum(PRICES[item] for item in cart), 2)}


def build_graph(gateway: FlakyGateway) -> CompiledGraph:
    """quote -> confirm -> charge (only when approved)."""

    def quote(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        order = ctx.step("create_order", create_order, state["cart"])
        for word in f"Your order of {len(order['items'])} items comes to {order['total']}.".split(" "):
            ctx.emit_token(word + " ")
        return {"order": order}

    def confirm(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answer = ctx.interrupt({"question": f"Charge {state['order']['total']}?"})
        return {"approved": str(answer).strip().lower() in ("y", "yes")}

    def charge(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.emit({"progress": "contacting the payment gateway"})
        return {"log": [ctx.step("charge", gateway.charge, state["order"]["total"])]}

    return (
        graph(
            "checkout",
            {
                "cart": channel.last_write([]),
                "order": channel.last_write(None),
                "approved": channel.last_write(False),
                "log": channel.append(),
            },
        )
        .node("quote", quote)
        .node("confirm", confirm)
        .node("charge", charge, retry=RetryPolicy(max_attempts=3, backoff=0.05))
        .edge(START, "quote")
        .edge("quote", "confirm")
        .edge("confirm", "charge", when={"channel": "approved", "eq": True})
        .edge("charge", END)
        .compile()
    )


def _token_text(event: Event) -> str | None:
    """The text of a token event (``ctx.emit_token``), ``None`` for any other event."""
    if (
        isinstance(event, CustomEvent)
        and isinstance(event.payload, dict)
        and event.payload.get("type") == "token"
    ):
        return str(event.payload["text"])
    return None


def _details(event: Any) -> str:
    kind = event.type
    if kind == "run_start":
        return f"run {event.run_id[:8]} of thread {event.thread_id!r}"
    if kind == "step_start":
        return f"step {event.step}: {', '.join(event.tasks)}"
    if kind == "node_start":
        return str(event.node)
    if kind == "custom":
        return f"{event.node}: {event.payload}"
    if kind == "node_retry":
        # node_retry numbers the attempt about to run; the one that failed came before it.
        return f"{event.node} attempt {event.attempt - 1} failed ({event.error}); retrying"
    if kind == "node_end":
        return f"{event.node} wrote {dict(event.update)}"
    if kind == "node_error":
        return f"{event.node} failed: {event.error!r}"
    if kind == "state":
        return ", ".join(f"{name}={value!r}" for name, value in event.channels.items())
    if kind == "checkpoint":
        return str(event.id)
    if kind == "interrupt":
        return "; ".join(f"{pause.id} asks {pause.payload}" for pause in event.pending)
    if kind == "run_end":
        return str(event.status) + (f" ({event.abort_reason})" if event.abort_reason else "")
    return ""


def show(events: Iterable[Event]) -> Event | None:
    """Print each event as it arrives; consecutive tokens share one line. Returns the last event."""
    last: Event | None = None
    in_tokens = False
    for event in events:
        last = event
        text = _token_text(event)
        if text is not None:
            say(text if in_tokens else f"{event.seq:>3} {'tokens':<11} {text}", end="")
            in_tokens = True
            continue
        if in_tokens:
            say("")  # ends the line of tokens
            in_tokens = False
        say(f"{event.seq:>3} {event.type:<11} {_details(event)}")
    if in_tokens:
        say("")
    return last


def raise_for_status(last: Event | None) -> RunEnd:
    """The stream's ``RunEnd``; re-raise the failed node's exception, as ``Result.raise_for_status()`` does.

    A stream has no ``Result``: its last event says how the run ended. A run
    that failed does not raise by itself, so the script checks, and a failure
    cannot pass for a run that merely printed less.
    """
    if not isinstance(last, RunEnd):
        raise RuntimeError(f"the stream ended without a run_end event (last: {last!r})")
    if last.status == "error" and last.errors:
        node, error = last.errors[0]
        error.add_note(f"raised by node {node!r}, thread {THREAD_ID!r}")
        raise error
    return last


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checkout, answer its pause, and print both runs; 0 when the checkout finished."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--answer", default="yes", help='the answer to "Charge ...?" (default: yes)')
    parser.add_argument("--db", help="a SQLite file for the thread (default: in memory)")
    args = parser.parse_args(argv)
    checkpointer: Checkpointer = SqliteCheckpointer.open(args.db) if args.db else InMemoryCheckpointer()
    try:
        g = build_graph(FlakyGateway(failures=1))
        say("== run")
        raise_for_status(
            show(stream(g, {"cart": ["coffee", "mug"]}, thread_id=THREAD_ID, checkpointer=checkpointer))
        )
        (pause,) = pending_interrupts(checkpointer, THREAD_ID)
        say(f"== resume: {pause.payload['question']} {args.answer}")
        end = raise_for_status(
            show(resume_stream(g, args.answer, thread_id=THREAD_ID, checkpointer=checkpointer))
        )
        if end.status != "done":
            return 1
    finally:
        checkpointer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
