"""The threads page: the inbox of pauses waiting for a person, and every other thread by status."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Sequence

from ..types import utc_now
from . import json_input
from .html import Markup, tag
from .layout import STATUS_LABELS, Note, badge, document, note_box, running_badge, when
from .links import Links
from .reading import STATUSES, InboxPage, InboxQuery, InboxRow
from .values import label, question_of

__all__ = ["threads_page"]

_EMPTY = {
    "interrupted": "No thread is waiting for a person.",
    "error": "No thread has failed.",
    "running": "No run holds a thread right now.",
    "unfinished": "No thread has unfinished work.",
    "done": "No thread has finished.",
    "all": "No threads yet.",
}
_TAB_TITLES = {
    "interrupted": "paused on ctx.interrupt, waiting for an answer",
    "error": "the last run failed",
    "running": "a live run holds the thread now",
    "unfinished": "tasks planned, not waiting for anyone (running, or stalled)",
    "done": "finished",
    "all": "every thread",
}


def _shown(value: object) -> str:
    """A metadata filter value as it would be typed to mean the same (see ``parse_metadata_filter``)."""
    if not isinstance(value, str):
        return json.dumps(value)
    try:
        parsed = json_input.loads(value)
    except ValueError:
        return value
    # Text that reads as a JSON scalar ("3", "true") is quoted to stay text.
    return value if isinstance(parsed, (list, dict)) else json.dumps(value)


def _params(query: InboxQuery, **changes: object) -> dict[str, str | int | Sequence[str] | None]:
    """The query string of the page ``query`` with ``changes``, defaults left out."""
    status = changes.get("status", query.status)
    offset = changes.get("offset", query.offset)
    return {
        "status": None if status == "interrupted" else str(status),
        "q": query.search or None,
        "meta": [f"{key}={_shown(value)}" for key, value in query.metadata.items()] or None,
        "offset": int(str(offset)) or None,
        "limit": None if query.limit == 50 else query.limit,
    }


def _tabs(links: Links, query: InboxQuery) -> Markup:
    items = []
    for status in STATUSES:
        label = "Inbox" if status == "interrupted" else STATUS_LABELS[status].capitalize()
        current = status == query.status
        items.append(
            tag(
                "a",
                {
                    "href": links.threads(_params(query, status=status, offset=0)),
                    "class": "tab current" if current else "tab",
                    "aria-current": "page" if current else None,
                    "title": _TAB_TITLES[status],
                },
                label,
            )
        )
    return tag("nav", {"class": "tabs", "aria-label": "filter by status"}, items)


def _filters(links: Links, query: InboxQuery, problem: str | None) -> Markup:
    # One field per pair: a value may hold any separator one could pick.
    pairs = [f"{key}={_shown(value)}" for key, value in query.metadata.items()] or [""]
    return tag(
        "form",
        {"method": "get", "action": links.threads(), "class": "filters"},
        tag("input", {"type": "hidden", "name": "status", "value": query.status}),
        tag(
            "label",
            {},
            tag("span", {}, "Thread id contains"),
            tag("input", {"type": "search", "name": "q", "value": query.search, "placeholder": "order-42"}),
        ),
        [
            tag(
                "label",
                {},
                tag("span", {}, "Metadata"),
                tag("input", {"type": "text", "name": "meta", "value": pair, "placeholder": "customer=acme"}),
            )
            for pair in pairs
        ],
        tag("button", {"type": "submit"}, "Filter"),
        tag("a", {"href": links.threads(_params(InboxQuery(status=query.status))), "class": "clear"}, "Clear")
        if query.search or query.metadata
        else None,
        tag("p", {"class": "problem"}, problem) if problem else None,
    )


def _detail(row: InboxRow, now: _dt.datetime) -> Markup:
    info = row.info
    if row.pending:
        first = row.pending[0]
        more = f" (+{len(row.pending) - 1} more)" if len(row.pending) > 1 else ""
        return tag(
            "div",
            {"class": "asks"},
            tag("span", {"class": "question"}, question_of(first.payload)),
            tag("span", {"class": "muted"}, f" — {first.node}{more}"),
        )
    if info.error is not None:
        message = info.error.message.strip().split("\n", 1)[0]
        return tag(
            "div",
            {"class": "failure"},
            tag("code", {}, info.error.type),
            ": ",
            message if len(message) <= 140 else message[:140] + "…",
            tag("span", {"class": "muted"}, f" — in {info.error.node}") if info.error.node else None,
        )
    if info.running:
        return tag("div", {"class": "muted"}, "running since ", when(info.held_since, now))
    if info.status == "unfinished":
        return tag("div", {"class": "muted"}, "stalled: tasks planned, no run holds it")
    return tag("div", {"class": "muted"}, "")


def _row(links: Links, row: InboxRow, now: _dt.datetime) -> Markup:
    info = row.info
    chips = [
        tag("span", {"class": "chip"}, f"{key}={label(value, 30)}")
        for key, value in list(info.metadata.items())[:3]
    ]
    return tag(
        "tr",
        {},
        tag(
            "td",
            {"class": "thread"},
            tag(
                "a",
                {"href": links.thread(info.id), "class": "tid"},
                info.id if len(info.id) <= 80 else info.id[:80] + "…",
            ),
            tag("div", {"class": "chips"}, chips) if chips else None,
        ),
        tag(
            "td",
            {"class": "status"},
            badge(info.status),
            " ",
            running_badge(info.held_since) if info.running else None,
        ),
        tag("td", {"class": "detail"}, _detail(row, now)),
        tag("td", {"class": "num"}, str(info.step)),
        tag("td", {"class": "when"}, when(info.updated_at, now)),
    )


def _pager(links: Links, query: InboxQuery, page: InboxPage) -> Markup:
    first = query.offset + 1 if page.rows else query.offset
    last = query.offset + len(page.rows)
    newer = (
        tag(
            "a",
            {"href": links.threads(_params(query, offset=max(query.offset - query.limit, 0))), "rel": "prev"},
            "← Newer",
        )
        if query.offset > 0
        else tag("span", {"class": "disabled"}, "← Newer")
    )
    older = (
        tag(
            "a",
            {"href": links.threads(_params(query, offset=query.offset + query.limit)), "rel": "next"},
            "Older →",
        )
        if page.more
        else tag("span", {"class": "disabled"}, "Older →")
    )
    return tag("nav", {"class": "pager"}, newer, tag("span", {"class": "range"}, f"{first} to {last}"), older)


def threads_page(
    links: Links,
    query: InboxQuery,
    page: InboxPage | None,
    *,
    actions_on: bool,
    note: Note | None = None,
    problem: str | None = None,
) -> Markup:
    """The threads page for ``query``; ``page`` is ``None`` when the store cannot list threads."""
    now = utc_now()
    heading = "Inbox" if query.status == "interrupted" else f"Threads: {STATUS_LABELS[query.status]}"
    intro = (
        "Threads paused on a question, waiting for a person's answer; most recently updated first."
        if query.status == "interrupted"
        else _TAB_TITLES[query.status].capitalize() + "; most recently updated first."
    )
    if page is None:
        listing = tag("p", {"class": "empty"}, "This checkpointer cannot list threads.")
    elif not page.rows:
        listing = tag(
            "p", {"class": "empty"}, _EMPTY[query.status] if query.offset == 0 else "No more threads."
        )
    else:
        listing = tag(
            "table",
            {"class": "threads"},
            tag(
                "thead",
                {},
                tag(
                    "tr",
                    {},
                    tag("th", {}, "Thread"),
                    tag("th", {}, "Status"),
                    tag("th", {}, "Waiting for / failure"),
                    tag("th", {"class": "num"}, "Step"),
                    tag("th", {}, "Updated"),
                ),
            ),
            tag("tbody", {}, [_row(links, row, now) for row in page.rows]),
        )
    body = [
        tag("h1", {}, heading),
        tag("p", {"class": "lede"}, intro),
        note_box(note),
        _tabs(links, query),
        _filters(links, query, problem),
        listing,
        _pager(links, query, page) if page is not None and (page.rows or query.offset) else None,
    ]
    return document(heading, links, body, actions_on=actions_on)
