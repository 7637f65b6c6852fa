"""The threads page on 100,000 threads: it reads one page, never the whole store.

Most threads are rows written straight into ``ilmek_threads`` (volume
without a hundred thousand runs); the newest 60 are real paused checkouts,
so the inbox reads the pause of every row it shows. What each page must
stay within is counted, not timed (a busy machine makes any time bound
flaky): the thread rows it decodes, at most a page's worth, never the
store. The times are printed (``pytest -s``; well under a second each on an
idle machine) and bounded only against a pathology (``PATHOLOGY_SECONDS``).
"""

from __future__ import annotations

import json
import pathlib
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator

import pytest

import ilmek.web
from ilmek import SqliteCheckpointer, run
from tests.support.web_support import Client, checkout_graph, counting_decoded_rows, failing_graph

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

THREADS = 100_000
PATHOLOGY_SECONDS = 30.0
"""Far beyond any page's time even on a loaded machine: only a page that reads the whole store in Python
would reach it (the work bound is the decoded rows, below)."""
ROWS_PER_PAGE = 600
"""The most thread rows a page may decode: its 50 (or 500) rows and the few it reads besides."""


def fill(path: pathlib.Path) -> None:
    """100,000 thread rows, a tenth of them paused and one in twenty failed, then 60 real paused runs."""
    store = SqliteCheckpointer(path, synchronous="NORMAL")
    try:
        run(failing_graph(), {}, thread_id="real-failure", checkpointer=store)
    finally:
        store.close()
    connection = sqlite3.connect(path)
    try:
        (error,) = connection.execute(
            "SELECT error FROM ilmek_threads WHERE thread_id = 'real-failure'"
        ).fetchone()
        start = time.time() - 86_400 * 30

        def row(index: int) -> tuple[object, ...]:
            status = "interrupted" if index % 10 == 0 else "error" if index % 20 == 1 else "done"
            return (
                f"bulk-{index:06d}",
                start + index,
                start + index * 2,
                status,
                index % 7,
                None,
                json.dumps({"customer": f"c{index % 1000}", "tier": index % 3}),
                error if status == "error" else None,
            )

        with connection:
            connection.executemany(
                "INSERT INTO ilmek_threads (thread_id, created_at, updated_at, status, step, checkpoint_id, "
                "metadata, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (row(index) for index in range(THREADS)),
            )
    finally:
        connection.close()
    store = SqliteCheckpointer(path, synchronous="NORMAL")
    try:
        checkout = checkout_graph()
        for index in range(60):
            run(
                checkout,
                {"cart": ["mug"] * (1 + index % 3)},
                thread_id=f"order-{index:03d}",
                checkpointer=store,
            )
    finally:
        store.close()


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteCheckpointer]:
    """The 100,000-thread store, filled once for this module."""
    path = tmp_path_factory.mktemp("big") / "big.db"
    fill(path)
    store = SqliteCheckpointer(path)
    yield store
    store.close()


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter of the thread rows the SQL checkpointer decodes (``[count]``)."""
    return counting_decoded_rows(monkeypatch)


def timed(client: Client, urls: dict[str, str], decoded: list[int]) -> dict[str, tuple[float, int]]:
    """Seconds each page took and the thread rows it decoded; each must list threads."""
    measured = {}
    for name, url in urls.items():
        started, before = time.perf_counter(), decoded[0]
        reply = client.get(url)
        measured[name] = (time.perf_counter() - started, decoded[0] - before)
        assert 200 == reply.status
        assert 'class="tid"' in reply.text
    print(
        "\n"
        + "\n".join(
            f"  {name:10} {seconds * 1000:7.1f} ms, {rows} rows" for name, (seconds, rows) in measured.items()
        )
    )
    return measured


def _over_bounds(measured: dict[str, tuple[float, int]]) -> dict[str, tuple[float, int]]:
    return {
        name: (seconds, rows)
        for name, (seconds, rows) in measured.items()
        if rows > ROWS_PER_PAGE or seconds >= PATHOLOGY_SECONDS
    }


def test_the_threads_page_renders_fast_on_100000_threads(
    big_store: SqliteCheckpointer, decoded: list[int]
) -> None:
    """Inbox, every tab, a search and a deep page each decode a page of thread rows, not the store."""
    assert THREADS + 61 == len(big_store.list_threads(limit=THREADS * 2))
    client = Client(ilmek.web.app(big_store, checkout_graph()))
    client.get("/")  # the first request pays for imports and the connection
    timings = timed(
        client,
        {
            "inbox": "/",
            "failed": "/?status=error",
            "all": "/?status=all",
            "done": "/?status=done",
            "search": "/?" + urllib.parse.urlencode({"status": "all", "q": "bulk-09999"}),
            "deep page": "/?status=all&offset=90000",
            "big page": "/?limit=500",
        },
        decoded,
    )
    inbox = client.get("/").text
    assert 50 == inbox.count('class="tid"')
    assert "Charge 74.97 EUR?" in inbox  # the newest real pauses, read row by row
    assert {} == _over_bounds(timings)


def test_a_metadata_filter_stays_bounded_on_100000_threads(
    big_store: SqliteCheckpointer, decoded: list[int]
) -> None:
    """A metadata filter (one thread in a thousand matches) decodes only the rows that match.

    SqliteCheckpointer filters metadata in SQL (``json_each``), a scan of
    the threads table in C: no longer the 1 to 3.5 s of decoding every
    thread's metadata in Python.
    """
    client = Client(ilmek.web.app(big_store, checkout_graph()))
    client.get("/")
    query = urllib.parse.urlencode({"status": "all", "meta": "customer=c42"})
    timings = timed(client, {"metadata": f"/?{query}"}, decoded)
    assert 50 == client.get(f"/?{query}").text.count('class="tid"')
    assert {} == _over_bounds(timings)
