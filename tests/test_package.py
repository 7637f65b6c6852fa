"""The package's surface: what it exports, what importing it costs."""

from __future__ import annotations

import subprocess
import sys

import ilmek


def test_import_ilmek_imports_no_database_driver() -> None:
    """`import ilmek` loads neither psycopg2, psycopg nor Django: drivers are the caller's."""
    code = (
        "import sys, ilmek; "
        "print(sorted(m for m in ('psycopg2', 'psycopg', 'django', 'sqlalchemy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "[]" == out.stdout.strip()


def test_all_is_sorted_and_every_name_exists() -> None:
    """__all__ lists real attributes, each once."""
    assert len(set(ilmek.__all__)) == len(ilmek.__all__)
    missing = [name for name in ilmek.__all__ if not hasattr(ilmek, name)]
    assert [] == missing


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
