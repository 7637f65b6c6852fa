"""The terms of a pause as a node asks for them: its contract, its deadline, a timer's due time.

``ctx.interrupt`` and ``ctx.sleep`` turn their arguments into a
:class:`~ilmek.types.PauseTerms` here, checked before the pause is made;
the superstep stores the terms with the pause (``Pending``). What comes back
on replay is turned into what the node receives here too.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

from . import answers as _answers
from .channel import UNSET
from .errors import AnswerRejectedError, InvalidArgumentError
from .types import JournalEntry, PauseTerms, utc_now

__all__ = ["person_terms", "received", "timer_terms"]


def _aware(value: Any, what: str) -> _dt.datetime:
    if isinstance(value, _dt.timedelta):
        return utc_now() + value
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidArgumentError(
                f"{what} must be an aware datetime (a naive one could mean any zone), got {value!r}; "
                "use datetime.now(timezone.utc) + ... or a timedelta"
            )
        return value.astimezone(_dt.UTC)
    raise InvalidArgumentError(f"{what} is a timedelta or an aware datetime, got {type(value).__name__}")


def person_terms(
    contract: _answers.Shape[Any] | None, deadline: Any, on_timeout: Any, *, where: str
) -> PauseTerms | None:
    """The terms of ``ctx.interrupt``; ``None`` for a plain pause.

    Raises:
        InvalidArgumentError: ``answers`` is not a shape; ``deadline`` is
            not a timedelta or aware datetime, or comes without ``on_timeout``
            (or ``on_timeout`` without it); ``on_timeout`` does not fit the contract.
    """
    if contract is not None and not isinstance(contract, _answers.Shape):
        raise InvalidArgumentError(
            f"{where}: answers= takes a shape of ilmek.answers (choice, text, number, boolean, review, "
            f"schema), got {type(contract).__name__}"
        )
    if deadline is None:
        if on_timeout is not UNSET:
            raise InvalidArgumentError(f"{where}: on_timeout= applies at a deadline; pass deadline= too")
        return None if contract is None else PauseTerms(answers=contract.to_json())
    if on_timeout is UNSET:
        raise InvalidArgumentError(
            f"{where}: a deadline needs on_timeout=, the answer recorded when nobody answered in time"
        )
    due = _aware(deadline, f"{where}: deadline")
    if contract is not None:
        reason = _answers.check(contract, on_timeout)
        if reason is not None:
            raise InvalidArgumentError(
                f"{where}: on_timeout={on_timeout!r} does not fit the contract: {reason}"
            )
        on_timeout = contract.wire(on_timeout)
    return PauseTerms(
        answers=None if contract is None else contract.to_json(), deadline=due, on_timeout=on_timeout
    )


def timer_terms(seconds: float | None, until: _dt.datetime | None, *, where: str) -> PauseTerms:
    """The terms of ``ctx.sleep``: a timer due ``seconds`` from now or ``until`` (exactly one).

    Raises:
        InvalidArgumentError: neither or both given, a negative or non-finite
            ``seconds``, a naive ``until``.
    """
    if (seconds is None) == (until is None):
        raise InvalidArgumentError(f"{where}: pass exactly one of seconds= and until=")
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
            raise InvalidArgumentError(f"{where}: seconds is a finite number, got {seconds!r}")
        if seconds < 0:
            raise InvalidArgumentError(f"{where}: seconds must not be negative, got {seconds!r}")
        due = utc_now() + _dt.timedelta(seconds=seconds)
    else:
        if not isinstance(until, _dt.datetime):
            raise InvalidArgumentError(f"{where}: until is an aware datetime, got {type(until).__name__}")
        due = _aware(until, f"{where}: until")
    return PauseTerms(deadline=due, kind="timer")


def received(contract: _answers.Shape[Any] | None, entry: JournalEntry, *, pause: str, thread_id: str) -> Any:
    """What the node receives for the answer ``entry`` records, judged by the live contract.

    The contract's Python checks run here whatever ``resume`` could run: this
    is where the graph's code is surely loaded.

    Raises:
        AnswerRejectedError: the recorded answer does not fit (a Python check
            that the resuming process could not run refused it).
    """
    if contract is None:
        return entry.value
    reason = _answers.check(contract, entry.value)
    if reason is not None:
        raise AnswerRejectedError(
            f"the answer recorded for pause {pause!r} of thread {thread_id!r} was refused when the "
            f"node replayed it: {reason}. The resume could not run that check (define it in a module, "
            "loaded where you resume); answer again by forking from the pause (checkpoint_id=)",
            thread_id=thread_id,
            pause_id=pause,
            reason=reason,
        )
    return contract.receive(entry.value)
