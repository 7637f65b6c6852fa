"""A resume's answers: one per open pause, checked before anything is recorded, then recorded at once.

Whether a bare answer is legal is decided by the number of open pauses,
never by the answer's type; a keyed resume must answer every pause by id.
A pause already answered differently by a resume that did not finish is
refused (steps after it may have acted on that answer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import answers as contracts
from .. import serde
from ..checkpoint.base import journal_view
from ..checkpoint.holds import Hold
from ..errors import AnswerRejectedError, ConcurrentUpdateError, InvalidArgumentError, ResumeError
from ..types import AnsweredBy, Checkpoint, JournalEntry, Pending
from .position import ThreadPosition
from .setup import RunSetup

__all__ = ["Resume", "answers_by_id", "record_answers"]


Answerers = AnsweredBy | Mapping[str, AnsweredBy]
"""Who gives a resume's answers: one for all, or one per pause id."""


class Resume:
    """A run that answers pauses: the answer (``keyed``: a dict of pause id to answer), and who gave it."""

    __slots__ = ("answers", "by", "keyed")

    def __init__(self, answers: Any, keyed: bool, by: Answerers = "person") -> None:
        self.answers = answers
        self.keyed = keyed
        self.by: Answerers = by


def answers_by_id(setup: RunSetup, resume: Resume, base: Checkpoint) -> dict[str, Any]:
    """Each open pause's answer, checked before anything is recorded."""
    thread_id = setup.thread_id
    pending = base.pending
    expected = ", ".join(repr(p.id) for p in pending)
    if resume.keyed:
        answers = resume.answers
        if not isinstance(answers, Mapping):
            raise ResumeError(
                f"resume_keyed() takes a dict of pause id to answer, got "
                f"{type(answers).__name__} (thread {thread_id!r}); expected ids: {expected}",
                thread_id=thread_id,
                checkpoint_id=base.id,
            )
        missing = [p.id for p in pending if p.id not in answers]
        if missing:
            open_ids = {p.id for p in pending}
            unknown = [key for key in answers if key not in open_ids]
            named = (
                f"; the answers name {', '.join(map(repr, unknown))}, which "
                f"{'is not an open pause' if len(unknown) == 1 else 'are not open pauses'}"
                if unknown
                else ""
            )
            raise ResumeError(
                f"thread {thread_id!r} waits for {len(pending)} answer(s); no answer supplied for "
                f"{', '.join(map(repr, missing))} (expected ids: {expected}){named}. Nothing was "
                "recorded: answer every open pause, by id, in one resume_keyed() call",
                thread_id=thread_id,
                checkpoint_id=base.id,
            )
        by_id = {p.id: answers[p.id] for p in pending}
    else:
        if len(pending) != 1:
            raise ResumeError(
                f"{len(pending)} interrupts are pending on thread {thread_id!r} ({expected}), so a "
                "bare answer is ambiguous; answer each by id with resume_keyed(g, {id: answer, ...})",
                thread_id=thread_id,
                checkpoint_id=base.id,
            )
        by_id = {pending[0].id: resume.answers}
    for pause in pending:
        by_id[pause.id] = _fitting(pause, by_id[pause.id], thread_id=thread_id, checkpoint_id=base.id)
    for pause_id, answer in by_id.items():
        serde.encode(answer, where=f"the answer to {pause_id!r}")
    return by_id


def _fitting(pause: Pending, answer: Any, *, thread_id: str, checkpoint_id: str) -> Any:
    """``answer`` in its stored form, once the pause's contract accepts it."""
    if pause.answers is None:
        return answer
    try:
        shape = contracts.from_json(pause.answers)
    except InvalidArgumentError as exc:
        raise ResumeError(
            f"pause {pause.id!r} of thread {thread_id!r} stores a contract this ilmek cannot read "
            f"({exc}); upgrade ilmek, or fork from an earlier checkpoint",
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
        ) from exc
    reason = contracts.check(shape, answer)
    if reason is not None:
        raise AnswerRejectedError(
            f"the answer to pause {pause.id!r} of thread {thread_id!r} was refused: {reason}. "
            "Nothing was recorded and the pause is still open: answer it again with an answer that fits",
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            pause_id=pause.id,
            reason=reason,
        )
    return shape.wire(answer)


def record_answers(
    setup: RunSetup,
    position: ThreadPosition,
    hold: Hold,
    base: Checkpoint,
    by_id: Mapping[str, Any],
    by: Answerers = "person",
) -> None:
    """Record the answers to ``base``'s pauses (all or nothing); the position learns the journals."""
    cp, thread_id = setup.checkpointer, setup.thread_id
    keys = list(dict.fromkeys([*(t.task_key for t in base.next), *(p.task_key for p in base.pending)]))
    journals = cp.load_journals(base, keys, hold=hold)
    answers: dict[str, list[JournalEntry]] = {}
    for pause in base.pending:
        key = pause.task_key
        answer = by_id[pause.id]
        # Compare in JSON space: that is what a stored answer comes back as.
        canonical = serde.decode(serde.encode(answer, where=f"the answer to {pause.id!r}"))
        recorded = next((e for e in journals.get(key, ()) if e.key == pause.key), None)
        if recorded is not None and recorded.answered and recorded.value != canonical:
            if not hold.taken:
                # Read without the hold: another resume may have answered
                # it and moved on since. Judge again under the hold.
                raise ConcurrentUpdateError(
                    f"pause {pause.id!r} of thread {thread_id!r} was answered meanwhile",
                    thread_id=thread_id,
                    checkpoint_id=base.id,
                )
            raise ResumeError(
                f"pause {pause.id!r} of thread {thread_id!r} was already answered with "
                f"{recorded.value!r} by a resume that did not finish; steps after the pause "
                "may have acted on it. Resume with that same answer, or fork from an earlier "
                "checkpoint with checkpoint_id=",
                thread_id=thread_id,
                checkpoint_id=base.id,
            )
        answers.setdefault(key, []).append(
            JournalEntry(
                key=pause.key,
                kind="interrupt",
                payload=pause.payload,
                value=answer,
                answered=True,
                by=_who(by, pause.id),
            )
        )
    from_pause = cp.record_answers(hold, base.id, answers)
    position.answered_by = {pause.id: _who(by, pause.id) for pause in base.pending}
    if from_pause is not None:
        # What the read found, then what is recorded from the pause itself
        # now (the answers' write refused anything recorded from it since
        # the read): the journals a read would find, in its order.
        position.answered = (
            base.id,
            {key: journal_view(journals.get(key, ()), [from_pause.get(key, ())]) for key in keys},
        )


def _who(by: Answerers, pause_id: str) -> AnsweredBy:
    return by if isinstance(by, str) else by.get(pause_id, "person")
