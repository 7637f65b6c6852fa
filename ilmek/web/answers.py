"""How a pause may be answered, and the answers a submitted form gives.

A pause with a contract is answered as its contract says
(:mod:`ilmek.web.contract_input`, checked before anything is written).
Without one, its payload decides its controls (:func:`shape_of`):

* ``options`` (a dict's list): one button per option; a yes/no pair
  (``yes``/``no``, ``approve``/``reject``, ``true``/``false``...) reads
  *Approve* and *Reject*;
* a draft to review (a dict's text ``draft`` or ``text``, or a text
  payload that is not a one-line question): shown as text, sent back as it
  is (*Accept*) or as the person edited it;
* otherwise, and besides the above, a free answer typed as JSON.

Nothing is ever sent that the person did not choose or type: a form field
left empty answers nothing, and the whole form is refused (server side,
whatever the browser let through). The buttons name an option by its index
and *Accept* names the draft, so the value sent is the one stored in the
pause (read again from the checkpoint), never a copy the browser carried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from ..types import Pending
from . import json_input
from .contract_input import contract_of, from_contract

__all__ = ["MAX_OPTION_DIGITS", "AnswerShape", "answers_from_form", "malformed_field", "shape_of"]

# Pairs read as a yes/no question: the first of each is the "yes".
_YES: Final = frozenset({"yes", "y", "approve", "approved", "accept", "ok", "allow", "confirm", "true"})
_NO: Final = frozenset({"no", "n", "reject", "rejected", "deny", "decline", "cancel", "false"})
_DRAFT_FIELDS: Final = ("draft", "text")
MAX_OPTION_DIGITS: Final = 6
"""The most digits of an ``option.N`` field: an option's index, as the console's buttons write it."""


@attrs.frozen(kw_only=True)
class AnswerShape:
    """What a pause offers to answer with.

    Attributes:
        question: The text it asks (a dict's ``question``), if any.
        options: The payload's ``options``, in order.
        yes: The index of the "yes" option when the options are a yes/no pair.
        no: The index of the "no" option then.
        draft: A text to review and send back, as it is or edited.
        draft_field: Where the draft is: ``draft``, ``text``, or ``None`` (the payload itself).
    """

    question: str | None = None
    options: tuple[Any, ...] = ()
    yes: int | None = None
    no: int | None = None
    draft: str | None = None
    draft_field: str | None = None


def _word(option: Any) -> str | None:
    if option is True:
        return "true"
    if option is False:
        return "false"
    return option.strip().lower() if isinstance(option, str) else None


def _yes_no(options: Sequence[Any]) -> tuple[int, int] | None:
    if len(options) != 2:
        return None
    words = [_word(option) for option in options]
    for yes, no in ((0, 1), (1, 0)):
        if words[yes] in _YES and words[no] in _NO:
            return yes, no
    return None


def _is_question(text: str) -> bool:
    """A one-line text ending in ``?`` asks something; it is not a draft to send back."""
    stripped = text.strip()
    return "\n" not in stripped and stripped.endswith("?")


def shape_of(payload: Any) -> AnswerShape:
    """How a pause with this payload may be answered."""
    if isinstance(payload, str):
        if not payload.strip() or _is_question(payload):
            return AnswerShape(question=payload.strip() or None)
        return AnswerShape(draft=payload)
    if not isinstance(payload, Mapping):
        return AnswerShape()
    question = payload.get("question")
    raw = payload.get("options")
    options = tuple(raw) if isinstance(raw, (list, tuple)) else ()
    pair = _yes_no(options)
    draft_field = next((name for name in _DRAFT_FIELDS if isinstance(payload.get(name), str)), None)
    return AnswerShape(
        question=question if isinstance(question, str) else None,
        options=options,
        yes=pair[0] if pair else None,
        no=pair[1] if pair else None,
        draft=payload[draft_field] if draft_field is not None else None,
        draft_field=draft_field,
    )


def _option_index(text: str) -> int | None:
    """The index an ``option.N`` field names: ASCII digits, at most :data:`MAX_OPTION_DIGITS`; else ``None``.

    ``str.isdigit`` would pass ``²`` and ``①`` (which ``int`` refuses) and
    ``int`` reads Arabic-Indic digits and 5,000-digit text (slowly, then refusing).
    """
    if 0 < len(text) <= MAX_OPTION_DIGITS and text.isascii() and text.isdecimal():
        return int(text)
    return None


def malformed_field(form: Mapping[str, str]) -> str | None:
    """What is wrong with a field no console page writes (an option that is not an index), or ``None``.

    A form with one is refused whole, before any pause is read.
    """
    for name, value in form.items():
        if name.startswith("option.") and _option_index(value) is None:
            shown = value if len(value) <= 20 else value[:20] + "…"
            return (
                f"The form field {name} must be an option's index in ASCII digits (0-9, at most "
                f"{MAX_OPTION_DIGITS}), not {shown!r}; nothing was answered."
            )
    return None


def _one(form: Mapping[str, str], index: int, pause: Pending) -> tuple[bool, Any] | str:
    """``(True, answer)``, ``(False, None)`` when the form gives none, or what is wrong."""
    if contract_of(pause) is not None:
        return from_contract(form, index, pause)
    shape = shape_of(pause.payload)
    option = form.get(f"option.{index}")
    if option is not None:
        offered = _option_index(option)
        if offered is None or offered >= len(shape.options):
            return f"The form chose an option pause {pause.id} does not offer; nothing was answered."
        return True, shape.options[offered]
    if f"accept.{index}" in form:
        if shape.draft is None:
            return f"Pause {pause.id} has no draft to accept; nothing was answered."
        shown = form.get(f"text.{index}")
        if shown is not None and shown.replace("\r\n", "\n") != shape.draft:
            # Accept sends the draft as stored; an edit left in the editor would be lost without a word.
            return (
                f"The draft of {pause.id} was edited, and Accept sends it unedited; nothing was answered. "
                "Press Send the edited text to send your version."
            )
        return True, shape.draft
    if f"edit.{index}" in form:
        text = form.get(f"text.{index}", "")
        if not text.strip():
            return f"The text for {pause.id} is empty; nothing was answered. Write the text to send."
        # A browser sends line breaks as CRLF; the draft came with LF.
        return True, text.replace("\r\n", "\n")
    chosen = form.get(f"choice.{index}")
    typed = chosen if chosen is not None else form.get(f"answer.{index}", "")
    if not typed.strip():
        return False, None
    try:
        return True, json_input.loads(typed)
    except ValueError as error:
        return (
            f"The answer to {pause.id} is not JSON ({error}); nothing was answered. "
            'Write text in quotes: "yes".'
        )


def answers_from_form(form: Mapping[str, str], pauses: Sequence[Pending]) -> dict[str, Any] | str:
    """The answers a form gives to ``pauses`` (the whole payloads, as stored), by pause id.

    Returns:
        The answers, or the reason none is taken: a pause left without an
        answer (an empty editor), an answer that is not JSON, an option or
        a draft the pause does not offer.
    """
    answers: dict[str, Any] = {}
    missing: list[str] = []
    for index, pause in enumerate(pauses):
        found = _one(form, index, pause)
        if isinstance(found, str):
            return found
        given, value = found
        if given:
            answers[pause.id] = value
        else:
            missing.append(pause.id)
    if missing:
        which = ", ".join(missing)
        if len(pauses) == 1:
            return (
                f"No answer was given to {which}; nothing was answered. Choose an option, or type "
                'an answer (as JSON: "yes", 42, {"approved": true}).'
            )
        return f"Every pause needs an answer, and {which} got none; nothing was answered."
    return answers
