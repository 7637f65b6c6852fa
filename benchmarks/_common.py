"""What the benchmark scripts share: the graphs, timing, tables and the databases under test.

A *target* is one kind of database (``sqlite`` today). It opens checkpointers,
measures how many bytes a batch of work wrote, counts the SQL statements a
checkpointer issues and offers a bare insert + commit for the floor. Adding a
database (Postgres) means adding a :class:`Target` subclass to ``TARGETS``;
the scripts do not change.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

# Measure the ilmek of this checkout, not one that happens to be installed.
_CHECKOUT = pathlib.Path(__file__).resolve().parent.parent
if str(_CHECKOUT) not in sys.path:
    sys.path.insert(0, str(_CHECKOUT))

from ilmek import END, START, CompiledGraph, channel, graph  # noqa: E402
from ilmek.checkpoint.base import Checkpointer  # noqa: E402
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

    def describe(self) -> str:
        """One line naming the database and its durability settings."""
        raise NotImplementedError

    def make_checkpointer(self, *, for_setup: bool = False) -> Checkpointer:
        """A checkpointer on this database.

        ``for_setup`` asks for one that may trade durability for speed: it
        only builds histories that are then measured with a normal one.
        """
        raise NotImplementedError

    def measure_growth(self) -> contextlib.AbstractContextManager[Growth]:
        """Around a batch of work: fills the yielded :class:`Growth` when the batch ends.

        Nothing else may write to the database during the batch.
        """
        raise NotImplementedError

    def trace_statements(
        self, checkpointer: Checkpointer, record: Callable[[str], None]
    ) -> Callable[[], None]:
        """Call ``record(sql)`` for every statement ``checkpointer`` sends; return what stops it."""
        raise NotImplementedError

    def bare_writer(self, payload: str) -> BareWriter:
        """A :class:`BareWriter` of ``payload`` beside the checkpointer's tables."""
        raise NotImplementedError

    def close(self) -> None:
        """Close what the target opened."""


class _SqliteFile:
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
        self._file = _SqliteFile(path, synchronous)
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

    def __init__(self, folder: pathlib.Path, synchronous: str, file_name: str) -> None:
        self.folder = folder
        self.synchronous = synchronous.upper()
        self._file = _SqliteFile(folder / file_name, self.synchronous)

    def describe(self) -> str:
        return f"SQLite {sqlite3.sqlite_version}, WAL, synchronous={self.synchronous}, file {self._file.path}"

    def make_checkpointer(self, *, for_setup: bool = False) -> Checkpointer:
        return SqliteCheckpointer(self._file.path, synchronous="OFF" if for_setup else self.synchronous)

    def measure_growth(self) -> contextlib.AbstractContextManager[Growth]:
        return self._file.measure_growth()

    def trace_statements(
        self, checkpointer: Checkpointer, record: Callable[[str], None]
    ) -> Callable[[], None]:
        assert isinstance(checkpointer, SqliteCheckpointer)
        # Benchmark-only reach into the checkpointer: it opens one connection
        # per thread, lazily, so make this thread's exist, then watch them all.
        checkpointer.get("benchmark: open this thread's connection")
        connections = list(checkpointer._adapter._connections._all)  # type: ignore[attr-defined]
        for connection in connections:
            connection.set_trace_callback(record)

        def stop() -> None:
            for connection in connections:
                connection.set_trace_callback(None)
            opened = checkpointer._adapter._connections._all  # type: ignore[attr-defined]
            if len(opened) != len(connections):
                raise RuntimeError("the checkpointer opened a connection while traced: the count is short")

        return stop

    def bare_writer(self, payload: str) -> BareWriter:
        return _SqliteBareWriter(self.folder / f"bare-{self._file.path.name}", self.synchronous, payload)

    def close(self) -> None:
        self._file.close()


def _sqlite_connect(path: pathlib.Path, synchronous: str) -> sqlite3.Connection:
    # The pragmas SqliteCheckpointer sets, so the bare floor is a fair one.
    connection = sqlite3.connect(path, isolation_level=None, timeout=30)
    connection.execute("PRAGMA journal_mode = WAL").fetchall()
    connection.execute(f"PRAGMA synchronous = {synchronous}")
    connection.execute("PRAGMA busy_timeout = 30000").fetchall()
    return connection


TARGETS: dict[str, Callable[[argparse.Namespace, str], Target]] = {
    "sqlite": lambda options, name: SqliteTarget(options.db_folder, options.synchronous, f"{name}.db"),
}
"""How to open each kind of database from the command line's options and a name for the script's data."""


def add_target_options(parser: argparse.ArgumentParser) -> None:
    """The options every script takes to choose and configure its database."""
    parser.add_argument("--target", choices=sorted(TARGETS), default="sqlite", help="the database kind")
    parser.add_argument(
        "--synchronous",
        type=str.upper,
        choices=("FULL", "NORMAL"),
        default="FULL",
        help="SQLite's synchronous pragma for ilmek and the bare floor (default FULL)",
    )
    parser.add_argument(
        "--db",
        type=pathlib.Path,
        default=None,
        help="a folder for the SQLite files; the script's own files there are replaced "
        "(default: a fresh temporary folder, removed after)",
    )


@contextlib.contextmanager
def open_target(options: argparse.Namespace, name: str) -> Iterator[Target]:
    """The target the options name, holding the script's data under ``name``.

    SQLite files go to ``--db`` or to a temporary folder removed afterwards.
    """
    with contextlib.ExitStack() as stack:
        if options.db is None:
            options.db_folder = pathlib.Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="ilmek-"))
            )
        else:
            options.db.mkdir(parents=True, exist_ok=True)
            options.db_folder = options.db
        target = TARGETS[options.target](options, name)
        stack.callback(target.close)
        yield target


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def print_header(script: str, target: Target, notes: Sequence[str]) -> None:
    """What ran, where, and how to read the tables."""
    print(f"{script}: {target.describe()}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; times are medians, ratios side by side")
    for note in notes:
        print(note)
