"""Building HTML safely: the one place where text becomes markup.

Every piece of text goes through :func:`escape` on its way into a page:
control and invisible characters are shown as escapes
(:func:`ilmek.redact.printable`), then ``& < > " '`` become entities, in
text and in attribute values alike. Only :class:`Markup` (what this module
built) passes unchanged, and a link attribute takes only a :class:`Url`
(what :mod:`ilmek.web.links` built), so a stored ``javascript:`` URL can
never become a link.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from typing import Final, TypeAlias

from ..redact import printable

__all__ = ["Child", "Markup", "Url", "escape", "join", "tag"]


class Markup(str):
    """Text that is already HTML. Made only by this module, never from stored text."""

    __slots__ = ()


class Url(str):
    """A URL the console built itself (from ``SCRIPT_NAME`` and percent-encoded parts)."""

    __slots__ = ()


Child: TypeAlias = "str | Markup | Iterable[Child] | None"
"""What an element may contain: text (escaped), markup, nothing, or several of those."""

_VOID: Final = frozenset({"br", "hr", "img", "input", "link", "meta"})
_NAME: Final = re.compile(r"[a-z][a-z0-9-]*(?::[a-z]+)?\Z", re.IGNORECASE)
# Attributes whose value is followed as a link: only URLs the console built.
_LINKS: Final = frozenset({"href", "action", "src", "formaction", "xlink:href"})


def escape(text: object, *, keep_newlines: bool = False) -> Markup:
    """``text`` as HTML: unsafe characters shown as escapes, markup characters as entities.

    Args:
        text: Anything; it is turned into ``str`` first. :class:`Markup` is returned as it is.
        keep_newlines: Keep line breaks (for a block laid out line by line
            by the console, whose stored parts were escaped already).
    """
    if isinstance(text, Markup):
        return text
    return Markup(html.escape(printable(str(text), keep_newlines=keep_newlines), quote=True))


def _flatten(children: Iterable[Child], out: list[str]) -> None:
    for child in children:
        if child is None:
            continue
        if isinstance(child, str):
            out.append(escape(child))
        else:
            _flatten(child, out)


def join(*children: Child) -> Markup:
    """Several children as one piece of markup (text escaped)."""
    out: list[str] = []
    _flatten(children, out)
    return Markup("".join(out))


def tag(name: str, attributes: Mapping[str, object] | None = None, *children: Child) -> Markup:
    """One element: ``tag("a", {"href": url, "class": "x"}, "text")``.

    Attribute values are escaped; ``None`` and ``False`` leave the attribute
    out, ``True`` writes it bare. Names are the console's own constants.

    Raises:
        ValueError: a malformed tag or attribute name, a link attribute
            whose value is not a :class:`Url`, or children for a void element.
    """
    if not _NAME.match(name):
        raise ValueError(f"not an element name: {name!r}")
    parts = [f"<{name}"]
    for key, value in (attributes or {}).items():
        if not _NAME.match(key):
            raise ValueError(f"not an attribute name: {key!r}")
        if value is None or value is False:
            continue
        if key in _LINKS and not isinstance(value, Url):
            raise ValueError(f"{key}= takes a Url the console built, got {type(value).__name__}")
        if value is True:
            parts.append(f" {key}")
        else:
            parts.append(f' {key}="{escape(value)}"')
    parts.append(">")
    if name in _VOID:
        if any(child is not None for child in children):
            raise ValueError(f"<{name}> has no children")
        return Markup("".join(parts))
    return Markup("".join(parts) + join(*children) + f"</{name}>")
