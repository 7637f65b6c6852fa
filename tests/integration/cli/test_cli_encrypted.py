"""The operator's tools on a store encrypted at rest: ``--keys-env`` reads it, without it values show sealed.

A store written by the application with a keyring holds a paused thread and
a failed one. ``threads``, ``show`` and ``history`` list and draw them with
or without the keys (without: every value reads "sealed", ids and statuses
stay readable); ``rekey`` reseals under a new current key; the console pages
do the same. No key ever reaches the output.
"""

from __future__ import annotations

import pathlib

import pytest

from ilmek import resume, run
from ilmek.checkpoint.sqlite import SqliteCheckpointer
from tests.support.cli_support import cli, home_fixture  # noqa: F401 - the home fixture
from tests.support.sealed import KEY_TEXTS, SECRETS, keyring, secret_graph
from tests.support.web_support import fetch, serving

pytestmark = pytest.mark.timeout(120)

KEYS_K1 = f"k1:{KEY_TEXTS[0]}"
KEYS_K2_K1 = f"k2:{KEY_TEXTS[1]},k1:{KEY_TEXTS[0]}"


@pytest.fixture(name="sealed_db")
def sealed_db_fixture(tmp_path: pathlib.Path) -> str:
    """A SQLite file written with keyring k1: thread ``t`` paused, thread ``t-fails`` failed."""
    path = str(tmp_path / "sealed.db")
    with SqliteCheckpointer(path, cipher=keyring("k1")) as store:
        g = secret_graph()
        run(g, {}, thread_id="t", checkpointer=store)
        run(g, {}, thread_id="t-fails", checkpointer=store)
        resume(g, "fail", thread_id="t-fails", checkpointer=store)
    return path


def _no_keys_in(*texts: str) -> bool:
    return not any(key in text for key in KEY_TEXTS for text in texts)


@pytest.mark.parametrize("command", [["show", "t"], ["history", "t"], ["threads"], ["show", "t-fails"]])
def test_without_keys_values_show_as_sealed_and_ids_stay_readable(
    capsys: pytest.CaptureFixture[str], sealed_db: str, command: list[str]
) -> None:
    """No --keys-env: exit 0, the thread ids and statuses print, no secret does."""
    status, out, err = cli(capsys, *command, "--db", sealed_db)
    assert status == 0, err
    assert [secret for secret in SECRETS if secret in out] == []
    assert command[-1] in out or "t-fails" in out


def test_show_without_keys_says_sealed(capsys: pytest.CaptureFixture[str], sealed_db: str) -> None:
    """``show`` marks each sealed value so, naming the key id (never the key)."""
    status, out, _err = cli(capsys, "show", "t", "--db", sealed_db)
    assert status == 0
    assert "sealed (key k1" in out
    assert "interrupted" in out


def test_with_keys_the_values_print(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, sealed_db: str
) -> None:
    """``--keys-env VAR`` opens the values: the state, the pause and the failure print."""
    monkeypatch.setenv("SHOP_KEYS", KEYS_K1)
    status, out, err = cli(capsys, "show", "t", "--db", sealed_db, "--keys-env", "SHOP_KEYS")
    assert status == 0, err
    assert "CARD-SECRET" in out
    assert "PAUSE-SECRET" in out
    status, out, err = cli(capsys, "threads", "--db", sealed_db, "--keys-env", "SHOP_KEYS")
    assert status == 0, err
    assert "FAIL-SECRET" in out
    assert _no_keys_in(out, err)


def test_a_malformed_key_variable_fails_without_showing_a_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, sealed_db: str
) -> None:
    """A key of the wrong length is one line on stderr naming the variable, exit 1, no key material."""
    monkeypatch.setenv("SHOP_KEYS", f"k1:{KEY_TEXTS[0][:20]}")
    status, out, err = cli(capsys, "show", "t", "--db", sealed_db, "--keys-env", "SHOP_KEYS")
    assert status == 1
    assert "SHOP_KEYS" in err
    assert KEY_TEXTS[0][:20] not in err + out


def test_rekey_reseals_under_the_new_current_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, sealed_db: str
) -> None:
    """``rekey`` with k2 first prints progress; then k2 alone reads the store; run again it rewrites 0."""
    monkeypatch.setenv("SHOP_KEYS", KEYS_K2_K1)
    status, out, err = cli(capsys, "rekey", "--db", sealed_db, "--keys-env", "SHOP_KEYS", "--batch", "4")
    assert status == 0, err
    assert "rekey: " in out
    assert "rekey done: " in out
    assert _no_keys_in(out, err)
    with SqliteCheckpointer(sealed_db, cipher=keyring("k2")) as store:
        assert store.get("t") is not None
    status, out, err = cli(capsys, "rekey", "--db", sealed_db, "--keys-env", "SHOP_KEYS", "--json")
    assert status == 0, err
    assert '"rewritten": 0' in out


def test_rekey_needs_the_keys(capsys: pytest.CaptureFixture[str], sealed_db: str) -> None:
    """``rekey`` without --keys-env says how to give them, exit 1."""
    status, _out, err = cli(capsys, "rekey", "--db", sealed_db)
    assert status == 1
    assert "--keys-env" in err


def test_the_console_shows_sealed_values_without_keys_and_values_with_them(sealed_db: str) -> None:
    """The console's inbox and thread page: sealed without the keyring, readable with it; never a key."""
    for cipher, readable in ((None, False), (keyring("k1"), True)):
        with SqliteCheckpointer(sealed_db, cipher=cipher) as store, serving(store) as server:
            base = f"http://127.0.0.1:{server.server_port}"
            status, inbox = fetch(base + "/")
            assert status == 200
            # The inbox shows what the pause asks: its question with the keys, "sealed" without.
            assert ("PAUSE-SECRET" in inbox) is readable
            assert ("sealed (key k1" in inbox) is not readable
            status, page = fetch(base + "/thread?id=t")
            assert status == 200
            assert ("PAUSE-SECRET" in page) is readable
            assert ("sealed (key k1" in page) is not readable
            assert _no_keys_in(inbox, page)
