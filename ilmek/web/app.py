"""The console as a WSGI application: routing, requests, responses and their headers.

Routes, under wherever the console is mounted (``SCRIPT_NAME``)::

    GET  /                     the threads page (?status=&q=&meta=&offset=&limit=)
    GET  /thread?id=&checkpoint=&tree=   a thread's page (tree=: its older checkpoints)
    GET  /value?id=&checkpoint=&channel= (or &task=&key=)   one value, whole
    POST /action/NAME?id=&checkpoint=   answer, fork, cancel, recover, delete
    GET  /bulk?action=&thread=...  (or &every=1&status=&q=&meta=&updated=)   confirm a bulk action
    POST /bulk                 do it: recover, cancel or delete each thread (see ilmek.web.bulk)
    GET  /static/console.css   the stylesheet
    GET  /static/console.js    the small script that refreshes the inbox and a running thread

Before anything else, a request must name an allowed host (when the console
was given ``allowed_hosts``: else a plain 400) and carry the login (when it
was given one: else a plain 401); see :mod:`ilmek.web.access`.

Every response carries a strict Content-Security-Policy (no inline script or
style, nothing from another origin), ``nosniff``, ``same-origin`` referrers
and ``X-Frame-Options: DENY``. A POST is refused (403, nothing written)
unless actions are on, its token is valid for the action and the thread,
and it comes from the console's own origin; a GET to an action is a 405.
After an action the browser is sent (303) to the thread's page, with a
note the console signed.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import attrs

from .. import serde
from ..checkpoint.base import Checkpointer
from ..errors import CorruptCheckpointError, InvalidArgumentError
from ..graph import CompiledGraph
from ..logs import logger
from ..redact import mask_secrets, printable
from .access import Login, basic_user, host_allowed, split_host
from .actions import ACTIONS, Outcome
from .answer_link import answer_page
from .answers import malformed_field
from .background import Background
from .bulk import bulk_scope, run_bulk, scope_threads
from .bulk_page import confirm_page, first_values, scope_at_now
from .csrf import Guard, same_origin
from .html import Markup, tag
from .inbox import threads_page
from .inbox_params import list_params
from .layout import Note, document
from .links import Links
from .reading import InboxQuery, inbox_query, read_inbox, read_thread
from .thread_page import thread_page
from .value_page import read_value, value_page

__all__ = ["Console", "app"]

_LOG = logger("ilmek.web")

SECURITY_HEADERS: Final = (
    (
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "same-origin"),
    ("X-Frame-Options", "DENY"),
)
"""Headers on every response."""

_STATUS_TEXT: Final = {
    200: "OK",
    303: "See Other",
    304: "Not Modified",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    410: "Gone",
    413: "Content Too Large",
    422: "Unprocessable Content",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_MAX_BODY: Final = 256 * 1024
_MAX_NOTE: Final = 1500
_STATIC: Final = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}
_RUNNING_REFRESH: Final = 3.0

StartResponse = Callable[..., Any]


@attrs.frozen
class _Response:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()


class _Refused(Exception):
    """A request the console answers with an error page."""

    def __init__(
        self, status: int, title: str, message: str, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message
        self.headers = headers


@attrs.frozen
class _Request:
    environ: Mapping[str, Any]
    method: str
    path: str
    query: Mapping[str, list[str]]
    links: Links

    def arg(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None


def _parse(text: str) -> dict[str, list[str]]:
    try:
        return urllib.parse.parse_qs(text, keep_blank_values=True, errors="replace", max_num_fields=200)
    except ValueError as error:
        raise _Refused(400, "Bad request", f"The query is malformed: {error}") from error


def _wsgi_text(value: str) -> str:
    # WSGI hands over bytes as latin-1 text; a raw (not percent-encoded) UTF-8
    # query is read back as the UTF-8 it was.
    return value.encode("latin-1", "replace").decode("utf-8", "replace")


def _plain(status: int, text: str, headers: tuple[tuple[str, str], ...] = ()) -> _Response:
    """A page of plain text that shows nothing of the store (and needs no layout, links or tokens)."""
    content = (("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-store"))
    return _Response(status, text.encode("utf-8") + b"\n", (*content, *headers))


def _form_lists(environ: Mapping[str, Any]) -> dict[str, list[str]]:
    """A POSTed form's fields, each with every value it was sent."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError as error:
        raise _Refused(400, "Bad request", "The request's length is malformed.") from error
    if length > _MAX_BODY:
        raise _Refused(413, "Too large", "The form is larger than the console accepts.")
    try:
        body = environ["wsgi.input"].read(length) if length > 0 else b""
    except OSError as error:
        # The server's deadline passed (a client sending its form a byte at a time), or it left.
        raise _Refused(
            408, "Request timeout", "The form did not arrive in time; nothing was done."
        ) from error
    content_type = str(environ.get("CONTENT_TYPE") or "").split(";")[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        return {}
    return _parse(body.decode("utf-8", "replace"))


def _form(environ: Mapping[str, Any]) -> dict[str, str]:
    """A POSTed form's fields, each with its first value."""
    return {key: values[0] for key, values in _form_lists(environ).items()}


def _html(markup: Markup, status: int = 200) -> _Response:
    return _Response(
        status,
        # Text was escaped on its way in (a lone surrogate reads \ud800); should any slip
        # through, it is written as that escape here rather than failing the whole page.
        markup.encode("utf-8", "backslashreplace"),
        (("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store")),
    )


def _note(guard: Guard, request: _Request) -> Note | None:
    text, tone = request.arg("note"), request.arg("tone")
    if text is None or tone not in ("ok", "error"):
        return None
    # Only the console's own words: a crafted link cannot make it say "log in at evil.example".
    signed = f"{tone}\0{text}\0{request.arg('cancelling') or ''}"
    if not guard.signed(signed, request.arg("sig")):
        return None
    return Note(tone, text, request.arg("cancelling") or None)


def _user(login: Login | None, environ: Mapping[str, Any]) -> str | None:
    """Who the request says is acting: the host application's ``REMOTE_USER``, or the login's user."""
    user = environ.get("REMOTE_USER")
    if isinstance(user, str) and user.strip():
        return printable(_wsgi_text(user.strip()))[:100]
    if login is not None:
        named = basic_user(environ)
        return printable(named.strip())[:100] if named and named.strip() else None
    return None


_LOGIN_NEEDED: Final = (
    "This console needs its login: open the address with ?token= that `ilmek web` printed when it "
    "started, or sign in with any user name and that token as the password."
)


def _graphs(graphs: CompiledGraph | Mapping[str, CompiledGraph] | None) -> dict[str, CompiledGraph]:
    if graphs is None:
        return {}
    if isinstance(graphs, CompiledGraph):
        return {graphs.name: graphs}
    if isinstance(graphs, Mapping) and all(
        isinstance(name, str) and isinstance(graph, CompiledGraph) for name, graph in graphs.items()
    ):
        return dict(graphs)
    raise InvalidArgumentError(
        "graphs must be a compiled graph, a dict of graph name to compiled graph, or None"
    )


class Console:
    """The web console as a WSGI application; see :func:`app`.

    Besides :func:`app`'s arguments: ``page_size``, the threads a page lists;
    ``login``, a :class:`~ilmek.web.access.Login` every request must carry
    (``ilmek web`` gives one when it listens beyond this machine with its
    actions on); ``refresh_seconds``, how often the inbox reloads itself (a
    running thread's page: every 3 s, or this if shorter; ``0``: never);
    ``background_runs``, how many recoveries and answers the console runs at
    once after their request has returned (:mod:`ilmek.web.background`;
    :meth:`close` stops them at their next superstep boundary).
    """

    def __init__(
        self,
        checkpointer: Checkpointer,
        graphs: CompiledGraph | Mapping[str, CompiledGraph] | None = None,
        *,
        allow_actions: bool = False,
        secret: bytes | str | None = None,
        allowed_hosts: Iterable[str] | None = None,
        trusted_origins: Iterable[str] = (),
        page_size: int = 50,
        login: Login | None = None,
        refresh_seconds: float = 30.0,
        background_runs: int = 2,
        answer_secret: bytes | str | None = None,
    ) -> None:
        if not isinstance(checkpointer, Checkpointer):
            raise InvalidArgumentError(
                f"checkpointer must be an ilmek Checkpointer, got {type(checkpointer).__name__}"
            )
        self.checkpointer = checkpointer
        self.graphs = _graphs(graphs)
        self.allow_actions = bool(allow_actions)
        self.guard = Guard(secret)
        self.allowed_hosts = None if allowed_hosts is None else tuple(allowed_hosts)
        if self.allowed_hosts is not None:
            malformed = [name for name in self.allowed_hosts if split_host(name) is None]
            if malformed:
                raise InvalidArgumentError(f"allowed_hosts holds what is not a host name: {malformed[0]!r}")
        self.login = login
        self.trusted_origins = tuple(trusted_origins)
        self.page_size = page_size
        self.refresh_seconds = refresh_seconds
        self.background = Background(background_runs)
        self.answer_secret = answer_secret or None
        self._static: dict[str, tuple[bytes, str]] = {}
        for name in _STATIC:
            body = importlib.resources.files("ilmek.web").joinpath("static", name).read_bytes()
            self._static[name] = (body, '"' + hashlib.sha256(body).hexdigest()[:20] + '"')

    def close(self) -> None:
        """Stop the console's background runs at their next superstep boundary and wait for them."""
        self.background.close()

    # --- WSGI -----------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """Answer one request."""
        links = Links(_wsgi_text(str(environ.get("SCRIPT_NAME") or "")))
        method = str(environ.get("REQUEST_METHOD") or "GET").upper()
        try:
            response = self._gate(environ, links) or self._respond(environ, method, links)
        except _Refused as refusal:
            response = self._page(links, refusal.status, refusal.title, refusal.message, refusal.headers)
        except Exception as error:
            # Logged whole for the operator; the page names the error, never a traceback.
            _LOG.exception("the web console failed on %s %r", method, environ.get("PATH_INFO"))
            message = mask_secrets(f"{type(error).__name__}: {error}")
            response = self._page(links, 500, "The console failed", message[:_MAX_NOTE])
        headers = [*response.headers, *SECURITY_HEADERS]
        if response.body or response.status == 200:
            headers.append(("Content-Length", str(len(response.body))))
        start_response(f"{response.status} {_STATUS_TEXT.get(response.status, '')}".strip(), headers)
        return [b"" if method == "HEAD" else response.body]

    def answers_from_headers(self, environ: Mapping[str, Any]) -> bool:
        """Whether the console answers this request from its headers alone, reading nothing stored.

        A host name it does not answer to, a request without the login, and
        the login's redirect: a server may answer these without giving them
        one of its places (:meth:`ilmek.web.serve.ConsoleServer.place`).
        """
        links = Links(_wsgi_text(str(environ.get("SCRIPT_NAME") or "")))
        return self._gate(environ, links) is not None

    def _gate(self, environ: Mapping[str, Any], links: Links) -> _Response | None:
        """The plain refusal of a request to a host name not allowed, or without the login; else ``None``."""
        host = str(environ.get("HTTP_HOST") or "")
        if self.allowed_hosts is not None and not host_allowed(host, self.allowed_hosts):
            # A page on another site that a DNS trick pointed here says so in Host: it learns nothing.
            return _plain(400, "This console does not answer to that host name.")
        if self.login is None or self._answering(environ):
            return None  # an answer link's token is its own credential
        authorized = self.login.authorized(environ)
        try:
            query = _parse(_wsgi_text(str(environ.get("QUERY_STRING") or "")))
        except _Refused:
            query = {}
        offered = query.get("token")
        if offered is not None and (authorized or self.login.matches(offered[0])):
            # Logged in: a cookie from now on, and the same page without the token in its URL
            # (nor in the browser's history).
            path = _wsgi_text(str(environ.get("PATH_INFO") or "")) or "/"
            rest = {name: values for name, values in query.items() if name != "token"}
            location = links.page(path, rest)
            return _Response(
                303,
                b"",
                (
                    ("Location", str(location)),
                    ("Set-Cookie", self.login.set_cookie(links.base)),
                    ("Cache-Control", "no-store"),
                ),
            )
        if authorized:
            return None
        return _plain(
            401, _LOGIN_NEEDED, (("WWW-Authenticate", 'Basic realm="ilmek console", charset="UTF-8"'),)
        )

    def _respond(self, environ: Mapping[str, Any], method: str, links: Links) -> _Response:
        path = _wsgi_text(str(environ.get("PATH_INFO") or "")) or "/"
        request = _Request(
            environ=environ,
            method=method,
            path=path,
            query=_parse(_wsgi_text(str(environ.get("QUERY_STRING") or ""))),
            links=links,
        )
        if self._answering(environ):
            return self._answer(request)
        if path.startswith("/action/"):
            name = path.removeprefix("/action/")
            if name not in ACTIONS:
                raise _Refused(404, "Not found", "There is no such action.")
            if method != "POST":
                raise _Refused(
                    405,
                    "Method not allowed",
                    "Actions are POSTed by the console's forms.",
                    (("Allow", "POST"),),
                )
            return self._act(request, name)
        if path == "/bulk":
            return self._bulk(request)
        routes: dict[str, Callable[[_Request], _Response]] = {
            "/": self._threads,
            "/thread": self._thread,
            "/value": self._value,
        }
        handler = routes.get(path)
        if handler is None and path.startswith("/static/") and path.removeprefix("/static/") in self._static:
            handler = functools.partial(_asset, self._static)
        if handler is None:
            raise _Refused(404, "Not found", "The console has no such page.")
        if method not in ("GET", "HEAD"):
            raise _Refused(405, "Method not allowed", "This page is only read.", (("Allow", "GET, HEAD"),))
        # Pages only show stored values: a class this process never registered shows as stored,
        # a tag that cannot be decoded as damaged.
        with serde.showing_unregistered(), serde.showing_damaged():
            return handler(request)

    # --- responses --------------------------------------------------------------------------

    def _page(
        self, links: Links, status: int, title: str, message: str, headers: tuple[tuple[str, str], ...] = ()
    ) -> _Response:
        body = [
            tag("h1", {}, title),
            tag("p", {"class": "note error"}, message),
            tag("p", {}, tag("a", {"href": links.threads()}, "Back to the threads")),
        ]
        response = _html(document(title, links, body, actions_on=self.allow_actions), status)
        return attrs.evolve(response, headers=(*response.headers, *headers))

    # --- pages ------------------------------------------------------------------------------

    def _threads(self, request: _Request) -> _Response:
        problems: list[str] = []
        query = inbox_query(request.query, self.page_size, problems)
        try:
            page = read_inbox(self.checkpointer, query)
        except NotImplementedError:
            page = None
        except InvalidArgumentError as error:
            problems.append(f"{error}; the list below is not filtered")
            # What was typed stays in the form, to correct it.
            page = read_inbox(self.checkpointer, InboxQuery(status=query.status, limit=query.limit))
        markup = threads_page(
            request.links,
            self.guard,
            query,
            page,
            actions_on=self.allow_actions,
            graphs=self.graphs,
            note=_note(self.guard, request),
            problem="; ".join(problems) or None,
            refresh=self.refresh_seconds or None,
        )
        return _html(markup)

    def _thread(self, request: _Request) -> _Response:
        thread_id = request.arg("id")
        if not thread_id:
            raise _Refused(400, "Bad request", "Which thread? The link names none (?id=...).")
        return self._thread_view(
            request, thread_id, request.arg("checkpoint") or None, _note(self.guard, request)
        )

    def _thread_view(
        self,
        request: _Request,
        thread_id: str,
        checkpoint_id: str | None,
        note: Note | None,
        kept: Mapping[str, str] | None = None,
        status: int = 200,
    ) -> _Response:
        """A thread's page (``kept``: a refused answer's form, drawn again to correct it)."""
        try:
            view = read_thread(
                self.checkpointer,
                self.graphs,
                thread_id,
                checkpoint_id,
                tree_before=request.arg("tree") or None,
            )
        except InvalidArgumentError as error:
            raise _Refused(404, "No such thread", str(error)) from error
        except CorruptCheckpointError as error:
            # Damaged (or forged) rows, refused in bounded time: the store's trouble, not the console's.
            raise _Refused(500, "Damaged thread", f"This thread cannot be shown: {error}") from error
        if view is None:
            _missing(self.checkpointer, thread_id, checkpoint_id)
        assert view is not None
        if kept:
            view = attrs.evolve(view, kept=kept)
        if view.problems:
            # What a damaged row hides is said on every view; an action's outcome goes first.
            said = "\n\n".join([*([note.text] if note is not None else []), *view.problems])
            note = Note("error", said, note.cancelling if note is not None else None)
        refresh = min(_RUNNING_REFRESH, self.refresh_seconds) if self.refresh_seconds else None
        markup = thread_page(
            request.links,
            self.guard,
            view,
            actions_on=self.allow_actions,
            note=note,
            cancelling=note.cancelling if note is not None else None,
            refresh=refresh,
        )
        return _html(markup, status)

    def _value(self, request: _Request) -> _Response:
        thread_id, checkpoint_id = request.arg("id"), request.arg("checkpoint")
        if not thread_id or not checkpoint_id:
            raise _Refused(400, "Bad request", "Which value? The link names no thread or checkpoint.")
        try:
            stored = read_value(
                self.checkpointer,
                thread_id,
                checkpoint_id,
                {name: request.arg(name) for name in ("channel", "task", "key")},
            )
        except InvalidArgumentError as error:
            raise _Refused(404, "No such thread", str(error)) from error
        if isinstance(stored, str):
            raise _Refused(404, "No such value", stored)
        return _html(value_page(request.links, stored, actions_on=self.allow_actions))

    # --- actions ----------------------------------------------------------------------------

    def _answering(self, environ: Mapping[str, Any]) -> bool:
        path = _wsgi_text(str(environ.get("PATH_INFO") or ""))
        return self.answer_secret is not None and path.startswith("/answer/")

    def _answer(self, request: _Request) -> _Response:
        """An answer link's page (:mod:`ilmek.web.answer_link`), read (GET) or answered (POST)."""
        assert self.answer_secret is not None
        if request.method not in ("GET", "HEAD", "POST"):
            raise _Refused(
                405, "Method not allowed", "Answer with the page's form.", (("Allow", "GET, POST"),)
            )
        form = None
        if request.method == "POST":
            if not same_origin(request.environ, self.trusted_origins):
                raise _Refused(403, "Forbidden", "The form was sent from another site; nothing was done.")
            form = _form(request.environ)
        token = request.path.removeprefix("/answer/")
        with serde.showing_unregistered():
            page = answer_page(
                self.checkpointer,
                self.graphs,
                self.guard,
                request.links,
                token,
                secret=self.answer_secret,
                form=form,
            )
        return _html(
            document(page.title, request.links, page.body, actions_on=False, standalone=True), page.status
        )

    def _writable(self) -> None:
        """Refuse every action of a read-only console (a 403, nothing written)."""
        if not self.allow_actions:
            raise _Refused(
                403,
                "Read-only",
                "This console is read-only: actions need allow_actions=True (--allow-actions).",
            )

    def _posted(self, request: _Request) -> dict[str, list[str]]:
        """An action's form, once the console is writable and the form came from its own origin."""
        self._writable()
        if not same_origin(request.environ, self.trusted_origins):
            raise _Refused(403, "Forbidden", "The form was sent from another site; nothing was done.")
        return _form_lists(request.environ)

    def _check_token(self, token: str | None, action: str, subject: str) -> None:
        """Refuse a form whose token was not made by this console for ``action`` on ``subject``."""
        if not self.guard.valid(token, action, subject):
            raise _Refused(
                403,
                "Forbidden",
                "The form has expired or did not come from this console; nothing was done. "
                "Reload the page and try again.",
            )

    def _act(self, request: _Request, name: str) -> _Response:
        self._writable()
        thread_id = request.arg("id")
        if not thread_id:
            raise _Refused(400, "Bad request", "The form names no thread.")
        form = {key: values[0] for key, values in self._posted(request).items()}
        self._check_token(form.get("token"), name, thread_id)
        malformed = malformed_field(form)
        if malformed is not None:
            raise _Refused(400, "Bad request", malformed)
        outcome = ACTIONS[name](
            self.checkpointer,
            self.graphs,
            thread_id,
            request.arg("checkpoint"),
            form,
            user=_user(self.login, request.environ),
            background=self.background,
        )
        back = form.get("back") == "inbox"
        if outcome.refused and not back:
            # Nothing was written: the same page again, with what was typed or chosen, and why (422).
            shown = request.arg("checkpoint") or None if name == "fork" else None
            return self._thread_view(request, thread_id, shown, Note("error", outcome.text), form, 422)
        if back and not outcome.gone:
            # The inbox lists many threads: its note says which one was answered.
            outcome = attrs.evolve(outcome, text=f"{thread_id}: {outcome.text}")
        params = _note_params(self.guard, outcome)
        if outcome.gone or back:
            # An answer from an inbox row goes back to the inbox, to the next one.
            location = request.links.threads(params)
        else:
            location = request.links.to("/thread", {"id": thread_id, **params})
        # str(): wsgiref refuses a header value of a str subclass.
        return _Response(303, b"", (("Location", str(location)), ("Cache-Control", "no-store")))

    def _bulk(self, request: _Request) -> _Response:
        """A bulk action: its confirmation page (GET), or the action itself (POST); see :mod:`.bulk`."""
        if request.method not in ("GET", "HEAD", "POST"):
            raise _Refused(
                405, "Method not allowed", "Use the threads page's forms.", (("Allow", "GET, POST"),)
            )
        self._writable()
        posted = self._posted(request) if request.method == "POST" else None
        scope = bulk_scope(posted if posted is not None else request.query, self.page_size)
        if isinstance(scope, str):
            raise _Refused(400, "Bad request", scope)
        if posted is None:
            scope = scope_at_now(scope)
            with serde.showing_unregistered(), serde.showing_damaged():
                infos = scope_threads(self.checkpointer, scope)
            markup = confirm_page(request.links, self.guard, scope, infos, actions_on=self.allow_actions)
            return _html(markup)
        form = first_values(posted)
        self._check_token(form.get("token"), f"bulk-{scope.action}", scope.token_subject())
        outcome = run_bulk(
            self.checkpointer,
            self.graphs,
            scope,
            form,
            user=_user(self.login, request.environ),
            background=self.background,
        )
        params = {**list_params(scope.back, offset=0), **_note_params(self.guard, outcome)}
        return _Response(
            303, b"", (("Location", str(request.links.threads(params))), ("Cache-Control", "no-store"))
        )


def app(
    checkpointer: Checkpointer,
    graphs: CompiledGraph | Mapping[str, CompiledGraph] | None = None,
    allow_actions: bool = False,
    *,
    secret: bytes | str | None = None,
    allowed_hosts: Iterable[str] | None = None,
    trusted_origins: Iterable[str] = (),
    answer_secret: bytes | str | None = None,
) -> Console:
    """The web console as a WSGI application, to serve or to mount in a Flask or Django app.

    Pages list threads (the inbox of pauses waiting for a person first) and
    show each thread: its checkpoint tree, state, differences, journals,
    pauses, failure and graph. With ``allow_actions`` its forms answer
    pauses (``resume_keyed``; a fork from an older pause), cancel a running
    thread, recover a stalled one and delete threads. A resume or recovery
    runs the graph in the console's background pool (two at once), until it
    finishes or pauses again: the request waits for it only half a second
    (:mod:`ilmek.web.background`; ``Console.close()`` stops those runs).

    Mounted in a host application, the console has no login of its own:
    put it behind the host application's authentication. Its forms are
    protected against cross-site requests (see :mod:`ilmek.web.csrf`).

    Args:
        checkpointer: The store to show.
        graphs: A compiled graph, or a dict of graph name to graph: answering
            and recovering need the thread's graph (its checkpoints record its
            name), and only known graphs are drawn.
        allow_actions: Show and accept the forms that change threads.
        secret: The key of the form tokens; random per process when not given
            (give one to every process behind the same address).
        allowed_hosts: Answer only requests whose ``Host`` header names one
            of these: a name (``console.example.com``, ``127.0.0.1``,
            ``[::1]``; any port) or ``name:port`` (that port only); any other
            gets a plain 400. ``None`` (the default) accepts any, for a host
            application that checks ``Host`` itself (Django's
            ``ALLOWED_HOSTS``). ``ilmek web`` always sets it, against DNS
            rebinding (:mod:`ilmek.web.access`).
        trusted_origins: More origins whose forms are accepted
            (``https://admin.example.com``), for a proxy that rewrites ``Host``.
        answer_secret: The secret of :func:`~ilmek.answer_token`: the console
            then serves ``/answer/<token>``, that one pause answerable with
            the token alone (no login), whether or not ``allow_actions``.

    Returns:
        A WSGI callable.

    Raises:
        InvalidArgumentError: ``checkpointer`` or ``graphs`` is of the wrong kind, or
            ``allowed_hosts`` holds what is not a host name.
    """
    return Console(
        checkpointer,
        graphs,
        allow_actions=allow_actions,
        secret=secret,
        allowed_hosts=allowed_hosts,
        trusted_origins=trusted_origins,
        answer_secret=answer_secret,
    )


def _asset(static: Mapping[str, tuple[bytes, str]], request: _Request) -> _Response:
    """A file of the console's own (CSS, script), revalidated by its ETag."""
    name = request.path.removeprefix("/static/")
    body, etag = static[name]
    headers = (("ETag", etag), ("Cache-Control", "no-cache"))
    if request.environ.get("HTTP_IF_NONE_MATCH") == etag:
        return _Response(304, b"", headers)
    return _Response(200, body, (("Content-Type", _STATIC[name]), *headers))


def _missing(checkpointer: Checkpointer, thread_id: str, checkpoint_id: str | None) -> None:
    """Refuse a thread page whose thread, or checkpoint, is not stored (a 404 that says which)."""
    if checkpoint_id and checkpointer.get(thread_id) is not None:
        raise _Refused(
            404,
            "No such checkpoint",
            f"Thread {thread_id!r} has no checkpoint {checkpoint_id!r} (pruned, or from another thread).",
        )
    raise _Refused(404, "No such thread", f"There is no thread {thread_id!r} in this store.")


def _note_params(guard: Guard, outcome: Outcome) -> dict[str, str]:
    """The query that carries an action's note to the page it redirects to, signed by ``guard``."""
    # Escaped before it is signed: a lone surrogate from a stored value cannot be put in a URL.
    text = printable(outcome.text, keep_newlines=True)
    text = text if len(text) <= _MAX_NOTE else text[:_MAX_NOTE] + "…"
    cancelling = outcome.cancelling or ""
    params = {"tone": outcome.tone, "note": text}
    if cancelling:
        params["cancelling"] = cancelling
    params["sig"] = guard.sign(f"{outcome.tone}\0{text}\0{cancelling}")
    return params
