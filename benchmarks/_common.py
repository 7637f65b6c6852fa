"""What the benchmark scripts share: the graphs, timing, tables and the databases under test.

A *target* is one kind of database: ``sqlite`` (a file in WAL mode) or
``postgres`` (a server reached through a psycopg2 ``ThreadedConnectionPool``:
the one named by ``--dsn`` or ``ILMEK_BENCH_POSTGRES_DSN``, else a throwaway
cluster started for the run). It opens checkpointers, measures how many bytes
a batch of work wrote, counts the SQL statements a checkpointer issues and
offers a bare insert + commit for the floor. Adding a database means adding a
:class:`Target` subclass to ``TARGETS``; the scripts do not change.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg2.pool

# Measure the ilmek of this checkout, not one that happens to be installed.
_CHECKOUT = pathlib.Path(__file__).resolve().parent.parent
if str(_CHECKOUT) not in sys.path:
    sys.path.insert(0, str(_CHECKOUT))

from ilmek import END, START, CompiledGraph, channel, graph  # noqa: E402
from ilmek.checkpoint.base import Checkpointer  # noqa: E402
from ilmek.checkpoint.postgres import PostgresCheckpointer  # noqa: E402
from ilmek.checkpoint.sqlite import SqliteCheckpointer  # noqa: E402
from ilmek.events import CheckpointEvent, Event  # noqa: E402

MESSAGE_BYTES = 200


def message(role: str, number: int) -> str:
    """A distinct chat message of ``MESSAGE_BYTES`` ASCII characters (so as many bytes)."""
    head = f"{role} #{number}: "
    return (head + "lorem ipsum dolor sit amet " * 10)[:MESSAGE_BYTES]


def chat_graph() -> CompiledGraph:
    """``messages`` (append) and one node ``reply`` that appends one message: one turn, one superstep."""

    def reply(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": message("assistant", len(state["messages"]))}

    return (
        graph("chat", {"messages": channel.append()})
        .node("reply", reply)
        .edge(START, "reply")
        .edge("reply", END)
        .compile()
    )


def loop_graph() -> CompiledGraph:
    """A node that appends one message and schedules itself again: it never ends on its own.

    Run it with a large ``recursion_limit`` through :class:`SuperstepStream`,
    which pulls exactly as many supersteps as it is asked for.
    """

    def think(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": message("assistant", len(state["messages"]))}

    return (
        graph("agent-loop", {"messages": channel.append()})
        .node("think", think)
        .edge(START, "think")
        .edge("think", "think")
        .compile()
    )


NEVER_ENDING = 10**9
"""A ``recursion_limit`` a benchmark loop never reaches."""


class SuperstepStream:
    """A running loop graph, advanced a chosen number of supersteps at a time.

    A stream is lazy, so a run can be paused between batches while another
    thread (or a bare SQL loop) is measured, and so two workloads interleave
    in one process without threads competing for the two cores.
    """

    def __init__(self, events: Iterator[Event]) -> None:
        self._events = events

    def advance(self, supersteps: int) -> Timings:
        """Run ``supersteps`` more supersteps, timing each one."""
        timings = Timings()
        if supersteps <= 0:
            return timings
        for event in self._events:
            if isinstance(event, CheckpointEvent):
                timings.lap()
                if len(timings) == supersteps:
                    return timings
        raise RuntimeError("the loop graph ended; it should run until closed")

    def close(self) -> None:
        """End the run (it releases its thread)."""
        close = getattr(self._events, "close", None)
        if close is not None:
            close()


class SuperstepRun:
    """Supersteps timed inside ``run()``: a loop of one node, as many supersteps as asked, per run.

    ``run()`` runs a one-task superstep on the calling thread, where a stream
    hands every task to a worker thread (so its events arrive live); this
    measures that path. Each lap is the time from one node call to the
    next: a whole superstep, its commit included. The run's own start (the
    hold, the input's checkpoint) falls before the first lap.
    """

    def __init__(self, checkpointer: Checkpointer, thread_id: str) -> None:
        self._checkpointer = checkpointer
        self._thread_id = thread_id
        self._timings = Timings()
        self._calls = 0
        self._wanted = 0

        def think(state: dict[str, Any]) -> dict[str, Any]:
            if self._calls:
                self._timings.lap()
            else:
                self._timings = Timings()  # the first call starts the clock
            self._calls += 1
            return {"messages": message("assistant", len(state["messages"]))}

        # The same state as loop_graph's (one append channel); the stop is counted outside it.
        self._graph = (
            graph("counted-loop", {"messages": channel.append()})
            .node("think", think)
            .edge(START, "think")
            .router(
                "think",
                lambda state: END if self._calls > self._wanted else "think",
                destinations=["think", END],
            )
            .compile()
        )

    def advance(self, supersteps: int) -> Timings:
        """One run of ``supersteps`` + 1 supersteps, timing the last ``supersteps`` of them."""
        from ilmek import run

        self._calls, self._wanted = 0, supersteps
        run(
            self._graph,
            {"messages": message("user", 0)},
            thread_id=self._thread_id,
            checkpointer=self._checkpointer,
            recursion_limit=supersteps + 2,
        )
        return self._timings


class Timings:
    """Wall and CPU time of consecutive operations.

    CPU time is the whole process's (the run's worker threads included): it
    leaves out waiting on the disk, and also most of the slowdown other
    programs on a busy machine cause, so its ratios are the steadier ones.
    """

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self._mark = (time.perf_counter(), time.process_time())

    def lap(self) -> None:
        """An operation ended (and the next one starts) now."""
        now = (time.perf_counter(), time.process_time())
        self.wall.append(now[0] - self._mark[0])
        self.cpu.append(now[1] - self._mark[1])
        self._mark = now

    def extend(self, other: Timings) -> None:
        """Add another batch's operations."""
        self.wall.extend(other.wall)
        self.cpu.extend(other.cpu)

    def __len__(self) -> int:
        return len(self.wall)

    def wall_ms(self) -> float:
        """The median wall time of an operation, in milliseconds."""
        return statistics.median(self.wall) * 1000.0

    def cpu_ms(self) -> float:
        """The median CPU time of an operation, in milliseconds."""
        return statistics.median(self.cpu) * 1000.0


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain-text table: a title, headers, right-aligned cells."""
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [max([len(header)] + [len(row[i]) for row in cells]) for i, header in enumerate(headers)]
    # Text columns read best aligned left, numbers right.
    text = [all(isinstance(row[i], str) for row in rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        aligned = (
            value.ljust(width) if is_text else value.rjust(width)
            for value, width, is_text in zip(values, widths, text, strict=True)
        )
        return "  ".join(aligned).rstrip()

    print()
    print(title)
    print(line(headers))
    print(line(["-" * width for width in widths]))
    for row in cells:
        print(line(row))
    sys.stdout.flush()


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, or infinity when the denominator is zero."""
    return numerator / denominator if denominator else float("inf")


# --- the databases under test ----------------------------------------------------------------


class Growth:
    """Bytes a batch of work added: to the stored data, and to the write-ahead log."""

    def __init__(self, stored: int = 0, logged: int = 0) -> None:
        self.stored = stored
        self.logged = logged

    def __iadd__(self, other: Growth) -> Growth:
        self.stored += other.stored
        self.logged += other.logged
        return self


class BareWriter:
    """The floor: the cheapest durable write of a payload on the target's database."""

    def write(self) -> None:
        """Insert the payload once, in its own committed transaction."""
        raise NotImplementedError

    def measure_growth(self) -> contextlib.AbstractContextManager[Growth]:
        """As :meth:`Target.measure_growth`, for the writer's own table."""
        raise NotImplementedError

    def trace_statements(self, record: Callable[[str], None] | None) -> None:
        """Call ``record(sql)`` for every statement the writer sends (``None`` stops)."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the writer's connection."""


class Target:
    """One database under test.

    Subclasses say how to open checkpointers on it, how to measure the bytes
    a batch wrote, how to watch the SQL a checkpointer sends, and what the
    cheapest durable write of the same payload looks like.
    """

    name = "?"
    #: How the build of a long history trades durability for speed (printed with its time).
    setup_note = "?"
    #: How :meth:`measure_growth` counts stored and logged bytes (printed under the header).
    bytes_note = "?"
    #: How :meth:`trace_statements` sees the SQL, and what a statement costs (printed with the counts).
    trace_note = "?"

    def describe(self) -> str:
        """One line naming the database and its durability settings."""
        raise NotImplementedError

    def make_checkpointer(self, *, for_setup: bool = False, concurrent_runs: int = 2) -> Checkpointer:
        """A checkpointer on this database.

        ``for_setup`` asks for one that may trade durability for speed: it
        only builds histories that are then measured with a normal one.
        ``concurrent_runs`` is how many runs will use it at once (a pool is
        sized for them).
        """
        raise NotImplementedError

    def measure_growth(self) -> contextlib.AbstractContextManager[Growth]:
        """Around a batch of work: fills the yielded :class:`Growth` when the batch ends.

        Nothing else may write to the database during the batch.
        """
        raise NotImplementedError

    def stored_bytes(self) -> int:
        """Bytes the checkpointer's data takes on the database now (as :meth:`measure_growth` counts them)."""
        raise NotImplementedError

    def trace_statements(
        self, checkpointer: Checkpointer, record: Callable[[str], None]
    ) -> Callable[[], None]:
        """Call ``record(sql)`` for every statement ``checkpointer`` sends; return what stops it."""
        raise NotImplementedError

    def bare_writer(self, payload: str) -> BareWriter:
        """A :class:`BareWriter` of ``payload`` beside the checkpointer's tables."""
        raise NotImplementedError

    def server_cpu_seconds(self) -> float | None:
        """CPU seconds the database server's processes have used so far (``None``: in-process or remote)."""
        return None

    #: The prefix of the tables :meth:`make_checkpointer`'s checkpointers use.
    table_prefix = "ilmek"

    def sql_connection(self) -> Any:
        """A DB-API connection of the script's own to the same database, with the run's durability.

        For writing rows straight into ilmek's tables (building volume fast)
        and for bare floors; the caller closes it.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Close what the target opened."""


class SqliteFile:
    """A SQLite file in WAL mode, and a connection of ours to flush and measure it.

    Bytes are the growth of the database file between two
    ``PRAGMA wal_checkpoint(TRUNCATE)`` (what a batch left stored, in whole
    pages) and the size the WAL reached in between (every page the batch's
    commits wrote, 24-byte frame headers included: the write volume).
    """

    def __init__(self, path: pathlib.Path, synchronous: str) -> None:
        self.path = path
        self.wal = path.with_name(path.name + "-wal")
        for stale in (path, self.wal, path.with_name(path.name + "-shm")):
            stale.unlink(missing_ok=True)
        self.admin = _sqlite_connect(path, synchronous)
        # The admin connection never waits on a lock: a TRUNCATE checkpoint
        # that would wait reports busy after copying every frame, and then
        # succeeds at once when asked again.
        self.admin.execute("PRAGMA busy_timeout = 0")

    def settle(self) -> None:
        """Copy the WAL into the database file and empty it."""
        for _ in range(1000):
            busy, _log, _done = self.admin.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                return
            time.sleep(0.001)
        raise RuntimeError(f"the WAL of {self.path} could not be emptied: a connection keeps reading")

    def stored_bytes(self) -> int:
        """The size of the database file once the WAL is copied into it and emptied."""
        self.settle()
        return self.path.stat().st_size

    @contextlib.contextmanager
    def measure_growth(self) -> Iterator[Growth]:
        growth = Growth()
        self.settle()
        before = self.path.stat().st_size
        yield growth
        growth.logged = self.wal.stat().st_size if self.wal.exists() else 0
        self.settle()
        growth.stored = self.path.stat().st_size - before

    def close(self) -> None:
        self.admin.close()


class _SqliteBareWriter(BareWriter):
    def __init__(self, path: pathlib.Path, synchronous: str, payload: str) -> None:
        self._file = SqliteFile(path, synchronous)
        self._connection = _sqlite_connect(path, synchronous)
        self._connection.execute("CREATE TABLE rows (row_id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
        self._payload = (payload,)

    def write(self) -> None:
        self._connection.execute("BEGIN IMMEDIATE")
        self._connection.execute("INSERT INTO rows (value) VALUES (?)", self._payload)
        self._connection.execute("COMMIT")

    def measure_growth(self) -> contextlib.AbstractContextManager[Growth]:
        return self._file.measure_growth()

    def trace_statements(self, record: Callable[[str], None] | None) -> None:
        self._connection.set_trace_callback(record)

    def close(self) -> None:
        self._connection.close()
        self._file.close()


class SqliteTarget(Target):
    """A SQLite file in WAL mode, with the ``synchronous`` level of the run."""

    name = "sqlite"
    setup_note = "synchronous=OFF"
    bytes_note = (
        "stored B: database growth between two wal_checkpoint(TRUNCATE), per operation; "
        "WAL B: bytes the batch wrote to the WAL (whole pages), per operation"
    )
    trace_note = (
        "traced with sqlite3's set_trace_callback on every connection the checkpointer opened; "
        "SQLite runs in-process, so a statement is a function call, not a round trip"
    )

    def __init__(self, folder: pathlib.Path, synchronous: str, file_name: str) -> None:
        self.folder = folder
        self.synchronous = synchronous.upper()
        self._file = SqliteFile(folder / file_name, self.synchronous)

    def describe(self) -> str:
        return f"SQLite {sqlite3.sqlite_version}, WAL, synchronous={self.synchronous}, file {self._file.path}"

    def wal_pages_by_table(self, action: Callable[[], None]) -> dict[str, int]:
        """The WAL frames ``action`` wrote, counted by the table or index owning each page (``dbstat``).

        Empty where SQLite was built without the ``dbstat`` table.
        """
        self._file.settle()
        action()
        wal = self._file.wal.read_bytes()
        try:
            owners = dict(self._file.admin.execute("SELECT pageno, name FROM dbstat").fetchall())
        except sqlite3.OperationalError:
            return {}
        page_size = int.from_bytes(wal[8:12], "big") if len(wal) >= 32 else 0
        counts: dict[str, int] = {}
        offset = 32
        while page_size and offset + 24 <= len(wal):
            page = int.from_bytes(wal[offset : offset + 4], "big")
            owner = str(owners.get(page, "(free or new page)"))
            counts[owner] = counts.get(owner, 0) + 1
            offset += 24 + page_size
        return counts

    def make_checkpointer(self, *, for_setup: bool = False, concurrent_runs: int = 2) -> Checkpointer:
        # One connection per thread, opened by the checkpointer itself: nothing to size.
        return SqliteCheckpointer(self._file.path, synchronous="OFF" if for_setup else self.synchronous)

    def measure_growth(self) -> contextlib.AbstractContextManager[Growth]:
        return self._file.measure_growth()

    def stored_bytes(self) -> int:
        return self._file.stored_bytes()

    def trace_statements(
        self, checkpointer: Checkpointer, record: Callable[[str], None]
    ) -> Callable[[], None]:
        assert isinstance(checkpointer, SqliteCheckpointer)
        # Benchmark-only reach into the checkpointer: it opens one connection
        # per thread, lazily, so make this thread's exist, then watch them all.
        checkpointer.get("benchmark: open this thread's connection")
        opened = checkpointer._adapter._connections._live  # type: ignore[attr-defined]
        connections = [holder.connection for holder in opened]
        for connection in connections:
            connection.set_trace_callback(record)

        def stop() -> None:
            for connection in connections:
                connection.set_trace_callback(None)
            if len(opened) != len(connections):
                raise RuntimeError("the checkpointer opened a connection while traced: the count is short")

        return stop

    def bare_writer(self, payload: str) -> BareWriter:
        return _SqliteBareWriter(self.folder / f"bare-{self._file.path.name}", self.synchronous, payload)

    def sql_connection(self) -> sqlite3.Connection:
        """A connection to the checkpointer's file, in autocommit: ``BEGIN`` / ``COMMIT`` are the caller's."""
        return _sqlite_connect(self._file.path, self.synchronous)

    def close(self) -> None:
        self._file.close()


def _sqlite_connect(path: pathlib.Path, synchronous: str) -> sqlite3.Connection:
    # The pragmas SqliteCheckpointer sets, so the bare floor is a fair one.
    connection = sqlite3.connect(path, isolation_level=None, timeout=30)
    connection.execute("PRAGMA journal_mode = WAL").fetchall()
    connection.execute(f"PRAGMA synchronous = {synchronous}")
    connection.execute("PRAGMA busy_timeout = 30000").fetchall()
    return connection


# --- Postgres -------------------------------------------------------------------------------

_BENCH_DATABASE = "ilmek_bench"
"""The database a throwaway cluster's benchmark runs in."""

_STATUS_IDLE = 0
"""psycopg2's ``TRANSACTION_STATUS_IDLE``: no transaction open on the connection."""

# A throwaway cluster from tests/support/pgcluster.py is tuned for tests (fsync and
# full-page writes off, on tmpfs). Measured as it is, a commit would cost a
# fraction of a durable one and the floor would mean nothing: the benchmark
# turns durability back on and keeps the cluster on disk, like SQLite's file.
_DURABLE_SETTINGS = {"fsync": "on", "full_page_writes": "on"}

_TABLE_BYTES = "(SELECT COALESCE(sum(pg_total_relation_size(to_regclass(t))), 0) FROM unnest(%s::text[]) t)"
"""The bytes of the tables named by the one parameter (a list): heap, indexes and TOAST."""


def _table_names(prefix: str) -> list[str]:
    """ilmek's tables under ``prefix``, read from its own DDL so that a new table is not missed."""
    names = []
    for statement in PostgresCheckpointer.schema_sql(prefix):
        match = re.match(rf"CREATE TABLE IF NOT EXISTS ({re.escape(prefix)}_\w+)", statement)
        if match:
            names.append(match.group(1))
    return names


class _TracingPool(psycopg2.pool.AbstractConnectionPool):  # type: ignore[misc]
    """A psycopg2 pool seen through a tap: every statement a borrowed connection sends is recorded.

    What is recorded is what goes over the wire, one entry per round trip:
    psycopg2's implicit ``BEGIN`` (it sends one before the first statement on
    an idle connection outside autocommit), each statement with its
    parameters bound, and ``COMMIT`` / ``ROLLBACK`` when a transaction is open
    (psycopg2 sends nothing for them otherwise).
    """

    def __init__(self, pool: Any, record: Callable[[str], None]) -> None:
        # Not the pool's own __init__: this one lends the wrapped pool's connections.
        self.pool = pool
        self._record = record
        self.outstanding = 0

    def getconn(self) -> _TracingConnection:
        connection = _TracingConnection(self.pool.getconn(), self._record)
        self.outstanding += 1
        return connection

    def putconn(self, connection: Any, close: bool = False) -> None:
        if isinstance(connection, _TracingConnection):
            self.outstanding -= 1
            connection = connection.wrapped
        self.pool.putconn(connection, close=close)


class _TracingConnection:
    """A psycopg2 connection that records what it sends; everything else is the connection's own."""

    def __init__(self, connection: Any, record: Callable[[str], None]) -> None:
        self.wrapped = connection
        self._record = record

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # a proxy stands in for the connection, as wrapt's do
        return type(self.wrapped)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # Settings (autocommit...) reach the connection, as through wrapt's proxies.
        if name in ("wrapped", "_record"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.wrapped, name, value)

    def in_transaction(self) -> bool:
        return int(self.wrapped.info.transaction_status) != _STATUS_IDLE

    def cursor(self, **options: Any) -> _TracingCursor:
        return _TracingCursor(self.wrapped.cursor(**options), self, self._record)

    def commit(self) -> None:
        if self.in_transaction():
            self._record("COMMIT")
        self.wrapped.commit()

    def rollback(self) -> None:
        if self.in_transaction():
            self._record("ROLLBACK")
        self.wrapped.rollback()


class _TracingCursor:
    def __init__(self, cursor: Any, connection: _TracingConnection, record: Callable[[str], None]) -> None:
        self._cursor = cursor
        self._connection = connection
        self._record = record

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def execute(self, sql: str, params: Any = None) -> None:
        if not self._connection.wrapped.autocommit and not self._connection.in_transaction():
            self._record("BEGIN")
        self._record(self._cursor.mogrify(sql, params).decode())
        self._cursor.execute(sql, params)


class _PostgresBareWriter(BareWriter):
    """``INSERT`` of the payload into a table of its own, then ``COMMIT``, through the checkpointer's pool."""

    def __init__(self, target: PostgresTarget, pool: Any, payload: str) -> None:
        self._target = target
        self._real_pool = pool
        self._pool: Any = pool
        self.table = f"{target.prefix}_bare"
        # Like ilmek's tables: an identity key, and the payload as text (the same bytes).
        target.admin_execute(
            f"CREATE TABLE {self.table} (row_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
            "value TEXT NOT NULL)"
        )
        self._insert = f"INSERT INTO {self.table} (value) VALUES (%s)"
        self._payload = (payload,)

    def write(self) -> None:
        # What ilmek's pool adapter does for one write, minus ilmek: borrow,
        # one statement on a fresh cursor, commit, give back.
        pool = self._pool
        connection = pool.getconn()
        try:
            cursor = connection.cursor()
            try:
                cursor.execute(self._insert, self._payload)
            finally:
                cursor.close()
            connection.commit()
        finally:
            pool.putconn(connection)

    def measure_growth(self) -> contextlib.AbstractContextManager[Growth]:
        return self._target.measure_tables([self.table])

    def trace_statements(self, record: Callable[[str], None] | None) -> None:
        self._pool = self._real_pool if record is None else _TracingPool(self._real_pool, record)


class PostgresTarget(Target):
    """A Postgres database reached through psycopg2 ``ThreadedConnectionPool`` s, tables ``bench_<name>_*``.

    Without a DSN it starts a throwaway cluster (``tests/support/pgcluster.py``) in the
    system temporary folder, with fsync and full-page writes on, and stops it
    at the end. ``synchronous`` maps SQLite's levels onto the session setting
    ``synchronous_commit``: ``FULL`` waits for the WAL flush of every commit
    (``on``), ``NORMAL`` does not (``off``; a crash may lose the last commits,
    never corrupt).

    Bytes: *stored* is the growth of ``pg_total_relation_size`` summed over
    the measured tables (heap, indexes and TOAST, in whole 8 kB pages);
    *WAL* is ``pg_wal_lsn_diff`` of ``pg_current_wal_insert_lsn()`` around the
    batch: every WAL record the server inserted meanwhile (the insert
    position, not the write position, so that a commit not yet flushed under
    ``synchronous_commit=off`` counts too). The WAL is the whole server's, so
    a DSN shared with other work counts theirs too.
    """

    name = "postgres"
    setup_note = "synchronous_commit=off"
    bytes_note = (
        "stored B: growth of pg_total_relation_size summed over the tables (8 kB pages), per operation; "
        "WAL B: pg_wal_lsn_diff of pg_current_wal_insert_lsn() around the batch, per operation"
    )
    trace_note = (
        "traced by wrapping the pool's connections; each statement (BEGIN, which psycopg2 sends by "
        "itself, and COMMIT included) is one round trip to the server; one sent in autocommit is a "
        "transaction of its own"
    )

    def __init__(
        self, dsn: str | None, cluster_parent: pathlib.Path | None, synchronous: str, name: str
    ) -> None:
        import psycopg2  # only the Postgres target needs a driver

        self._psycopg2 = psycopg2
        self.synchronous = synchronous.upper()
        self.prefix = f"bench_{name}"
        self.tables = _table_names(self.prefix)
        self._pools: list[Any] = []
        self._main_pool: Any = None
        self._migrated = False
        self._cluster: Any = None
        if dsn is None:
            dsn = self._start_cluster(cluster_parent)
        self.dsn = dsn
        try:
            self._admin = psycopg2.connect(dsn)
            self._admin.autocommit = True
            self._drop_tables()
        except BaseException:
            self._stop_cluster()
            raise

    # --- the server ---------------------------------------------------------------------

    def _start_cluster(self, parent: pathlib.Path | None) -> str:
        from tests.support.pgcluster import PostgresCluster  # the repository root is on sys.path

        self._cluster = PostgresCluster.start(tmpdir=str(parent or tempfile.gettempdir()))
        try:
            with contextlib.closing(self._psycopg2.connect(self._cluster.dsn)) as connection:
                connection.autocommit = True
                with connection.cursor() as cursor:
                    for setting, value in _DURABLE_SETTINGS.items():
                        cursor.execute(f"ALTER SYSTEM SET {setting} = {value}")
                    cursor.execute("SELECT pg_reload_conf()")
            self._wait_for_settings(self._cluster.dsn, _DURABLE_SETTINGS)
            return str(self._cluster.create_database(_BENCH_DATABASE))
        except BaseException:
            self._stop_cluster()
            raise

    def _wait_for_settings(self, dsn: str, settings: dict[str, str]) -> None:
        # The postmaster rereads its configuration on its own time; new
        # sessions see the new values once it has.
        deadline = time.monotonic() + 30
        while True:
            found = self._settings(dsn, list(settings))
            if found == settings:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not take the settings {settings}: it shows {found}")
            time.sleep(0.05)

    def _settings(self, dsn: str, names: Sequence[str], **connect: Any) -> dict[str, str]:
        with contextlib.closing(self._psycopg2.connect(dsn, **connect)) as connection:
            with connection.cursor() as cursor:
                found = {}
                for setting in names:
                    cursor.execute(f"SHOW {setting}")
                    found[setting] = cursor.fetchone()[0]
            connection.rollback()
        return found

    def _stop_cluster(self) -> None:
        if self._cluster is not None:
            self._cluster.stop()
            self._cluster = None

    def admin_execute(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement on the target's own autocommit connection (never ilmek's pools)."""
        with self._admin.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description is not None else []

    def _drop_tables(self) -> None:
        self.admin_execute(f"DROP TABLE IF EXISTS {', '.join([*self.tables, f'{self.prefix}_bare'])}")

    def _session_options(self, *, for_setup: bool) -> str:
        durable = not for_setup and self.synchronous == "FULL"
        return f"-c synchronous_commit={'on' if durable else 'off'}"

    @property
    def table_prefix(self) -> str:  # type: ignore[override]
        return self.prefix

    def sql_connection(self) -> Any:
        """A psycopg2 connection of its own (not from the pools), its commits as durable as the run's."""
        return self._psycopg2.connect(self.dsn, options=self._session_options(for_setup=False))

    def describe(self) -> str:
        settings = self._settings(
            self.dsn,
            ["server_version", "fsync", "full_page_writes", "synchronous_commit"],
            options=self._session_options(for_setup=False),
        )
        version = settings.pop("server_version").split()[0]
        if self._cluster is not None:
            where = f"throwaway cluster in {self._cluster.base}"
        else:
            params = self._admin.get_dsn_parameters()
            where = f"database {params.get('dbname')} at {params.get('host')}:{params.get('port')}"
        durability = ", ".join(f"{key}={value}" for key, value in settings.items())
        client = f"psycopg2 {self._psycopg2.__version__.split()[0]} ThreadedConnectionPool"
        return f"PostgreSQL {version}, {where}, {durability}; client {client}; tables {self.prefix}_*"

    # --- what the scripts use -------------------------------------------------------------

    def make_checkpointer(self, *, for_setup: bool = False, concurrent_runs: int = 2) -> Checkpointer:
        import psycopg2.pool

        # A running run keeps one connection from its start to its end; two
        # to spare (the bare writer, a run starting while another ends).
        # minconn equals maxconn because psycopg2's pool closes a returned
        # connection when minconn are already idle: below that every burst
        # would reconnect.
        size = concurrent_runs + 2
        pool = psycopg2.pool.ThreadedConnectionPool(
            size, size, self.dsn, options=self._session_options(for_setup=for_setup)
        )
        self._pools.append(pool)
        if not for_setup and self._main_pool is None:
            self._main_pool = pool
        checkpointer = PostgresCheckpointer(pool, table_prefix=self.prefix)
        if not self._migrated:
            checkpointer.migrate()
            self._migrated = True
        return checkpointer

    @contextlib.contextmanager
    def measure_tables(self, tables: Sequence[str]) -> Iterator[Growth]:
        """Growth of ``tables`` and of the server's WAL around the block."""
        growth = Growth()
        table_list = list(tables)
        [(lsn, size_before)] = self.admin_execute(
            f"SELECT pg_current_wal_insert_lsn()::text, {_TABLE_BYTES}", (table_list,)
        )
        yield growth
        [(logged, size_after)] = self.admin_execute(
            f"SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s::pg_lsn), {_TABLE_BYTES}",
            (lsn, table_list),
        )
        growth.stored = int(size_after) - int(size_before)
        growth.logged = int(logged)

    def measure_growth(self) -> contextlib.AbstractContextManager[Growth]:
        return self.measure_tables(self.tables)

    def table_bytes(self, tables: Sequence[str]) -> int:
        """``pg_total_relation_size`` summed over ``tables`` (names, schema-qualified or not)."""
        [(size,)] = self.admin_execute(f"SELECT {_TABLE_BYTES}", (list(tables),))
        return int(size)

    def stored_bytes(self) -> int:
        return self.table_bytes(self.tables)

    def trace_statements(
        self, checkpointer: Checkpointer, record: Callable[[str], None]
    ) -> Callable[[], None]:
        assert isinstance(checkpointer, PostgresCheckpointer)
        # Benchmark-only reach into the checkpointer: its pool adapter borrows
        # through ``_pool``; swapping in a tap sees every connection it lends.
        adapter = checkpointer._adapter
        real = adapter._pool  # type: ignore[attr-defined]
        tracing = _TracingPool(real, record)
        adapter._pool = tracing  # type: ignore[attr-defined]

        def stop() -> None:
            adapter._pool = real  # type: ignore[attr-defined]
            if tracing.outstanding:
                raise RuntimeError(
                    "a traced connection is still lent out: it would go back to the wrong pool"
                )

        return stop

    def bare_writer(self, payload: str) -> BareWriter:
        if self._main_pool is None:
            self.make_checkpointer()
        return _PostgresBareWriter(self, self._main_pool, payload)

    def server_cpu_seconds(self) -> float | None:
        # The server's processes for this database plus its background ones
        # (WAL writer, checkpointer...), read from /proc: only when the server
        # runs on this machine.
        rows = self.admin_execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "OR backend_type <> 'client backend'"
        )
        total = 0.0
        seen = False
        for (pid,) in rows:
            used = _process_cpu_seconds(int(pid))
            if used is not None:
                total += used
                seen = True
        return total if seen else None

    def close(self) -> None:
        try:
            for pool in self._pools:
                pool.closeall()
            self._pools.clear()
            if self._cluster is None:
                # A server of the caller's: leave it as it was found.
                self._drop_tables()
            self._admin.close()
        finally:
            self._stop_cluster()


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a Postgres process on this machine, or ``None``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            if b"postgres" not in cmdline.read():
                return None  # not a local server: the pid is someone else's
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # Fields 14 and 15 of stat (utime, stime), counted after the ")" that ends the name.
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


POSTGRES_DSN_VARIABLE = "ILMEK_BENCH_POSTGRES_DSN"
"""The environment variable naming a Postgres server to measure (``--dsn`` wins over it)."""


def _open_sqlite(options: argparse.Namespace, name: str, stack: contextlib.ExitStack) -> Target:
    if options.db is None:
        folder = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ilmek-")))
    else:
        options.db.mkdir(parents=True, exist_ok=True)
        folder = options.db
    return SqliteTarget(folder, options.synchronous, f"{name}.db")


def _open_postgres(options: argparse.Namespace, name: str, stack: contextlib.ExitStack) -> Target:
    dsn = options.dsn or os.environ.get(POSTGRES_DSN_VARIABLE, "").strip() or None
    return PostgresTarget(dsn, options.db, options.synchronous, name)


TARGETS: dict[str, Callable[[argparse.Namespace, str, contextlib.ExitStack], Target]] = {
    "sqlite": _open_sqlite,
    "postgres": _open_postgres,
}
"""How to open each kind of database from the command line's options and a name for the script's data."""


def add_target_options(parser: argparse.ArgumentParser, *, default: str = "sqlite") -> None:
    """The options every script takes to choose and configure its database."""
    parser.add_argument(
        "--target", choices=sorted(TARGETS), default=default, help=f"the database kind (default {default})"
    )
    parser.add_argument(
        "--synchronous",
        type=str.upper,
        choices=("FULL", "NORMAL"),
        default="FULL",
        help="durability of a commit, for ilmek and the bare floor alike: SQLite's synchronous pragma; "
        "on Postgres FULL is synchronous_commit=on and NORMAL synchronous_commit=off (default FULL)",
    )
    parser.add_argument(
        "--db",
        type=pathlib.Path,
        default=None,
        help="sqlite: a folder for the files, the script's own files there are replaced (default: a "
        "fresh temporary folder, removed after); postgres: the parent folder of the throwaway "
        "cluster (default: the system temporary folder, on disk like SQLite's files)",
    )
    parser.add_argument(
        "--dsn",
        default=None,
        help=f"postgres: the database to measure (default ${POSTGRES_DSN_VARIABLE}, else a throwaway "
        "cluster started and stopped by the script); its bench_* tables are dropped before and after",
    )


@contextlib.contextmanager
def open_target(options: argparse.Namespace, name: str) -> Iterator[Target]:
    """The target the options name, holding the script's data under ``name``.

    SQLite files go to ``--db`` or to a temporary folder removed afterwards;
    Postgres tables are ``bench_<name>_*`` on ``--dsn`` or on a throwaway cluster.
    """
    with contextlib.ExitStack() as stack:
        target = TARGETS[options.target](options, name, stack)
        stack.callback(target.close)
        yield target


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def machine() -> str:
    """The header line naming the interpreter and the cores, and how to read the figures."""
    return f"python {sys.version.split()[0]}, {os.cpu_count()} cores; times are medians, ratios side by side"


def print_header(script: str, target: Target, notes: Sequence[str]) -> None:
    """What ran, where, and how to read the tables."""
    print(f"{script}: {target.describe()}")
    print(machine())
    for note in notes:
        print(note)
