"""A Flask app running a checkout that pauses for approval, checkpointed by ilmek.

The flow: ``POST /checkout`` creates the order and pauses on "Charge 24.99?";
``POST /checkout/<thread_id>/approve`` answers it and charges the card;
``GET /checkout/<thread_id>`` shows where the thread stands. Each request is
an ordinary synchronous Flask view calling ``ilmek.run`` / ``ilmek.resume``:
between requests the thread lives in the database, so any worker process can
answer it, and a double-clicked "approve" charges once (the second request
gets 409).

The side effects (orders, charges) are rows in the same database, written
inside journaled steps: ilmek records each step's result, so a step never
runs twice for one thread.

From the root of a clone, with the project's interpreter: after ``bash
scripts/demo`` has made ``.venv``, one line installs Flask and psycopg2 into
it::

    .venv/bin/pip install -e '.[postgres]' flask

Run it on SQLite (``checkout.db`` in the current folder)::

    .venv/bin/python examples/flask_app.py

or on Postgres (``PORT`` picks another port than 5000)::

    DATABASE_URL=postgresql://localhost/shop .venv/bin/python examples/flask_app.py

then::

    curl -X POST localhost:5000/checkout -H 'Content-Type: application/json' \\
         -d '{"thread_id": "order-1", "cart": ["coffee", "mug"]}'
    curl -X POST localhost:5000/checkout/order-1/approve -H 'Content-Type: application/json' \\
         -d '{"answer": "yes"}'

With ``CONSOLE_PASSWORD`` set, ilmek's web console is mounted at
``/console`` (``werkzeug``'s ``DispatcherMiddleware``), behind the app's
login check: here HTTP Basic authentication with that password (any user
name). Open http://localhost:5000/console/ to see the paused checkouts and
answer them with a button.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from flask import Flask, Response, jsonify, request
from werkzeug.middleware.dispatcher import DispatcherMiddleware

import ilmek
import ilmek.web

PRICES_CENTS = {"coffee": 1499, "mug": 1000, "filter": 350}
"""What the shop sells; a cart names these items."""

APPROVALS = frozenset({"yes", "y"})
"""The answers that approve the charge; anything else cancels it."""

HTTP_CONFLICT = 409


class Shop:
    """The shop's own records, orders and charges: the side effects the journal guards.

    The SQL is written once with ``?`` placeholders; a subclass says how to
    reach its database and which placeholder its driver wants.

    Args:
        charge_latency: Seconds a charge takes (a payment provider is slow;
            the tests use it to make two approvals overlap).
    """

    placeholder = "?"

    def __init__(self, *, charge_latency: float = 0.0) -> None:
        self.charge_latency = charge_latency

    def connection(self) -> contextlib.AbstractContextManager[Any]:
        """A DB-API connection whose work commits when the block ends without an error."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the shop opened."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement in a transaction of its own; return its rows."""
        with self.connection() as connection:
            cursor = connection.cursor()
            try:
                cursor.execute(sql.replace("?", self.placeholder), tuple(params))
                return cursor.fetchall() if cursor.description is not None else []
            finally:
                cursor.close()

    def setup(self) -> None:
        """Create the shop's tables if they are missing."""
        self.execute(
            "CREATE TABLE IF NOT EXISTS orders (order_id TEXT PRIMARY KEY, thread_id TEXT NOT NULL,"
            " items TEXT NOT NULL, total_cents INTEGER NOT NULL)"
        )
        self.execute(
            "CREATE TABLE IF NOT EXISTS charges (charge_id TEXT PRIMARY KEY, order_id TEXT NOT NULL,"
            " amount_cents INTEGER NOT NULL)"
        )

    def create_order(self, thread_id: str, cart: Sequence[str]) -> dict[str, Any]:
        """Record an order for the cart and return it."""
        order = {
            "id": uuid.uuid4().hex,
            "items": list(cart),
            "total_cents": sum(PRICES_CENTS[item] for item in cart),
        }
        self.execute(
            "INSERT INTO orders (order_id, thread_id, items, total_cents) VALUES (?, ?, ?, ?)",
            (order["id"], thread_id, ",".join(cart), order["total_cents"]),
        )
        return order

    def charge(self, order: dict[str, Any]) -> dict[str, Any]:
        """Charge the order's total and return the charge.

        A real provider would take the order id as an idempotency key; here
        nothing but ilmek's journal stands between a retry and a second charge.
        """
        time.sleep(self.charge_latency)
        charge = {"id": uuid.uuid4().hex, "order_id": order["id"], "amount_cents": order["total_cents"]}
        self.execute(
            "INSERT INTO charges (charge_id, order_id, amount_cents) VALUES (?, ?, ?)",
            (charge["id"], charge["order_id"], charge["amount_cents"]),
        )
        return charge


class SqliteShop(Shop):
    """The shop's tables in a SQLite file (it may be the checkpointer's file too)."""

    def __init__(self, path: str | os.PathLike[str], *, charge_latency: float = 0.0) -> None:
        super().__init__(charge_latency=charge_latency)
        self.path = os.fspath(path)

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        # A connection per call: steps run on ilmek's worker threads, and a
        # sqlite3 connection belongs to the thread that opened it.
        connection = sqlite3.connect(self.path, timeout=30)
        try:
            with connection:  # commits, or rolls back on an exception
                yield connection
        finally:
            connection.close()


class PostgresShop(Shop):
    """The shop's tables in Postgres, through a psycopg2 pool.

    Args:
        pool: A ``psycopg2.pool`` pool (``getconn`` / ``putconn``).
        owns_pool: Close the pool in :meth:`close` (only when the caller hands it over).
    """

    placeholder = "%s"

    def __init__(self, pool: Any, *, owns_pool: bool = False, charge_latency: float = 0.0) -> None:
        super().__init__(charge_latency=charge_latency)
        self.pool = pool
        self.owns_pool = owns_pool

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        connection = self.pool.getconn()
        try:
            with connection:  # psycopg2: commits, or rolls back on an exception; never closes
                yield connection
        finally:
            self.pool.putconn(connection)

    def close(self) -> None:
        if self.owns_pool:
            self.pool.closeall()


def build_checkout_graph(shop: Shop) -> ilmek.CompiledGraph:
    """The one-node checkout: create the order, ask before charging, charge (or cancel)."""

    def checkout(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        order = ctx.step("create_order", shop.create_order, ctx.thread_id, state["cart"])
        answer = ctx.interrupt({"question": f"Charge {order['total_cents'] / 100:.2f}?"})
        if str(answer).strip().lower() not in APPROVALS:
            return {"order": order, "outcome": "cancelled"}
        charge = ctx.step("charge", shop.charge, order)
        return {"order": order, "charge": charge, "outcome": "charged"}

    return (
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
    # A node that failed is a server error: Flask turns the re-raised exception into a 500.
    result.raise_for_status()
    body: dict[str, Any] = {
        "thread_id": result.thread_id,
        "status": result.status,
        "pending": _pending_json(result.pending),
    }
    if result.status == "done":
        body["state"] = result.state
    return body


def _error(status: int, code: str, message: str) -> tuple[Response, int]:
    return jsonify(error=code, message=message), status


def _cart_problem(cart: Any) -> str | None:
    if not isinstance(cart, list) or not cart:
        return "cart must be a non-empty list of items"
    unknown = [item for item in cart if item not in PRICES_CENTS]
    if unknown:
        return f"unknown items {unknown!r}; the shop sells {sorted(PRICES_CENTS)}"
    return None


def require_password(wsgi_app: Any, password: str, realm: str = "checkout console") -> Any:
    """The app's login check around a WSGI app: HTTP Basic, one password, any user name.

    A real shop would check its own sessions or its single sign-on here;
    the console itself has no logins and trusts whoever reaches it.
    """
    expected = password.encode("utf-8")

    def guarded(environ: dict[str, Any], start_response: Any) -> Any:
        scheme, _, encoded = str(environ.get("HTTP_AUTHORIZATION", "")).partition(" ")
        given = b""
        if scheme.lower() == "basic":
            try:
                given = base64.b64decode(encoded, validate=True).partition(b":")[2]
            except (binascii.Error, ValueError):
                given = b""
        if given and hmac.compare_digest(given, expected):
            return wsgi_app(environ, start_response)
        start_response(
            "401 Unauthorized",
            [("WWW-Authenticate", f'Basic realm="{realm}"'), ("Content-Type", "text/plain; charset=utf-8")],
        )
        return [b"log in to use the console\n"]

    return guarded


def create_app(
    checkpointer: ilmek.Checkpointer,
    shop: Shop,
    *,
    console_password: str | None = None,
    console_secret: str | None = None,
) -> Flask:
    """The checkout app on a checkpointer and the shop's tables.

    Every view answers JSON. Status codes: 201 a checkout started, 200 an
    approval ran or a state was read, 400 a malformed body, 404 an unknown
    thread, 409 a thread that is held by another request (``busy``), is not
    waiting for an answer (``not_paused``), already exists (``exists``) or
    was moved on by another writer (``conflict``).

    With ``console_password``, ilmek's web console is mounted at
    ``/console`` behind :func:`require_password`, actions on: the people who
    approve charges answer there. ``console_secret`` signs its forms (give
    every worker process the same one).
    """
    checkout_graph = build_checkout_graph(shop)
    app = Flask(__name__)
    if console_password:
        console = ilmek.web.app(checkpointer, checkout_graph, allow_actions=True, secret=console_secret)
        app.wsgi_app = DispatcherMiddleware(  # type: ignore[method-assign]
            app.wsgi_app, {"/console": require_password(console, console_password)}
        )

    @app.post("/checkout")
    def start_checkout() -> Any:
        body = request.get_json(silent=True) or {}
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
        return _result_json(result), 201, {"Location": f"/checkout/{thread_id}"}

    @app.post("/checkout/<thread_id>/approve")
    def approve_checkout(thread_id: str) -> Any:
        body = request.get_json(silent=True) or {}
        if "answer" not in body:
            return _error(400, "bad_request", 'send {"answer": "yes"} to charge, anything else to cancel')
        try:
            result = ilmek.resume(
                checkout_graph, body["answer"], thread_id=thread_id, checkpointer=checkpointer
            )
        except ilmek.ThreadBusyError as error:
            return _error(HTTP_CONFLICT, "busy", str(error))
        except ilmek.ConcurrentUpdateError as error:
            return _error(HTTP_CONFLICT, "conflict", str(error))
        except ilmek.ResumeError as error:
            # Checked only on this unhappy path, so an approval costs no extra query.
            if ilmek.thread_state(checkout_graph, checkpointer, thread_id) is None:
                return _error(404, "not_found", f"no checkout {thread_id!r}")
            return _error(HTTP_CONFLICT, "not_paused", str(error))
        return _result_json(result)

    @app.get("/checkout/<thread_id>")
    def show_checkout(thread_id: str) -> Any:
        state = ilmek.thread_state(checkout_graph, checkpointer, thread_id)
        if state is None:
            return _error(404, "not_found", f"no checkout {thread_id!r}")
        pending = ilmek.pending_interrupts(checkpointer, thread_id)
        return {"thread_id": thread_id, "state": state, "pending": _pending_json(pending)}

    return app


def open_stores(
    database_url: str | None,
    *,
    sqlite_path: str | os.PathLike[str] = "checkout.db",
    charge_latency: float = 0.0,
) -> tuple[ilmek.Checkpointer, Shop]:
    """The checkpointer and the shop on one database, tables created.

    Postgres (through a psycopg2 ``ThreadedConnectionPool`` both share) when
    ``database_url`` is given, else the SQLite file ``sqlite_path``. Close
    both when done; the shop closes the pool.
    """
    shop: Shop
    checkpointer: ilmek.Checkpointer
    if database_url:
        import psycopg2.pool

        # Each request in flight uses up to three connections: its hold, its
        # checkpoint writes and its step's side effect.
        pool = psycopg2.pool.ThreadedConnectionPool(1, 20, database_url)
        checkpointer = ilmek.PostgresCheckpointer(pool)
        checkpointer.migrate()
        shop = PostgresShop(pool, owns_pool=True, charge_latency=charge_latency)
    else:
        checkpointer = ilmek.SqliteCheckpointer(sqlite_path)
        shop = SqliteShop(sqlite_path, charge_latency=charge_latency)
    shop.setup()
    return checkpointer, shop


def app_from_environment() -> Flask:
    """The app on ``DATABASE_URL`` (else ``checkout.db``), its console from ``CONSOLE_PASSWORD``.

    What a production server loads, draining ilmek's runs on SIGTERM::

        .venv/bin/gunicorn -c examples/gunicorn_conf.py 'examples.flask_app:app_from_environment()'
    """
    checkpointer, shop = open_stores(os.environ.get("DATABASE_URL"))
    return create_app(
        checkpointer,
        shop,
        console_password=os.environ.get("CONSOLE_PASSWORD"),
        console_secret=os.environ.get("CONSOLE_SECRET"),
    )


if __name__ == "__main__":
    # Flask's development server; in production run gunicorn with examples/gunicorn_conf.py, whose
    # SIGTERM hook calls ilmek.drain() so a deploy never kills a run mid-superstep.
    app_from_environment().run(threaded=True, port=int(os.environ.get("PORT", "5000")))
