"""A hold taken inside the caller's transaction lasts as long as that transaction, attacked where the caller
commits mid-run: a stream consumer committing at each ``checkpoint`` event, a node committing the shared
session, a Django ``atomic`` block left (or entered anew) while the stream is read on.

Once the caller's commit makes the hold's row visible, nothing can keep it (a renewal would land in the
caller's next transaction, unseen), so the run refuses its next step and its next write with
``HoldLostError``; another worker takes the thread after the lease and replays what was recorded. Each test
counts the effects of steps in a file and has another worker (its own pool) try the thread all along, on a
real Postgres server with real SQLAlchemy and Django.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg2
import psycopg2.pool
import pytest
import sqlalchemy
import sqlalchemy.orm
from psycopg2.extensions import parse_dsn

from ilmek import END, START, HoldLostError, ThreadBusyError, channel, graph, run, stream
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.graph import CompiledGraph
from tests.support.pgcluster import dsn_to_url

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]

LEASE = 0.4
#: How long the second step runs: long enough for a lease seen by others to lapse under it.
SECOND_STEP = 3 * LEASE


def two_step_graph(effects: str, after_first: Callable[[], None] | None = None) -> CompiledGraph:
    """``first`` then ``second``, one step each, appending its name to ``effects``; the second step sleeps
    :data:`SECOND_STEP`. ``after_first`` runs in the first node after its step (a node that commits)."""

    def charge(name: str, seconds: float = 0.0) -> Callable[[], str]:
        def effect() -> str:
            with open(effects, "a", encoding="utf-8") as out:
                out.write(f"{name}\n")
            time.sleep(seconds)
            return name

        return effect

    def first(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        done = ctx.step("charge", charge("first"))
        if after_first is not None:
            after_first()
        return {"log": [done]}

    def second(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.step("charge", charge("second", SECOND_STEP))]}

    return (
        graph("joined-two-steps", {"log": channel.append()})
        .node("first", first)
        .node("second", second)
        .edge(START, "first")
        .edge("first", "second")
        .edge("second", END)
        .compile()
    )


def effects_of(effects: str) -> dict[str, int]:
    """How many times each step's effect ran."""
    counts: dict[str, int] = {}
    if os.path.exists(effects):
        with open(effects, encoding="utf-8") as found:
            for line in found:
                counts[line.strip()] = counts.get(line.strip(), 0) + 1
    return counts


class OtherWorker:
    """Another worker with a pool of its own: once the thread is visible, runs it until it gets in."""

    def __init__(self, dsn: str, effects: str, thread_id: str) -> None:
        self._pool = psycopg2.pool.ThreadedConnectionPool(1, 4, dsn)
        self._checkpointer = PostgresCheckpointer(self._pool, lease_seconds=LEASE)
        self._effects, self._thread_id = effects, thread_id
        self.results: list[Any] = []
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._try, daemon=True)
        self._thread.start()

    def _try(self) -> None:
        deadline = time.monotonic() + 30
        while self._checkpointer.get(self._thread_id) is None and not self._stop.wait(0.01):
            if time.monotonic() > deadline:
                return
        while time.monotonic() < deadline and not self._stop.is_set():
            try:
                self.results.append(
                    run(
                        two_step_graph(self._effects),
                        None,
                        thread_id=self._thread_id,
                        checkpointer=self._checkpointer,
                    )
                )
                return
            except ThreadBusyError:
                self.refused += 1
                time.sleep(0.02)

    def outcome(self) -> tuple[str, list[str]]:
        """How its run ended once it got in: status and log."""
        self._thread.join(40)
        [result] = self.results
        return result.status, result.state["log"]

    def stop(self) -> None:
        """Stop trying (a test that failed early) and close the pool."""
        self._stop.set()
        self._thread.join(40)
        self._pool.closeall()


@pytest.fixture
def other_worker(postgres_dsn: str) -> Iterator[Callable[[str, str], OtherWorker]]:
    """Starts :class:`OtherWorker`s on the test database; each is stopped at the end of the test."""
    started: list[OtherWorker] = []

    def start(effects: str, thread_id: str) -> OtherWorker:
        started.append(OtherWorker(postgres_dsn, effects, thread_id))
        return started[-1]

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def engine(postgres_dsn: str) -> Iterator[Any]:
    """A SQLAlchemy engine (psycopg2) on the test database, with ilmek's tables."""
    created = sqlalchemy.create_engine(
        dsn_to_url(postgres_dsn).replace("postgresql://", "postgresql+psycopg2://", 1)
    )
    PostgresCheckpointer(created).migrate()
    yield created
    created.dispose()


@contextlib.contextmanager
def joined_client(kind: str, engine: Any, postgres_dsn: str) -> Iterator[tuple[PostgresCheckpointer, Any]]:
    """A checkpointer writing inside the caller's transaction, and what commits it (opening the next one):
    a SQLAlchemy Session, or a psycopg2 connection with ``join_transaction=True``."""
    if kind == "sqlalchemy-session":
        with sqlalchemy.orm.Session(engine) as session:
            yield PostgresCheckpointer(session, lease_seconds=LEASE), session.commit
        return
    connection = psycopg2.connect(postgres_dsn)

    def commit_and_begin() -> None:
        connection.commit()
        with connection.cursor() as cursor:  # the caller's next transaction, for ilmek to join
            cursor.execute("SELECT 1")

    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        yield PostgresCheckpointer(connection, join_transaction=True, lease_seconds=LEASE), commit_and_begin
    finally:
        connection.close()


@pytest.mark.parametrize("kind", ["sqlalchemy-session", "psycopg2-joined"])
def test_a_consumer_committing_at_each_checkpoint_event_stops_the_joined_run(
    engine: Any, postgres_dsn: str, other_worker: Callable[[str, str], OtherWorker], tmp_path: Any, kind: str
) -> None:
    """A stream through the caller's SQLAlchemy Session (or psycopg2 connection with join_transaction=True)
    whose consumer commits at each ``checkpoint`` event: the commit ends the transaction the hold lived in,
    so the run's next step is refused (HoldLostError) rather than run under a lease nobody can renew;
    another worker trying the thread all along gets it after the lease, and every step's effect happens
    once."""
    effects = str(tmp_path / "effects.txt")
    other = other_worker(effects, "consumer-commits")
    with joined_client(kind, engine, postgres_dsn) as (checkpointer, commit):
        events = stream(two_step_graph(effects), {}, thread_id="consumer-commits", checkpointer=checkpointer)

        def read_committing_at_each_checkpoint() -> None:
            for event in events:
                if event.type == "checkpoint":
                    commit()

        with pytest.raises(HoldLostError, match="consumer-commits"):
            read_committing_at_each_checkpoint()
        commit()
    assert ("done", ["first", "second"]) == other.outcome()
    assert {"first": 1, "second": 1} == effects_of(effects)
    assert other.refused > 0


def test_a_node_committing_the_shared_session_stops_the_joined_run(
    engine: Any, other_worker: Callable[[str, str], OtherWorker], tmp_path: Any
) -> None:
    """A node commits the SQLAlchemy Session the run writes through, after its step was recorded: the run's
    next write (the superstep's commit) is refused with HoldLostError, the step's record stays (it was
    committed with the node's commit), and another worker trying the thread replays it after the lease and
    runs the rest: every step's effect happens once."""
    effects = str(tmp_path / "effects.txt")
    other = other_worker(effects, "node-commits")
    with sqlalchemy.orm.Session(engine) as session:
        checkpointer = PostgresCheckpointer(session, lease_seconds=LEASE)
        with pytest.raises(HoldLostError, match="node-commits"):
            run(
                two_step_graph(effects, session.commit),
                {},
                thread_id="node-commits",
                checkpointer=checkpointer,
            )
        session.commit()
    assert ("done", ["first", "second"]) == other.outcome()
    assert {"first": 1, "second": 1} == effects_of(effects)
    assert other.refused > 0


DJANGO_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {repo!r})
    import django
    from django.conf import settings
    settings.configure(DATABASES={{"default": {database}}}, INSTALLED_APPS=[], USE_TZ=True)
    django.setup()
    from django.db import connection, transaction
    from ilmek import HoldLostError, stream
    from ilmek.checkpoint.postgres import PostgresCheckpointer
    from tests.integration.stores.test_joined_holds import LEASE, OtherWorker, effects_of, two_step_graph

    shape, effects, dsn = sys.argv[1:4]
    checkpointer = PostgresCheckpointer(connection, lease_seconds=LEASE)
    other = OtherWorker(dsn, effects, shape)
    raised = None
    try:
        if shape == "atomic-left":
            # The stream starts inside a request's atomic block and is read on after it committed.
            with transaction.atomic():
                events = stream(two_step_graph(effects), {{}}, thread_id=shape, checkpointer=checkpointer)
                for event in events:
                    if event.type == "checkpoint":
                        break
            for event in events:
                pass
        else:
            # Each event is read in an atomic block of its own: each checkpoint commits with it.
            events = stream(two_step_graph(effects), {{}}, thread_id=shape, checkpointer=checkpointer)
            while True:
                with transaction.atomic():
                    if next(events, None) is None:
                        break
    except HoldLostError as error:
        raised = str(error)
    status, log = other.outcome()
    other.stop()
    print(json.dumps({{"raised": raised, "status": status, "log": log, "effects": effects_of(effects),
                      "refused": other.refused}}))
    """
)


@pytest.mark.parametrize("shape", ["atomic-left", "atomic-per-event"])
def test_a_django_atomic_block_that_commits_mid_run_stops_the_joined_run(
    postgres_dsn: str, tmp_path: Any, shape: str
) -> None:
    """Django on Postgres: a stream taken inside ``transaction.atomic()`` and read on after the block
    committed, or read one event per atomic block: once the transaction the hold was taken in commits, the
    run refuses its next step or write (HoldLostError naming the thread), and another worker trying the
    thread all along gets it after the lease; every step's effect happens once. (A node cannot commit
    inside Django's ``atomic``: Django refuses it.)"""
    params = parse_dsn(postgres_dsn)
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params["dbname"],
        "USER": params.get("user", ""),
        "HOST": params.get("host", ""),
        "PORT": params.get("port", ""),
        "PASSWORD": params.get("password", ""),
    }
    PostgresCheckpointer.connect(postgres_dsn).migrate()
    script = DJANGO_SCRIPT.format(repo=os.getcwd(), database=repr(database))
    effects = str(tmp_path / "effects.txt")
    finished = subprocess.run(
        [sys.executable, "-c", script, shape, effects, postgres_dsn],
        capture_output=True,
        text=True,
        timeout=80,
    )
    assert 0 == finished.returncode, finished.stderr
    outcome = json.loads(finished.stdout.splitlines()[-1])
    assert outcome["raised"] is not None, outcome
    assert shape in outcome["raised"], outcome
    assert ("done", ["first", "second"]) == (outcome["status"], outcome["log"])
    assert {"first": 1, "second": 1} == outcome["effects"]
    assert outcome["refused"] > 0
