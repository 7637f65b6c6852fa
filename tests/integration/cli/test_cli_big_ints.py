"""`ilmek show` of a stored integer too long to print in decimal: it answers at once, on SQLite and Postgres.

Printing an int in decimal costs time quadratic in its length (a million digits
took over a minute, and Ctrl-C waited for it); one of more than
``MAX_PRINTED_INT_DIGITS`` digits shows as its approximate length instead, even
with ``--full``. Rows are forged straight into a real SQLite file and a real
Postgres database, as an attacker with write access to the store would.
"""

from __future__ import annotations

import contextlib
import io
import sqlite3
import time

import psycopg2
import pytest

from ilmek import channel, graph, run
from ilmek.cli import main
from ilmek.cli.rendering import MAX_PRINTED_INT_DIGITS
from ilmek.graph import END, START
from tests.support.stores import Store, store_fixture  # noqa: F401 - the store fixture

HEX_DIGITS = 400_000
"""A 1.6 million-bit int: about 480,000 decimal digits, which took over 10 s to print."""

BIG = '{"__ilmek__": "int", "v": "' + "f" * HEX_DIGITS + '"}'


def forge(store: Store, value: str) -> str:
    """A thread whose channel ``big`` holds ``value`` (stored JSON text), written behind ilmek's back."""
    checkpointer = store.open()
    g = graph("big", {"big": channel.last_write(0)}).node("n", lambda s: {"big": 7}).edge(START, "n")
    assert "done" == run(g.edge("n", END).compile(), {}, thread_id="big", checkpointer=checkpointer).status
    update = "UPDATE ilmek_blobs SET value = {} WHERE thread_id = 'big' AND channel = 'big'"
    if store.kind == "sqlite":
        with contextlib.closing(sqlite3.connect(store.path)) as connection, connection:
            assert 1 == connection.execute(update.format("?"), (value,)).rowcount
        return str(store.path)
    with (
        contextlib.closing(psycopg2.connect(store.dsn)) as connection,
        connection,
        connection.cursor() as cursor,
    ):
        cursor.execute(update.format("CAST(%s AS jsonb)"), (value,))
        assert 1 == cursor.rowcount
    return store.dsn


def show(database: str, *options: str) -> tuple[int, str, float]:
    """`ilmek show big` in-process: exit status, stdout, seconds taken."""
    out, err = io.StringIO(), io.StringIO()
    began = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["--db", database, "show", "big", *options])
    return status, out.getvalue(), time.perf_counter() - began


@pytest.mark.parametrize("full", [["--full"], []], ids=["full", "short"])
def test_a_huge_stored_int_is_shown_by_its_length_at_once(store: Store, full: list[str]) -> None:
    """A forged 480,000-digit int: `show` (with or without --full) prints its length in well under 3 s."""
    database = forge(store, BIG)
    status, out, seconds = show(database, *full)
    assert 0 == status
    assert '  big: "<int of about 481,648 digits' in out
    assert "too long to print" in out
    assert seconds < 3.0


def test_a_huge_int_inside_a_set_is_shown_too(store: Store) -> None:
    """A set is sorted for display by each item's repr, which refuses a long int: the set still shows."""
    database = forge(store, '{"__ilmek__": "set", "v": [1, ' + BIG + "]}")
    status, out, seconds = show(database, "--full")
    assert 0 == status, out
    assert "<int of about" in out
    assert seconds < 3.0


def test_an_int_at_the_limit_is_printed_whole(store: Store) -> None:
    """Up to the documented limit, --full prints every digit, as before."""
    value = 10 ** (MAX_PRINTED_INT_DIGITS - 1)  # the largest power of ten within the limit
    database = forge(store, '{"__ilmek__": "int", "v": "' + format(value, "x") + '"}')
    status, out, _ = show(database, "--full")
    assert 0 == status
    assert '  big: "1' + "0" * (MAX_PRINTED_INT_DIGITS - 1) + '"' in out.splitlines()
