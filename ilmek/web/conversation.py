"""A messages channel drawn as a conversation: who said what, in order, as text.

A channel holding a list of messages reads better as the chat it is than
as folded JSON. A message is a mapping with ``role`` (or ``type``) and
``content``, or an object with ``type`` (or ``role``) and ``content``
attributes (LangChain's message classes); any other list is left to
:func:`ilmek.web.layout.value_block`. A long chat shows its newest
:data:`SHOWN` messages and links to the whole value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from .html import Markup, Url, escape, join, tag
from .values import preview

__all__ = ["SHOWN", "conversation_block", "conversation_of"]

SHOWN: Final = 40
"""The most messages (the newest) a conversation shows."""
_SAID_LIMIT: Final = 4000
"""The most characters of one message shown."""
_ROLE_CLASSES: Final = {
    "user": "user",
    "human": "user",
    "assistant": "ai",
    "ai": "ai",
    "system": "system",
    "tool": "tool",
    "function": "tool",
}


def _field(message: Any, name: str) -> Any:
    if isinstance(message, Mapping):
        return message.get(name)
    # Only plain attributes of a decoded value are read; nothing is called.
    return getattr(message, name, None) if not isinstance(message, (str, bytes, Sequence)) else None


def _text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part
            if isinstance(part, str)
            else str(part["text"])
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
            else preview(part, 200)
            for part in content
        ]
        return "\n".join(parts)
    return preview(content, 400)


def conversation_of(value: Any) -> list[tuple[str, str]] | None:
    """``value`` as (who, what they said) pairs, or ``None`` when it is not a list of messages."""
    if not isinstance(value, list) or not value:
        return None
    said: list[tuple[str, str]] = []
    for message in value:
        who = _field(message, "role") or _field(message, "type")
        content = _field(message, "content")
        if not isinstance(who, str) or content is None:
            return None
        said.append((who, _text(content)))
    return said


def _message(who: str, text: str) -> Markup:
    shown = text if len(text) <= _SAID_LIMIT else text[:_SAID_LIMIT] + " …"
    css = _ROLE_CLASSES.get(who.lower(), "other")
    return tag(
        "li",
        {"class": f"msg m-{css}"},
        tag("span", {"class": f"who who-{css}"}, who),
        tag("div", {"class": "said"}, escape(shown, keep_newlines=True)),
    )


def conversation_block(said: list[tuple[str, str]], *, whole: Url | None) -> Markup:
    """The newest :data:`SHOWN` messages, oldest first, and how many earlier ones the whole value holds."""
    earlier = max(0, len(said) - SHOWN)
    return join(
        tag(
            "p",
            {"class": "hint"},
            f"{len(said)} messages; {earlier} earlier messages are not shown here. ",
            tag("a", {"href": whole}, "Show the whole value") if whole is not None else None,
        )
        if earlier
        else None,
        tag(
            "ol",
            {
                "class": "conversation",
                "start": earlier + 1,
                "tabindex": "0",
                "aria-label": "messages, oldest first",
            },
            [_message(who, text) for who, text in said[earlier:]],
        ),
    )
