"""The package's surface: what it exports, what importing it costs."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

import ilmek
from ilmek.types import Result

ROOT = pathlib.Path(__file__).resolve().parents[3]

BACKEND_MODULES = (
    "sqlite3",
    "_sqlite3",
    "psycopg2",
    "psycopg",
    "ilmek.checkpoint.sqlite",
    "ilmek.checkpoint.postgres",
)
"""What `import ilmek` must not load: a database module is loaded by the program that uses it."""


def loaded_after(code: str, modules: tuple[str, ...]) -> list[str]:
    """The ``modules`` a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {modules!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return ast.literal_eval(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_import_ilmek_imports_no_database_driver() -> None:
    """`import ilmek` loads neither psycopg2, psycopg nor Django: drivers are the caller's."""
    assert [] == loaded_after("import ilmek", ("psycopg2", "psycopg", "django", "sqlalchemy"))


def test_import_ilmek_loads_no_backend_and_not_sqlite3() -> None:
    """`import ilmek` loads no backend module and not sqlite3: a Postgres app never pays for SQLite."""
    assert [] == loaded_after("import ilmek", BACKEND_MODULES)


STANDARD_MODULES_NOT_NEEDED = (
    "base64",
    "concurrent.futures",
    "dataclasses",
    "decimal",
    "logging",
    "random",
    "uuid",
    "zoneinfo",
)
"""Standard modules `import ilmek` leaves to first use (together about 15 ms of an import)."""


def test_import_ilmek_leaves_standard_modules_to_first_use() -> None:
    """`import ilmek` loads no standard module it needs only for some values, retries, pools or logs."""
    assert [] == loaded_after("import ilmek", STANDARD_MODULES_NOT_NEEDED)


def test_a_one_task_run_loads_no_thread_pool_and_no_logging() -> None:
    """A run whose supersteps each have one task, in memory, needs no thread pool and imports no logging.

    Without the OpenTelemetry API, as most installs are (with it, the API itself imports logging).
    """
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "import ilmek\n"
        "from ilmek import channel\n"
        "g = ilmek.graph('g', {'n': channel.last_write(0)})\n"
        "g = g.node('a', lambda s, ctx: {'n': s['n'] + 1}).edge(ilmek.START, 'a')\n"
        "g = g.edge('a', ilmek.END).compile()\n"
        "store = ilmek.InMemoryCheckpointer()\n"
        "assert ilmek.run(g, {'n': 1}, thread_id='t', checkpointer=store).state == {'n': 2}"
    )
    assert [] == loaded_after(code, ("concurrent.futures", "logging"))


def test_backends_are_bound_on_first_use() -> None:
    """ilmek binds its checkpointers when first asked for, each the class of its backend module."""
    lazy = ("InMemoryCheckpointer", "PostgresCheckpointer", "SqliteCheckpointer")
    code = f"import ilmek\nprint(sorted(set(vars(ilmek)) & set({lazy!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "[]" == out.stdout.strip()
    from ilmek import InMemoryCheckpointer, PostgresCheckpointer, SqliteCheckpointer
    from ilmek.checkpoint import memory, postgres, sqlite

    assert (memory.InMemoryCheckpointer, postgres.PostgresCheckpointer, sqlite.SqliteCheckpointer) == (
        InMemoryCheckpointer,
        PostgresCheckpointer,
        SqliteCheckpointer,
    )


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    """A name ilmek does not have raises AttributeError naming it (so hasattr and getattr work)."""
    with pytest.raises(AttributeError, match="'NoSuchCheckpointer'"):
        ilmek.NoSuchCheckpointer  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(ilmek, "NoSuchCheckpointer")


def test_all_is_sorted_and_every_name_exists() -> None:
    """__all__ lists real attributes, each once, and dir(ilmek) shows them all, lazy ones included."""
    assert len(set(ilmek.__all__)) == len(ilmek.__all__)
    missing = [name for name in ilmek.__all__ if not hasattr(ilmek, name)]
    assert [] == missing
    assert set() == set(ilmek.__all__) - set(dir(ilmek))


def test_all_lists_every_name_the_package_imports() -> None:
    """Every name ilmek/__init__.py imports from its modules (for type checkers too) is in __all__."""
    tree = ast.parse((ROOT / "ilmek" / "__init__.py").read_text(encoding="utf-8"))
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
    }
    assert sorted(imported) == sorted(ilmek.__all__)


def test_the_spec_names_are_exported() -> None:
    """The names SPEC.md fixes are importable from ilmek itself."""
    names = {
        "graph", "channel", "START", "END", "run", "resume", "resume_keyed", "stream", "resume_stream",
        "resume_keyed_stream", "stream_modes", "send", "command", "RetryPolicy", "InMemoryCheckpointer",
        "SqliteCheckpointer", "PostgresCheckpointer", "pending_interrupts", "thread_state", "history",
        "update_state", "append_field", "merge_field", "reduce_field", "InterruptSignal", "IlmekError",
        "GraphError", "ReducerError", "ResumeError", "RecursionLimitError", "NondeterminismError",
        "SerializationError", "ThreadBusyError", "ConcurrentUpdateError", "SchemaVersionError",
        "StorageError", "TransientStorageError", "to_spec", "from_spec",
    }  # fmt: skip
    assert set() == {name for name in names if not hasattr(ilmek, name)}


def test_errors_form_the_documented_tree() -> None:
    """Errors derive from IlmekError, TransientStorageError from StorageError; a pause is no error."""
    from ilmek import errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        if name != "InterruptSignal":
            assert issubclass(cls, errors.IlmekError), name
    assert issubclass(errors.TransientStorageError, errors.StorageError)
    assert not issubclass(errors.InterruptSignal, Exception)
    assert issubclass(errors.InterruptSignal, BaseException)


def test_version_is_a_literal() -> None:
    """__version__ is a plain string literal (pyproject.toml reads it without importing ilmek)."""
    assert isinstance(ilmek.__version__, str)
    assert ilmek.__version__.count(".") == 2


def test_the_import_benchmark_runs_and_prints_ilmeks_share() -> None:
    """benchmarks/bench_import.py runs at one run each and prints its tables (no timing is checked)."""
    completed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_import.py"), "--runs", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == completed.returncode, completed.stderr
    assert "import attrs" in completed.stdout
    assert "ilmek's own share (import ilmek - import attrs; goal: at most 40 ms)" in completed.stdout
    assert "import ilmek also loads: " in completed.stdout


def test_result_repr_leaves_out_the_events() -> None:
    """repr(result) shows how the run ended, not every event it yielded (print stays short)."""
    events = tuple({"seq": seq, "payload": "x" * 100} for seq in range(1000))
    result = Result(status="done", state={"n": 1}, thread_id="t-1", run_id="r-1", events=events)
    text = repr(result)
    assert "events" not in text
    assert "status='done'" in text
    assert "state={'n': 1}" in text
    assert "thread_id='t-1'" in text
    assert len(text) < 300
