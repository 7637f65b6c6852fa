"""The console's pages through its WSGI interface, on the sample store of ``tests/support/web_support.py``.

Every page is read on memory and on a SQLite file, and once on Postgres.
"""

from __future__ import annotations

import pathlib
import re
import urllib.parse
from collections.abc import Iterator

import pytest

import ilmek
import ilmek.web
from ilmek import Checkpointer, InMemoryCheckpointer, SqliteCheckpointer
from ilmek.checkpoint.postgres import PostgresCheckpointer
from ilmek.errors import InvalidArgumentError
from tests.support.web_support import (
    THREADS,
    Client,
    batch_graph,
    checkout_graph,
    counter_graph,
    graphs,
    populate,
    without_console_script,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Checkpointer]:
    """The sample threads, in memory or in a SQLite file."""
    checkpointer: Checkpointer
    if request.param == "memory":
        checkpointer = InMemoryCheckpointer()
    else:
        checkpointer = SqliteCheckpointer(tmp_path / "console.db")
    populate(checkpointer)
    yield checkpointer
    checkpointer.close()


@pytest.fixture
def client(store: Checkpointer) -> Client:
    """The console on the store, with every sample graph and actions on."""
    return Client(ilmek.web.app(store, graphs(), allow_actions=True))


def thread_url(thread_id: str, checkpoint_id: str | None = None) -> str:
    """A thread page's path and query."""
    params = {"id": thread_id} | ({"checkpoint": checkpoint_id} if checkpoint_id else {})
    return "/thread?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote)


def rows(page: str) -> list[str]:
    """The thread ids linked from the rows of a threads page, in order."""
    return [
        urllib.parse.unquote(found) for found in re.findall(r'href="/thread\?id=([^"&]+)" class="tid"', page)
    ]


# --- the threads page ------------------------------------------------------------------------


def test_the_inbox_lists_the_paused_threads_newest_first_with_their_questions(client: Client) -> None:
    """By default only threads waiting for a person, most recent first, each with what it asks."""
    reply = client.get("/")
    assert 200 == reply.status
    assert "text/html; charset=utf-8" == reply.headers["Content-Type"]
    assert [THREADS["hostile"], THREADS["waiting"], THREADS["second_waiting"]] == rows(reply.text)
    assert "Charge 74.97 EUR?" in reply.text
    assert "Charge 24.99 EUR?" in reply.text
    assert "customer=acme" in reply.text


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("error", ["failed"]),
        ("unfinished", ["stalled"]),
        ("done", ["answered", "forked"]),
    ],
)
def test_each_status_tab_lists_its_threads(client: Client, status: str, expected: list[str]) -> None:
    """?status= filters; a failed thread shows its error, a stalled one says so."""
    reply = client.get(f"/?status={status}")
    assert [THREADS[role] for role in expected] == rows(reply.text)
    if status == "error":
        assert "RuntimeError" in reply.text
        assert "upstream CRM answered 502 Bad Gateway" in reply.text
    if status == "unfinished":
        assert "stalled: no run holds it and none recorded an end: its process died" in reply.text


def test_all_lists_every_thread_and_running_none_when_idle(client: Client) -> None:
    """status=all lists all seven; running lists none and says so."""
    assert 7 == len(rows(client.get("/?status=all").text))
    reply = client.get("/?status=running")
    assert [] == rows(reply.text)
    assert "No run holds a thread right now." in reply.text


def test_search_and_metadata_filter_the_threads(client: Client) -> None:
    """q= matches part of the id; meta=key=value matches metadata (numbers as numbers)."""
    assert [THREADS["second_waiting"]] == rows(client.get("/?status=all&q=1043").text)
    assert [THREADS["waiting"], THREADS["forked"]] == rows(
        client.get("/?status=all&meta=customer%3Dacme").text
    )
    assert [THREADS["second_waiting"]] == rows(client.get("/?status=all&meta=tier%3D2").text)
    assert [] == rows(client.get("/?status=all&meta=tier%3D%222%22").text)


def test_paging_links_walk_through_the_threads(client: Client) -> None:
    """limit= and offset= page; Older and Newer link to the next and previous pages."""
    first = client.get("/?status=all&limit=3")
    assert 3 == len(rows(first.text))
    older = re.search(r'<a href="([^"]+)" rel="next">', first.text)
    assert older is not None
    assert "/?status=all&offset=3&limit=3" == older.group(1).replace("&amp;", "&")
    second = client.get(older.group(1).replace("&amp;", "&"))
    third = client.get("/?status=all&offset=6&limit=3")
    seen = rows(first.text) + rows(second.text) + rows(third.text)
    assert 7 == len(set(seen)) == len(seen)
    assert 'rel="next"' not in third.text
    assert 'rel="prev"' in third.text


def test_bad_filters_are_explained_not_failed(client: Client) -> None:
    """An unknown status, a malformed number or metadata pair shows a problem; the page still renders."""
    reply = client.get("/?status=nope&offset=x&meta=novalue&limit=100000")
    assert 200 == reply.status
    assert "unknown status" in reply.text
    assert "offset must be a whole number" in reply.text
    assert "a metadata filter is key=value" in reply.text
    assert "limit must be between 1 and 500" in reply.text


def test_a_search_ilmek_refuses_is_explained(client: Client) -> None:
    """A NUL in the search is refused by ilmek: the page says so and lists unfiltered."""
    reply = client.get("/?status=all&q=a%00b")
    assert 200 == reply.status
    assert "search" in reply.text
    assert 7 == len(rows(reply.text))


def test_the_threads_page_says_when_the_store_cannot_list_threads() -> None:
    """A minimal third-party checkpointer without list_threads gets a message, not an error."""

    class Minimal(InMemoryCheckpointer):
        def list_threads(self, *args: object, **kwargs: object) -> list[ilmek.ThreadInfo]:
            raise NotImplementedError

    reply = Client(ilmek.web.app(Minimal())).get("/")
    assert 200 == reply.status
    assert "This checkpointer cannot list threads." in reply.text


# --- a thread's page ---------------------------------------------------------------------------


def test_a_paused_thread_shows_its_question_the_options_and_the_answer_form(
    client: Client, store: Checkpointer
) -> None:
    """The waiting panel: question, payload, Approve/Reject for yes/no, an empty JSON editor (never null)."""
    reply = client.get(thread_url(THREADS["waiting"]))
    assert 200 == reply.status
    page = reply.text
    assert "Waiting for an answer" in page
    assert "Charge 74.97 EUR?" in page
    assert re.search(
        r'<button type="submit" name="option\.0" value="0" class="option approve"[^>]*>Approve</button>', page
    )
    assert re.search(
        r'<button type="submit" name="option\.0" value="1" class="option reject"[^>]*>Reject</button>', page
    )
    assert re.search(r'<textarea name="answer\.0"[^>]*></textarea>', page)
    assert ">null</textarea>" not in page
    latest = store.get(THREADS["waiting"])
    assert latest is not None
    action = f'action="/action/answer?id={THREADS["waiting"]}&amp;checkpoint={latest.id}"'
    assert action in page
    assert 'name="token"' in page


def test_a_thread_page_shows_the_tree_state_difference_journal_and_graph(
    client: Client, store: Checkpointer
) -> None:
    """Every checkpoint is linked from the tree; the state, the change, the task's journal and the graph."""
    thread_id = THREADS["waiting"]
    page = client.get(thread_url(thread_id)).text
    for listed in store.list(thread_id):
        assert f'href="/thread?id={thread_id}&amp;checkpoint={listed.id}"' in page
    assert 'class="row selected"' in page
    assert "ord-order-1042" in page  # the state
    assert "Changes from its parent" in page
    assert "quote#0" in page  # a completed step in the journal
    assert "74.97" in page
    assert "no answer yet" in page
    assert '<svg class="graph"' in page
    assert 'class="gnode paused"' in page  # approve waits
    assert "flowchart TD\n  __start__([START])" in page  # the Mermaid text, line by line


def test_an_older_checkpoint_shows_its_own_state_and_what_changed(
    client: Client, store: Checkpointer
) -> None:
    """Selecting the first checkpoint: every channel is new; the cart is the input."""
    thread_id = THREADS["answered"]
    first = store.list(thread_id)[-1]
    page = client.get(thread_url(thread_id, first.id)).text
    assert f"Checkpoint <code>{first.id}</code>" in page
    assert "The thread&#x27;s first checkpoint: every channel is new." in page
    assert "added" in page


def test_an_appended_channel_shows_only_its_new_items(client: Client, store: Checkpointer) -> None:
    """The last checkpoint of a finished checkout appended one log line: shown as appended."""
    thread_id = THREADS["answered"]
    latest = store.get(thread_id)
    assert latest is not None
    page = client.get(thread_url(thread_id, latest.id)).text
    assert "d-appended" in page
    assert "1 item appended:" in page
    assert "[&quot;charged&quot;]" in page


def test_an_answered_pause_shows_its_answer_and_offers_a_fork(client: Client, store: Checkpointer) -> None:
    """The pause of a finished thread reads answered, with the answer, and a fork form."""
    thread_id = THREADS["answered"]
    pause = next(c for c in store.list(thread_id) if c.pending)
    page = client.get(thread_url(thread_id, pause.id)).text
    assert "p-answered" in page
    assert "Answer this pause differently (fork a new branch)" in page
    assert f'action="/action/fork?id={thread_id}&amp;checkpoint={pause.id}"' in page
    assert "Waiting for an answer" not in page


def test_a_forked_thread_draws_both_branches(client: Client, store: Checkpointer) -> None:
    """The fork's first checkpoint sits in a second lane, its edge dashed, both pauses answered."""
    thread_id = THREADS["forked"]
    page = client.get(thread_url(thread_id)).text
    assert 'class="edge fork"' in page
    assert 2 == page.count('t-answered">answered: approve:interrupt#0')  # a row each (and its title)
    fork = next(c for c in store.list(thread_id) if c.metadata.get("source") == "fork")
    fork_page = client.get(thread_url(thread_id, fork.id)).text
    assert "A fork&#x27;s first checkpoint is a copy of the pause it answers differently." in fork_page


def test_a_failed_thread_shows_its_error_and_a_recover_button(client: Client) -> None:
    """The failure panel names the type, the message (line breaks kept), the node; Recover is offered."""
    page = client.get(thread_url(THREADS["failed"])).text
    assert "The last run failed" in page
    assert '<code class="etype">RuntimeError</code>' in page
    assert "upstream CRM answered 502 Bad Gateway\nretry later" in page
    assert "<code>fetch</code>" in page
    assert "failed from here" in page
    assert "Recover: continue the run" in page


def test_a_stalled_thread_offers_recover_and_no_cancel(client: Client) -> None:
    """Unfinished and not running: Recover, Delete; no Cancel (no run to cancel)."""
    page = client.get(thread_url(THREADS["stalled"])).text
    assert "Recover: continue the run" in page
    assert "Cancel the run" not in page
    assert "Delete thread" in page


def test_without_the_graph_the_page_says_so_and_offers_no_answer_form(store: Checkpointer) -> None:
    """No graphs given: the pause is shown, the form is not, and the page says which graph is missing."""
    page = Client(ilmek.web.app(store, allow_actions=True)).get(thread_url(THREADS["waiting"])).text
    assert "Charge 74.97 EUR?" in page
    assert "The console was not given graph &#x27;checkout&#x27;" in page
    assert 'name="answer.0"' not in page
    assert "so it cannot draw it" in page


def test_a_read_only_console_shows_no_forms(store: Checkpointer) -> None:
    """allow_actions=False: no form posts anywhere; the page says it is read-only."""
    client = Client(ilmek.web.app(store, graphs()))
    for role in THREADS:
        page = client.get(thread_url(THREADS[role])).text
        assert 'method="post"' not in page
    assert "The console is read-only" in client.get(thread_url(THREADS["waiting"])).text
    assert "read-only" in client.get("/").text


def test_an_unknown_thread_or_checkpoint_is_a_404(client: Client) -> None:
    """No such thread, no such checkpoint, no id: 404, 404, 400 pages that name the problem."""
    missing = client.get(thread_url("no-such-thread"))
    assert 404 == missing.status
    assert "There is no thread &#x27;no-such-thread&#x27; in this store." in missing.text
    assert "<title>No such thread · ilmek</title>" in missing.text
    checkpoint = client.get(thread_url(THREADS["waiting"], "no-such-checkpoint"))
    assert 404 == checkpoint.status
    assert "<title>No such checkpoint · ilmek</title>" in checkpoint.text
    assert 400 == client.get("/thread").status
    assert 404 == client.get(thread_url("a\x00b")).status


def test_a_thread_id_with_url_syntax_round_trips_through_its_links(
    client: Client, store: Checkpointer
) -> None:
    """An id holding / ? & # and spaces is linked percent-encoded and its page opens."""
    odd = "team a/b?c=1&d#e"
    checkout = checkout_graph()
    ilmek.run(checkout, {"cart": ["mug"]}, thread_id=odd, checkpointer=store)
    inbox = client.get("/").text
    assert f'href="/thread?id={urllib.parse.quote(odd, safe="")}"' in inbox
    assert 200 == client.get(thread_url(odd)).status


def test_the_thread_page_draws_only_the_newest_checkpoints_of_a_long_history(tmp_path: pathlib.Path) -> None:
    """A thread of 400 checkpoints: the tree holds the newest 300, says so, and links to the older ones."""
    store = SqliteCheckpointer(tmp_path / "long.db")
    counter = counter_graph(400)
    ilmek.run(counter, {}, thread_id="long", checkpointer=store, recursion_limit=1000)
    page = Client(ilmek.web.app(store, counter)).get(thread_url("long")).text
    assert 300 == len(re.findall(r'<a href="/thread\?id=long&amp;checkpoint=[^"]+" class="row', page))
    assert "300 checkpoints drawn, the newest 300; there are older ones." in page
    older = re.search(r'<a href="([^"]+)" rel="next">Older checkpoints', page)
    assert older is not None
    older_page = Client(ilmek.web.app(store, counter)).get(older.group(1).replace("&amp;", "&")).text
    assert 100 == len(re.findall(r'<a href="/thread\?id=long&amp;checkpoint=[^"]+" class="row', older_page))
    store.close()


# --- the application itself --------------------------------------------------------------------


def test_every_response_carries_the_security_headers(client: Client) -> None:
    """CSP without inline code, nosniff, same-origin referrers, no framing; pages are not cached."""
    for url in ["/", thread_url(THREADS["waiting"]), "/static/console.css", "/nowhere", thread_url("x")]:
        headers = client.get(url).headers
        assert headers["Content-Security-Policy"].startswith(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'"
        )
        assert "nosniff" == headers["X-Content-Type-Options"]
        assert "same-origin" == headers["Referrer-Policy"]
        assert "DENY" == headers["X-Frame-Options"]
    assert "no-store" == client.get("/").headers["Cache-Control"]


def test_no_page_has_inline_script_style_or_foreign_assets(client: Client, store: Checkpointer) -> None:
    """No script but the console's own file, no style= attribute, no <style>, no http(s) URL elsewhere."""
    pages = [client.get("/").text, client.get("/?status=all").text]
    pages += [client.get(thread_url(thread_id)).text for thread_id in THREADS.values()]
    for page in pages:
        assert "<script" not in without_console_script(page)
        assert " style=" not in page
        assert "<style" not in page
        assert [] == re.findall(r'(?:href|src|action)="(https?:[^"]*)"', page)


def test_the_stylesheet_is_served_with_an_etag(client: Client) -> None:
    """console.css comes from the package; a matching If-None-Match gets 304."""
    reply = client.get("/static/console.css")
    assert 200 == reply.status
    assert "text/css; charset=utf-8" == reply.headers["Content-Type"]
    assert b"svg.tree" in reply.body
    again = client.get("/static/console.css", headers={"If-None-Match": reply.headers["ETag"]})
    assert 304 == again.status
    assert b"" == again.body


def test_unknown_paths_and_methods_are_refused(client: Client) -> None:
    """404 for an unknown page or asset, 405 for a POST to a page (with Allow)."""
    assert 404 == client.get("/nowhere").status
    assert 404 == client.get("/static/../app.py").status
    refused = client.post("/", {})
    assert 405 == refused.status
    assert "GET, HEAD" == refused.headers["Allow"]


def test_head_answers_with_headers_only(client: Client) -> None:
    """HEAD / is a 200 without a body."""
    reply = client.request("HEAD", "/")
    assert (200, b"") == (reply.status, reply.body)


def test_mounted_under_a_prefix_every_link_starts_with_it(store: Checkpointer) -> None:
    """With SCRIPT_NAME=/ops/console, links, forms and the stylesheet are under it."""
    client = Client(ilmek.web.app(store, graphs(), allow_actions=True), script_name="/ops/console")
    for url in ["/ops/console/", "/ops/console" + thread_url(THREADS["waiting"])]:
        page = client.get(url).text
        targets = re.findall(r'(?:href|action)="([^"#]+)"', page)
        assert targets
        assert [] == [target for target in targets if not target.startswith("/ops/console/")]


def test_allowed_hosts_refuses_other_host_names(store: Checkpointer) -> None:
    """With allowed_hosts, another Host header (a DNS-rebinding page) gets 400."""
    app = ilmek.web.app(store, allowed_hosts=["127.0.0.1:8765"])
    assert 200 == Client(app, host="127.0.0.1:8765").get("/").status
    assert 400 == Client(app, host="attacker.example:8765").get("/").status


def test_a_failure_inside_the_console_is_a_500_page_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store that breaks: the page names the error (password masked); the log has the traceback."""

    class Broken(InMemoryCheckpointer):
        def list_threads(self, *args: object, **kwargs: object) -> list[ilmek.ThreadInfo]:
            raise RuntimeError("cannot reach postgresql://app:hunter2@db/shop")

    reply = Client(ilmek.web.app(Broken())).get("/")
    assert 500 == reply.status
    assert "RuntimeError" in reply.text
    assert "hunter2" not in reply.text
    assert "Traceback" not in reply.text
    assert "Traceback" in caplog.text


def test_app_refuses_what_is_not_a_checkpointer_or_graphs() -> None:
    """A wrong checkpointer or graphs argument is an InvalidArgumentError at once."""
    with pytest.raises(InvalidArgumentError):
        ilmek.web.app(object())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        ilmek.web.app(InMemoryCheckpointer(), {"checkout": object()})  # type: ignore[dict-item]


def test_graphs_may_be_one_graph_or_a_mapping(store: Checkpointer) -> None:
    """A single compiled graph is keyed by its name."""
    assert ["nightly-batch"] == list(ilmek.web.app(store, batch_graph()).graphs)


@pytest.mark.postgres
def test_every_page_renders_on_postgres(postgres_dsn: str) -> None:
    """The sample store on Postgres: the inbox, each tab and each thread page answer 200."""
    with PostgresCheckpointer.connect(postgres_dsn) as store:
        populate(store)
        client = Client(ilmek.web.app(store, graphs(), allow_actions=True))
        assert [THREADS["hostile"], THREADS["waiting"], THREADS["second_waiting"]] == rows(
            client.get("/").text
        )
        for status in ("error", "running", "unfinished", "done", "all"):
            assert 200 == client.get(f"/?status={status}").status
        for thread_id in THREADS.values():
            assert 200 == client.get(thread_url(thread_id)).status


def test_a_step_whose_result_could_not_be_stored_shows_as_run_with_its_type_escaped(
    store: Checkpointer,
) -> None:
    """The failed task's journal says the step ran and which type could not be stored, as text."""

    class Hostile:
        pass

    Hostile.__qualname__ = "<b>Hostile</b>"

    def pay(state: dict[str, object], ctx: ilmek.NodeContext) -> None:
        ctx.step("charge", Hostile)

    g = ilmek.graph("sdk", {"n": ilmek.last_write(0)}).node("pay", pay).edge(ilmek.START, "pay").compile()
    assert "error" == ilmek.run(g, {}, thread_id="sdk", checkpointer=store).status

    page = Client(ilmek.web.app(store, {"sdk": g})).get(thread_url("sdk")).text

    assert "charge#0" in page
    assert "Ran, but its result (of type" in page
    assert "&lt;b&gt;Hostile&lt;/b&gt;) could not be stored." in page
    assert "<b>Hostile</b>" not in page
