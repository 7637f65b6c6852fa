"""ilmek and LangGraph side by side: the same graphs on the same stores, in one process.

Three workloads, each run by both systems in batches whose order swaps from
round to round, on each store:

* **W1**: a 3-node chain ``a -> b -> c`` (each node appends a short string to
  a list channel), one run per new thread; timed per run.
* **W2**: one conversation of ``--turns`` turns (2,000 by default), each a run
  whose input appends a 200-byte message and whose node appends a reply;
  timed per turn, early (turns 1-50) and late (the last 50); then the bytes
  each system keeps for the thread. The messages are pseudo-words that
  compress like prose (``--payload lorem``: the other scripts' lorem ipsum,
  which Postgres compresses 46-fold in LangGraph's whole-list blobs).
* **W3**: a journaled side effect, a pause and a resume on a new thread.
  ilmek: ``ctx.step("charge", ...)``, then ``ctx.interrupt(...)``, answered by
  ``resume``. LangGraph, written the straightforward way: the node calls the
  effect, then ``interrupt(...)``, answered by ``Command(resume=...)``; it runs
  the node again from the top on resume, so its effect runs twice (the
  counts are printed). Timed per run + resume.

Stores (``--store``): **memory** (``InMemoryCheckpointer`` / ``InMemorySaver``);
**sqlite** (``SqliteCheckpointer(path)`` / ``SqliteSaver`` on a ``sqlite3``
connection to a second file in the same folder; both in WAL mode with the
same ``synchronous``); **postgres** (``PostgresCheckpointer`` on a psycopg2
``ThreadedConnectionPool`` / ``PostgresSaver`` on a psycopg 3
``ConnectionPool`` with ``autocommit=True, prepare_threshold=0,
row_factory=dict_row`` as its documentation requires; both on one server,
with fsync on and the same ``synchronous_commit``). LangGraph runs with
``durability="sync"``: a checkpoint is saved before the next superstep starts,
as ilmek commits each superstep before the next. Its lists are
``Annotated[list, operator.add]`` (``--langgraph-list delta``: its beta
``DeltaChannel``). Every workload starts on empty stores of its own.

Printed per store: the median time of each system, and the ratio LangGraph /
ilmek (higher: ilmek faster) of wall and CPU time; W2's storage on SQLite
(file size after ``wal_checkpoint(TRUNCATE)``) and Postgres
(``pg_total_relation_size`` of each system's tables).

LangGraph is the ``bench`` extra, never a runtime or test dependency: without
it the script says how to install it, in one line, and measures ilmek alone.

Usage: ``python benchmarks/bench_langgraph.py [--store all|memory|sqlite|postgres ...]
[--quick] [--samples 20] [--batch 10] [--turns 2000] [--window 50]
[--payload words|lorem] [--langgraph-list add|delta] [--ilmek-client psycopg2|psycopg]
[--synchronous FULL|NORMAL] [--db FOLDER] [--dsn DSN]``
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import importlib.metadata
import itertools
import operator
import os
import pathlib
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated, Any, NamedTuple, TypedDict

from _common import (
    MESSAGE_BYTES,
    POSTGRES_DSN_VARIABLE,
    PostgresTarget,
    SqliteFile,
    SqliteTarget,
    Timings,
    machine,
    message,
    positive_int,
    print_table,
    ratio,
)

from ilmek import (
    END,
    START,
    Checkpointer,
    CompiledGraph,
    InMemoryCheckpointer,
    NodeContext,
    PostgresCheckpointer,
    channel,
    graph,
    resume,
    run,
)

INSTALL_HINT = (
    "LangGraph is not installed, so ilmek is measured alone: "
    ".venv/bin/pip install -e '.[bench]' installs it (the bench extra)"
)

STORES = ("memory", "sqlite", "postgres")

DURABILITY = "sync"
"""LangGraph's durability mode: each checkpoint saved before the next superstep starts."""

FULL = {"samples": 20, "batch": 10, "turns": 2000, "window": 50}
QUICK = {"samples": 2, "batch": 2, "turns": 12, "window": 3}
"""``--quick``: a smoke test's sizes (the figures mean nothing)."""

LIST_CHANNELS = {
    "add": "Annotated[list, operator.add], the whole list stored whenever it changed",
    "delta": "Annotated[list, DeltaChannel(extend_all)] (beta): writes stored, a snapshot every 100 updates",
}
"""``--langgraph-list``: how LangGraph's states declare their lists."""

AMOUNT = 249.9
"""What W3 charges."""


# --- the graphs: the same node functions for both systems where their APIs allow ------------


class LogState(TypedDict):
    """LangGraph's state for W1 and W3: ``log``, a list that every write extends."""

    log: Annotated[list[str], operator.add]


class ChatState(TypedDict):
    """LangGraph's state for W2: ``messages``, a list that every write extends."""

    messages: Annotated[list[str], operator.add]


CHAIN = ("a", "b", "c")


def append_name(name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A W1 node: appends its own name to ``log``."""

    def node(state: dict[str, Any]) -> dict[str, Any]:
        return {"log": [name]}

    node.__name__ = name
    return node


def _pseudo_words(count: int = 3000) -> tuple[list[str], list[float]]:
    rng = random.Random(14)
    vocabulary = [
        "".join(
            rng.choice("bcdfghjklmnprstvwz") + rng.choice("aeiou")
            for _ in range(rng.choice((1, 2, 2, 3, 3, 4)))
        )
        for _ in range(count)
    ]
    # Zipf's law, as in a language: the few common words make most of a text.
    return vocabulary, list(itertools.accumulate(1 / rank for rank in range(1, count + 1)))


_VOCABULARY, _WORD_CUMULATIVE_WEIGHTS = _pseudo_words()


def words_message(role: str, number: int) -> str:
    """A distinct message of ``MESSAGE_BYTES`` ASCII characters: pseudo-words drawn as a language draws words.

    Postgres compresses a value of over 2 kB (LangGraph's whole-list blobs;
    not ilmek's 200-byte items) with pglz: these compress about 2.1 times,
    close to English prose (about 1.8), where ``_common.message``'s identical
    lorem ipsum compresses about 46 times, which no conversation does.
    """
    rng = random.Random(number)
    text = f"{role} #{number}: "
    while len(text) < MESSAGE_BYTES:
        text += " ".join(rng.choices(_VOCABULARY, cum_weights=_WORD_CUMULATIVE_WEIGHTS, k=16)) + " "
    return text[:MESSAGE_BYTES]


PAYLOADS: dict[str, Callable[[str, int], str]] = {"words": words_message, "lorem": message}
"""``--payload``: how W2's messages are written."""


def replier(texts: Sequence[str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The W2 node: appends the reply ``texts`` holds for the conversation's length."""

    def reply(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [texts[len(state["messages"])]]}

    return reply


class Charges:
    """W3's side effect, counting how often it ran."""

    def __init__(self) -> None:
        self.count = 0

    def charge(self, amount: float) -> dict[str, Any]:
        self.count += 1
        return {"charge": self.count, "amount": amount}


def ilmek_chain() -> CompiledGraph:
    builder = graph("chain", {"log": channel.append()})
    for name in CHAIN:
        builder.node(name, append_name(name))
    builder.edge(START, CHAIN[0])
    for before, after in itertools.pairwise(CHAIN):
        builder.edge(before, after)
    return builder.edge(CHAIN[-1], END).compile()


def ilmek_chat(reply: Callable[[dict[str, Any]], dict[str, Any]]) -> CompiledGraph:
    return (
        graph("chat", {"messages": channel.append()})
        .node("reply", reply)
        .edge(START, "reply")
        .edge("reply", END)
        .compile()
    )


def ilmek_checkout(charges: Charges) -> CompiledGraph:
    def checkout(state: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
        receipt = ctx.step("charge", charges.charge, AMOUNT)
        answer = ctx.interrupt({"question": f"Charge {AMOUNT}?"})
        return {"log": [f"charge {receipt['charge']}: {answer}"]}

    return (
        graph("checkout", {"log": channel.append()})
        .node("checkout", checkout)
        .edge(START, "checkout")
        .edge("checkout", END)
        .compile()
    )


def extend_all(current: list[str], writes: Sequence[list[str]]) -> list[str]:
    """``DeltaChannel``'s reducer for a list: every write's items, in order, after the current ones."""
    return current + [item for write in writes for item in write]


class LangGraph:
    """The LangGraph modules the comparison uses, imported once, and its graphs.

    ``list_channel`` is how its states declare a list: ``"add"``, the
    straightforward ``Annotated[list, operator.add]`` (a checkpoint stores the
    whole list whenever it changed), or ``"delta"``, ``DeltaChannel`` (beta in
    LangGraph 1.2: checkpoints store the writes, and a snapshot every 100).
    """

    def __init__(self, list_channel: str = "add") -> None:
        started = time.perf_counter()
        self._graph = importlib.import_module("langgraph.graph")
        self.import_seconds = time.perf_counter() - started
        self.list_channel = list_channel
        self._log_state: Any = LogState
        self._chat_state: Any = ChatState
        if list_channel == "delta":
            delta = importlib.import_module("langgraph.channels").DeltaChannel
            # The functional form: class syntax would leave the annotation a
            # string, evaluated later where DeltaChannel is not a global.
            self._log_state = TypedDict(  # type: ignore[misc]
                "LogState", {"log": Annotated[list[str], delta(extend_all)]}
            )
            self._chat_state = TypedDict(  # type: ignore[misc]
                "ChatState", {"messages": Annotated[list[str], delta(extend_all)]}
            )
        self._types = importlib.import_module("langgraph.types")
        self._func = importlib.import_module("langgraph.func")
        self._memory = importlib.import_module("langgraph.checkpoint.memory")
        self._sqlite = importlib.import_module("langgraph.checkpoint.sqlite")
        self._postgres = importlib.import_module("langgraph.checkpoint.postgres")
        self.command = self._types.Command

    @staticmethod
    def versions() -> str:
        names = (
            "langgraph",
            "langgraph-checkpoint",
            "langgraph-checkpoint-sqlite",
            "langgraph-checkpoint-postgres",
        )
        return ", ".join(f"{name} {importlib.metadata.version(name)}" for name in names)

    def memory_saver(self) -> Any:
        return self._memory.InMemorySaver()

    def sqlite_saver(self, connection: sqlite3.Connection) -> Any:
        saver = self._sqlite.SqliteSaver(connection)
        saver.setup()
        return saver

    def postgres_saver(self, pool: Any) -> Any:
        saver = self._postgres.PostgresSaver(pool)
        saver.setup()
        return saver

    def chain(self, saver: Any) -> Any:
        builder = self._graph.StateGraph(self._log_state)
        for name in CHAIN:
            builder.add_node(name, append_name(name))
        builder.add_edge(self._graph.START, CHAIN[0])
        for before, after in itertools.pairwise(CHAIN):
            builder.add_edge(before, after)
        builder.add_edge(CHAIN[-1], self._graph.END)
        return builder.compile(checkpointer=saver)

    def chat(self, saver: Any, reply: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
        builder = self._graph.StateGraph(self._chat_state)
        builder.add_node("reply", reply)
        builder.add_edge(self._graph.START, "reply")
        builder.add_edge("reply", self._graph.END)
        return builder.compile(checkpointer=saver)

    def checkout(self, saver: Any, charges: Charges, *, as_task: bool) -> Any:
        interrupt = self._types.interrupt
        # On resume LangGraph runs the node again from the top: a plain call
        # charges again; a @task's saved result is reused instead.
        charge_task = self._func.task(charges.charge) if as_task else None

        def checkout(state: dict[str, Any]) -> dict[str, Any]:
            receipt = charges.charge(AMOUNT) if charge_task is None else charge_task(AMOUNT).result()
            answer = interrupt({"question": f"Charge {AMOUNT}?"})
            return {"log": [f"charge {receipt['charge']}: {answer}"]}

        builder = self._graph.StateGraph(self._log_state)
        builder.add_node("checkout", checkout)
        builder.add_edge(self._graph.START, "checkout")
        builder.add_edge("checkout", self._graph.END)
        return builder.compile(checkpointer=saver)


def load_langgraph(list_channel: str) -> LangGraph | None:
    """LangGraph and its three savers, or ``None`` when any of them is missing."""
    try:
        return LangGraph(list_channel)
    except ImportError:
        return None


def thread(thread_id: str) -> dict[str, Any]:
    """LangGraph's config naming a thread."""
    return {"configurable": {"thread_id": thread_id}}


def count_checkpoints(stores: Stores, thread_id: str) -> tuple[int, int | None]:
    """How many checkpoints each system keeps for ``thread_id``."""
    ilmek_count = len(stores.ilmek.list(thread_id))
    if stores.langgraph is None:
        return ilmek_count, None
    return ilmek_count, sum(1 for _ in stores.langgraph.list(thread(thread_id)))


def expect(what: str, expected: Any, actual: Any) -> None:
    """Stop the benchmark when a system did not do what the workload asks: its time would mean nothing."""
    if expected != actual:
        raise RuntimeError(f"{what}: expected {expected!r}, got {actual!r}")


# --- the stores -------------------------------------------------------------------------------


class Stores:
    """The two systems' stores for one workload, fresh and empty."""

    def __init__(
        self,
        ilmek: Checkpointer,
        langgraph: Any,
        sizes: Callable[[], tuple[int, int | None]] | None = None,
    ) -> None:
        self.ilmek = ilmek
        self.langgraph = langgraph
        self._sizes = sizes
        #: What the empty stores take (tables, indexes, a file's header): measured before any run.
        self.empty = self.sizes()

    def sizes(self) -> tuple[int, int | None] | None:
        """Bytes each system keeps now (``None``: not measured on this store)."""
        return None if self._sizes is None else self._sizes()


class Backend:
    """One kind of store, for both systems: what each workload runs on."""

    name = "?"
    #: How the stored bytes are counted.
    bytes_note = "not measured"

    def describe(self) -> list[str]:
        """Lines naming each system's store and its durability settings."""
        raise NotImplementedError

    def stores(self, workload: str) -> contextlib.AbstractContextManager[Stores]:
        """Empty stores for ``workload``, closed when the block ends."""
        raise NotImplementedError

    def close(self) -> None:
        """Close what the backend opened."""


class MemoryBackend(Backend):
    name = "memory"

    def __init__(self, langgraph: LangGraph | None) -> None:
        self.langgraph = langgraph

    def describe(self) -> list[str]:
        return ["ilmek: InMemoryCheckpointer(); LangGraph: InMemorySaver()"]

    @contextlib.contextmanager
    def stores(self, workload: str) -> Iterator[Stores]:
        checkpointer = InMemoryCheckpointer()
        try:
            yield Stores(checkpointer, self.langgraph.memory_saver() if self.langgraph else None)
        finally:
            checkpointer.close()


_SYNCHRONOUS_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


class SqliteBackend(Backend):
    """Two files in one folder: ``<workload>-ilmek.db`` and ``<workload>-langgraph.db``."""

    name = "sqlite"
    bytes_note = "file size after PRAGMA wal_checkpoint(TRUNCATE)"

    def __init__(self, folder: pathlib.Path, synchronous: str, langgraph: LangGraph | None) -> None:
        self.folder = folder
        self.synchronous = synchronous
        self.langgraph = langgraph
        self._described: list[str] = []

    def describe(self) -> list[str]:
        return self._described

    @contextlib.contextmanager
    def stores(self, workload: str) -> Iterator[Stores]:
        with contextlib.ExitStack() as stack:
            target = SqliteTarget(self.folder, self.synchronous, f"{workload}-ilmek.db")
            stack.callback(target.close)
            checkpointer = target.make_checkpointer()
            stack.callback(checkpointer.close)
            described = [
                f"ilmek: SqliteCheckpointer(path, synchronous={self.synchronous!r}) on {target.describe()}"
            ]
            saver = langgraph_file = None
            if self.langgraph is not None:
                langgraph_file = SqliteFile(self.folder / f"{workload}-langgraph.db", self.synchronous)
                stack.callback(langgraph_file.close)
                # As LangGraph's documentation opens it; the saver takes a lock of its own.
                connection = sqlite3.connect(langgraph_file.path, check_same_thread=False)
                stack.callback(connection.close)
                connection.execute(f"PRAGMA synchronous = {self.synchronous}")
                saver = self.langgraph.sqlite_saver(connection)
                [(journal_mode,)] = connection.execute("PRAGMA journal_mode").fetchall()
                [(level,)] = connection.execute("PRAGMA synchronous").fetchall()
                described.append(
                    f"LangGraph: SqliteSaver(sqlite3.connect(path, check_same_thread=False)), "
                    f"journal_mode={journal_mode}, synchronous={_SYNCHRONOUS_NAMES.get(level, level)}, "
                    f"file {langgraph_file.path}"
                )
            self._described = self._described or described

            def sizes() -> tuple[int, int | None]:
                return (
                    target.stored_bytes(),
                    None if langgraph_file is None else langgraph_file.stored_bytes(),
                )

            yield Stores(checkpointer, saver, sizes)


class PostgresBackend(Backend):
    """One server; per workload, ilmek's tables ``bench_langgraph_<workload>_*`` and LangGraph's in a schema.

    LangGraph's saver has no table prefix: its tables (``checkpoints``,
    ``checkpoint_blobs``...) go into a schema of their own,
    ``bench_langgraph_<workload>``, through the pool's ``search_path``, so that
    a server of yours never sees them beside tables it may already have.
    """

    name = "postgres"
    bytes_note = "pg_total_relation_size of each system's tables: heap, indexes, TOAST"

    def __init__(
        self,
        dsn: str | None,
        cluster_parent: pathlib.Path | None,
        synchronous: str,
        langgraph: LangGraph | None,
        ilmek_client: str,
    ) -> None:
        self.synchronous = synchronous
        self.langgraph = langgraph
        self.ilmek_client = ilmek_client
        # The server: a throwaway cluster (fsync and full-page writes on) unless a DSN names one.
        self.server = PostgresTarget(dsn, cluster_parent, synchronous, "langgraph")
        self._described = [f"ilmek: PostgresCheckpointer(pool) on {self.server.describe()}"]
        if ilmek_client == "psycopg":
            import psycopg

            self._described.append(
                f"ilmek's client instead: psycopg {psycopg.__version__} ConnectionPool with psycopg's "
                "defaults (transactions, tuple rows, prepare_threshold=5)"
            )

    def _synchronous_commit(self) -> str:
        return f"-c synchronous_commit={'on' if self.synchronous == 'FULL' else 'off'}"

    def _ilmek_checkpointer(self, target: PostgresTarget, stack: contextlib.ExitStack) -> Checkpointer:
        if self.ilmek_client == "psycopg2":
            checkpointer = target.make_checkpointer(concurrent_runs=1)  # the target closes its pool
        else:
            import psycopg_pool

            # Sized as the target sizes its psycopg2 pools: one connection for
            # the one run at a time, two to spare; never a connection opened mid-run.
            pool = psycopg_pool.ConnectionPool(
                target.dsn, min_size=3, max_size=3, kwargs={"options": self._synchronous_commit()}, open=True
            )
            stack.callback(pool.close)  # ilmek never closes a pool it was given
            checkpointer = PostgresCheckpointer(pool, table_prefix=target.prefix)
            checkpointer.migrate()
        stack.callback(checkpointer.close)
        return checkpointer

    def describe(self) -> list[str]:
        return self._described

    def _langgraph_pool(self, target: PostgresTarget, schema: str) -> Any:
        import psycopg.rows
        import psycopg_pool

        pool = psycopg_pool.ConnectionPool(
            target.dsn,
            # The saver holds a lock around each use: one connection at a time,
            # and min_size = max_size so that none is ever opened mid-run.
            min_size=2,
            max_size=2,
            kwargs={
                "autocommit": True,
                "prepare_threshold": 0,
                "row_factory": psycopg.rows.dict_row,
                "options": f"{self._synchronous_commit()} -c search_path={schema}",
            },
            open=True,
        )
        if len(self._described) == 1:
            with pool.connection() as connection:
                settings = {
                    setting: connection.execute(f"SHOW {setting}").fetchone()[setting]
                    for setting in ("synchronous_commit", "search_path")
                }
            self._described.append(
                f"LangGraph: PostgresSaver(pool), psycopg {psycopg.__version__} ConnectionPool "
                "(autocommit=True, prepare_threshold=0, row_factory=dict_row), "
                + ", ".join(f"{key}={value}" for key, value in settings.items())
            )
        return pool

    @contextlib.contextmanager
    def stores(self, workload: str) -> Iterator[Stores]:
        with contextlib.ExitStack() as stack:
            target = PostgresTarget(self.server.dsn, None, self.synchronous, f"langgraph_{workload}")
            stack.callback(target.close)
            checkpointer = self._ilmek_checkpointer(target, stack)
            saver = None
            schema = target.prefix
            if self.langgraph is not None:
                target.admin_execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                target.admin_execute(f"CREATE SCHEMA {schema}")
                stack.callback(target.admin_execute, f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                pool = self._langgraph_pool(target, schema)
                stack.callback(pool.close)
                saver = self.langgraph.postgres_saver(pool)

            def sizes() -> tuple[int, int | None]:
                if saver is None:
                    return target.stored_bytes(), None
                tables = target.admin_execute(
                    "SELECT schemaname || '.' || tablename FROM pg_tables WHERE schemaname = %s", (schema,)
                )
                return target.stored_bytes(), target.table_bytes([name for (name,) in tables])

            yield Stores(checkpointer, saver, sizes)

    def close(self) -> None:
        self.server.close()


# --- measuring ---------------------------------------------------------------------------------


class Side:
    """One system's half of a workload: operation number ``n`` as a call, run in timed batches."""

    def __init__(self, operation: Callable[[int], None]) -> None:
        self._operation = operation
        self._done = 0
        self.timings = Timings()

    def batch(self, size: int) -> Timings:
        operation = self._operation
        first = self._done
        self._done += size
        timings = Timings()
        for number in range(first, first + size):
            operation(number)
            timings.lap()
        return timings


def interleave(sides: Sequence[Side], sizes: Sequence[int], *, warm_up: bool) -> None:
    """One batch of each side per size, the order swapping from batch to batch.

    With ``warm_up`` the first batches (connections, caches, first imports)
    are not recorded.
    """
    for number, size in enumerate(sizes):
        ordered = sides if number % 2 == 0 else list(reversed(sides))
        for side in ordered:
            timings = side.batch(size)
            if number > 0 or not warm_up:
                side.timings.extend(timings)


def part(timings: Timings, start: int, stop: int) -> Timings:
    """Operations ``start`` to ``stop`` (0-based, ``stop`` excluded) of ``timings``."""
    sliced = Timings()
    sliced.wall = timings.wall[start:stop]
    sliced.cpu = timings.cpu[start:stop]
    return sliced


class Row(NamedTuple):
    """One timed line of a store's table."""

    label: str
    ilmek: Timings
    langgraph: Timings | None


class Report:
    """What one store measured."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.rows: list[Row] = []
        self.notes: list[str] = []
        #: W2's bytes, each system's (``None`` without LangGraph): when empty, after the last turn.
        self.storage: tuple[tuple[int, int | None], tuple[int, int | None]] | None = None

    def add(self, label: str, ilmek_side: Side, langgraph_side: Side | None) -> None:
        self.rows.append(
            Row(label, ilmek_side.timings, None if langgraph_side is None else langgraph_side.timings)
        )


def chain_workload(
    stores: Stores, langgraph: LangGraph | None, options: argparse.Namespace, report: Report
) -> None:
    """W1: a 3-node chain, one run per new thread."""
    ilmek_graph = ilmek_chain()
    ilmek_checkpointer = stores.ilmek
    start = {"log": ["start"]}
    expected = ["start", *CHAIN]

    def ilmek_operation(number: int) -> None:
        result = run(ilmek_graph, start, thread_id=f"chain-{number}", checkpointer=ilmek_checkpointer)
        if result.status != "done":
            expect("ilmek W1 run", "done", result.status)

    expect(
        "ilmek W1 state",
        expected,
        run(ilmek_graph, start, thread_id="probe", checkpointer=ilmek_checkpointer).state["log"],
    )
    sides = [Side(ilmek_operation)]
    langgraph_side = None
    if langgraph is not None:
        app = langgraph.chain(stores.langgraph)

        def langgraph_operation(number: int) -> None:
            app.invoke(start, thread(f"chain-{number}"), durability=DURABILITY)

        expect(
            "LangGraph W1 state", expected, app.invoke(start, thread("probe"), durability=DURABILITY)["log"]
        )
        langgraph_side = Side(langgraph_operation)
        sides.append(langgraph_side)
    interleave(sides, [options.batch] * (options.samples + 1), warm_up=True)
    report.add("W1 3-node run", sides[0], langgraph_side)
    report.notes.append("W1 checkpoints stored per run: " + _pair(count_checkpoints(stores, "probe")))


def chat_workload(
    stores: Stores, langgraph: LangGraph | None, options: argparse.Namespace, report: Report
) -> None:
    """W2: one thread, ``turns`` turns of a message in and a reply out."""
    turns, window = options.turns, options.window
    # Every message is written before the clock starts, the same for both:
    # the user's at the even positions, the node's replies at the odd ones.
    make_message = PAYLOADS[options.payload]
    texts = [make_message("assistant" if position % 2 else "user", position) for position in range(2 * turns)]
    inputs = [{"messages": [texts[2 * turn]]} for turn in range(turns)]
    reply = replier(texts)
    ilmek_graph = ilmek_chat(reply)
    ilmek_checkpointer = stores.ilmek
    lengths: dict[str, int] = {}

    def ilmek_operation(number: int) -> None:
        result = run(ilmek_graph, inputs[number], thread_id="chat", checkpointer=ilmek_checkpointer)
        if result.status != "done":
            expect("ilmek W2 turn", "done", result.status)
        lengths["ilmek"] = len(result.state["messages"])

    sides = [Side(ilmek_operation)]
    langgraph_side = None
    if langgraph is not None:
        app = langgraph.chat(stores.langgraph, reply)
        config = thread("chat")

        def langgraph_operation(number: int) -> None:
            lengths["LangGraph"] = len(app.invoke(inputs[number], config, durability=DURABILITY)["messages"])

        langgraph_side = Side(langgraph_operation)
        sides.append(langgraph_side)
    # No warm-up: the first turns are the early ones. W1 ran before, in this
    # process, and a median of the window shrugs off a first turn that opens a connection.
    sizes = [options.batch] * (turns // options.batch) + (
        [turns % options.batch] if turns % options.batch else []
    )
    interleave(sides, sizes, warm_up=False)
    for system, length in lengths.items():
        expect(f"{system} W2 messages after {turns} turns", 2 * turns, length)
    late = turns - window
    for label, start, stop in (
        (f"W2 turns 1-{window}", 0, window),
        (f"W2 turns {late + 1}-{turns}", late, turns),
    ):
        report.rows.append(
            Row(
                label,
                part(sides[0].timings, start, stop),
                None if langgraph_side is None else part(langgraph_side.timings, start, stop),
            )
        )
    after = stores.sizes()
    if stores.empty is not None and after is not None:
        report.storage = (stores.empty, after)
    report.notes.append(
        f"W2 checkpoints stored after {turns} turns: " + _pair(count_checkpoints(stores, "chat"))
    )


def checkout_workload(
    stores: Stores, langgraph: LangGraph | None, options: argparse.Namespace, report: Report
) -> None:
    """W3: a journaled charge, a pause, a resume; one run + resume per new thread.

    LangGraph's node twice: the straightforward way (the charge a plain call,
    run again on resume) and with the charge a ``@task``, LangGraph's nearest
    thing to a journaled step (its result is saved and reused on resume).
    """
    ilmek_charges = Charges()
    ilmek_graph = ilmek_checkout(ilmek_charges)
    ilmek_checkpointer = stores.ilmek
    order = {"log": ["order"]}

    def ilmek_operation(number: int) -> None:
        thread_id = f"checkout-{number}"
        paused = run(ilmek_graph, order, thread_id=thread_id, checkpointer=ilmek_checkpointer)
        done = resume(ilmek_graph, "yes", thread_id=thread_id, checkpointer=ilmek_checkpointer)
        if paused.status != "interrupted" or done.status != "done":
            expect("ilmek W3 statuses", ("interrupted", "done"), (paused.status, done.status))

    ilmek_side = Side(ilmek_operation)
    # (label, thread id prefix, charges, side) of each LangGraph variant.
    variants: list[tuple[str, str, Charges, Side]] = []
    if langgraph is not None:
        answer = langgraph.command(resume="yes")
        for label, as_task in (("LangGraph", False), ("LangGraph @task", True)):
            charges = Charges()
            app = langgraph.checkout(stores.langgraph, charges, as_task=as_task)
            prefix = "checkout-task-" if as_task else "checkout-"
            variants.append((label, prefix, charges, Side(_langgraph_checkout(app, answer, order, prefix))))
    interleave(
        [ilmek_side, *(side for *_, side in variants)], [options.batch] * (options.samples + 1), warm_up=True
    )
    report.add("W3 step, pause, resume", ilmek_side, variants[0][3] if variants else None)
    if variants:
        report.add("W3, LangGraph's charge a @task", ilmek_side, variants[1][3])
    runs = options.batch * (options.samples + 1)
    charged = [f"ilmek {ilmek_charges.count / runs:g}"]
    stored = [f"ilmek {len(ilmek_checkpointer.list('checkout-0'))}"]
    for label, prefix, charges, _side in variants:
        charged.append(f"{label} {charges.count / runs:g}")
        stored.append(f"{label} {sum(1 for _ in stores.langgraph.list(thread(prefix + '0')))}")
    report.notes.append("W3 side effect runs per run + resume: " + ", ".join(charged))
    report.notes.append("W3 checkpoints stored per run + resume: " + ", ".join(stored))


def _langgraph_checkout(app: Any, answer: Any, order: dict[str, Any], prefix: str) -> Callable[[int], None]:
    def operation(number: int) -> None:
        config = thread(f"{prefix}{number}")
        paused = app.invoke(order, config, durability=DURABILITY)
        done = app.invoke(answer, config, durability=DURABILITY)
        if "__interrupt__" not in paused or "__interrupt__" in done:
            expect(
                "LangGraph W3: paused, then done",
                (True, False),
                ("__interrupt__" in paused, "__interrupt__" in done),
            )

    return operation


WORKLOADS = (("w1", chain_workload), ("w2", chat_workload), ("w3", checkout_workload))


def _pair(values: tuple[float, float | None]) -> str:
    ilmek_value, langgraph_value = values
    text = f"ilmek {ilmek_value:g}"
    return text if langgraph_value is None else f"{text}, LangGraph {langgraph_value:g}"


def measure(backend: Backend, langgraph: LangGraph | None, options: argparse.Namespace) -> Report:
    """All three workloads on one kind of store, each on fresh stores."""
    report = Report(backend)
    for name, workload in WORKLOADS:
        with backend.stores(name) as stores:
            workload(stores, langgraph, options, report)
        # The last workload's stores (LangGraph's W2 history can take a gigabyte) go now, not mid-batch.
        gc.collect()
    return report


# --- printing ---------------------------------------------------------------------------------


def print_report(report: Report, options: argparse.Namespace) -> list[float | str]:
    """One store's table; return its wall-time ratios (and storage ratio) for the summary."""
    rows = []
    summary: list[float | str] = []
    for row in report.rows:
        if row.langgraph is None:
            rows.append([row.label, row.ilmek.wall_ms(), "-", "-", row.ilmek.cpu_ms(), "-", "-"])
            summary.append("-")
            continue
        wall = ratio(row.langgraph.wall_ms(), row.ilmek.wall_ms())
        rows.append(
            [
                row.label,
                row.ilmek.wall_ms(),
                row.langgraph.wall_ms(),
                wall,
                row.ilmek.cpu_ms(),
                row.langgraph.cpu_ms(),
                ratio(row.langgraph.cpu_ms(), row.ilmek.cpu_ms()),
            ]
        )
        summary.append(wall)
    print_table(
        f"{report.backend.name}: ms per operation (medians); LangGraph / ilmek, higher: ilmek faster",
        [
            "workload",
            "ilmek ms",
            "LangGraph ms",
            "LangGraph / ilmek",
            "ilmek CPU ms",
            "LangGraph CPU ms",
            "CPU ratio",
        ],
        rows,
    )
    if report.storage is not None:
        empty, after = report.storage
        grown = (after[0] - empty[0], None if after[1] is None or empty[1] is None else after[1] - empty[1])
        storage_rows = [
            _storage_row(f"after {options.turns} turns", after),
            _storage_row("grown from empty", grown),
        ]
        print_table(
            f"{report.backend.name}: bytes stored, the W2 thread alone ({report.backend.bytes_note})",
            ["W2 stores", "ilmek B", "LangGraph B", "LangGraph / ilmek"],
            storage_rows,
        )
        summary.append(storage_rows[0][-1])
    else:
        summary.append("-")
    print()
    for note in report.notes:
        print(note)
    return summary


def _storage_row(label: str, sizes: tuple[int, int | None]) -> list[Any]:
    ilmek_bytes, langgraph_bytes = sizes
    if langgraph_bytes is None:
        return [label, ilmek_bytes, "-", "-"]
    return [label, ilmek_bytes, langgraph_bytes, ratio(langgraph_bytes, ilmek_bytes)]


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--store",
        nargs="+",
        choices=(*STORES, "all"),
        default=["all"],
        help="the stores to compare on, in order (default all: memory, sqlite, postgres)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes, for a smoke test: the figures mean nothing"
    )
    parser.add_argument(
        "--samples", type=positive_int, help=f"measured rounds of W1 and W3 (default {FULL['samples']})"
    )
    parser.add_argument(
        "--batch", type=positive_int, help=f"operations of each system per round (default {FULL['batch']})"
    )
    parser.add_argument("--turns", type=positive_int, help=f"W2's turns (default {FULL['turns']})")
    parser.add_argument(
        "--window", type=positive_int, help=f"W2's early and late turns compared (default {FULL['window']})"
    )
    parser.add_argument(
        "--synchronous",
        type=str.upper,
        choices=("FULL", "NORMAL"),
        default="FULL",
        help="durability of a commit, for both systems: SQLite's synchronous pragma; on Postgres FULL is "
        "synchronous_commit=on and NORMAL synchronous_commit=off (default FULL)",
    )
    parser.add_argument(
        "--db",
        type=pathlib.Path,
        default=None,
        help="sqlite: a folder for the files, the script's own files there are replaced (default: a fresh "
        "temporary folder, removed after); postgres: the parent folder of the throwaway cluster",
    )
    parser.add_argument(
        "--dsn",
        default=None,
        help=f"postgres: the database to measure (default ${POSTGRES_DSN_VARIABLE}, else a throwaway cluster "
        "started and stopped by the script); ilmek's bench_langgraph_* tables and LangGraph's "
        "bench_langgraph_* schemas are dropped before and after",
    )
    parser.add_argument(
        "--ilmek-client",
        choices=("psycopg2", "psycopg"),
        default="psycopg2",
        help="postgres: ilmek's pool, psycopg2's ThreadedConnectionPool (default, as the other scripts) or "
        "psycopg 3's ConnectionPool (LangGraph's driver)",
    )
    parser.add_argument(
        "--langgraph-list",
        choices=sorted(LIST_CHANNELS),
        default="add",
        help="LangGraph's list channels: add, Annotated[list, operator.add] (default, the straightforward "
        "way), or delta, DeltaChannel (beta in LangGraph 1.2; stores writes, not the whole list)",
    )
    parser.add_argument(
        "--payload",
        choices=sorted(PAYLOADS),
        default="words",
        help="W2's messages: words, distinct pseudo-words that compress like prose (default), or lorem, "
        "the other scripts' lorem ipsum, which Postgres compresses 46-fold in LangGraph's blobs",
    )
    options = parser.parse_args(argv)
    for name, value in (QUICK if options.quick else FULL).items():
        if getattr(options, name) is None:
            setattr(options, name, value)
    options.window = min(options.window, options.turns)
    options.stores = list(STORES) if "all" in options.store else list(dict.fromkeys(options.store))
    return options


@contextlib.contextmanager
def open_backend(name: str, options: argparse.Namespace, langgraph: LangGraph | None) -> Iterator[Backend]:
    with contextlib.ExitStack() as stack:
        backend: Backend
        if name == "memory":
            backend = MemoryBackend(langgraph)
        elif name == "sqlite":
            if options.db is None:
                folder = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ilmek-")))
            else:
                options.db.mkdir(parents=True, exist_ok=True)
                folder = options.db
            backend = SqliteBackend(folder, options.synchronous, langgraph)
        else:
            dsn = options.dsn or os.environ.get(POSTGRES_DSN_VARIABLE, "").strip() or None
            backend = PostgresBackend(dsn, options.db, options.synchronous, langgraph, options.ilmek_client)
        stack.callback(backend.close)
        yield backend


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_options(argv)
    langgraph = load_langgraph(options.langgraph_list)
    print(f"bench_langgraph: ilmek vs LangGraph on {', '.join(options.stores)}")
    print(machine())
    if langgraph is None:
        print(INSTALL_HINT)
    else:
        print(f"{langgraph.versions()}; import langgraph.graph took {langgraph.import_seconds:.2f} s")
        print(f"LangGraph durability={DURABILITY!r}: each checkpoint saved before the next superstep starts")
        print(f"LangGraph's list channels: {LIST_CHANNELS[langgraph.list_channel]}")
    print(
        f"W1, W3: {options.samples} rounds of {options.batch} operations per system, order swapping, "
        f"after a warm-up round; W2: {options.turns} turns in batches of {options.batch}, "
        f"{MESSAGE_BYTES}-byte messages ({options.payload}); CPU is this process's, not the database server's"
    )
    summary = []
    for name in options.stores:
        print(f"\n== {name} ==", flush=True)
        with open_backend(name, options, langgraph) as backend:
            report = measure(backend, langgraph, options)
            for line in backend.describe():
                print(line)
            summary.append(print_report(report, options))
    if langgraph is not None and len(options.stores) > 1:
        labels = [row.label for row in report.rows] + [f"W2 storage after {options.turns} turns"]
        print_table(
            "summary: LangGraph / ilmek (wall time, storage); higher: ilmek faster or smaller",
            ["workload", *options.stores],
            [[label, *(column[index] for column in summary)] for index, label in enumerate(labels)],
        )


if __name__ == "__main__":
    main()
