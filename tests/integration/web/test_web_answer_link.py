"""The console's answer-link page over a real socket (``ilmek web --answer-secret-env``): the link's one pause
is answered with the token alone, once, recorded by="token"; a tampered link is a 400, an expired or used one
a 410, never a 500; a form without its token is refused; the request log never shows the token."""

from __future__ import annotations

import html
import pathlib
import re
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

import ilmek.web
from ilmek import InMemoryCheckpointer, SqliteCheckpointer, answer_token, history, pending_interrupts, run
from ilmek.web.access import Login
from ilmek.web.app import Console
from tests.support.noticeworker import ASKING
from tests.support.web_support import Client, fetch, start_web, stop_web, url_of

pytestmark = pytest.mark.timeout(90)

SECRET = "links-secret-for-the-test"
PAUSE = "ask:interrupt#0"


def _post(url: str, fields: dict[str, str]) -> tuple[int, str]:
    data = urllib.parse.urlencode(fields).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8")


def _hidden(page: str) -> dict[str, str]:
    return {
        k: html.unescape(v)
        for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page)
    }


def test_an_answer_link_answers_its_pause_once_over_a_real_server(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GET draws the pause; a POST without the form's token is a 403, an answer outside the contract a 422
    that records nothing; the right one answers by="token"; the link is then a 410, a tampered or expired
    one a 400/410; the request log hides every token."""
    database = str(tmp_path / "links.db")
    with SqliteCheckpointer(database) as store:
        for thread_id in ("order-9", "order-10"):
            assert "interrupted" == run(ASKING, {}, thread_id=thread_id, checkpointer=store).status
        token = answer_token(store, "order-9", PAUSE, secret=SECRET)
        expired = answer_token(store, "order-10", PAUSE, secret=SECRET, expires_in=0.05)
    monkeypatch.setenv("ILMEK_LINK_SECRET", SECRET)
    process, first = start_web(
        "--db",
        database,
        "--graph",
        "tests.support.noticeworker:ASKING",
        "--port",
        "0",
        "--answer-secret-env",
        "ILMEK_LINK_SECRET",
        home=tmp_path,
    )
    try:
        base = url_of(first)
        status, page = fetch(f"{base}answer/{token}")
        assert 200 == status
        assert "Ship?" in page
        fields = _hidden(page)
        assert 403 == _post(f"{base}answer/{token}", {"option.0": "0"})[0]  # no form token
        assert 400 == fetch(f"{base}answer/{token[:-2]}xy")[0]
        assert 400 == fetch(f"{base}answer/not-a-token")[0]
        time.sleep(0.1)
        assert 410 == fetch(f"{base}answer/{expired}")[0]
        # The contract is a choice: its buttons name an option; one it does not offer is refused.
        status, refused = _post(f"{base}answer/{token}", {**fields, "option.0": "5"})
        assert (422, True) == (status, "does not offer" in refused)
        status, done = _post(f"{base}answer/{token}", {**fields, "option.0": "0"})
        assert (200, True) == (status, "Answered" in done)
        assert 410 == fetch(f"{base}answer/{token}")[0]
        assert 410 == _post(f"{base}answer/{token}", {**fields, "option.0": "1"})[0]
    finally:
        _out, log = stop_web(process)
    with SqliteCheckpointer(database) as store:
        assert () == tuple(pending_interrupts(store, "order-9"))
        assert [{PAUSE: "token"}] == [
            c.metadata["answered_by"] for c in history(store, "order-9") if "answered_by" in c.metadata
        ]
        assert 1 == len(pending_interrupts(store, "order-10"))
    assert "/answer/" in log
    for secretive in (token, token.partition(".")[2], expired.partition(".")[2], SECRET):
        assert secretive not in log


def test_the_link_page_needs_no_login_but_every_other_page_still_does() -> None:
    """Behind a login, /answer/<token> opens with the token alone while the inbox stays a 401; without
    answer_secret there is no such page (404 behind no login)."""
    store = InMemoryCheckpointer()
    run(ASKING, {}, thread_id="t", checkpointer=store)
    token = answer_token(store, "t", PAUSE, secret=SECRET)
    guarded = Client(Console(store, {"noticed": ASKING}, login=Login(), answer_secret=SECRET))
    assert 200 == guarded.get(f"/answer/{token}").status
    assert 401 == guarded.get("/").status
    assert 401 == guarded.get(f"/thread?id=t&x=/answer/{token}").status
    plain = Client(ilmek.web.app(store, {"noticed": ASKING}))
    assert 404 == plain.get(f"/answer/{token}").status
