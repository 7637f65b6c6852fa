"""Answer links: a signed token that answers one open pause, once, from outside the program.

:func:`answer_token` signs (HMAC-SHA256, keyed by the caller's secret) the
thread, the checkpoint that holds the open pause, the pause's id and an
optional expiry; :func:`resume_with_token` checks the signature in constant
time, the expiry and that the thread still stands at that checkpoint, then
resumes it with the answer, ``by="token"``. A token is single use because a
resume moves the thread on: the signed checkpoint is then no longer the
latest, and a second use is refused.

A resume answers all of a thread's open pauses at once, so a token answers
its pause only while that pause is the thread's only open one: with other
pauses still open it is refused, saying so, and nothing is recorded (answer
the others first, through the console or ``resume_keyed``, or send one link
per pause and resume them together in code).

The token carries no secret and names the thread in plain (base64) text;
keep it out of logs all the same: whoever holds it may answer. No ilmek log
record or error message ever contains it.
"""

from __future__ import annotations

import binascii
import datetime as _dt
import hashlib
import hmac
import json
from typing import Any

import attrs

from .checkpoint.base import Checkpointer
from .engine import collect_result, resume_run
from .errors import AnswerRejectedError, InvalidArgumentError, ResumeError
from .graph import CompiledGraph
from .types import Checkpoint, Pending, Result, utc_now

__all__ = ["SignedPause", "answer_token", "read_token", "resume_with_token"]

_VERSION = 1
"""The token format's version, signed with the rest (a future format is refused, not misread)."""

_REFUSED = "this answer link is not valid (it was altered, cut short, or signed with another secret)"


@attrs.frozen(kw_only=True)
class SignedPause:
    """What a valid token names: the pause, the checkpoint that holds it, and when it expires."""

    thread_id: str
    checkpoint_id: str
    pause_id: str
    expires_at: _dt.datetime | None


def answer_token(
    checkpointer: Checkpointer,
    thread_id: str,
    pause_id: str,
    *,
    secret: str | bytes,
    expires_in: _dt.timedelta | float | None = None,
) -> str:
    """A URL-safe token that answers one open pause of a thread, once.

    It signs the thread, its latest checkpoint (which holds the open pause),
    the pause's id and the expiry; :func:`resume_with_token` answers with it.

    Args:
        checkpointer: Where the thread is.
        thread_id: The paused thread.
        pause_id: The open pause's ``Pending.id``.
        secret: The signing key (text or bytes); keep it out of the code.
        expires_in: How long the token is good for (a ``timedelta`` or
            seconds); ``None``: until the pause is answered.

    Returns:
        The token: URL-safe base64, no padding.

    Raises:
        InvalidArgumentError: an empty secret, a non-positive ``expires_in``.
        ResumeError: the thread has no such open pause.
    """
    key = _key(secret)
    latest = checkpointer.get(thread_id)
    if latest is None or not any(p.id == pause_id for p in latest.pending):
        raise ResumeError(
            f"thread {thread_id!r} has no open pause {pause_id!r} to link to; list its open "
            "pauses with pending_interrupts()",
            thread_id=thread_id,
            checkpoint_id=None if latest is None else latest.id,
        )
    expires = _expiry(expires_in)
    body = {"v": _VERSION, "t": thread_id, "c": latest.id, "p": pause_id, "e": expires}
    text = _b64(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode())
    return f"{text}.{_signature(key, text)}"


def read_token(token: str, *, secret: str | bytes, now: _dt.datetime | None = None) -> SignedPause:
    """The pause a token names, once its signature and expiry are checked.

    Raises:
        AnswerRejectedError: the token was altered, cut, signed with another
            secret, or has expired (the message never says which byte).
    """
    key = _key(secret)
    text, _, given = token.partition(".") if isinstance(token, str) else ("", "", "")
    expected = _signature(key, text)
    if not given or not hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace")):
        raise AnswerRejectedError(_REFUSED, reason="invalid link")
    body = json.loads(_unb64(text))
    if body.get("v") != _VERSION:
        raise AnswerRejectedError(
            "this answer link was made by another version of ilmek; ask for a new link",
            reason="unknown link version",
        )
    expires = None if body["e"] is None else _dt.datetime.fromtimestamp(body["e"] / 1000, _dt.UTC)
    signed = SignedPause(thread_id=body["t"], checkpoint_id=body["c"], pause_id=body["p"], expires_at=expires)
    if expires is not None and (utc_now() if now is None else now) >= expires:
        raise AnswerRejectedError(
            f"this answer link expired at {expires.isoformat()}; ask for a new link",
            thread_id=signed.thread_id,
            checkpoint_id=signed.checkpoint_id,
            pause_id=signed.pause_id,
            reason="expired",
        )
    return signed


def open_pause(checkpointer: Checkpointer, signed: SignedPause) -> tuple[Checkpoint, Pending]:
    """The signed pause, while it is still open at the thread's latest checkpoint and alone there.

    Raises:
        AnswerRejectedError: the thread moved on (the link was used, or the
            pause answered another way), or other pauses are open beside it.
    """
    latest = checkpointer.get(signed.thread_id)
    pause = None if latest is None else next((p for p in latest.pending if p.id == signed.pause_id), None)
    if latest is None or latest.id != signed.checkpoint_id or pause is None:
        raise AnswerRejectedError(
            f"pause {signed.pause_id!r} of thread {signed.thread_id!r} was already answered, or the "
            "thread has moved on since this link was made; an answer link works once",
            thread_id=signed.thread_id,
            checkpoint_id=signed.checkpoint_id,
            pause_id=signed.pause_id,
            reason="already answered",
        )
    others = [p.id for p in latest.pending if p.id != pause.id]
    if others:
        raise AnswerRejectedError(
            f"thread {signed.thread_id!r} also waits on {', '.join(map(repr, others))}; a resume "
            f"answers every open pause at once, so answer those first (or all together with "
            f"resume_keyed) before pause {pause.id!r} can be answered by its link. Nothing was recorded",
            thread_id=signed.thread_id,
            checkpoint_id=latest.id,
            pause_id=pause.id,
            reason="other pauses are open",
        )
    return latest, pause


def resume_with_token(
    graph: CompiledGraph[Any],
    token: str,
    answer: Any,
    *,
    secret: str | bytes,
    checkpointer: Checkpointer | None = None,
    **run_options: Any,
) -> Result[Any]:
    """Answer the pause a token names, once, and run on (recorded ``by="token"``).

    The answer is checked against the pause's contract like any resume's,
    and the resume expects the signed checkpoint, so a token is stale once
    the thread has moved on.

    Args:
        graph: The thread's compiled graph.
        token: From :func:`answer_token`.
        answer: The answer to the pause.
        secret: The secret the token was signed with.
        checkpointer: Where the thread is; default the graph's bound one.
        run_options: More options for the resume (``recursion_limit``...).

    Raises:
        AnswerRejectedError: the token was altered, signed with another
            secret, expired or already used; another pause is open beside it;
            or the answer does not fit the pause's contract.
        ThreadBusyError: a run holds the thread now.
    """
    store = checkpointer if checkpointer is not None else graph.checkpointer
    if store is None:
        raise InvalidArgumentError(
            "resume_with_token() needs a checkpointer: pass checkpointer=, or bind one to the graph"
        )
    signed = read_token(token, secret=secret)
    latest, pause = open_pause(store, signed)
    options = {
        **run_options,
        "thread_id": signed.thread_id,
        "checkpointer": store,
        "expect_checkpoint_id": latest.id,
    }
    return collect_result(graph, resume_run(graph, {pause.id: answer}, True, options, by="token"))


def _key(secret: str | bytes) -> bytes:
    key = secret.encode() if isinstance(secret, str) else secret
    if not isinstance(key, bytes) or not key:
        raise InvalidArgumentError("secret must be non-empty text or bytes (the answer links' signing key)")
    return key


def _expiry(expires_in: _dt.timedelta | float | None) -> int | None:
    if expires_in is None:
        return None
    if isinstance(expires_in, _dt.timedelta):
        seconds = expires_in.total_seconds()
    elif isinstance(expires_in, int | float) and not isinstance(expires_in, bool):
        seconds = float(expires_in)
    else:
        raise InvalidArgumentError(
            f"expires_in must be a timedelta or seconds, got {type(expires_in).__name__}"
        )
    if not seconds > 0:
        raise InvalidArgumentError(f"expires_in must be positive, got {seconds} seconds")
    return round((utc_now().timestamp() + seconds) * 1000)  # milliseconds: compact and exact


def _signature(key: bytes, text: str) -> str:
    return _b64(hmac.new(key, text.encode("utf-8", "replace"), hashlib.sha256).digest())


# URL-safe base64 by hand over binascii: ``import ilmek`` imports no base64 (a test keeps it so).
_TO_URL = bytes.maketrans(b"+/", b"-_")
_FROM_URL = bytes.maketrans(b"-_", b"+/")


def _b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).translate(_TO_URL).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    padded = text.encode("ascii") + b"=" * (-len(text) % 4)
    return binascii.a2b_base64(padded.translate(_FROM_URL))
