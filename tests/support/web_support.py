"""Shared by the web console's tests and ``scripts/screenshots``: sample threads, a client, a server.

``populate(checkpointer)`` writes a small store with a thread of every kind
the console shows: paused on a question with options, answered, forked,
failed, finished, stalled, and one whose every stored text is hostile
markup. ``Client`` calls a WSGI application in-process; ``serving`` runs
one with ``wsgiref`` on a free port of 127.0.0.1 in a background thread;
``start_web`` runs ``python -m ilmek web`` in a process of its own and
``fetch`` reads a page over a real connection.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import io
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import wsgiref.util
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

import ilmek
from ilmek import END, START, Checkpointer, channel, graph, resume_keyed, run
from ilmek.web.serve import ConsoleServer, make_server

XSS_SCRIPT = "<script>alert(1)</script>"
XSS_IMG = '"><img src=x onerror=alert(1)>'
XSS_URL = "javascript:alert(1)"
CONTROL = "bell\x07 esc\x1b[31m nul-free \u202egnp.exe"
HOSTILE_TEXTS = (XSS_SCRIPT, XSS_IMG, XSS_URL)
"""Markup that must never reach a page unescaped."""

CONSOLE_SCRIPT = re.compile(r'<script src="(?:/[^"<>]*)?/static/console\.js" defer></script>')
"""The one script the console writes: its own file, which reloads the inbox and a running thread."""


def without_console_script(page: str) -> str:
    """A page without the console's own ``<script src>`` (whatever else reads ``<script`` stays)."""
    return CONSOLE_SCRIPT.sub("", page, count=1)


HOSTILE_THREAD = f"{XSS_SCRIPT}{XSS_IMG}/../?&id=x#{XSS_URL}"
HOSTILE_NODE = 'ask"><img src=x onerror=alert(1)>'

THREADS = {
    "waiting": "order-1042",
    "second_waiting": "order-1043",
    "answered": "order-1041",
    "forked": "order-1040",
    "failed": "sync-crm-7",
    "stalled": "batch-2026-11-30",
    "hostile": HOSTILE_THREAD,
}
"""The sample threads by role."""


# --- graphs -----------------------------------------------------------------------------


def checkout_graph() -> ilmek.CompiledGraph:
    """Plan an order, ask before charging (options yes/no), charge or cancel."""

    def plan(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        order = ctx.step("create_order", lambda: {"id": f"ord-{ctx.thread_id}", "items": state["cart"]})
        return {"order": order, "log": [f"order for {len(state['cart'])} items"]}

    def approve(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        total = ctx.step("quote", lambda: 24.99 * len(state["cart"]))
        answer = ctx.interrupt({"question": f"Charge {total:.2f} EUR?", "options": ["yes", "no"]})
        return {"approved": answer == "yes", "log": [f"answered {answer!r}"]}

    def charge(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        receipt = ctx.step("charge", lambda: {"receipt": f"rcpt-{state['order']['id']}"})
        return {"receipt": receipt, "log": ["charged"]}

    def cancel(state: dict[str, Any]) -> dict[str, Any]:
        return {"log": ["cancelled"]}

    return (
        graph(
            "checkout",
            {
                "cart": channel.last_write([]),
                "order": channel.last_write(None),
                "approved": channel.last_write(None),
                "receipt": channel.last_write(None),
                "log": channel.append(),
            },
        )
        .node("plan", plan)
        .node("approve", approve)
        .node("charge", charge)
        .node("cancel", cancel)
        .edge(START, "plan")
        .edge("plan", "approve")
        .edge("approve", "charge", when={"channel": "approved", "eq": True})
        .edge("approve", "cancel", when={"channel": "approved", "eq": False})
        .edge("charge", END)
        .edge("cancel", END)
        .compile()
    )


def failing_graph() -> ilmek.CompiledGraph:
    """One node that fails: the upstream answered 502."""

    def fetch(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        ctx.step("login", lambda: "session-1")
        raise RuntimeError("upstream CRM answered 502 Bad Gateway\nretry later")

    return (
        graph("crm-sync", {"contacts": channel.append()})
        .node("fetch", fetch)
        .edge(START, "fetch")
        .edge("fetch", END)
        .compile()
    )


def loop_graph(delay: float = 0.05) -> ilmek.CompiledGraph:
    """A node that sleeps briefly and loops, superstep after superstep, until cancelled."""

    def tick(state: dict[str, Any]) -> dict[str, Any]:
        time.sleep(delay)
        return {"ticks": state["ticks"] + 1}

    return (
        graph("ticker", {"ticks": channel.last_write(0)})
        .node("tick", tick)
        .edge(START, "tick")
        .router(
            "tick", lambda state: "tick" if state["ticks"] < 1_000_000 else END, destinations=["tick", END]
        )
        .compile()
    )


def counter_graph(steps: int) -> ilmek.CompiledGraph:
    """One node that counts to ``steps - 1``, a checkpoint a superstep: a long history."""
    return (
        graph("counter", {"n": channel.last_write(0)})
        .node("inc", lambda state: {"n": state["n"] + 1})
        .edge(START, "inc")
        .router("inc", lambda state: "inc" if state["n"] < steps - 1 else END, destinations=["inc", END])
        .compile()
    )


@contextlib.contextmanager
def looping(
    checkpointer: Checkpointer, thread_id: str, delay: float = 0.05, *, stop: bool = True
) -> Iterator[list[ilmek.Result]]:
    """A run of :func:`loop_graph` in a background thread, holding ``thread_id``; its result once it ends.

    At the end the run is cancelled (``stop``), or given 10 seconds to end as
    the test made it (a cancel of its own), then cancelled.
    """
    results: list[ilmek.Result] = []
    runner = threading.Thread(
        target=lambda: results.append(
            run(
                loop_graph(delay), {}, thread_id=thread_id, checkpointer=checkpointer, recursion_limit=100_000
            )
        ),
        daemon=True,
    )
    runner.start()
    try:
        deadline = time.monotonic() + 15
        while (info := checkpointer.get_thread(thread_id)) is None or not info.running:
            assert time.monotonic() < deadline, "the looping run never started"
            time.sleep(0.02)
        yield results
    finally:
        if not stop:
            runner.join(10)
        if runner.is_alive():
            ilmek.request_cancel(checkpointer, thread_id, "the test is over")
        runner.join(15)


def stall_after_first_superstep(g: ilmek.CompiledGraph, thread_id: str, checkpointer: Checkpointer) -> None:
    """A thread left as a process that died after its first superstep leaves it: tasks planned, nothing
    recorded about how the run ended (the run's stream is closed, as at a crash)."""
    events = ilmek.stream(g, {}, thread_id=thread_id, checkpointer=checkpointer)
    seen = 0
    for event in events:
        seen += isinstance(event, ilmek.CheckpointEvent)
        if seen == 2:  # the input's checkpoint, then the first superstep's
            break
    events.close()


def batch_graph() -> ilmek.CompiledGraph:
    """Three quick nodes in a row: extract, transform, load."""

    def extract(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        rows = ctx.step("read_rows", lambda: [{"sku": "A-1", "qty": 3}, {"sku": "B-7", "qty": 1}])
        return {"rows": rows}

    def transform(state: dict[str, Any]) -> dict[str, Any]:
        return {"rows": [dict(row, qty=row["qty"] * 2) for row in state["rows"]]}

    def load(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        return {"loaded": ctx.step("write_rows", lambda: len(state["rows"]))}

    return (
        graph("nightly-batch", {"rows": channel.last_write([]), "loaded": channel.last_write(0)})
        .node("extract", extract)
        .node("transform", transform)
        .node("load", load)
        .edge(START, "extract")
        .edge("extract", "transform")
        .edge("transform", "load")
        .edge("load", END)
        .compile()
    )


def hostile_graph() -> ilmek.CompiledGraph:
    """Every name and value it stores is markup: node, channel, step key, payload, error."""

    def ask(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        ctx.step(XSS_SCRIPT + XSS_IMG, lambda: {XSS_IMG: [XSS_SCRIPT, XSS_URL, CONTROL]})
        answer = ctx.interrupt(
            {"question": XSS_SCRIPT + CONTROL, "options": [XSS_IMG, XSS_URL], "link": XSS_URL}, key=XSS_IMG
        )
        if answer == "fail":
            raise ValueError(f"{XSS_SCRIPT} {XSS_IMG} {XSS_URL} {CONTROL}")
        return {XSS_SCRIPT: [answer]}

    return (
        graph("x" + XSS_IMG, {XSS_SCRIPT: channel.append(), "url": channel.last_write(XSS_URL)})
        .node(HOSTILE_NODE, ask)
        .edge(START, HOSTILE_NODE)
        .edge(HOSTILE_NODE, END)
        .compile()
    )


DRAFT = (
    "Hello Ayşe,\n\nThank you for writing to us. Your order #4711 left our warehouse today;\n"
    "the tracking number is JP-1234-5678 (配送中).\n\nKind regards,\nThe support team 🙂"
)
"""The reply the support agent drafts for review: several lines, Turkish, Japanese and an emoji."""


def support_graph() -> ilmek.CompiledGraph:
    """A support agent loop: the agent calls a tool, then drafts a reply a person reviews before sending."""

    def agent(state: dict[str, Any]) -> dict[str, Any]:
        if not state["looked_up"]:
            return {"log": ["agent: look up the order"]}
        return {"draft": DRAFT, "log": ["agent: drafted a reply"]}

    def tools(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        found = ctx.step("lookup_order", lambda: {"order": 4711, "status": "shipped"})
        return {"looked_up": True, "log": [f"tools: {found['status']}"]}

    def review(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        reply = ctx.interrupt({"question": "Send this reply to the customer?", "draft": state["draft"]})
        return {"sent": reply, "log": ["review: answered"]}

    def send_reply(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        ctx.step("send_email", lambda: {"to": "ayse@example.com", "chars": len(state["sent"])})
        return {"log": ["sent"]}

    return (
        graph(
            "support",
            {
                "looked_up": channel.last_write(False),
                "draft": channel.last_write(None),
                "sent": channel.last_write(None),
                "log": channel.append(),
            },
        )
        .node("agent", agent)
        .node("tools", tools)
        .node("review", review)
        .node("send", send_reply)
        .edge(START, "agent")
        .router(
            "agent", lambda state: "review" if state["draft"] else "tools", destinations=["tools", "review"]
        )
        .edge("tools", "agent")
        .edge("review", "send")
        .edge("send", END)
        .compile()
    )


def research_graph() -> ilmek.CompiledGraph:
    """A fan-out: plan sends one research task per topic; the task for "pricing" fails; write sums up."""

    def plan(state: dict[str, Any]) -> dict[str, Any]:
        return {"topics": ["market", "pricing", "rivals"]}

    def research(state: dict[str, Any], ctx: ilmek.NodeContext) -> dict[str, Any]:
        notes = ctx.step("search", lambda: f"notes on {state['topic']}")
        if state["topic"] == "pricing":
            raise ConnectionError("the pricing API timed out after 30 s")
        return {"notes": [notes]}

    def write(state: dict[str, Any]) -> dict[str, Any]:
        return {"report": " / ".join(state["notes"])}

    return (
        graph(
            "research",
            {"topics": channel.last_write([]), "notes": channel.append(), "report": channel.last_write(None)},
        )
        .node("plan", plan)
        .node("research", research)
        .node("write", write)
        .edge(START, "plan")
        .router(
            "plan",
            lambda state: [ilmek.send("research", {"topic": topic}) for topic in state["topics"]],
            destinations=["research"],
        )
        .edge("research", "write")
        .edge("write", END)
        .compile()
    )


def retry_chain_graph() -> ilmek.CompiledGraph:
    """A chain with a back edge: draft, check, and back to draft until the check passes."""
    return (
        graph("retry-chain", {"tries": channel.last_write(0)})
        .node("draft", lambda state: {"tries": state["tries"] + 1})
        .node("check", lambda state: None)
        .node("publish", lambda state: None)
        .edge(START, "draft")
        .edge("draft", "check")
        .router(
            "check",
            lambda state: "publish" if state["tries"] > 2 else "draft",
            destinations=["draft", "publish"],
        )
        .edge("publish", END)
        .compile()
    )


def graphs() -> dict[str, ilmek.CompiledGraph]:
    """Every sample graph by name."""
    found = [
        checkout_graph(),
        failing_graph(),
        loop_graph(),
        batch_graph(),
        hostile_graph(),
        support_graph(),
        research_graph(),
        retry_chain_graph(),
    ]
    return {g.name: g for g in found}


# --- the sample store ---------------------------------------------------------------------------


def populate(checkpointer: Checkpointer, *, hostile: bool = True) -> dict[str, str]:
    """Write the sample threads (see :data:`THREADS`); returns them by role."""
    checkout = checkout_graph()
    pause_id = "approve:interrupt#0"

    def start(thread_id: str, cart: list[str], **metadata: Any) -> None:
        result = run(checkout, {"cart": cart}, thread_id=thread_id, checkpointer=checkpointer)
        assert "interrupted" == result.status
        if metadata:
            checkpointer.put_thread_metadata(thread_id, metadata)

    start(THREADS["forked"], ["coffee", "mug"], customer="acme", channel="web")
    resume_keyed(checkout, {pause_id: "yes"}, thread_id=THREADS["forked"], checkpointer=checkpointer)
    pause = next(c for c in checkpointer.list(THREADS["forked"]) if c.pending)
    resume_keyed(
        checkout,
        {pause_id: "no"},
        thread_id=THREADS["forked"],
        checkpointer=checkpointer,
        checkpoint_id=pause.id,
    )

    start(THREADS["answered"], ["filter"], customer="globex")
    resume_keyed(checkout, {pause_id: "yes"}, thread_id=THREADS["answered"], checkpointer=checkpointer)

    result = run(failing_graph(), {"contacts": []}, thread_id=THREADS["failed"], checkpointer=checkpointer)
    assert "error" == result.status
    checkpointer.put_thread_metadata(THREADS["failed"], {"source": "nightly"})

    # Stopped by its recursion limit after one superstep: tasks planned, no
    # pause, no run (as a process that died mid-run leaves a thread).
    stall_after_first_superstep(batch_graph(), THREADS["stalled"], checkpointer)

    start(THREADS["second_waiting"], ["coffee"], customer="initech", tier=2)
    start(THREADS["waiting"], ["coffee", "mug", "filter"], customer="acme", tier=1)

    if hostile:
        hostile_graph_ = hostile_graph()
        result = run(hostile_graph_, {"url": XSS_URL}, thread_id=HOSTILE_THREAD, checkpointer=checkpointer)
        assert "interrupted" == result.status
        checkpointer.put_thread_metadata(
            HOSTILE_THREAD, {XSS_SCRIPT: XSS_IMG, "href": XSS_URL, "ctl": CONTROL}
        )
    return dict(THREADS)


UX_THREADS = {
    "draft": "support-ticket-88",
    "draft_accept": "support-ticket-89",
    "research": "research-q3",
    "long": "long-values",
}
"""The threads :func:`populate_ux` adds, by role."""
LONG_TEXT = "".join(f"line {n}: İstanbul 東京 🙂 " + "x" * 40 + "\n" for n in range(500))
"""A text of about 34,000 characters: more than a thread page shows of one value."""


def populate_ux(checkpointer: Checkpointer) -> dict[str, str]:
    """The sample threads, plus two support tickets waiting on a draft, a failed fan-out, a long value."""
    threads = populate(checkpointer, hostile=False)
    support = support_graph()
    for role in ("draft_accept", "draft"):
        result = run(support, {}, thread_id=UX_THREADS[role], checkpointer=checkpointer)
        assert "interrupted" == result.status
    result = run(research_graph(), {}, thread_id=UX_THREADS["research"], checkpointer=checkpointer)
    assert "error" == result.status
    long_graph = (
        graph("notes", {"text": channel.last_write("")})
        .node("write", lambda state, ctx: {"text": ctx.step("fetch", lambda: LONG_TEXT)})
        .edge(START, "write")
        .edge("write", END)
        .compile()
    )
    run(long_graph, {}, thread_id=UX_THREADS["long"], checkpointer=checkpointer)
    return {**threads, **UX_THREADS}


def hostile_failure(checkpointer: Checkpointer) -> str:
    """A thread of the hostile graph whose run failed with a hostile message; returns its id."""
    thread_id = XSS_IMG + "-failed"
    hostile = hostile_graph()
    run(hostile, {}, thread_id=thread_id, checkpointer=checkpointer)
    result = resume_keyed(
        hostile, {f"{HOSTILE_NODE}:{XSS_IMG}#0": "fail"}, thread_id=thread_id, checkpointer=checkpointer
    )
    assert "error" == result.status
    return thread_id


# --- an in-process client -----------------------------------------------------------------------


@attrs.frozen
class Reply:
    """What the application answered."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def text(self) -> str:
        """The body as text."""
        return self.body.decode("utf-8")

    @property
    def location(self) -> str:
        """Where a redirect points."""
        return self.headers["Location"]


class Client:
    """Calls a WSGI application directly, as a server would."""

    def __init__(self, app: Any, *, script_name: str = "", host: str = "127.0.0.1:8765") -> None:
        self.app = app
        self.script_name = script_name
        self.host = host

    def request(
        self,
        method: str,
        url: str,
        *,
        form: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """One request; ``url`` is the path under the mount point with its query (or a full path).

        ``form``: a mapping, or pairs (a name may repeat, as ticked boxes send it).
        """
        path, _, query = url.partition("?")
        if self.script_name and path.startswith(self.script_name):
            path = path[len(self.script_name) :]
        body = urllib.parse.urlencode(form or {}).encode("utf-8")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": self.script_name,
            "PATH_INFO": urllib.parse.unquote(path, encoding="latin-1"),
            "QUERY_STRING": query,
            "HTTP_HOST": self.host,
            "wsgi.input": io.BytesIO(body),
        }
        if form is not None:
            environ["CONTENT_TYPE"] = "application/x-www-form-urlencoded"
            environ["CONTENT_LENGTH"] = str(len(body))
        for name, value in (headers or {}).items():
            environ["HTTP_" + name.upper().replace("-", "_")] = value
        wsgiref.util.setup_testing_defaults(environ)
        started: dict[str, Any] = {}

        def start_response(status: str, header_list: list[tuple[str, str]], exc_info: Any = None) -> Any:
            started["status"], started["headers"] = status, header_list
            return lambda data: None

        chunks = self.app(environ, start_response)
        content = b"".join(chunks)
        return Reply(int(started["status"].split()[0]), dict(started["headers"]), content)

    def get(self, url: str, **options: Any) -> Reply:
        """A GET."""
        return self.request("GET", url, **options)

    def post(
        self, url: str, form: Mapping[str, str] | Sequence[tuple[str, str]] | None = None, **options: Any
    ) -> Reply:
        """A POST of a form."""
        return self.request("POST", url, form=form or {}, **options)


# --- a real server ----------------------------------------------------------------------------


@contextlib.contextmanager
def serving(
    checkpointer: Checkpointer, console_graphs: Any = None, *, host: str = "127.0.0.1", **options: Any
) -> Iterator[ConsoleServer]:
    """The console served by ``wsgiref`` on a free port of ``host`` (127.0.0.1), in a background thread."""
    server = make_server(checkpointer, console_graphs, host=host, port=0, quiet=True, **options)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def fetch(url: str, host: str | None = None) -> tuple[int, str]:
    """GET over a real connection; the status and the body."""
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8")


def send(
    address: str,
    port: int,
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: str | None = None,
) -> tuple[int, dict[str, str], str]:
    """One request to ``address`` with exactly these headers (``Host`` included); status, headers, body."""
    connection = http.client.HTTPConnection(address, port, timeout=10)
    try:
        connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        sent = dict(headers)
        if body is not None:
            sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
            sent["Content-Length"] = str(len(body.encode()))
        for name, value in sent.items():
            connection.putheader(name, value)
        connection.endheaders(body.encode() if body is not None else None)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode("utf-8", "replace")
    finally:
        connection.close()


def basic(user: str, password: str) -> str:
    """An HTTP Basic Authorization header value."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def start_web(*argv: str, home: pathlib.Path) -> tuple[subprocess.Popen[str], str]:
    """``python -m ilmek web ...`` in a new process; the process and its first line (the URL)."""
    # This checkout first; what the caller's path adds (a package installed aside) after it.
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    environment = {**os.environ, "HOME": str(home), "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
    environment.pop("ILMEK_DB", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "ilmek", "web", *argv],
        cwd=REPO_ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    return process, first


def stop_web(process: subprocess.Popen[str]) -> tuple[str, str]:
    """Ctrl-C a running ``ilmek web`` (or collect one that ended, or kill one that hangs); stdout, stderr."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate(timeout=10)
        raise


def url_of(first_line: str) -> str:
    """The URL ``ilmek web`` printed on its first line."""
    found = re.search(r" on (http://\S+/) \(", first_line)
    assert found is not None, first_line
    return found.group(1)


def port_of(first_line: str) -> int:
    """The port ``ilmek web`` printed on its first line."""
    return int(url_of(first_line).rstrip("/").rsplit(":", 1)[1])


def counting_decoded_rows(monkeypatch: Any) -> list[int]:
    """Count the thread rows the SQL checkpointers decode from now on (``[count]``).

    A page's work, counted rather than timed: a list reads a page of rows, or
    every row of the store when it filters in Python.
    """
    from ilmek.checkpoint.sql import threads

    count = [0]
    original = threads.thread_from_row

    def counting(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(threads, "thread_from_row", counting)
    return count
