"""The checkout views: ilmek's checkpoints ride Django's own connection and transactions.

``PostgresCheckpointer(connection)`` takes ``django.db.connection`` as it is.
ilmek writes inside ``transaction.atomic``: with ``ATOMIC_REQUESTS`` that is a
savepoint in the request's transaction, so the receipt a view records and
the checkpoint saying "charged" commit together, or not at all, when Django
ends the request. Without it, each of ilmek's writes commits at once.

The steps (create the order, charge the card) write through the same
connection. Under ``ATOMIC_REQUESTS`` ilmek runs them on the request's own
thread, inside the request's transaction: a step's rows and ilmek's record
of the step commit together, or vanish together if the request fails, and
answering again then runs the step again against a database that never saw
the first try. Without ``ATOMIC_REQUESTS`` each commits at once. A call to a
real payment provider would still carry an idempotency key (the order id,
as ``charges`` does here): an effect outside the database cannot roll back
with the request.

ilmek's web console is mounted at ``/console`` (see ``urls.py``) through
``ilmek.web.django_view``, behind :func:`console_login_required`; it is
there only when ``CONSOLE_PASSWORD`` is set.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import hmac
import json
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET, require_POST

import ilmek
import ilmek.web

PRICES_CENTS = {"coffee": 1499, "mug": 1000, "filter": 350}
"""What the shop sells; a cart names these items."""

APPROVALS = frozenset({"yes", "y"})
"""The answers that approve the charge; anything else cancels it."""

HTTP_CONFLICT = 409

checkpointer = ilmek.PostgresCheckpointer(connection)
"""ilmek on Django's connection: each request thread's own, inside its transaction if it has one."""

SHOP_TABLES = (
    "CREATE TABLE IF NOT EXISTS orders (order_id TEXT PRIMARY KEY, thread_id TEXT NOT NULL,"
    " items TEXT NOT NULL, total_cents INTEGER NOT NULL)",
    # order_id is the idempotency key: one charge per order however often it is asked for.
    "CREATE TABLE IF NOT EXISTS charges (order_id TEXT PRIMARY KEY, charge_id TEXT NOT NULL,"
    " amount_cents INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 1)",
    "CREATE TABLE IF NOT EXISTS receipts (order_id TEXT PRIMARY KEY, charge_id TEXT NOT NULL)",
)


def create_tables() -> None:
    """Create ilmek's tables and the shop's (orders, charges, receipts) if they are missing."""
    checkpointer.migrate()
    with connection.cursor() as cursor:
        for statement in SHOP_TABLES:
            cursor.execute(statement)


@contextlib.contextmanager
def _step_cursor() -> Iterator[Any]:
    # The thread's own Django connection: the request's, inside its transaction
    # under ATOMIC_REQUESTS (ilmek closes the connections of its worker threads).
    with connection.cursor() as cursor:
        yield cursor


def create_order(thread_id: str, cart: Sequence[str]) -> dict[str, Any]:
    """Record an order for the cart and return it."""
    order = {
        "id": uuid.uuid4().hex,
        "items": list(cart),
        "total_cents": sum(PRICES_CENTS[item] for item in cart),
    }
    with _step_cursor() as cursor:
        cursor.execute(
            "INSERT INTO orders (order_id, thread_id, items, total_cents) VALUES (%s, %s, %s, %s)",
            [order["id"], thread_id, ",".join(cart), order["total_cents"]],
        )
    return order


def charge(order: dict[str, Any]) -> dict[str, Any]:
    """Charge the order's total once per order id; return the charge.

    ``CHECKOUT_CHARGE_LATENCY`` (seconds, default 0) stands for a slow payment provider.
    """
    time.sleep(getattr(settings, "CHECKOUT_CHARGE_LATENCY", 0.0))
    with _step_cursor() as cursor:
        cursor.execute(
            "INSERT INTO charges (order_id, charge_id, amount_cents) VALUES (%s, %s, %s)"
            " ON CONFLICT (order_id) DO UPDATE SET attempts = charges.attempts + 1 RETURNING charge_id",
            [order["id"], uuid.uuid4().hex, order["total_cents"]],
        )
        (charge_id,) = cursor.fetchone()
    return {"id": charge_id, "order_id": order["id"], "amount_cents": order["total_cents"]}


def record_receipt(order: dict[str, Any], charge: dict[str, Any]) -> None:
    """Record the receipt on the request's connection: part of the request's transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO receipts (order_id, charge_id) VALUES (%s, %s)", [order["id"], charge["id"]]
        )


def checkout(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
    """The one node: create the order, ask before charging, charge (or cancel)."""
    order = ctx.step("create_order", create_order, ctx.thread_id, state["cart"])
    answer = ctx.interrupt({"question": f"Charge {order['total_cents'] / 100:.2f}?"})
    if str(answer).strip().lower() not in APPROVALS:
        return {"order": order, "outcome": "cancelled"}
    return {"order": order, "charge": ctx.step("charge", charge, order), "outcome": "charged"}


checkout_graph = (
    ilmek.graph(
        "checkout",
        {
            "cart": ilmek.channel.last_write([]),
            "order": ilmek.channel.last_write(None),
            "charge": ilmek.channel.last_write(None),
            "outcome": ilmek.channel.last_write(None),
        },
    )
    .node("checkout", checkout)
    .edge(ilmek.START, "checkout")
    .edge("checkout", ilmek.END)
    .compile()
)


def _pending_json(pending: Sequence[ilmek.Pending]) -> list[dict[str, Any]]:
    return [{"id": pause.id, "payload": pause.payload} for pause in pending]


def _result_json(result: ilmek.Result) -> dict[str, Any]:
    # A node that failed is a server error: the re-raised exception becomes a 500.
    result.raise_for_status()
    body: dict[str, Any] = {
        "thread_id": result.thread_id,
        "status": result.status,
        "pending": _pending_json(result.pending),
    }
    if result.status == "done":
        body["state"] = result.state
    return body


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": code, "message": message}, status=status)


def _json_body(request: HttpRequest) -> dict[str, Any]:
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _cart_problem(cart: Any) -> str | None:
    if not isinstance(cart, list) or not cart:
        return "cart must be a non-empty list of items"
    unknown = [item for item in cart if item not in PRICES_CENTS]
    if unknown:
        return f"unknown items {unknown!r}; the shop sells {sorted(PRICES_CENTS)}"
    return None


@require_POST
def start_checkout(request: HttpRequest) -> JsonResponse:
    """Start a checkout: ``{"thread_id": ..., "cart": [...]}`` -> 201, paused on the question.

    409 when the thread id is taken (``exists``) or held by another request (``busy``).
    """
    body = _json_body(request)
    thread_id = str(body.get("thread_id") or uuid.uuid4().hex)
    problem = _cart_problem(body.get("cart"))
    if problem is not None:
        return _error(400, "bad_request", problem)
    # A finished thread given new input would run again: a new order. Refuse it;
    # a paused or running one is refused by ilmek itself (below).
    if ilmek.thread_state(checkout_graph, checkpointer, thread_id) is not None:
        return _error(HTTP_CONFLICT, "exists", f"checkout {thread_id!r} already exists")
    try:
        result = ilmek.run(
            checkout_graph, {"cart": body["cart"]}, thread_id=thread_id, checkpointer=checkpointer
        )
    except ilmek.ThreadBusyError as error:
        return _error(HTTP_CONFLICT, "busy", str(error))
    except ilmek.ResumeError as error:
        return _error(HTTP_CONFLICT, "exists", str(error))
    response = JsonResponse(_result_json(result), status=201)
    response["Location"] = f"/checkout/{thread_id}"
    return response


@require_POST
def approve_checkout(request: HttpRequest, thread_id: str) -> JsonResponse:
    """Answer the question: ``{"answer": "yes"}`` charges and records a receipt -> 200.

    404 for an unknown thread; 409 when it is held by another request
    (``busy``), not waiting for an answer (``not_paused``) or was moved on by
    another writer (``conflict``).
    """
    body = _json_body(request)
    if "answer" not in body:
        return _error(400, "bad_request", 'send {"answer": "yes"} to charge, anything else to cancel')
    try:
        result = ilmek.resume(checkout_graph, body["answer"], thread_id=thread_id, checkpointer=checkpointer)
    except ilmek.ThreadBusyError as error:
        return _error(HTTP_CONFLICT, "busy", str(error))
    except ilmek.ConcurrentUpdateError as error:
        return _error(HTTP_CONFLICT, "conflict", str(error))
    except ilmek.ResumeError as error:
        # Checked only on this unhappy path, so an approval costs no extra query.
        if ilmek.thread_state(checkout_graph, checkpointer, thread_id) is None:
            return _error(404, "not_found", f"no checkout {thread_id!r}")
        return _error(HTTP_CONFLICT, "not_paused", str(error))
    answered = _result_json(result)
    if result.status == "done" and result.state["outcome"] == "charged":
        record_receipt(result.state["order"], result.state["charge"])
    return JsonResponse(answered)


@require_GET
def show_checkout(request: HttpRequest, thread_id: str) -> JsonResponse:
    """The checkout's state and open question; 404 for an unknown thread."""
    state = ilmek.thread_state(checkout_graph, checkpointer, thread_id)
    if state is None:
        return _error(404, "not_found", f"no checkout {thread_id!r}")
    pending = ilmek.pending_interrupts(checkpointer, thread_id)
    return JsonResponse({"thread_id": thread_id, "state": state, "pending": _pending_json(pending)})


# --- the web console -----------------------------------------------------------------------------


def console_login_required(view: Any) -> Any:
    """The project's login check around the console: HTTP Basic with ``settings.CONSOLE_PASSWORD``.

    A project with ``django.contrib.auth`` would use ``staff_member_required``
    (or ``login_required``) here instead; the console itself has no logins.
    Without a password configured the console is not there (404).
    """

    @functools.wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        password = getattr(settings, "CONSOLE_PASSWORD", None)
        if not password:
            return HttpResponse("no console here\n", status=404, content_type="text/plain")
        scheme, _, encoded = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        given = b""
        if scheme.lower() == "basic":
            try:
                given = base64.b64decode(encoded, validate=True).partition(b":")[2]
            except (binascii.Error, ValueError):
                given = b""
        if given and hmac.compare_digest(given, password.encode("utf-8")):
            return view(request, *args, **kwargs)
        response = HttpResponse("log in to use the console\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Basic realm="checkout console"'
        return response

    return guarded


# Signed with a key derived from the project's secret: every worker process accepts every form.
console = ilmek.web.app(
    checkpointer, checkout_graph, allow_actions=True, secret=f"ilmek-console:{settings.SECRET_KEY}"
)
"""The console on Django's connection, answering with the checkout graph."""

console_view = console_login_required(ilmek.web.django_view(console))
"""The view ``urls.py`` mounts at ``/console``."""
