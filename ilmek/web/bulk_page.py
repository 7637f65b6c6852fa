"""The bulk actions on the page: the threads list's forms, and the page that confirms one.

The threads list (with actions on) has a box to tick on each row and two
small forms above it: one for the ticked threads, one for every thread of
the list as filtered. Either leads to :func:`confirm_page`, which says how
many threads the action touches and how many it leaves alone (a recover
touches only failed or stalled threads no run holds, a cancel only running
ones, a delete none a run holds), names them, and posts the action
(:mod:`ilmek.web.bulk`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Final

import attrs

from ..types import ThreadInfo
from .bulk import BULK_LIMIT, LEFT_ALONE, VERBS, BulkScope, applies
from .csrf import Guard
from .html import Markup, tag
from .inbox_params import list_params
from .layout import badge, document
from .links import Links
from .reading import InboxQuery

__all__ = ["bulk_bar", "confirm_page", "tick_box"]

_NAMED: Final = 30
_EVERY_ACTIONS: Final = {
    "error": ("recover", "delete"),
    "unfinished": ("recover", "delete"),
    "running": ("cancel",),
    "interrupted": ("delete",),
    "done": ("delete",),
    "all": ("recover", "cancel", "delete"),
}
_CSS: Final = {"recover": "primary", "cancel": "warn", "delete": "danger"}
_WHAT: Final = {
    "recover": "Each failed or stalled thread continues from its last checkpoint, replaying its recorded "
    "steps, one after another in the console's process.",
    "cancel": "The run holding each thread is asked to stop at its next superstep boundary; it ends aborted.",
    "delete": "Each thread is deleted with every checkpoint and journal it has. This cannot be undone.",
}


def tick_box(thread_id: str) -> Markup:
    """A row's box, ticked to include the thread in the bulk form's action."""
    shown = thread_id if len(thread_id) <= 60 else thread_id[:60] + "…"
    return tag(
        "input",
        {
            "type": "checkbox",
            "name": "thread",
            "value": thread_id,
            "form": "bulk",
            "aria-label": f"Tick {shown}",
        },
    )


def _buttons(actions: Sequence[str]) -> list[Markup]:
    return [
        tag(
            "button",
            {"type": "submit", "name": "action", "value": action, "class": _CSS[action]},
            VERBS[action],
        )
        for action in actions
    ]


def bulk_bar(links: Links, query: InboxQuery, listed: int, total: int | None) -> Markup:
    """The two bulk forms above the threads list: the ticked threads, and every thread of the list.

    ``listed``: the rows shown; ``total``: how many threads the list holds
    (its tab's count, or the filter's match), when known.
    """
    ticked = tag(
        "form",
        {"method": "get", "action": links.to("/bulk"), "id": "bulk", "class": "bulk"},
        _list_fields(query),
        tag("span", {"class": "bulk-label"}, "Ticked threads:"),
        _buttons(list(VERBS)),
    )
    every = None
    if not query.graph and listed:
        count = f" ({total:,})" if total is not None else ""
        every = tag(
            "form",
            {"method": "get", "action": links.to("/bulk"), "class": "bulk every"},
            tag("input", {"type": "hidden", "name": "every", "value": "1"}),
            _list_fields(query),
            tag("span", {"class": "bulk-label"}, f"Every thread of this list{count}:"),
            _buttons(_EVERY_ACTIONS[query.status]),
        )
    return tag("div", {"class": "bulk-bar", "role": "group", "aria-label": "bulk actions"}, ticked, every)


def _list_fields(query: InboxQuery) -> list[Markup]:
    """The hidden fields that name a threads list (its status and filters), as the threads page reads them."""
    params = list_params(query, offset=0)
    fields = [tag("input", {"type": "hidden", "name": "status", "value": query.status})]
    for name in ("q", "meta", "graph", "updated"):
        value = params.get(name)
        items = [] if value is None else [value] if isinstance(value, (str, int)) else list(value)
        fields += [tag("input", {"type": "hidden", "name": name, "value": str(item)}) for item in items]
    return fields


def _scope_fields(scope: BulkScope) -> list[Markup]:
    """The hidden fields that carry the scope to the POST, as the token was made for it."""
    fields = [
        tag("input", {"type": "hidden", "name": "action", "value": scope.action}),
        *_list_fields(scope.back),
    ]
    if scope.query is None:
        fields += [
            tag("input", {"type": "hidden", "name": "thread", "value": thread}) for thread in scope.ticked
        ]
        return fields
    fields += [
        tag("input", {"type": "hidden", "name": "every", "value": "1"}),
        tag("input", {"type": "hidden", "name": "at", "value": repr(scope.at)}),
    ]
    return fields


def _count(count: int) -> str:
    return "1 thread" if count == 1 else f"{count:,} threads"


def _said(scope: BulkScope, infos: Sequence[ThreadInfo]) -> str:
    """What the scope names: every thread of a list (capped), or the ticked ones (some maybe gone)."""
    stored = len(infos[:BULK_LIMIT])
    if scope.every:
        capped = len(infos) > BULK_LIMIT
        rest = f" (the {BULK_LIMIT:,} most recently updated; confirm again for the rest)" if capped else ""
        return f"Every thread of the list matches: {_count(stored)}{rest}."
    gone = len(scope.ticked) - stored
    return f"You ticked {_count(len(scope.ticked))}" + (
        f"; {_count(gone)} of them no longer stored." if gone else "."
    )


def _named(links: Links, action: str, infos: Sequence[ThreadInfo]) -> list[Markup]:
    """The first threads the scope names, each with its status and whether the action leaves it alone."""
    return [
        tag(
            "li",
            {},
            tag(
                "a",
                {"href": links.thread(info.id), "class": "tid"},
                info.id if len(info.id) <= 80 else info.id[:80] + "…",
            ),
            " ",
            badge(info.status),
            tag("span", {"class": "muted"}, " — left alone") if not applies(action, info) else None,
        )
        for info in infos[:_NAMED]
    ]


def _confirm_form(links: Links, guard: Guard, scope: BulkScope, applying: int) -> Markup:
    """The form that does the action: its token made for exactly this scope."""
    action = scope.action
    back = links.threads(list_params(scope.back, offset=0))
    token = guard.token(f"bulk-{action}", scope.token_subject())
    return tag(
        "form",
        {"method": "post", "action": links.to("/bulk"), "class": "action bulk-confirm"},
        tag("input", {"type": "hidden", "name": "token", "value": token}),
        _scope_fields(scope),
        tag(
            "label",
            {"class": "reason-field"},
            tag("span", {"class": "label"}, "Reason (optional)"),
            tag("input", {"type": "text", "name": "reason", "maxlength": 200}),
        )
        if action == "cancel"
        else None,
        tag(
            "button",
            {"type": "submit", "class": _CSS[action], "disabled": not applying},
            f"{VERBS[action]} {_count(applying)}",
        ),
        " ",
        tag("a", {"href": back}, "Back to the list"),
    )


def confirm_page(
    links: Links, guard: Guard, scope: BulkScope, infos: Sequence[ThreadInfo], *, actions_on: bool
) -> Markup:
    """The page that confirms a bulk action: how many threads, which, and the button that does it.

    ``infos``: the threads the scope names now (for a filter, at most
    :data:`~ilmek.web.bulk.BULK_LIMIT` + 1). ``scope.at`` is the moment the page is drawn.
    """
    action = scope.action
    capped = infos[:BULK_LIMIT]
    applying = sum(1 for info in capped if applies(action, info))
    left = len(capped) - applying
    title = f"{VERBS[action]} {_count(applying)}?"
    more = len(capped) - _NAMED
    body = [
        tag("h1", {}, title),
        tag("p", {"class": "lede"}, _said(scope, infos)),
        tag("p", {"class": "total", "role": "status"}, _WHAT[action]),
        tag("p", {"class": "note error"}, f"{_count(left)} will be left alone: {LEFT_ALONE[action]}.")
        if left
        else None,
        # The button before the names: a list of 30 must not push it below the fold.
        _confirm_form(links, guard, scope, applying),
        tag("ul", {"class": "bulk-threads", "aria-label": "the threads"}, _named(links, action, capped)),
        tag("p", {"class": "muted"}, f"and {more:,} more.") if more > 0 else None,
    ]
    return document(title, links, body, actions_on=actions_on)


def scope_at_now(scope: BulkScope) -> BulkScope:
    """A filter's scope fixed at this moment (a confirmation page is drawn now)."""
    return attrs.evolve(scope, at=time.time()) if scope.every else scope


def first_values(args: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Each field's first value."""
    return {name: values[0] for name, values in args.items() if values}
