"""The Flask example (``examples/flask_app.py``) through Flask's test client, on real databases.

Every test runs twice: on a SQLite file and on Postgres through a psycopg2
pool, both opened the way the example's ``__main__`` opens them. Side
effects are counted as rows in the database the example wrote them to.
"""

from __future__ import annotations

import pathlib
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

    def app(self, *, charge_latency: float = 0.0) -> Flask:
        """A new app on the database, as a new worker process would open it."""
        checkpointer, shop = open_stores(
            self.database_url, sqlite_path=self.sqlite_path, charge_latency=charge_latency
        )
        self.closers += [checkpointer.close, shop.close]
        return create_app(checkpointer, shop)

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
