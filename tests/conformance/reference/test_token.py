"""Ported from the reference's ``ts/packages/core/test/token.test.ts``: the token envelope.

Python has no public ``token()`` / ``isToken()``: a token is what
``ctx.emit_token`` pushes, and "is a token" is what ``messages`` mode keeps of
the ``custom`` events. Each case is checked through those. (The reference's
"narrows the type for a consumer" is a TypeScript type check, not ported.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ilmek import stream, stream_modes
from tests.support.reference import linear


def _parts(body: Callable[[Any], None], mode: str) -> list[Any]:
    """Run one node whose body calls ``body(ctx)``; the data of ``mode`` parts."""

    def work(state: Any, ctx: Any) -> None:
        body(ctx)

    return [p.data for p in stream_modes(stream(linear("tokens", work)), [mode])]


def _messages_of_emitted(*payloads: Any) -> list[Any]:
    """What ``messages`` mode keeps when a node ``ctx.emit``s each payload."""

    def body(ctx: Any) -> None:
        for payload in payloads:
            ctx.emit(payload)

    return _parts(body, "messages")


def test_a_token_without_meta_carries_no_meta() -> None:
    """token.test.ts · "builds a chunk without a meta key when none is given".

    The reference leaves the key out; SPEC §4 writes the shape as
    ``{"type", "text", "meta"}``, so a ``None`` meta is accepted as "no meta".
    """
    (payload,) = _parts(lambda ctx: ctx.emit_token("hel"), "custom")

    assert {"type": "token", "text": "hel"} == {
        k: v for k, v in payload.items() if not (k == "meta" and v is None)
    }


def test_a_token_carries_meta_when_given() -> None:
    """token.test.ts · "carries meta when given"."""
    (payload,) = _parts(lambda ctx: ctx.emit_token("lo", {"node": "answer", "model": "opus"}), "custom")

    assert {"type": "token", "text": "lo", "meta": {"node": "answer", "model": "opus"}} == payload


def test_an_empty_string_is_a_legal_delta() -> None:
    """token.test.ts · "an empty string is a legal delta"."""
    messages = _parts(lambda ctx: ctx.emit_token(""), "messages")

    assert [("token", "")] == [(m["type"], m["text"]) for m in messages]


def test_messages_mode_accepts_what_emit_token_builds_with_and_without_meta() -> None:
    """token.test.ts · "accepts what token() builds, with and without meta"."""

    def body(ctx: Any) -> None:
        ctx.emit_token("hi")
        ctx.emit_token("hi", {"node": "answer"})

    assert ["hi", "hi"] == [m["text"] for m in _parts(body, "messages")]


def test_messages_mode_accepts_a_hand_built_envelope_of_the_right_shape() -> None:
    """token.test.ts · "accepts a hand-built envelope of the right shape"."""
    envelope = {"type": "token", "text": "hi", "extra": 1}

    assert [envelope] == _messages_of_emitted(envelope)


def test_messages_mode_rejects_other_custom_events() -> None:
    """token.test.ts · "rejects other custom events on the same channel"."""
    assert [] == _messages_of_emitted({"progress": 0.5}, {"type": "progress", "text": "hi"})


def test_messages_mode_rejects_a_token_typed_value_with_a_non_string_text() -> None:
    """token.test.ts · "rejects a token-typed value with a non-string text" (issue #8)."""
    malformed = ({"type": "token"}, {"type": "token", "text": 42}, {"type": "token", "text": None})

    assert [] == _messages_of_emitted(*malformed)


@pytest.mark.parametrize(
    "payload", [None, "token", 42, True, object()], ids=["None", "str", "int", "bool", "object"]
)
def test_messages_mode_rejects_none_and_primitives_without_raising(payload: Any) -> None:
    """token.test.ts · "rejects null and primitives without throwing"."""
    assert [] == _messages_of_emitted(payload)


def test_messages_mode_rejects_lists_and_functions() -> None:
    """token.test.ts · "rejects arrays and functions"."""
    assert [] == _messages_of_emitted([], lambda: None)
