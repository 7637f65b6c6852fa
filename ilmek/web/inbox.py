"""The threads page: the inbox of pauses waiting for a person, and every other thread by status.

A paused thread whose question offers a few options (a yes/no pair reads
*Approve* / *Reject*) is answered from its row, when the console has its
graph and its actions on; the answer goes to the pause the row showed (its
latest checkpoint) and the browser comes back to the inbox.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence

from ..graph import CompiledGraph
from ..namespaces import join_path
from ..operations import why_stalled
from ..types import utc_now
from .bulk_page import bulk_bar, tick_box
from .csrf import Guard
from .html import Markup, escape, join, tag
from .inbox_params import list_params, shown_metadata
from .layout import STATUS_LABELS, Note, action_form, badge, document, note_box, running_badge, when
from .links import Links
from .pause_forms import inbox_buttons
from .reading import MATCH_COUNT, STATUSES, UPDATED, InboxPage, InboxQuery, InboxRow, filtered
from .timing import pause_timing
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
_MATCHING = {
    "interrupted": "No waiting thread matches this filter.",
    "error": "No failed thread matches this filter.",
    "running": "No running thread matches this filter.",
    "unfinished": "No unfinished thread matches this filter.",
    "done": "No finished thread matches this filter.",
    "all": "No thread matches this filter.",
}
_TAB_TITLES = {
    "interrupted": "paused on ctx.interrupt, waiting for an answer",
    "error": "the last run failed",
    "running": "a live run holds the thread now",
    "unfinished": "tasks planned, not waiting for anyone (running, or stalled)",
    "done": "finished",
    "all": "every thread",
}


def _tabs(links: Links, query: InboxQuery, counts: Mapping[str, int] | None) -> Markup:
    items = []
    for status in STATUSES:
        label_text = "Inbox" if status == "interrupted" else STATUS_LABELS[status].capitalize()
        current = status == query.status
        count = counts.get(status) if counts is not None else None
        items.append(
            tag(
                "a",
                {
                    "href": links.threads(list_params(query, status=status, offset=0)),
                    "class": "tab current" if current else "tab",
                    "aria-current": "page" if current else None,
                    "title": _TAB_TITLES[status],
                },
                label_text,
                tag("span", {"class": "count"}, f"{count:,}") if count is not None else None,
            )
        )
    return tag("nav", {"class": "tabs", "aria-label": "threads by status"}, items)


def _select(name: str, caption: str, choices: Sequence[tuple[str, str]], chosen: str) -> Markup:
    return tag(
        "label",
        {},
        tag("span", {}, caption),
        tag(
            "select",
            {"name": name},
            [tag("option", {"value": value, "selected": value == chosen}, text) for value, text in choices],
        ),
    )


def _filters(
    links: Links, query: InboxQuery, problem: str | None, graphs: Mapping[str, CompiledGraph]
) -> Markup:
    # One field per pair: a value may hold any separator one could pick. What was typed stays.
    pairs = (
        list(query.typed)
        or [f"{key}={shown_metadata(value)}" for key, value in query.metadata.items()]
        or [""]
    )
    graph_names = sorted({*graphs, *([query.graph] if query.graph else [])})
    filtered = query.search or query.metadata or query.typed or query.graph or query.updated
    return tag(
        "form",
        {"method": "get", "action": links.threads(), "class": "filters", "role": "search"},
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
        _select("graph", "Graph", [("", "any graph"), *((name, name) for name in graph_names)], query.graph)
        if graph_names
        else None,
        _select(
            "updated", "Updated", [(value, text) for value, (text, _, _) in UPDATED.items()], query.updated
        ),
        tag("button", {"type": "submit"}, "Filter"),
        tag(
            "a",
            {"href": links.threads(list_params(InboxQuery(status=query.status))), "class": "clear"},
            "Clear",
        )
        if filtered
        else None,
        tag("p", {"class": "problem", "role": "alert"}, problem) if problem else None,
    )


def _detail(row: InboxRow, now: _dt.datetime) -> Markup:
    info = row.info
    if row.pending and all(p.kind == "timer" for p in row.pending):
        # A durable timer: nobody is asked anything; tick wakes it.
        due = min((p.deadline for p in row.pending if p.deadline is not None), default=None)
        return tag("div", {"class": "muted"}, "sleeping (ctx.sleep): wakes ", when(due, now, absolute=True))
    if row.pending:
        first = row.pending[0]
        more = f" (+{len(row.pending) - 1} more)" if len(row.pending) > 1 else ""
        timed = [p for p in row.pending if p.deadline is not None]
        timing = pause_timing(min(timed, key=lambda p: p.deadline or now), now) if timed else None
        return tag(
            "div",
            {"class": "asks"},
            # A question's own line breaks are its lines, not a literal \n.
            tag("span", {"class": "question"}, escape(question_of(first.payload), keep_newlines=True)),
            tag("span", {"class": "muted"}, f" — {first.node}{_inside(first.ns)}{more}"),
            tag("div", {"class": "timing"}, timing) if timing is not None else None,
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
        return tag(
            "div",
            {"class": "muted"},
            "running since ",
            when(info.held_since, now),
            f" — {info.held_by}" if info.held_by else None,
        )
    if info.cancelled is not None:
        return tag("div", {"class": "cancelled"}, f"cancelled: {label(info.cancelled.reason, 140)}")
    if info.status == "unfinished":
        return tag("div", {"class": "muted"}, f"stalled: {why_stalled(info) or 'tasks planned'}")
    if info.status == "done":
        last = f": {', '.join(row.ran)} ran last" if row.ran else ""
        return tag("div", {"class": "outcome"}, f"finished{last} (step {info.step})")
    return tag("div", {"class": "muted"}, "")


def _inside(ns: tuple[str, ...]) -> str:
    """Where a subgraph's pause is, after its node: `` (in outer:outer/review:review)``; else nothing."""
    return f" (in {join_path(ns)})" if ns else ""


def _answer_cell(links: Links, guard: Guard, row: InboxRow, graphs: Mapping[str, CompiledGraph]) -> Markup:
    """One click answers: the buttons of the row's pause, or a link to its page."""
    info = row.info
    open_link = tag(
        "a", {"href": links.thread(info.id, fragment="pauses"), "class": "open"}, "Open to answer"
    )
    if row.pending[0].kind == "timer":
        return tag("span", {"class": "muted"}, "a timer: nothing to answer")
    if len(row.pending) != 1 or info.checkpoint_id is None or row.graph not in graphs:
        return open_link
    buttons = inbox_buttons(row.pending[0])
    if buttons is None:
        return open_link
    return action_form(
        links,
        guard,
        "answer",
        info.id,
        # The pause the row showed: if the thread moves on meanwhile, nothing is answered.
        info.checkpoint_id,
        tag("input", {"type": "hidden", "name": "back", "value": "inbox"}),
        [
            tag(
                "button",
                {
                    "type": "submit",
                    "name": field,
                    "value": value,
                    "class": css,
                    "aria-label": f"{text}: {info.id if len(info.id) <= 60 else info.id[:60] + '…'}",
                },
                text,
            )
            for field, value, text, css in buttons
        ],
        css="row-answer",
    )


def _row(
    links: Links,
    guard: Guard,
    row: InboxRow,
    now: _dt.datetime,
    answering: Mapping[str, CompiledGraph] | None,
    ticking: bool,
) -> Markup:
    info = row.info
    chips = [
        tag("span", {"class": "chip"}, f"{key}={label(value, 30)}")
        for key, value in list(info.metadata.items())[:3]
    ]
    return tag(
        "tr",
        {},
        tag("td", {"class": "tick"}, tick_box(info.id)) if ticking else None,
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
        tag("td", {"class": "answer"}, _answer_cell(links, guard, row, answering) if row.pending else None)
        if answering is not None
        else None,
        tag("td", {"class": "num"}, str(info.step)),
        tag("td", {"class": "when"}, when(info.updated_at, now)),
    )


def _pager(links: Links, page: InboxPage, inbox: InboxQuery) -> Markup:
    if inbox.graph:
        # Filtered by graph, a page is what a scan of the threads found: its offsets are the scan's.
        newer = (
            tag("a", {"href": links.threads(list_params(inbox, offset=0)), "rel": "prev"}, "← Newest")
            if inbox.offset > 0
            else tag("span", {"class": "disabled"}, "← Newest")
        )
        span = f"looked through threads {inbox.offset + 1:,} to {inbox.offset + page.scanned:,}"
    else:
        first = inbox.offset + 1 if page.rows else inbox.offset
        newer = (
            tag(
                "a",
                {
                    "href": links.threads(list_params(inbox, offset=max(inbox.offset - inbox.limit, 0))),
                    "rel": "prev",
                },
                "← Newer",
            )
            if inbox.offset > 0
            else tag("span", {"class": "disabled"}, "← Newer")
        )
        span = f"{first} to {inbox.offset + len(page.rows)}"
    older = (
        tag(
            "a",
            {"href": links.threads(list_params(inbox, offset=page.next_offset)), "rel": "next"},
            "Older →",
        )
        if page.more
        else tag("span", {"class": "disabled"}, "Older →")
    )
    return tag(
        "nav", {"class": "pager", "aria-label": "pages"}, newer, tag("span", {"class": "range"}, span), older
    )


def _listing(
    links: Links,
    guard: Guard,
    query: InboxQuery,
    page: InboxPage | None,
    answering: Mapping[str, CompiledGraph] | None,
    ticking: bool,
) -> Markup:
    if page is None:
        return tag("p", {"class": "empty"}, "This checkpointer cannot list threads.")
    if not page.rows:
        narrowed = filtered(query) or bool(query.graph)
        empty = _EMPTY[query.status] if query.offset == 0 else "No more threads."
        if query.graph and page.more:
            empty = (
                f"No thread of graph {query.graph!r} among the {page.scanned:,} looked through; try Older."
            )
        elif narrowed and query.offset == 0:
            # The tab's own count may not be zero: the filter is why nothing shows.
            return tag(
                "p",
                {"class": "empty"},
                _MATCHING[query.status],
                " ",
                tag(
                    "a",
                    {"href": links.threads(list_params(InboxQuery(status=query.status)))},
                    "Clear the filter",
                ),
            )
        return tag("p", {"class": "empty"}, empty)
    now = utc_now()
    heads = [
        *(((tag("span", {"class": "sr-only"}, "Tick"), "tick"),) if ticking else ()),
        ("Thread", None),
        ("Status", None),
        ("Waiting for / failure", None),
        *((("Answer", None),) if answering is not None else ()),
        ("Step", "num"),
        ("Updated", None),
    ]
    return tag(
        "table",
        {"class": "threads"},
        tag(
            "thead",
            {},
            tag("tr", {}, [tag("th", {"class": css, "scope": "col"}, name) for name, css in heads]),
        ),
        tag("tbody", {}, [_row(links, guard, row, now, answering, ticking) for row in page.rows]),
    )


def _list_total(query: InboxQuery, page: InboxPage) -> int | None:
    """How many threads the list holds: the filter's match, else its tab's count (``None``: unknown)."""
    if filtered(query):
        return page.matched if page.matched is not None and page.matched <= MATCH_COUNT else None
    return page.counts.get(query.status) if page.counts is not None else None


def threads_page(
    links: Links,
    guard: Guard,
    query: InboxQuery,
    page: InboxPage | None,
    *,
    actions_on: bool,
    graphs: Mapping[str, CompiledGraph] | None = None,
    note: Note | None = None,
    problem: str | None = None,
    refresh: float | None = None,
) -> Markup:
    """The threads page for ``query``; ``page`` is ``None`` when the store cannot list threads.

    ``graphs``: the console's graphs (answering from a row needs the
    thread's); ``refresh``: seconds after which the page reloads itself.
    """
    heading = "Inbox" if query.status == "interrupted" else f"Threads: {STATUS_LABELS[query.status]}"
    intro = (
        "Threads paused on a question, waiting for a person's answer; most recently updated first."
        if query.status == "interrupted"
        else _TAB_TITLES[query.status].capitalize() + "; most recently updated first."
    )
    counts = page.counts if page is not None else None
    total = (
        tag(
            "p",
            {"class": "total"},
            f"{counts['all']:,} threads in this store; {counts['interrupted']:,} waiting.",
        )
        if counts is not None
        else None
    )
    matched = page.matched if page is not None else None
    if matched is not None:
        total = join(
            total,
            tag(
                "p",
                {"class": "total matched", "role": "status"},
                f"More than {MATCH_COUNT:,} threads match the filter."
                if matched > MATCH_COUNT
                else "1 thread matches the filter."
                if matched == 1
                else f"{matched:,} threads match the filter.",
            ),
        )
    answering = dict(graphs or {}) if actions_on and query.status in ("interrupted", "all") else None
    body = [
        tag("h1", {}, heading),
        tag("p", {"class": "lede"}, intro),
        total,
        note_box(note),
        _tabs(links, query, counts),
        _filters(links, query, problem, graphs or {}),
        bulk_bar(links, query, len(page.rows), _list_total(query, page))
        if actions_on and page is not None and page.rows
        else None,
        _listing(links, guard, query, page, answering, actions_on),
        _pager(links, page, query) if page is not None and (page.rows or query.offset) else None,
        tag(
            "p",
            {"class": "hint refresh"},
            f"This page refreshes itself every {refresh:g} s (with JavaScript on).",
        )
        if refresh
        else None,
    ]
    return document(heading, links, body, actions_on=actions_on, refresh=refresh)
