"""The benchmark scripts run to the end at a tiny size and print their tables.

Not a timing test: the machine may be slow or busy, so only the exit code
and the tables' headers are checked; the figures are for people to read.
The Postgres variants run against the test session's server, in a database
of their own.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping

import pytest

from tests.support.conftest_postgres import in_ci
from tests.support.pgcluster import PostgresServer

BENCHMARKS = pathlib.Path(__file__).resolve().parents[3] / "benchmarks"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def run_script(name: str, *arguments: str, extra_environment: Mapping[str, str] | None = None) -> str:
    """Run ``benchmarks/<name>`` in a fresh interpreter; return its output, failing on a non-zero exit."""
    # The tests choose the server: a DSN in the developer's environment must not redirect them.
    environment = {key: value for key, value in os.environ.items() if key != "ILMEK_BENCH_POSTGRES_DSN"}
    environment.update(extra_environment or {})
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *arguments],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
        env=environment,
    )
    assert 0 == completed.returncode, completed.stderr
    return completed.stdout


HISTORY_HEADERS = (
    "turns: one turn = an input checkpoint + 1 superstep",
    "loop: one superstep = 1 checkpoint",
    "ms/turn",
    "stored B/turn",
    "WAL B/turn",
    "ms/superstep",
    "long/short",
    "summary: long (20) / short (10) history",
)
HISTORY_TINY = ("--history", "20", "--samples", "2", "--batch", "2", "--synchronous", "NORMAL")

FLOOR_HEADERS = (
    "time and bytes per operation",
    "ratio to bare",
    "bare insert + commit",
    "ilmek superstep",
    "SQL per operation",
    "write transactions",
    "rollbacks",
    "the statements of one superstep, in order",
    "COMMIT",
)
FLOOR_TINY = ("--samples", "2", "--batch", "2")

STEPS_HEADERS = ("time per step", "ms/step", "ratio to steps 2-11", "the statements of one step, in order")
STEPS_TINY = ("--steps", "30", "--samples", "1")

CONCURRENCY_HEADERS = (
    "supersteps per second, all workers together",
    "supersteps/s",
    "client CPU ms/superstep",
    "speed-up, 2 workers / 1 (ideal 2.0)",
    "median of round pairs",
    "cores, shared by this process and the database server",
)
CONCURRENCY_TINY = ("--workers", "2", "--supersteps", "3", "--seconds", "0.2", "--rounds", "1")

GC_HEADERS = (
    "old threads deleted by each side",
    "rows per thread: threads 1, checkpoints",
    "deleting old threads",
    "threads/s",
    "ms per 1,000 threads",
    "ilmek delete_threads(updated_before=...)",
    "bare set-based DELETE",
    "every old thread's rows gone, the young threads kept",
)
GC_TINY = ("--threads", "60", "--batch", "20", "--synchronous", "NORMAL")


LANGGRAPH_HEADERS = (
    "ms per operation (medians); LangGraph / ilmek",
    "ilmek ms",
    "LangGraph ms",
    "W1 3-node run",
    "W2 turns 1-3",
    "W2 turns 10-12",
    "W3 step, pause, resume",
    "W3 side effect runs per run + resume: ilmek 1",
)
LANGGRAPH_STORAGE_HEADERS = ("bytes stored, the W2 thread alone", "after 12 turns", "grown from empty")
INSTALL_HINT = "pip install -e '.[bench]'"
HAVE_LANGGRAPH = importlib.util.find_spec("langgraph") is not None


@pytest.fixture
def without_langgraph(tmp_path: pathlib.Path) -> dict[str, str]:
    """Variables under which ``import langgraph`` fails, as in the test venv, even with the bench extra in."""
    shadow = tmp_path / "no-langgraph"
    (shadow / "langgraph").mkdir(parents=True)
    (shadow / "langgraph" / "__init__.py").write_text("raise ImportError('LangGraph hidden by the test')\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))}


def assert_headers(output: str, headers: tuple[str, ...]) -> None:
    for header in headers:
        assert header in output


def test_history_prints_both_workloads_and_the_ratios(tmp_path: pathlib.Path) -> None:
    """bench_history.py measures turns and loop supersteps on a short and a long thread."""
    output = run_script("bench_history.py", *HISTORY_TINY, "--db", str(tmp_path))

    assert_headers(output, HISTORY_HEADERS)


def test_floor_prints_times_ratios_and_statements(tmp_path: pathlib.Path) -> None:
    """bench_floor.py compares a superstep with a bare insert and lists the SQL it sent."""
    output = run_script("bench_floor.py", *FLOOR_TINY, "--db", str(tmp_path))

    assert_headers(output, (*FLOOR_HEADERS, "BEGIN IMMEDIATE"))


def test_steps_prints_early_and_late_step_times_and_the_sql_of_a_step(tmp_path: pathlib.Path) -> None:
    """bench_steps.py: a task of many ctx.step calls, steps 2-11 against the last ten, one INSERT a step."""
    output = run_script("bench_steps.py", *STEPS_TINY, "--db", str(tmp_path))

    assert_headers(output, (*STEPS_HEADERS, "_journals (thread_id, base_id"))


def test_instructions_counts_an_operation_under_valgrind() -> None:
    """bench_instructions.py: a W1 run's instructions, counted by valgrind at two sizes (LangGraph hidden
    or not installed: ilmek's column alone is checked)."""
    if shutil.which("valgrind") is None:
        if in_ci():
            pytest.fail("valgrind is not installed; scripts/test installs Debian's valgrind package")
        pytest.skip("valgrind is not installed (apt-get install valgrind)")
    output = run_script("bench_instructions.py", "--store", "memory", "--workload", "W1", "--sizes", "1", "2")

    assert_headers(output, ("instructions per operation", "LangGraph / ilmek", "cachegrind"))
    [row] = [line.split() for line in output.splitlines() if line.startswith("memory")]
    assert row[:2] == ["memory", "W1"]
    # A run is hundreds of thousands of instructions, not a subtraction's noise (nor negative).
    assert int(row[2].replace(",", "")) > 100_000


def test_subgraph_prints_the_nested_to_flat_ratio_and_the_commits(tmp_path: pathlib.Path) -> None:
    """bench_subgraph.py: three levels of subgraphs against the same nodes flat, both run to the end."""
    output = run_script(
        "bench_subgraph.py", "--nodes", "2", "--runs", "1", "--batches", "2", "--db", str(tmp_path)
    )

    assert_headers(output, ("one run to the end (medians)", "wall ratio", "cpu ratio", "flat", "nested"))


def test_crypto_prints_the_sealed_to_plain_ratio_and_the_bytes() -> None:
    """bench_crypto.py: a superstep's time sealed against plain on SQLite, and the bytes each stores."""
    output = run_script("bench_crypto.py", "--turns", "12", "--batches", "2")

    assert_headers(output, ("ratio sealed/plain: time", "bytes/superstep", "per sealed 200-byte value"))


def test_concurrency_on_sqlite_prints_rates_and_the_speed_up(tmp_path: pathlib.Path) -> None:
    """bench_concurrency.py --target sqlite compares 1 and N workers on one SQLite file."""
    output = run_script(
        "bench_concurrency.py", *CONCURRENCY_TINY, "--target", "sqlite", "--db", str(tmp_path)
    )

    assert_headers(output, (*CONCURRENCY_HEADERS, "SQLite 3."))


def test_gc_on_sqlite_deletes_every_old_thread_and_prints_the_rate(tmp_path: pathlib.Path) -> None:
    """bench_gc.py: delete_threads and the bare floor clear their old threads; the young ones stay."""
    output = run_script("bench_gc.py", *GC_TINY, "--db", str(tmp_path))

    assert_headers(output, (*GC_HEADERS, "SQLite 3."))


def test_langgraph_without_langgraph_measures_ilmek_alone_and_says_how_to_install_it(
    tmp_path: pathlib.Path, without_langgraph: dict[str, str]
) -> None:
    """bench_langgraph.py --quick, LangGraph missing: ilmek's figures, the install hint, exit code 0."""
    output = run_script(
        "bench_langgraph.py",
        *("--quick", "--store", "memory", "sqlite", "--db", str(tmp_path)),
        extra_environment=without_langgraph,
    )

    assert_headers(
        output, (*LANGGRAPH_HEADERS, *LANGGRAPH_STORAGE_HEADERS, INSTALL_HINT, "SqliteCheckpointer")
    )
    assert "LangGraph 2" not in output  # no LangGraph figure was made up
    assert "summary" not in output


@pytest.mark.skipif(not HAVE_LANGGRAPH, reason="LangGraph is the bench extra, not a test dependency")
@pytest.mark.parametrize("list_channel", ["add", "delta"])
def test_langgraph_compares_both_systems_on_memory_and_sqlite(
    tmp_path: pathlib.Path, list_channel: str
) -> None:
    """bench_langgraph.py --quick with the bench extra installed: both systems, the ratios, the summary."""
    output = run_script(
        "bench_langgraph.py",
        *("--quick", "--store", "memory", "sqlite", "--db", str(tmp_path), "--langgraph-list", list_channel),
    )

    assert_headers(
        output,
        (
            *LANGGRAPH_HEADERS,
            *LANGGRAPH_STORAGE_HEADERS,
            "durability='sync'",
            "SqliteSaver",
            "LangGraph 2, LangGraph @task 1",
            "W3, LangGraph's charge a @task",
            "DeltaChannel" if list_channel == "delta" else "operator.add",
        ),
    )
    assert "summary: LangGraph / ilmek" in output
    assert INSTALL_HINT not in output


@pytest.fixture(scope="module")
def benchmark_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """A database of its own on the session's server; each script drops its tables when done."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    name = "ilmek_benchmarks_smoke" + (f"_{worker}" if worker else "")
    postgres_server.drop_database(name)
    yield postgres_server.create_database(name)
    postgres_server.drop_database(name)


@pytest.mark.postgres
def test_history_on_postgres_prints_both_workloads_and_the_ratios(benchmark_dsn: str) -> None:
    """bench_history.py --target postgres, through a psycopg2 pool on the session's server."""
    output = run_script("bench_history.py", *HISTORY_TINY, "--target", "postgres", "--dsn", benchmark_dsn)

    assert_headers(output, (*HISTORY_HEADERS, "PostgreSQL", "ThreadedConnectionPool", "pg_wal_lsn_diff"))


@pytest.mark.postgres
def test_steps_on_postgres_prints_the_step_times(benchmark_dsn: str) -> None:
    """bench_steps.py --target postgres, through a psycopg2 pool on the session's server."""
    output = run_script("bench_steps.py", *STEPS_TINY, "--target", "postgres", "--dsn", benchmark_dsn)

    assert_headers(output, (*STEPS_HEADERS, "PostgreSQL", "_journals (thread_id, base_id"))


@pytest.mark.postgres
def test_floor_on_postgres_prints_times_ratios_and_round_trips(benchmark_dsn: str) -> None:
    """bench_floor.py --target postgres: the bare insert goes through the checkpointer's pool."""
    output = run_script("bench_floor.py", *FLOOR_TINY, "--target", "postgres", "--dsn", benchmark_dsn)

    assert_headers(output, (*FLOOR_HEADERS, "round trip", "BEGIN"))


@pytest.mark.postgres
def test_concurrency_on_postgres_prints_rates_and_the_speed_up(benchmark_dsn: str) -> None:
    """bench_concurrency.py (Postgres, its default): 1 and N workers through one pool, and N bare writers."""
    output = run_script("bench_concurrency.py", *CONCURRENCY_TINY, "--dsn", benchmark_dsn)

    assert_headers(
        output,
        (
            *CONCURRENCY_HEADERS,
            "PostgreSQL",
            "server CPU ms/superstep",
            "against the floor",
            "share of the floor",
        ),
    )


@pytest.mark.postgres
def test_gc_on_postgres_deletes_every_old_thread_and_prints_the_rate(benchmark_dsn: str) -> None:
    """bench_gc.py --target postgres: the same through a psycopg2 pool on the session's server."""
    output = run_script("bench_gc.py", *GC_TINY, "--target", "postgres", "--dsn", benchmark_dsn)

    assert_headers(output, (*GC_HEADERS, "PostgreSQL", "ThreadedConnectionPool"))


@pytest.mark.postgres
@pytest.mark.parametrize("langgraph", [False, True], ids=["ilmek-alone", "both"])
def test_langgraph_on_postgres_prints_times_and_table_sizes(
    benchmark_dsn: str, without_langgraph: dict[str, str], langgraph: bool
) -> None:
    """bench_langgraph.py --store postgres: ilmek's tables and LangGraph's schema on the session's server."""
    if langgraph and not HAVE_LANGGRAPH:
        pytest.skip("LangGraph is the bench extra, not a test dependency")
    output = run_script(
        "bench_langgraph.py",
        *("--quick", "--store", "postgres", "--dsn", benchmark_dsn),
        extra_environment={} if langgraph else without_langgraph,
    )

    assert_headers(
        output, (*LANGGRAPH_HEADERS, *LANGGRAPH_STORAGE_HEADERS, "PostgreSQL", "pg_total_relation_size")
    )
    assert (INSTALL_HINT in output) is not langgraph


def test_dbos_without_dbos_measures_ilmek_alone_and_says_how_to_install_it(tmp_path: pathlib.Path) -> None:
    """bench_dbos.py --quick without DBOS (never a test dependency): ilmek's figure, the install hint."""
    shadow = tmp_path / "no-dbos"
    (shadow / "dbos").mkdir(parents=True)
    (shadow / "dbos" / "__init__.py").write_text("raise ImportError('DBOS hidden by the test')\n")
    hidden = {"PYTHONPATH": os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))}
    output = run_script("bench_dbos.py", "--quick", "--db", str(tmp_path), extra_environment=hidden)

    assert_headers(
        output, ("a durable step on sqlite, ms", "ilmek", "pip install dbos", "2 durable steps per run")
    )
    assert "DBOS / ilmek" not in output  # no DBOS figure was made up


TICK_TINY = ("--small", "10", "--large", "200", "--due", "2", "--samples", "1")


def test_tick_on_sqlite_prints_both_sizes_and_the_ratio(tmp_path: pathlib.Path) -> None:
    """bench_tick.py: tick wakes the due timers at both sizes and prints the table and the ratio."""
    output = run_script("bench_tick.py", *TICK_TINY, "--db", str(tmp_path))
    assert "tick waking 2 timers" in output
    assert "ratio large/small: tick " in output


def test_tick_on_postgres_prints_both_sizes_and_the_ratio(benchmark_dsn: str) -> None:
    """bench_tick.py --target postgres: the same through a psycopg2 pool on the session's server."""
    output = run_script("bench_tick.py", *TICK_TINY, "--target", "postgres", "--dsn", benchmark_dsn)
    assert "ratio large/small: tick " in output
