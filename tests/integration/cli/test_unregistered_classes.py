"""An operator's CLI and console show values of classes only the application registered.

The application (a separate process, as in production) stores an ``app.Money``
and an ``app.Tier`` enum member in a thread's state and in its pause. This
process never registers them: ``show``, ``threads``, ``history --json`` and
the console's pages print them as stored, marked as a class not registered
here, instead of failing with exit 1; nothing is imported, no object of the
class is built, and an ordinary read (a run) still refuses them. What was
shown is never cached, and the application still reads its own objects back.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap
import urllib.parse

import pytest

from ilmek import SerializationError, serde
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from tests.support.cli_support import REPO_ROOT, cli, home_fixture  # noqa: F401 - the home fixture
from tests.support.web_support import fetch, serving

pytestmark = pytest.mark.timeout(120)

THREAD = "refund-1"

APPLICATION = textwrap.dedent(
    """
    import enum, sys
    import attrs
    from ilmek import START, channel, graph, run, serde
    from ilmek.checkpoint.sqlite import SqliteCheckpointer

    @attrs.frozen
    class Money:
        amount: int
        currency: str

    class Tier(enum.Enum):
        GOLD = "gold"

    serde.register(Money, name="app.Money")
    serde.register(Tier, name="app.Tier")

    def ask(state, ctx):
        answer = ctx.interrupt({"question": "Refund 19.99 EUR?", "refund": Money(1999, "EUR")})
        return {"answer": answer}

    flow = (
        graph("refund", {"total": channel.last_write(), "tier": channel.last_write(),
                         "answer": channel.last_write()})
        .node("ask", ask).edge(START, "ask").compile()
    )
    store = SqliteCheckpointer(sys.argv[2])
    if sys.argv[1] == "write":
        result = run(flow, {"total": Money(1999, "EUR"), "tier": Tier.GOLD},
                     thread_id="refund-1", checkpointer=store)
        assert result.status == "interrupted", result
    else:
        values = store.get("refund-1").channels
        assert values["total"] == Money(1999, "EUR"), values
        assert values["tier"] is Tier.GOLD, values
    print("ok")
    """
)


def application(mode: str, db: pathlib.Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", APPLICATION, mode, str(db)],
        cwd=REPO_ROOT,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "ok\n" == done.stdout, done.stderr


@pytest.fixture(name="db")
def db_fixture(tmp_path: pathlib.Path) -> pathlib.Path:
    db = tmp_path / "app.db"
    application("write", db)
    assert not serde.is_registered("app.Money")
    return db


def test_show_prints_the_values_as_stored_marked_as_not_registered_here(
    capsys: pytest.CaptureFixture[str], db: pathlib.Path
) -> None:
    status, out, err = cli(capsys, "show", THREAD, "--db", str(db))
    assert 0 == status, err
    assert "app.Money (class not registered here)" in out
    assert '"amount": 1999' in out
    assert '"currency": "EUR"' in out
    assert 'app.Tier (class not registered here)": "gold"' in out
    assert "Refund 19.99 EUR?" in out


def test_history_json_and_threads_print_the_stored_form(
    capsys: pytest.CaptureFixture[str], db: pathlib.Path
) -> None:
    status, out, err = cli(capsys, "history", THREAD, "--db", str(db), "--json")
    assert 0 == status, err
    assert '{"__ilmek__": "obj", "type": "app.Money", "v": {"amount": 1999, "currency": "EUR"}}' in (
        json.dumps(json.loads(out))
    )
    status, out, err = cli(capsys, "threads", "--db", str(db), "--json")
    assert 0 == status, err
    assert THREAD in out
    status, out, err = cli(capsys, "show", THREAD, "--db", str(db), "--json")
    assert 0 == status, err
    assert {"__ilmek__": "enum", "type": "app.Tier", "v": "gold"} == json.loads(out)["channels"]["tier"]


def test_the_console_shows_them_and_a_run_still_refuses_them(db: pathlib.Path) -> None:
    store = SqliteCheckpointer(db)
    try:
        with serving(store) as server:
            base = f"http://127.0.0.1:{server.server_port}"
            status, inbox = fetch(base + "/")
            assert 200 == status
            assert "Refund 19.99 EUR?" in inbox
            status, page = fetch(base + "/thread?" + urllib.parse.urlencode({"id": THREAD}))
            assert 200 == status, page
            assert "app.Money(amount=1999, currency=&quot;EUR&quot;) · class not registered here" in page
            assert "app.Tier(&quot;gold&quot;) · class not registered here" in page
        # The pages' reads left nothing in the store's cache: outside them, the class is refused.
        with pytest.raises(SerializationError, match=r"'app\.(Money|Tier)' is not registered in this"):
            dict(store.get(THREAD).channels)  # type: ignore[union-attr]
    finally:
        store.close()


def test_placeholders_are_never_cached_and_encode_back_to_the_stored_tag(db: pathlib.Path) -> None:
    store = SqliteCheckpointer(db)
    try:
        with serde.showing_unregistered():
            shown = store.get(THREAD)
            assert shown is not None
            total = shown.channels["total"]
        assert isinstance(total, serde.Unregistered)
        assert ("app.Money", "obj", {"amount": 1999, "currency": "EUR"}) == (
            total.type_name,
            total.kind,
            total.stored,
        )
        assert '{"__ilmek__":"obj","type":"app.Money","v":{"amount":1999,"currency":"EUR"}}' == serde.encode(
            total
        )
        with pytest.raises(SerializationError, match="not registered"):
            dict(store.get(THREAD).channels)  # type: ignore[union-attr]
    finally:
        store.close()
    application("read", db)
