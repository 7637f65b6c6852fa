"""Inside a Django ``atomic`` block (a view under ``ATOMIC_REQUESTS``) every way a run can end leaves no
hold row behind once the request commits: a run done, paused, failed, cancelled, stopped at its
recursion limit, or ended by a raising router. The next request runs the thread at once.

Django is configured in a process of its own per backend (it is configured once per process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from psycopg2.extensions import parse_dsn

pytestmark = pytest.mark.timeout(120)

ENDINGS = ("done", "interrupted", "error", "aborted", "recursion", "router")

SCRIPT = textwrap.dedent(
    """
    import json, sys, threading
    sys.path.insert(0, {repo!r})
    import django
    from django.conf import settings
    settings.configure(DATABASES={{"default": {database}}}, INSTALLED_APPS=[], USE_TZ=True)
    django.setup()
    from django.db import connection, transaction
    from ilmek import END, START, RecursionLimitError, channel, graph, run
    from ilmek.checkpoint.postgres import PostgresCheckpointer
    from ilmek.checkpoint.sqlite import SqliteCheckpointer

    if connection.vendor == "sqlite":
        checkpointer = SqliteCheckpointer(connection)
    else:
        checkpointer = PostgresCheckpointer(connection)
        checkpointer.migrate()

    def ask(state, ctx):
        ctx.interrupt({{"question": "ok?"}})
        return {{"n": 1}}

    def boom(state):
        raise ValueError("the node failed")

    def again(state):
        return {{"n": state["n"] + 1}}

    def bad_router(state):
        raise LookupError("the router failed")

    def endless(name):
        return (graph(name, {{"n": channel.last_write(0)}}).node("again", again)
                .edge(START, "again").edge("again", "again").compile())

    def one(name, node, fn):
        return graph(name, {{"n": channel.last_write(0)}}).node(node, fn).edge(START, node).compile()

    graphs = {{
        "done": one("d", "again", again),
        "interrupted": one("i", "ask", ask),
        "error": one("e", "boom", boom),
        "aborted": endless("a"),
        "recursion": endless("r"),
        "router": (graph("ro", {{"n": channel.last_write(0)}}).node("again", again).edge(START, "again")
                   .router("again", bad_router).compile()),
    }}

    def request(ending):
        cancel = threading.Event()
        if ending == "aborted":
            cancel.set()
        options = {{"recursion_limit": 2}} if ending == "recursion" else {{}}
        with transaction.atomic():
            try:
                result = run(graphs[ending], {{"n": 0}}, thread_id=ending, checkpointer=checkpointer,
                             cancel=cancel, **options)
                return result.status
            except (RecursionLimitError, LookupError) as error:
                return type(error).__name__

    out = {{}}
    for ending in {endings!r}:
        first = request(ending)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM ilmek_holds WHERE thread_id = %s", [ending])
            left = cursor.fetchone()[0]
        try:
            # The next request on the same thread (a resume for the paused one).
            with transaction.atomic():
                if ending == "interrupted":
                    from ilmek import resume
                    second = resume(graphs[ending], "yes", thread_id=ending, checkpointer=checkpointer).status
                else:
                    second = "ran"
                    run(graphs[ending], None, thread_id=ending, checkpointer=checkpointer,
                        recursion_limit=2)
        except Exception as error:
            second = type(error).__name__
        out[ending] = [first, left, second]
    print(json.dumps(out))
    """
)


def run_script(database: dict[str, Any]) -> dict[str, list[Any]]:
    script = SCRIPT.format(repo=os.getcwd(), database=repr(database), endings=list(ENDINGS))
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100)
    assert 0 == finished.returncode, finished.stderr
    return dict(json.loads(finished.stdout.splitlines()[-1]))


EXPECTED_FIRST = {
    "done": "done",
    "interrupted": "interrupted",
    "error": "error",
    "aborted": "aborted",
    "recursion": "RecursionLimitError",
    "router": "LookupError",
}


def check(outcome: dict[str, list[Any]]) -> None:
    for ending in ENDINGS:
        first, left, second = outcome[ending]
        assert EXPECTED_FIRST[ending] == first, (ending, outcome[ending])
        assert 0 == left, f"a run that ended {ending!r} left its hold row in the request's transaction"
        assert second not in ("ThreadBusyError", "HoldLostError"), (ending, outcome[ending])


def test_every_way_a_run_ends_inside_a_django_atomic_block_leaves_no_hold_on_sqlite(tmp_path: Any) -> None:
    """Django on SQLite, each run inside transaction.atomic(): no hold row survives the request's commit."""
    check(
        run_script(
            {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": str(tmp_path / "django.db"),
                "OPTIONS": {"transaction_mode": "IMMEDIATE"},
            }
        )
    )


@pytest.mark.postgres
def test_every_way_a_run_ends_inside_a_django_atomic_block_leaves_no_hold_on_postgres(
    postgres_dsn: str,
) -> None:
    """Django on Postgres, each run inside transaction.atomic(): no hold row survives the request's commit."""
    params = parse_dsn(postgres_dsn)
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params["dbname"],
        "USER": params.get("user", ""),
        "HOST": params.get("host", ""),
        "PORT": params.get("port", ""),
        "PASSWORD": params.get("password", ""),
    }
    check(run_script(database))
