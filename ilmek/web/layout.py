"""The parts every page shares: the document around it, badges, times, values, notes, forms.

Everything returns :class:`~ilmek.web.html.Markup` built with
:func:`~ilmek.web.html.tag`, so stored text is escaped on the way in.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any, Final

import attrs

from ..types import utc_now
from .csrf import Guard
from .html import Child, Markup, Url, escape, join, tag
from .links import Links
from .values import LIMIT, render

__all__ = [
    "STATUS_LABELS",
    "Note",
    "action_form",
    "badge",
    "document",
    "facts",
    "note_box",
    "running_badge",
    "value_block",
    "when",
]

STATUS_LABELS: Final = {
    "interrupted": "waiting",
    "error": "failed",
    "running": "running",
    "unfinished": "unfinished",
    "done": "done",
    "all": "all",
}
"""How a thread status reads on a badge or a tab."""

# A value longer than this folds away behind its first line.
_FOLD_LINES: Final = 12
_FOLD_CHARS: Final = 800


# Two linked loops ("ilmek" is Turkish for a loop, a knot).
_LOGO: Final = tag(
    "svg",
    {
        "class": "logo",
        "xmlns": "http://www.w3.org/2000/svg",
        "viewBox": "0 0 28 18",
        "width": 28,
        "height": 18,
    },
    tag("circle", {"cx": 9, "cy": 9, "r": 6.5}),
    tag("circle", {"cx": 19, "cy": 9, "r": 6.5}),
)


@attrs.frozen
class Note:
    """A message at the top of a page: ``tone`` is ``ok`` or ``error``.

    ``cancelling``: the run a cancel was just asked of (its ``held_since``), if any.
    """

    tone: str
    text: str
    cancelling: str | None = None


def _header(links: Links, actions_on: bool) -> Markup:
    mode = (
        tag("span", {"class": "mode on", "title": "answering, cancelling and deleting are on"}, "actions on")
        if actions_on
        else tag("span", {"class": "mode", "title": "started without allow_actions"}, "read-only")
    )
    return tag(
        "div",
        {"class": "bar"},
        tag("a", {"class": "brand", "href": links.threads()}, _LOGO, "ilmek"),
        tag("nav", {}, tag("a", {"href": links.threads()}, "Threads")),
        mode,
    )


def document(
    title: str,
    links: Links,
    body: Child,
    *,
    actions_on: bool,
    refresh: float | None = None,
    standalone: bool = False,
) -> Markup:
    """A whole page: head, the console's header, then ``body``.

    ``refresh``: seconds after which the page reloads itself, through the
    console's small script (``console.js``), which waits while a field is
    being filled in. Without JavaScript the page simply stays as it is.
    ``standalone``: a page reached by its own credential (an answer link's
    token), which opens no other: its header names ilmek and links nowhere.
    """
    bar = (
        tag("div", {"class": "bar"}, tag("span", {"class": "brand"}, _LOGO, "ilmek"))
        if standalone
        else _header(links, actions_on)
    )
    header = tag("header", {"class": "top"}, bar)
    return Markup(
        "<!DOCTYPE html>\n"
        + tag(
            "html",
            {"lang": "en"},
            tag(
                "head",
                {},
                tag("meta", {"charset": "utf-8"}),
                tag("meta", {"name": "viewport", "content": "width=device-width, initial-scale=1"}),
                tag("meta", {"name": "color-scheme", "content": "light dark"}),
                tag("title", {}, f"{title} · ilmek"),
                tag("link", {"rel": "stylesheet", "href": links.static("console.css")}),
                # On every page: its keys (j/k, o, a, ?), the one-time note; reloading where asked.
                tag("script", {"src": links.static("console.js"), "defer": True}),
            ),
            tag(
                "body",
                {"data-refresh": f"{refresh:g}" if refresh else None},
                tag("a", {"class": "skip", "href": Url("#main")}, "Skip to the content"),
                header,
                tag("main", {"id": "main"}, body),
            ),
        )
    )


def badge(status: str) -> Markup:
    """A thread or checkpoint status as a coloured label."""
    return tag("span", {"class": f"badge s-{status}"}, STATUS_LABELS.get(status, status))


def running_badge(held_since: _dt.datetime | None) -> Markup:
    """The label of a thread a live run holds now."""
    title = f"held since {held_since:%Y-%m-%d %H:%M:%S} UTC" if held_since is not None else None
    return tag("span", {"class": "badge s-running", "title": title}, "● running")


def _ago(moment: _dt.datetime, now: _dt.datetime) -> str:
    seconds = int((now - moment).total_seconds())
    if seconds < 0:
        return "just now"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def when(moment: _dt.datetime | None, now: _dt.datetime | None = None, *, absolute: bool = False) -> Markup:
    """A moment as "5 min ago", the exact UTC time on hover; ``absolute`` also writes the date and time."""
    if moment is None:
        return escape("-")
    now = now or utc_now()
    moment = moment.astimezone(_dt.UTC)
    exact = f"{moment:%Y-%m-%d %H:%M:%S} UTC"
    shown = f"{moment:%Y-%m-%d %H:%M:%S} ({_ago(moment, now)})" if absolute else _ago(moment, now)
    return tag("time", {"datetime": moment.isoformat(), "title": exact}, shown)


def facts(pairs: Sequence[tuple[str, Child]]) -> Markup:
    """Name and value pairs as a definition list; a pair whose value is ``None`` is left out."""
    return tag(
        "dl",
        {"class": "facts"},
        [
            tag("div", {}, tag("dt", {}, name), tag("dd", {}, value))
            for name, value in pairs
            if value is not None
        ],
    )


def value_block(
    value: Any, *, css: str = "value", whole: Url | None = None, limit: int = LIMIT, fold: bool = True
) -> Markup:
    """A stored value for reading; a long one is folded behind its first line (a ``<details>``).

    A text of several lines is shown as text (its lines, not ``\\n``);
    anything else as JSON-like text. A value cut at ``limit`` characters
    links to ``whole``, the page that shows it all, when given.
    """
    if isinstance(value, str) and "\n" in value:
        # A text's own line breaks are its lines: shown as text, not as an escaped JSON string.
        shown_text = value if len(value) <= limit else value[:limit] + " …"
        lines, cut, element, classes = value.count("\n") + 1, len(value) > limit, "div", f"{css} text"
    else:
        rendered = render(value, limit=limit)
        shown_text, lines, cut, element, classes = (
            rendered.text,
            rendered.lines,
            rendered.truncated,
            "pre",
            css,
        )
    more = (
        tag(
            "p",
            {"class": "cut"},
            f"Cut at {limit:,} characters. ",
            tag("a", {"href": whole}, "Show the whole value"),
        )
        if cut and whole is not None
        else None
    )
    folded = fold and (lines > _FOLD_LINES or len(shown_text) > _FOLD_CHARS)
    # A folded value is long enough to scroll in its box: focusable, so a keyboard can scroll it too.
    block = tag(
        element,
        {"class": classes, "tabindex": "0" if folded else None},
        escape(shown_text, keep_newlines=True),
    )
    if not folded:
        return join(block, more)
    first = shown_text.split("\n", 1)[0]
    summary = first if len(first) <= 90 else first[:90] + "…"
    size = f"{lines} lines" + (", cut short" if cut else "")
    return join(
        tag(
            "details",
            {"class": "fold"},
            tag("summary", {}, tag("code", {}, summary), tag("span", {"class": "muted"}, f" ({size})")),
            block,
        ),
        # Outside the fold: the way to the rest is seen without opening it.
        more,
    )


def note_box(note: Note | None) -> Markup:
    """The note a redirect carried, if any."""
    if note is None:
        return Markup("")
    return tag("div", {"class": f"note {note.tone}", "role": "status"}, escape(note.text, keep_newlines=True))


def action_form(
    links: Links,
    guard: Guard,
    action: str,
    thread_id: str,
    checkpoint_id: str | None,
    *children: Child,
    css: str = "inline",
) -> Markup:
    """A POST form for ``action`` on a thread, carrying its CSRF token."""
    return tag(
        "form",
        {
            "method": "post",
            "action": links.action(action, thread_id, checkpoint_id),
            "class": f"action {css}",
        },
        tag("input", {"type": "hidden", "name": "token", "value": guard.token(action, thread_id)}),
        join(*children),
    )
