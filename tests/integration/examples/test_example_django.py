"""The Django example (``examples/django_app``) through Django's test client, on real Postgres.

ilmek rides ``django.db.connection``; every test that can runs twice, with
``ATOMIC_REQUESTS`` on (ilmek writes in a savepoint of the request's
transaction, Django commits) and off (ilmek commits its own transactions).

Django is configured here, once per process, from the example's own settings
module; each test then points the ``default`` connection at its fresh
database and sets ``ATOMIC_REQUESTS`` on the connection settings every
thread's connection shares. Connections are persistent (``CONN_MAX_AGE``
``None``) so that a test can check that the very connection a request used
comes out clean.
"""

from __future__ import annotations

import base64
import html
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

import django
import psycopg2
import pytest
from django.conf import settings
from django.db import ProgrammingError, connection, connections
from django.test import Client, override_settings

from examples.django_app.settings import database_from_url
from ilmek import PostgresCheckpointer
from tests.support.pgcluster import dsn_to_url

pytestmark = pytest.mark.timeout(60)

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
CART = ["coffee", "mug"]
ATOMIC_REQUESTS = pytest.param(True, id="atomic-requests", marks=pytest.mark.postgres)
AUTOCOMMIT = pytest.param(False, id="autocommit", marks=pytest.mark.postgres)
PAUSE_ID = "checkout:interrupt#0"


@pytest.fixture(scope="module")
def views() -> ModuleType:
    """The example's views module, with Django configured from the example's settings."""
    if not settings.configured:
        from examples.django_app import settings as project_settings

        options = {name: getattr(project_settings, name) for name in dir(project_settings) if name.isupper()}
        # Django's own test runner would add it; we configure Django by hand.
        options["ALLOWED_HOSTS"] = [*options["ALLOWED_HOSTS"], "testserver"]
        settings.configure(**options)
        django.setup()
    from examples.django_app import views as project_views

    return project_views


def query(dsn: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Rows of a query, read (or a statement run and committed) on a fresh connection of the test's."""
    pg_connection = psycopg2.connect(dsn)
    try:
        with pg_connection, pg_connection.cursor() as cursor:
            cursor.execute(sql, tuple(params))
            return cursor.fetchall() if cursor.description is not None else []
    finally:
        pg_connection.close()


class ShopDatabase:
    """The test's view of one database: rows and checkpoints read on connections of its own."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.checkpointer = PostgresCheckpointer.connect(dsn)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a query on the test's database."""
        return query(self.dsn, sql, params)

    def count(self, table: str) -> int:
        """Rows in ``table``."""
        return int(self.query(f"SELECT count(*) FROM {table}")[0][0])

    def charge_attempts(self) -> list[int]:
        """How often each charged order was asked to be charged."""
        return [attempts for (attempts,) in self.query("SELECT attempts FROM charges ORDER BY order_id")]

    def latest_checkpoint_id(self, thread_id: str) -> str | None:
        """The thread's latest committed checkpoint, as another process sees it."""
        latest = self.checkpointer.get(thread_id)
        return latest.id if latest is not None else None


@pytest.fixture(params=[ATOMIC_REQUESTS, AUTOCOMMIT])
def database(request: pytest.FixtureRequest, views: ModuleType, postgres_dsn: str) -> Iterator[ShopDatabase]:
    """Django's ``default`` connection on a fresh database, with ATOMIC_REQUESTS on or off."""
    default = connections.settings["default"]
    saved = dict(default)
    # Every thread's connection shares this dict: change it while none is open.
    connections.close_all()
    default.update(database_from_url(dsn_to_url(postgres_dsn), atomic_requests=request.param))
    default["CONN_MAX_AGE"] = None
    views.create_tables()
    opened = ShopDatabase(postgres_dsn)
    try:
        yield opened
    finally:
        opened.checkpointer.close()
        connections.close_all()
        default.clear()
        default.update(saved)


def start(client: Client, thread_id: str) -> Any:
    """POST /checkout; return the response."""
    return client.post("/checkout", {"thread_id": thread_id, "cart": CART}, content_type="application/json")


def approve(client: Client, thread_id: str, answer: Any = "yes") -> Any:
    """POST /checkout/<thread_id>/approve; return the response."""
    return client.post(f"/checkout/{thread_id}/approve", {"answer": answer}, content_type="application/json")


def test_start_then_approve_charges_once(database: ShopDatabase) -> None:
    """Start pauses on the question; approving charges once, records a receipt and finishes."""
    client = Client()

    started = start(client, "order-1")
    assert 201 == started.status_code
    assert {
        "thread_id": "order-1",
        "status": "interrupted",
        "pending": [{"id": PAUSE_ID, "payload": {"question": "Charge 24.99?"}}],
    } == started.json()
    assert (1, 0) == (database.count("orders"), database.count("charges"))

    approved = approve(client, "order-1")
    assert 200 == approved.status_code
    state = approved.json()["state"]
    assert ("done", "charged", 2499) == (
        approved.json()["status"],
        state["outcome"],
        state["charge"]["amount_cents"],
    )
    assert (1, [1], 1) == (database.count("orders"), database.charge_attempts(), database.count("receipts"))

    shown = client.get("/checkout/order-1")
    assert (200, [], "charged") == (
        shown.status_code,
        shown.json()["pending"],
        shown.json()["state"]["outcome"],
    )


def test_approving_a_second_time_is_a_conflict(database: ShopDatabase) -> None:
    """A second approval is a 409 naming the thread, and the card is not charged again."""
    client = Client()
    start(client, "order-1")
    approve(client, "order-1")

    again = approve(client, "order-1")

    assert (409, "not_paused") == (again.status_code, again.json()["error"])
    assert "'order-1' is not interrupted" in again.json()["message"]
    assert [1] == database.charge_attempts()


def test_an_unknown_checkout_is_not_found(database: ShopDatabase) -> None:
    """Approving or reading a thread that was never started is a 404."""
    client = Client()
    assert [404, 404] == [approve(client, "nobody").status_code, client.get("/checkout/nobody").status_code]


class RequestThread(threading.Thread):
    """One request sent from a thread of its own, with its own client and connection, as another worker would.

    With a barrier, the request goes out when every party has reached it.
    """

    def __init__(self, send: Callable[[Client], Any], barrier: threading.Barrier | None = None) -> None:
        super().__init__()
        self.send = send
        self.barrier = barrier
        self.response: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            client = Client()
            if self.barrier is not None:
                self.barrier.wait(timeout=10)
            self.response = self.send(client)
        except BaseException as error:  # re-raised on the test's thread by outcome()
            self.error = error
        finally:
            # Persistent connections belong to their thread: close this one's.
            connections.close_all()

    def outcome(self) -> Any:
        """The response, once the request is over (its exception, if it raised one)."""
        self.join(timeout=30)
        assert not self.is_alive(), "the request did not finish"
        if self.error is not None:
            raise self.error
        return self.response


def test_two_racing_approvals_charge_once(database: ShopDatabase) -> None:
    """Two approvals at the same moment: one finishes, the other gets 409, the order is charged once."""
    start(Client(), "order-1")

    # The charge takes 200 ms, so the second request arrives while the first holds the thread.
    barrier = threading.Barrier(2)
    clicks = [RequestThread(lambda client: approve(client, "order-1"), barrier) for _ in range(2)]
    with override_settings(CHECKOUT_CHARGE_LATENCY=0.2):
        for click in clicks:
            click.start()
        responses = [click.outcome() for click in clicks]

    assert [200, 409] == sorted(response.status_code for response in responses)
    refused = next(response for response in responses if response.status_code == 409)
    assert refused.json()["error"] in {"busy", "not_paused"}
    assert ([1], 1) == (database.charge_attempts(), database.count("receipts"))


def connection_state() -> tuple[int, bool, bool, int]:
    """This thread's Django connection: its server pid, whether it is in a transaction, and its locks."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_backend_pid(), count(*) FROM pg_locks"
            " WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        )
        pid, advisory_locks = cursor.fetchone()
    return pid, connection.in_atomic_block, connection.get_autocommit(), advisory_locks


def fail_the_next_receipt(database: ShopDatabase) -> None:
    """Make recording a receipt fail in the database: the view then raises after ilmek committed."""
    database.query("DROP TABLE receipts")


@pytest.mark.parametrize("database", [ATOMIC_REQUESTS], indirect=True)
def test_with_atomic_requests_a_failed_request_rolls_back_ilmeks_checkpoint(
    database: ShopDatabase, views: ModuleType
) -> None:
    """A view failing after ilmek committed rolls ilmek's savepoint back with the request, and with it the
    step's own rows: the charge ran on the request's thread, inside its transaction, so the charge row and
    ilmek's record of it vanish together, and answering again charges once."""
    client = Client()
    start(client, "order-1")
    paused_at = database.latest_checkpoint_id("order-1")
    pid = connection_state()[0]
    fail_the_next_receipt(database)

    with pytest.raises(ProgrammingError, match="receipts"):
        approve(client, "order-1")

    # The thread is still paused at the same checkpoint: nothing of the request was kept.
    assert paused_at == database.latest_checkpoint_id("order-1")
    assert [PAUSE_ID] == [pause.id for pause in database.checkpointer.get("order-1").pending]
    # The charge's row, written in the request's transaction, vanished with ilmek's record of it.
    assert [] == database.charge_attempts()
    # The same connection, out of its transaction, holding nothing, and serving the next request.
    assert (pid, False, True, 0) == connection_state()
    assert 200 == client.get("/checkout/order-1").status_code

    # Answering again runs the charge step again (its journal entry was rolled back), against a
    # database that never saw the first try: one charge, one receipt.
    views.create_tables()
    retried = approve(client, "order-1")
    assert (200, "done") == (retried.status_code, retried.json()["status"])
    assert (1, [1], 1) == (database.count("orders"), database.charge_attempts(), database.count("receipts"))


@pytest.mark.parametrize("database", [AUTOCOMMIT], indirect=True)
def test_without_atomic_requests_a_failed_request_keeps_ilmeks_checkpoint(database: ShopDatabase) -> None:
    """Without ATOMIC_REQUESTS ilmek's commits stand when the view fails after them."""
    client = Client()
    start(client, "order-1")
    paused_at = database.latest_checkpoint_id("order-1")
    pid = connection_state()[0]
    fail_the_next_receipt(database)

    with pytest.raises(ProgrammingError, match="receipts"):
        approve(client, "order-1")

    finished = database.checkpointer.get("order-1")
    assert paused_at != finished.id
    assert ((), "charged") == (finished.pending, finished.channels["outcome"])
    assert [1] == database.charge_attempts()
    assert (pid, False, True, 0) == connection_state()
    # The checkout is over: approving again cannot charge, though the receipt was lost.
    again = approve(client, "order-1")
    assert (409, "not_paused") == (again.status_code, again.json()["error"])
    assert [1] == database.charge_attempts()


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` until it holds; fail after a deadline far above any expected wait."""
    deadline = time.monotonic() + 20
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        time.sleep(0.02)


def backends_waiting_on_locks(database: ShopDatabase, query_prefix: str = "") -> int:
    """How many sessions of the test database wait for a lock (on a query starting with the prefix)."""
    rows = database.query(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND starts_with(query, %s)",
        (query_prefix,),
    )
    return int(rows[0][0])


@pytest.mark.parametrize("database", [ATOMIC_REQUESTS], indirect=True)
def test_with_atomic_requests_the_thread_stays_held_until_the_request_commits(database: ShopDatabase) -> None:
    """An approval arriving after the first one's run, but before its request commits, does not charge."""
    start(Client(), "order-1")
    first = RequestThread(lambda client: approve(client, "order-1"))
    second = RequestThread(lambda client: approve(client, "order-1"))
    locker = psycopg2.connect(database.dsn)
    try:
        # Freeze the first request between ilmek's return and Django's commit: its
        # receipt INSERT waits for this lock.
        with locker.cursor() as cursor:
            cursor.execute("LOCK TABLE receipts IN ACCESS EXCLUSIVE MODE")
        first.start()
        wait_until(
            lambda: 1 == backends_waiting_on_locks(database, "INSERT INTO receipts"), "the receipt waits"
        )
        second.start()
        # The second request either finishes or blocks behind the first's uncommitted writes.
        wait_until(
            lambda: not second.is_alive() or 2 == backends_waiting_on_locks(database),
            "the second approval finishes or waits",
        )
    finally:
        locker.rollback()
        locker.close()

    assert 200 == first.outcome().status_code
    assert 409 == second.outcome().status_code
    assert [1] == database.charge_attempts(), second.outcome().json()


# --- the web console, mounted at /console behind the project's login -----------------------------

CONSOLE_PASSWORD = "let-me-in"
AUTH = "Basic " + base64.b64encode(f"ops:{CONSOLE_PASSWORD}".encode()).decode()


def test_the_console_is_mounted_behind_the_login(database: ShopDatabase) -> None:
    """/console/ is 401 without the password, then lists the paused checkout; links stay under /console/."""
    client = Client()
    start(client, "order-1")
    with override_settings(CONSOLE_PASSWORD=CONSOLE_PASSWORD):
        assert 401 == client.get("/console/").status_code
        page = client.get("/console/", HTTP_AUTHORIZATION=AUTH)
        assert 200 == page.status_code
        assert "text/html; charset=utf-8" == page["Content-Type"]
        assert "default-src 'self'" in page["Content-Security-Policy"]
        text = page.content.decode()
        assert "order-1" in text
        assert "Charge 24.99?" in text
        links = re.findall(r'(?:href|action)="([^"#]+)"', text)
        assert links
        assert [] == [link for link in links if not link.startswith("/console/")]
        assert 200 == client.get("/console/static/console.css", HTTP_AUTHORIZATION=AUTH).status_code
        assert 200 == client.get("/console", HTTP_AUTHORIZATION=AUTH).status_code


def test_answering_in_the_console_charges_once(database: ShopDatabase) -> None:
    """The console's "yes" answers the pause in a Django request: one charge; the same form again, none."""
    client = Client()
    start(client, "order-1")
    with override_settings(CONSOLE_PASSWORD=CONSOLE_PASSWORD):
        page = client.get("/console/thread?id=order-1", HTTP_AUTHORIZATION=AUTH).content.decode()
        found = re.search(
            r'action="(/console/action/answer\?[^"]+)".*?name="token" value="([0-9a-f]+)"', page, re.S
        )
        assert found is not None
        action = html.unescape(found.group(1))
        form = urllib.parse.urlencode({"token": found.group(2), "choice.0": '"yes"'})

        def post() -> Any:
            return client.post(
                action, form, content_type="application/x-www-form-urlencoded", HTTP_AUTHORIZATION=AUTH
            )

        answered = post()
        assert 303 == answered.status_code
        assert answered["Location"].startswith("/console/thread?id=order-1&tone=ok")
        shown = client.get(answered["Location"], HTTP_AUTHORIZATION=AUTH).content.decode()
        assert "Answered. The run finished." in shown
        again = client.get(post()["Location"], HTTP_AUTHORIZATION=AUTH).content.decode()
        assert "The thread moved on" in again
    assert [1] == database.charge_attempts()
    assert "charged" == client.get("/checkout/order-1").json()["state"]["outcome"]


def test_without_a_console_password_there_is_no_console(database: ShopDatabase) -> None:
    """With CONSOLE_PASSWORD unset, /console/ is a 404 even with credentials."""
    with override_settings(CONSOLE_PASSWORD=""):
        assert 404 == Client().get("/console/", HTTP_AUTHORIZATION=AUTH).status_code


@pytest.mark.postgres
def test_the_project_runs_as_a_module_on_database_url(postgres_dsn: str) -> None:
    """``python -m examples.django_app check`` sets Django up from DATABASE_URL and creates the tables."""
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env["DATABASE_URL"] = dsn_to_url(postgres_dsn)

    completed = subprocess.run(
        [sys.executable, "-m", "examples.django_app", "check"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert (0, "") == (completed.returncode, completed.stderr)
    assert "System check identified no issues" in completed.stdout
    assert [(True, True, True)] == query(
        postgres_dsn,
        "SELECT to_regclass('orders') IS NOT NULL, to_regclass('charges') IS NOT NULL,"
        " to_regclass('receipts') IS NOT NULL",
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql://shop:p%40ss@db.example:6543/shop?sslmode=require",
            ("shop", "shop", "p@ss", "db.example", "6543", {"sslmode": "require"}),
        ),
        # A socket folder keeps its case (urlsplit's hostname would lowercase it).
        ("postgres://%2FRun%2FPostgres/Shop", ("Shop", "", "", "/Run/Postgres", "", {})),
    ],
)
def test_the_settings_read_a_database_url(url: str, expected: tuple[Any, ...]) -> None:
    """DATABASE_URL becomes Django's DATABASES entry: credentials, host or socket folder, port, options."""
    entry = database_from_url(url, atomic_requests=False)

    assert expected == tuple(entry[key] for key in ("NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS"))
    assert ("django.db.backends.postgresql", False) == (entry["ENGINE"], entry["ATOMIC_REQUESTS"])


@pytest.mark.parametrize("url", ["sqlite:///shop.db", "postgresql://db.example"])
def test_the_settings_refuse_a_url_that_is_not_a_postgres_database(url: str) -> None:
    """A URL of another scheme, or one naming no database, is refused at once."""
    with pytest.raises(ValueError, match="DATABASE_URL must"):
        database_from_url(url)
