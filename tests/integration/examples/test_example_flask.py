"""The Flask example (``examples/flask_app.py``) through Flask's test client, on real databases.

Every test runs twice: on a SQLite file and on Postgres through a psycopg2
pool, both opened the way the example's ``__main__`` opens them. Side
effects are counted as rows in the database the example wrote them to.
"""

from __future__ import annotations

import base64
import html
import pathlib
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg2
import pytest
from flask import Flask
from flask.testing import FlaskClient

from examples.flask_app import create_app, open_stores

pytestmark = pytest.mark.timeout(60)

CART = ["coffee", "mug"]
QUESTION = {"question": "Charge 24.99?"}
PAUSE_ID = "checkout:interrupt#0"


class Store:
    """One database for one test: opens apps on it and counts rows in it directly."""

    def __init__(self, database_url: str | None, sqlite_path: pathlib.Path) -> None:
        self.database_url = database_url
        self.sqlite_path = sqlite_path
        self.closers: list[Callable[[], None]] = []

    def app(self, *, charge_latency: float = 0.0, console_password: str | None = None) -> Flask:
        """A new app on the database, as a new worker process would open it."""
        checkpointer, shop = open_stores(
            self.database_url, sqlite_path=self.sqlite_path, charge_latency=charge_latency
        )
        self.closers += [checkpointer.close, shop.close]
        return create_app(checkpointer, shop, console_password=console_password)

    def count(self, table: str) -> int:
        """Rows in ``table``, read on a connection of the test's own."""
        query = f"SELECT count(*) FROM {table}"
        if self.database_url is None:
            connection = sqlite3.connect(self.sqlite_path)
            try:
                return int(connection.execute(query).fetchone()[0])
            finally:
                connection.close()
        with psycopg2.connect(self.database_url) as pg_connection, pg_connection.cursor() as cursor:
            cursor.execute(query)
            count = int(cursor.fetchone()[0])
        pg_connection.close()
        return count

    def close(self) -> None:
        for close in reversed(self.closers):
            close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    """A fresh database for the example: a SQLite file, or a Postgres database."""
    database_url = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else None
    opened = Store(database_url, tmp_path / "checkout.db")
    yield opened
    opened.close()


@pytest.fixture
def client(store: Store) -> FlaskClient:
    """A test client of an app on the test's database."""
    return store.app().test_client()


def start(client: FlaskClient, thread_id: str, cart: Any = CART) -> Any:
    """POST /checkout; return the response."""
    return client.post("/checkout", json={"thread_id": thread_id, "cart": cart})


def approve(client: FlaskClient, thread_id: str, answer: Any = "yes") -> Any:
    """POST /checkout/<thread_id>/approve; return the response."""
    return client.post(f"/checkout/{thread_id}/approve", json={"answer": answer})


def test_starting_a_checkout_creates_the_order_and_pauses_on_the_question(
    client: FlaskClient, store: Store
) -> None:
    """POST /checkout runs up to the question: the order exists, nothing is charged yet."""
    response = start(client, "order-1")

    assert 201 == response.status_code
    assert "/checkout/order-1" == response.headers["Location"]
    assert {
        "thread_id": "order-1",
        "status": "interrupted",
        "pending": [{"id": PAUSE_ID, "payload": QUESTION}],
    } == response.get_json()
    assert (1, 0) == (store.count("orders"), store.count("charges"))


def test_approving_charges_once_and_finishes(client: FlaskClient, store: Store) -> None:
    """Approving answers the pause: the card is charged, the order is not created again."""
    start(client, "order-1")

    response = approve(client, "order-1")

    assert 200 == response.status_code
    body = response.get_json()
    assert ("done", [], "charged") == (body["status"], body["pending"], body["state"]["outcome"])
    state = body["state"]
    assert CART == state["order"]["items"]
    assert (2499, state["order"]["id"]) == (state["charge"]["amount_cents"], state["charge"]["order_id"])
    assert (1, 1) == (store.count("orders"), store.count("charges"))


def test_the_state_view_shows_the_question_then_the_outcome(client: FlaskClient) -> None:
    """GET /checkout/<id> shows the state and the open question, then the state without one."""
    start(client, "order-1")

    paused = client.get("/checkout/order-1")
    assert 200 == paused.status_code
    assert [{"id": PAUSE_ID, "payload": QUESTION}] == paused.get_json()["pending"]
    assert CART == paused.get_json()["state"]["cart"]
    assert paused.get_json()["state"]["charge"] is None

    approve(client, "order-1")
    finished = client.get("/checkout/order-1").get_json()
    assert ([], "charged") == (finished["pending"], finished["state"]["outcome"])


def test_approving_a_second_time_is_a_conflict(client: FlaskClient, store: Store) -> None:
    """A second approval finds nothing to answer: 409 with ilmek's message, no second charge."""
    start(client, "order-1")
    assert 200 == approve(client, "order-1").status_code

    again = approve(client, "order-1")

    assert 409 == again.status_code
    body = again.get_json()
    assert "not_paused" == body["error"]
    assert "'order-1' is not interrupted" in body["message"]
    assert 1 == store.count("charges")


def test_two_racing_approvals_charge_once(store: Store) -> None:
    """Two approvals at the same moment: one charges and finishes, the other gets 409; one charge."""
    # The charge takes 200 ms, so the second request arrives while the first holds the thread.
    app = store.app(charge_latency=0.2)
    assert 201 == start(app.test_client(), "order-1").status_code
    barrier = threading.Barrier(2)
    responses: list[tuple[int, Any]] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def click_approve() -> None:
        # Each "browser tab" has its own client, as two requests would.
        own_client = app.test_client()
        try:
            barrier.wait(timeout=10)
            response = approve(own_client, "order-1")
            with lock:
                responses.append((response.status_code, response.get_json()))
        except BaseException as error:  # reported by the test thread below
            failures.append(error)

    clicks = [threading.Thread(target=click_approve) for _ in range(2)]
    for click in clicks:
        click.start()
    for click in clicks:
        click.join(timeout=30)

    assert [] == failures
    statuses = sorted(status for status, _ in responses)
    assert [200, 409] == statuses
    done = next(body for status, body in responses if status == 200)
    refused = next(body for status, body in responses if status == 409)
    assert "done" == done["status"]
    # Busy if it came while the winner held the thread, not_paused if it came after.
    assert refused["error"] in {"busy", "not_paused"}
    assert 1 == store.count("charges")


def test_another_app_instance_answers_a_checkout_started_elsewhere(store: Store) -> None:
    """The thread lives in the database: a second app (another worker process) approves it."""
    start(store.app().test_client(), "order-1")

    response = approve(store.app().test_client(), "order-1")

    assert ("done", "charged") == (response.get_json()["status"], response.get_json()["state"]["outcome"])
    assert (1, 1) == (store.count("orders"), store.count("charges"))


def test_declining_cancels_without_charging(client: FlaskClient, store: Store) -> None:
    """An answer other than yes finishes the checkout as cancelled, with no charge."""
    start(client, "order-1")

    response = approve(client, "order-1", answer="no")

    assert ("done", "cancelled") == (response.get_json()["status"], response.get_json()["state"]["outcome"])
    assert 0 == store.count("charges")


def test_an_unknown_checkout_is_not_found(client: FlaskClient) -> None:
    """Approving or reading a thread that was never started is a 404."""
    assert 404 == approve(client, "nobody").status_code
    response = client.get("/checkout/nobody")
    assert (404, "not_found") == (response.status_code, response.get_json()["error"])


def test_starting_an_existing_checkout_is_a_conflict(client: FlaskClient, store: Store) -> None:
    """Starting a thread id again (paused or finished) is a 409, and no second order is made."""
    start(client, "order-1")
    paused_again = start(client, "order-1")
    approve(client, "order-1")
    finished_again = start(client, "order-1")

    assert [(409, "exists"), (409, "exists")] == [
        (paused_again.status_code, paused_again.get_json()["error"]),
        (finished_again.status_code, finished_again.get_json()["error"]),
    ]
    assert 1 == store.count("orders")


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/checkout", {"thread_id": "t", "cart": []}, "cart must be a non-empty list of items"),
        ("/checkout", {"thread_id": "t", "cart": ["yacht"]}, "unknown items ['yacht']"),
        ("/checkout/t/approve", {}, 'send {"answer": "yes"}'),
    ],
)
def test_a_malformed_request_is_a_bad_request(
    client: FlaskClient, store: Store, path: str, body: dict[str, Any], message: str
) -> None:
    """A missing answer, an empty cart or an unknown item is a 400 that says what to send."""
    response = client.post(path, json=body)

    assert (400, "bad_request") == (response.status_code, response.get_json()["error"])
    assert message in response.get_json()["message"]
    assert 0 == store.count("orders")


# --- the web console, mounted at /console behind the app's login -----------------------------

CONSOLE_PASSWORD = "let-me-in"


def basic(user: str, password: str) -> dict[str, str]:
    """An Authorization header for HTTP Basic."""
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


AUTH = basic("ops", CONSOLE_PASSWORD)


@pytest.fixture
def console_client(store: Store) -> FlaskClient:
    """A test client of an app with the console mounted."""
    return store.app(console_password=CONSOLE_PASSWORD).test_client()


def test_the_console_is_mounted_behind_the_login(console_client: FlaskClient) -> None:
    """/console/ answers 401 without the password, then lists the paused checkout with its question."""
    start(console_client, "order-1")
    assert 401 == console_client.get("/console/").status_code
    assert 401 == console_client.get("/console/", headers=basic("ops", "wrong")).status_code
    page = console_client.get("/console/", headers=AUTH)
    assert 200 == page.status_code
    text = page.get_data(as_text=True)
    assert "order-1" in text
    assert "Charge 24.99?" in text
    links = re.findall(r'(?:href|action)="([^"#]+)"', text)
    assert [] == [link for link in links if not link.startswith("/console/")]
    assert 200 == console_client.get("/console/static/console.css", headers=AUTH).status_code
    # The app's own routes are untouched by the mount.
    assert 200 == console_client.get("/checkout/order-1").status_code


def test_answering_in_the_console_charges_once(console_client: FlaskClient, store: Store) -> None:
    """The console's "yes" button answers the pause: one charge; posting the form again charges nothing."""
    start(console_client, "order-1")
    page = console_client.get("/console/thread?id=order-1", headers=AUTH).get_data(as_text=True)
    found = re.search(
        r'action="(/console/action/answer\?[^"]+)".*?name="token" value="([0-9a-f]+)"', page, re.S
    )
    assert found is not None
    action, token = html.unescape(found.group(1)), found.group(2)

    answered = console_client.post(action, data={"token": token, "choice.0": '"yes"'}, headers=AUTH)
    assert 303 == answered.status_code
    assert answered.headers["Location"].startswith("/console/thread?id=order-1&tone=ok")
    shown = console_client.get(answered.headers["Location"], headers=AUTH).get_data(as_text=True)
    assert "Answered. The run finished." in shown
    assert "charged" == console_client.get("/checkout/order-1").get_json()["state"]["outcome"]

    again = console_client.post(action, data={"token": token, "choice.0": '"yes"'}, headers=AUTH)
    assert "The thread moved on" in console_client.get(again.headers["Location"], headers=AUTH).get_data(
        as_text=True
    )
    assert (1, 1) == (store.count("orders"), store.count("charges"))


def test_a_console_form_without_the_login_does_nothing(console_client: FlaskClient, store: Store) -> None:
    """The login check stands before the console: a POST without it is a 401, nothing is charged."""
    start(console_client, "order-1")
    refused = console_client.post("/console/action/answer?id=order-1", data={"choice.0": '"yes"'})
    assert 401 == refused.status_code
    assert 0 == store.count("charges")


def test_without_a_console_password_there_is_no_console(client: FlaskClient) -> None:
    """The console is mounted only when a password is configured."""
    assert 404 == client.get("/console/").status_code
