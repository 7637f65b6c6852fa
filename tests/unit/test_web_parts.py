"""The console's building blocks on their own: escaping, links, values, differences, tokens, drawings."""

from __future__ import annotations

import base64
import datetime
import decimal
import re

import pytest

from ilmek import END, START, Checkpoint, Pending, ScheduledTask, channel, graph
from ilmek.web import json_input
from ilmek.web.access import Login, host_allowed, is_loopback, served_names, split_host
from ilmek.web.csrf import WINDOW_SECONDS, Guard, same_origin
from ilmek.web.diff import ChannelDiff, difference
from ilmek.web.graph_svg import draw_graph
from ilmek.web.html import Markup, Url, escape, join, tag
from ilmek.web.links import Links
from ilmek.web.reading import parse_metadata_filter
from ilmek.web.tree import answered_pauses, draw_tree, layout
from ilmek.web.values import as_json_text, label, preview, question_of, render
from tests.support.web_support import XSS_IMG, XSS_SCRIPT, XSS_URL

# --- html -----------------------------------------------------------------------------------


def test_escape_turns_markup_into_entities_and_controls_into_visible_escapes() -> None:
    """<, >, &, both quotes become entities; ESC, BEL and a bidi override are shown as escapes."""
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" == escape(XSS_SCRIPT)
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" == escape(XSS_IMG)
    assert "&#x27;a&#x27; &amp; b" == escape("'a' & b")
    assert "a\\x1bb\\x07c\\u202ed" == escape("a\x1bb\x07c\u202ed")


def test_escape_keeps_line_breaks_only_when_asked() -> None:
    """A stored newline reads \\n unless the block was laid out by the console."""
    assert "a\\nb" == escape("a\nb")
    assert "a\nb" == escape("a\nb", keep_newlines=True)


def test_tag_escapes_text_children_and_attribute_values() -> None:
    """Text children and attribute values are escaped; Markup children pass; None is left out."""
    built = tag(
        "p", {"title": XSS_IMG, "hidden": True, "id": None, "open": False}, XSS_SCRIPT, Markup("<b>x</b>")
    )
    assert (
        '<p title="&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" hidden>'
        "&lt;script&gt;alert(1)&lt;/script&gt;<b>x</b></p>"
    ) == built


def test_a_link_attribute_takes_only_a_url_the_console_built() -> None:
    """href= with plain text (a stored javascript: URL) is refused; a Url passes."""
    with pytest.raises(ValueError, match="Url"):
        tag("a", {"href": XSS_URL}, "x")
    assert '<a href="/x?id=1">x</a>' == tag("a", {"href": Url("/x?id=1")}, "x")


def test_tag_refuses_names_that_are_not_names_and_children_of_void_elements() -> None:
    """An element or attribute name with markup in it, or a child of <input>, is a programming error."""
    with pytest.raises(ValueError, match="not an element name"):
        tag("p onclick=x", {})
    with pytest.raises(ValueError, match="not an attribute name"):
        tag("p", {"on click": "x"})
    with pytest.raises(ValueError, match="has no children"):
        tag("input", {}, "child")


def test_join_flattens_nested_children() -> None:
    """Lists inside lists become one piece of markup, text escaped."""
    assert "a&lt;b<i>c</i>" == join(["a", ["<b"]], tag("i", {}, "c"), None)


# --- links ----------------------------------------------------------------------------------------


def test_links_start_at_the_mount_point_and_encode_ids() -> None:
    """SCRIPT_NAME prefixes every link; /, ?, &, # and spaces in ids are percent-encoded."""
    links = Links("/console/")
    assert "/console/" == links.threads()
    assert "/console/thread?id=a%2Fb%3Fc%26d%23e%20f" == links.thread("a/b?c&d#e f")
    assert "/console/action/answer?id=t&checkpoint=c1" == links.action("answer", "t", "c1")
    assert "/console/static/console.css" == links.static("console.css")
    assert "/?status=error&meta=a%3D1&meta=b%3D2" == Links("").threads(
        {"status": "error", "meta": ["a=1", "b=2"]}
    )


def test_links_encode_a_mount_point_with_unusual_characters() -> None:
    """A decoded SCRIPT_NAME with a space or a quote is encoded again, its slashes kept."""
    assert "/my%20console/%22x%22/" == Links('/my console/"x"').threads()


def test_a_lone_surrogate_in_a_link_is_written_as_its_escape() -> None:
    """Text with no UTF-8 form (from a stored value) makes an ASCII link, not a UnicodeEncodeError."""
    url = Links("").threads({"note": "bad \ud800 text"})
    assert url.isascii()
    assert "%5Cud800" in url


# --- values -------------------------------------------------------------------------------------


def test_render_lays_out_values_as_json_like_text() -> None:
    """Short containers stay on one line; strings are JSON literals (a newline reads \\n)."""
    assert (
        '{"a": [1, 2.5, null, true], "b": "x\\ny"}' == render({"a": [1, 2.5, None, True], "b": "x\ny"}).text
    )
    long = {"items": [f"item number {i}" for i in range(10)]}
    text = render(long).text
    assert text.startswith('{\n  "items": [\n    "item number 0",\n')
    assert text.endswith("\n  ]\n}")


def test_render_writes_non_json_values_readably() -> None:
    """Tuples, sets, dates, decimals and bytes read as themselves."""
    moment = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert "(1,)" == render((1,)).text
    assert "{1, 2}" == render({2, 1}).text
    assert "2026-01-02T03:04:05+00:00" == render(moment).text
    assert "1.10" == render(decimal.Decimal("1.10")).text
    assert "b'ab'" == render(b"ab").text


def test_render_stops_at_its_budget_however_large_the_value() -> None:
    """A million items render to at most the budget, marked as cut."""
    rendered = render(list(range(1_000_000)), limit=500)
    assert rendered.truncated
    assert len(rendered.text) <= 502


def test_render_copes_with_deep_nesting_and_huge_integers() -> None:
    """A value nested 5,000 deep and an integer of 10,000 digits do not break the page."""
    deep: list[object] = []
    for _ in range(5000):
        deep = [deep]
    assert "…" in render(deep).text
    assert "<int of about 10000 digits>" == render(10**9999).text


def test_preview_and_label_are_one_line_and_cut() -> None:
    """preview cuts at the width with …; label shows text as it is."""
    assert '["a", "b"]' == preview(["a", "b"])
    assert 11 == len(preview(list(range(100)), 10))
    assert "yes" == label("yes")
    assert '["yes"]' == label(["yes"])


def test_question_of_prefers_a_text_question() -> None:
    """A dict with a text `question` shows it; anything else is previewed."""
    assert "Charge 3?" == question_of({"question": "Charge 3?", "options": ["y"]})
    assert "plain" == question_of("plain")
    assert '{"question": 3}' == question_of({"question": 3})


def test_as_json_text_is_ascii_json_or_none() -> None:
    """Options travel back as ASCII JSON; a value JSON cannot hold gives None."""
    assert '"caf\\u00e9"' == as_json_text("café")
    assert as_json_text(datetime.date(2026, 1, 1)) is None
    assert as_json_text(float("nan")) is None


# --- differences --------------------------------------------------------------------------------


def test_difference_names_added_removed_changed_and_appended_channels() -> None:
    """Each channel that differs is reported once, in channel order, then the removed ones."""
    parent = {"log": ["a"], "status": "new", "gone": 1, "same": [1]}
    current = {"log": ["a", "b", "c"], "status": "paid", "same": [1], "fresh": {"x": 1}}
    assert [
        ChannelDiff(name="log", kind="appended", before=["a"], after=["a", "b", "c"], appended=("b", "c")),
        ChannelDiff(name="status", kind="changed", before="new", after="paid"),
        ChannelDiff(name="fresh", kind="added", after={"x": 1}),
        ChannelDiff(name="gone", kind="removed", before=1),
    ] == difference(parent, current)


def test_difference_from_nothing_adds_every_channel() -> None:
    """A first checkpoint: every channel is added."""
    assert ["added"] == [change.kind for change in difference(None, {"a": 1})]


def test_difference_treats_a_rewritten_list_as_changed() -> None:
    """A list whose old items changed is not an append; 1 and True are not the same value."""
    assert "changed" == difference({"l": [1, 2]}, {"l": [9, 2, 3]})[0].kind
    assert "changed" == difference({"v": 1}, {"v": True})[0].kind


# --- metadata filters ---------------------------------------------------------------------------


def test_metadata_filters_read_json_scalars_and_plain_text() -> None:
    """key=3 is the number, key="3" the text, key=acme the text; no = is an error."""
    assert ("tier", 3) == parse_metadata_filter("tier=3")
    assert ("tier", "3") == parse_metadata_filter('tier="3"')
    assert ("customer", "acme corp") == parse_metadata_filter(" customer = acme corp ")
    assert ("flag", True) == parse_metadata_filter("flag=true")
    assert ("raw", "[1]") == parse_metadata_filter("raw=[1]")
    with pytest.raises(ValueError, match="key=value"):
        parse_metadata_filter("nothing")


def test_json_input_counts_nesting_outside_strings_and_refuses_past_the_limit() -> None:
    """Brackets inside strings (escaped quotes too) do not count; 101 levels are refused before parsing."""
    assert 0 == json_input.depth('"[[[[\\"[["')
    assert 2 == json_input.depth('{"a": [1, "]]]{{{"], "b": "\\"["}')
    assert [[1]] == json_input.loads("[[1]]")
    limit = json_input.MAX_DEPTH
    assert json_input.loads("[" * limit + "]" * limit) is not None
    with pytest.raises(json_input.TooDeepError, match="nests deeper than 100 levels"):
        json_input.loads("[" * (limit + 1) + "]" * (limit + 1))
    with pytest.raises(ValueError, match="nests deeper"):
        parse_metadata_filter("k=" + "{" * 5000)


# --- tokens and origins -----------------------------------------------------------------------


class Clock:
    """A settable clock for the token windows."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_token_is_bound_to_its_action_its_thread_and_its_secret() -> None:
    """The same token fails for another action, another thread, or under another secret."""
    guard = Guard(b"k1")
    token = guard.token("answer", "t1")
    assert guard.valid(token, "answer", "t1")
    assert not guard.valid(token, "delete", "t1")
    assert not guard.valid(token, "answer", "t2")
    assert not Guard(b"k2").valid(token, "answer", "t1")
    assert not guard.valid(None, "answer", "t1")
    assert not guard.valid("", "answer", "t1")
    assert not guard.valid("é" * 64, "answer", "t1")


def test_a_token_lasts_its_window_and_the_next() -> None:
    """Made at the end of one hour, it still works in the next, not in the one after."""
    clock = Clock(10 * WINDOW_SECONDS - 1)
    guard = Guard("secret", clock=clock)
    token = guard.token("cancel", "t")
    clock.now += WINDOW_SECONDS
    assert guard.valid(token, "cancel", "t")
    clock.now += WINDOW_SECONDS
    assert not guard.valid(token, "cancel", "t")


def test_a_random_secret_differs_per_guard_and_an_empty_one_is_refused() -> None:
    """Two consoles without a secret make different tokens; b'' is not a secret."""
    assert Guard().token("a", "t") != Guard().token("a", "t")
    with pytest.raises(ValueError, match="must not be empty"):
        Guard(b"")


def test_signed_notes_verify_only_their_own_text() -> None:
    """A note's signature fails for other words."""
    guard = Guard(b"k")
    signature = guard.sign("ok\0Answered.")
    assert guard.signed("ok\0Answered.", signature)
    assert not guard.signed("ok\0Log in at evil.example", signature)
    assert not guard.signed("ok\0Answered.", None)


def test_same_origin_compares_origin_then_referer_with_the_host() -> None:
    """A matching Origin passes, another or "null" fails; Referer is the fallback; neither passes."""
    host = {"HTTP_HOST": "127.0.0.1:8765"}
    assert same_origin({**host, "HTTP_ORIGIN": "http://127.0.0.1:8765"})
    assert not same_origin({**host, "HTTP_ORIGIN": "http://evil.example"})
    assert not same_origin({**host, "HTTP_ORIGIN": "null"})
    assert same_origin({**host, "HTTP_REFERER": "http://127.0.0.1:8765/thread?id=x"})
    assert not same_origin({**host, "HTTP_REFERER": "http://evil.example/x"})
    assert same_origin(host)
    assert same_origin(
        {"HTTP_HOST": "internal:80", "HTTP_ORIGIN": "https://admin.example.com"},
        ["https://admin.example.com"],
    )


# --- who may reach the console --------------------------------------------------------------------


def test_host_headers_are_split_and_compared_in_one_spelling() -> None:
    """Case, a final dot and IPv6 spellings do not matter; a bad port, user info or spaces are malformed."""
    assert ("localhost", 8765) == split_host("LocalHost.:8765")
    assert ("[::1]", None) == split_host("[0:0:0:0:0:0:0:1]")
    assert ("[::1]", None) == split_host("::1")
    for malformed in ("", "a b", "evil.example:99999", "user@evil.example", "[::1", "café.example"):
        assert split_host(malformed) is None, malformed
    assert host_allowed("console.example:1234", ["console.example"])
    assert host_allowed("console.example:80", ["console.example:80"])
    assert not host_allowed("console.example:81", ["console.example:80"])
    assert not host_allowed("evil.console.example", ["console.example"])


def test_served_names_are_the_binding_its_spellings_and_localhost() -> None:
    """127.1 is also 127.0.0.1; a wildcard binding adds the loopback literals; a foreign name never."""
    assert {"127.0.0.1", "127.1", "[::1]", "localhost"} == set(served_names("127.1", "127.0.0.1"))
    assert {"0.0.0.0", "127.0.0.1", "[::1]", "localhost", "ops.example"} == set(
        served_names("0.0.0.0", "0.0.0.0", ["ops.example"])
    )
    assert {"myhost.example", "192.0.2.7", "localhost"} == set(served_names("myhost.example", "192.0.2.7"))
    assert is_loopback("::ffff:127.0.0.1")
    assert not is_loopback("0.0.0.0")
    with pytest.raises(ValueError, match="not a host name"):
        served_names("127.0.0.1", "127.0.0.1", ["a b"])


def test_a_login_takes_basic_auth_with_any_user_or_its_cookie_and_nothing_else() -> None:
    """The token as Basic password (any user name) or the derived cookie passes; anything else fails."""
    login = Login("s3cret-token")

    def basic(credentials: str) -> dict[str, str]:
        return {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(credentials.encode()).decode()}

    assert login.authorized(basic("anyone:s3cret-token"))
    assert login.authorized(basic(":s3cret-token"))
    assert not login.authorized(basic("anyone:s3cret-tokeN"))
    assert not login.authorized({"HTTP_AUTHORIZATION": "Basic !!!"})
    assert not login.authorized({})
    cookie = login.set_cookie("/ops").split(";", 1)[0]
    assert "s3cret-token" not in cookie
    assert login.authorized({"HTTP_COOKIE": f"other=1; {cookie}"})
    assert not login.authorized({"HTTP_COOKIE": cookie[:-1]})
    assert "Path=/ops; Max-Age=43200; HttpOnly; SameSite=Strict" in login.set_cookie("/ops")


# --- the checkpoint tree ------------------------------------------------------------------------


def checkpoint(
    checkpoint_id: str, parent: str | None, *, source: str = "loop", pending: bool = False
) -> Checkpoint:
    """A checkpoint for drawing: only ids, parent, source and a pause matter."""
    pause = (Pending(id="n:interrupt#0", task_id="x", node="n", key="interrupt#0", payload=None),)
    return Checkpoint(
        id=checkpoint_id,
        thread_id="t",
        parent_id=parent,
        pending=pause if pending else (),
        next=(ScheduledTask(node="n", task_key="n"),) if pending else (),
        metadata={"source": source},
    )


def test_a_linear_history_is_one_lane() -> None:
    """Every checkpoint of an unforked thread sits in lane 0, oldest in row 0."""
    nodes = layout([checkpoint("c3", "c2"), checkpoint("c1", None), checkpoint("c2", "c1")])
    assert [("c1", 0, 0), ("c2", 1, 0), ("c3", 2, 0)] == [(n.checkpoint.id, n.row, n.lane) for n in nodes]


def test_a_fork_opens_a_lane_beside_its_branch_and_lanes_are_reused() -> None:
    """The first child keeps the parent's lane; a fork takes lane 1; a later fork reuses a free lane."""
    checkpoints = [
        checkpoint("a", None),
        checkpoint("b", "a", source="pause", pending=True),
        checkpoint("c", "b"),
        checkpoint("d", "b", source="fork", pending=True),
        checkpoint("e", "d"),
        checkpoint("f", "c"),
        checkpoint("g", "f", source="pause", pending=True),
        checkpoint("h", "f", source="fork"),
    ]
    lanes = {node.checkpoint.id: node.lane for node in layout(checkpoints)}
    assert {"a": 0, "b": 0, "c": 0, "d": 1, "e": 1, "f": 0, "g": 0, "h": 1} == lanes


def test_forged_parent_links_are_drawn_as_roots_and_marked_damaged() -> None:
    """A self-parent, a loop and a parent newer than its child: each drawn once, no edge that goes down."""
    checkpoints = [
        checkpoint("a", None),
        checkpoint("b", "b"),
        checkpoint("c", "d"),
        checkpoint("d", "c"),
        checkpoint("e", "a"),
        checkpoint("f", "a"),
        checkpoint("a0", "f"),
    ]
    nodes = {node.checkpoint.id: node for node in layout(checkpoints)}
    assert ["a", "a0", "b", "c", "d", "e", "f"] == sorted(nodes)
    assert "damaged: its parents loop" == nodes["b"].damage
    assert "damaged: its parents loop" == nodes["c"].damage
    assert "damaged: its parents loop" == nodes["d"].damage
    assert "damaged: its parent f is not older" == nodes["a0"].damage
    assert (None, None) == (nodes["e"].damage, nodes["f"].damage)
    for node in nodes.values():
        assert node.parent_row is None or node.parent_row < node.row
    assert (nodes["c"].row, nodes["c"].lane) == (nodes["d"].parent_row, nodes["d"].parent_lane)
    svg = draw_tree(checkpoints, Links(""), selected="a", latest="f")
    assert 4 == svg.count('t-damaged">damaged:')


def test_answered_pauses_are_those_a_run_went_on_from_not_those_forked() -> None:
    """A pause with a loop child is answered; a fork's first checkpoint answers nothing."""
    checkpoints = [
        checkpoint("p", None, source="pause", pending=True),
        checkpoint("q", "p", source="fork", pending=True),
    ]
    assert set() == answered_pauses(checkpoints)
    assert {"q"} == answered_pauses([*checkpoints, checkpoint("r", "q")])


def test_the_tree_links_every_checkpoint_and_marks_latest_selected_and_pauses() -> None:
    """One link per checkpoint, to its page; the latest, the selected, waiting and answered are marked."""
    checkpoints = [
        checkpoint("a", None),
        checkpoint("b", "a", source="pause", pending=True),
        checkpoint("c", "b"),
        checkpoint("d", "b", source="fork", pending=True),
    ]
    svg = draw_tree(checkpoints, Links("/c"), selected="b", latest="d", failed_at="a")
    for checkpoint_id in "abcd":
        assert f'href="/c/thread?id=t&amp;checkpoint={checkpoint_id}"' in svg
    assert 1 == svg.count('class="row selected"')
    assert "answered: n:interrupt#0" in svg
    assert "waiting: n:interrupt#0" in svg
    assert "latest" in svg
    assert "failed from here" in svg
    assert 'class="edge fork"' in svg


# --- the graph ----------------------------------------------------------------------------------


def test_the_graph_drawing_has_every_node_edge_and_predicate_and_marks_the_paused_node() -> None:
    """Boxes for START, nodes and END; arrows with predicate labels; paused and upcoming classes."""
    built = (
        graph("g", {"intent": channel.last_write(None)})
        .node("classify", lambda s: None)
        .node("buy", lambda s: None)
        .node("browse", lambda s: None)
        .edge(START, "classify")
        .edge("classify", "buy", when={"channel": "intent", "eq": "buy"})
        .router("classify", lambda s: "browse", destinations=["browse"])
        .edge("buy", END)
        .edge("browse", "classify")
        .compile()
    )
    svg = draw_graph(built, upcoming=["buy"], paused=["classify"])
    assert {"START", "classify", "buy", "browse", "END"} <= set(
        re.findall(r"<text [^>]*>([^<]+)</text>", svg)
    )
    assert "intent == &quot;buy&quot;" in svg
    assert 'class="gnode paused"' in svg
    assert 'class="gnode upcoming"' in svg
    assert 'class="arrow dynamic"' in svg
    assert 5 == svg.count("<path d=") - 1  # five arrows and the arrowhead


def test_a_router_without_destinations_points_at_a_question_mark() -> None:
    """A router that declared nothing may go anywhere: drawn to a '?' box."""
    built = (
        graph("g", {"x": channel.last_write(0)})
        .node("a", lambda s: None)
        .edge(START, "a")
        .router("a", lambda s: END)
        .compile()
    )
    svg = draw_graph(built)
    assert ">?</text>" in svg
    assert 'class="gnode anywhere"' in svg


def test_node_names_are_escaped_in_the_drawing() -> None:
    """A node named with markup is text in the SVG."""
    name = 'x"><script>alert(1)</script>'
    built = graph("g", {"x": channel.last_write(0)}).node(name, lambda s: None).edge(START, name).compile()
    svg = draw_graph(built)
    assert "<script>" not in svg
    assert "&lt;script&gt;" in svg


def test_a_note_signature_lasts_its_hour_and_the_next() -> None:
    """A note signed now is shown for up to two token windows, then refused; another text never."""
    now = [1_000_000.0]
    guard = Guard(b"k", clock=lambda: now[0])
    signature = guard.sign("ok\0Answered.")
    assert not guard.signed("ok\0Deleted.", signature)
    now[0] += WINDOW_SECONDS
    assert guard.signed("ok\0Answered.", signature)
    now[0] += WINDOW_SECONDS
    assert not guard.signed("ok\0Answered.", signature)


def test_same_origin_compares_the_scheme_too() -> None:
    """An https:// origin posting to an http:// request is another origin; trusted origins keep theirs."""
    host = {"HTTP_HOST": "console.example", "wsgi.url_scheme": "https"}
    assert same_origin({**host, "HTTP_ORIGIN": "https://console.example"})
    assert not same_origin({**host, "HTTP_ORIGIN": "http://console.example"})
    assert not same_origin({**host, "HTTP_REFERER": "http://console.example/thread?id=x"})
    plain = {"HTTP_HOST": "127.0.0.1:8765"}
    assert not same_origin({**plain, "HTTP_ORIGIN": "https://127.0.0.1:8765"})
    trusted = ["https://admin.example"]
    assert same_origin({**plain, "HTTP_ORIGIN": "https://admin.example"}, trusted)
    assert not same_origin({**plain, "HTTP_ORIGIN": "http://admin.example"}, trusted)
