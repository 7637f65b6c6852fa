"""The answer a form gives to a pause with a contract (:mod:`ilmek.answers`), checked before it is sent.

Each shape's controls (:mod:`ilmek.web.contract_fields`) write their own
fields, ``N`` being the pause's place on the page:

* choice: ``option.N``, the chosen option's index (the value sent is the
  stored option, never a copy the browser carried);
* review: ``review.N`` (``accept``, ``edit`` or ``reject``) with ``text.N``
  (the edited draft) or ``reason.N``, sent as the review's wire form;
* text: ``text.N``; number: ``number.N``; boolean: ``boolean.N`` (``true`` or ``false``);
* schema: ``answer.N``, typed as JSON.

The answer is then checked with :func:`ilmek.answers.check`; a refusal
names the pause and why, and nothing is written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .. import answers as contracts
from ..errors import InvalidArgumentError
from ..types import Pending
from . import json_input

__all__ = ["contract_of", "draft_text", "from_contract"]


def contract_of(pause: Pending) -> Mapping[str, Any] | None:
    """The pause's stored contract, or ``None`` (none, or one sealed without its key)."""
    form = pause.answers
    return form if isinstance(form, Mapping) and isinstance(form.get("kind"), str) else None


def draft_text(draft: Any) -> str:
    """A review's draft as its editor holds it: text as it is, anything else as indented JSON."""
    return draft if isinstance(draft, str) else json.dumps(draft, indent=2, ensure_ascii=False)


def _text(form: Mapping[str, str], name: str) -> str | None:
    value = form.get(name)
    # A browser sends line breaks as CRLF; a stored draft has LF.
    return value.replace("\r\n", "\n") if value is not None else None


def _draft_edit(text: str, draft: Any) -> Any:
    """An edited draft: text for a text draft, else the JSON the editor holds."""
    return text if isinstance(draft, str) else json_input.loads(text)


def _review(form: Mapping[str, str], index: int, contract: Mapping[str, Any]) -> Any:
    action = form.get(f"review.{index}")
    if action == "accept":
        return {"action": "accept"}
    if action == "edit":
        return {
            "action": "edit",
            "value": _draft_edit(_text(form, f"text.{index}") or "", contract.get("draft")),
        }
    if action == "reject":
        return {"action": "reject", "reason": (_text(form, f"reason.{index}") or "").strip()}
    return None


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def _raw(form: Mapping[str, str], index: int, contract: Mapping[str, Any]) -> tuple[bool, Any]:
    """``(True, answer)`` as the form gives it, or ``(False, None)`` when it gives none.

    Raises:
        ValueError: a field that cannot be read (a number or JSON that is not one).
    """
    kind = contract["kind"]
    if kind == "choice":
        chosen = form.get(f"option.{index}")
        options = contract.get("options") or []
        if chosen is None:
            return False, None
        if not (chosen.isascii() and chosen.isdecimal()) or int(chosen) >= len(options):
            raise ValueError("the form chose an option the pause does not offer")
        return True, options[int(chosen)]
    if kind == "review":
        answer = _review(form, index, contract)
        return answer is not None, answer
    if kind == "text":
        typed = _text(form, f"text.{index}")
        return typed is not None, typed
    if kind == "number":
        typed = (form.get(f"number.{index}") or "").strip()
        return (True, _number(typed)) if typed else (False, None)
    if kind == "boolean":
        said = form.get(f"boolean.{index}")
        return (True, said == "true") if said in ("true", "false") else (False, None)
    typed = form.get(f"answer.{index}", "")
    return (True, json_input.loads(typed)) if typed.strip() else (False, None)


def from_contract(form: Mapping[str, str], index: int, pause: Pending) -> tuple[bool, Any] | str:
    """``(True, answer)`` fitting the pause's contract, ``(False, None)`` for none, or why it is refused."""
    contract = contract_of(pause)
    assert contract is not None
    edited = _text(form, f"text.{index}")
    if form.get(f"review.{index}") == "accept" and edited not in (None, draft_text(contract.get("draft"))):
        # Accept sends the draft as stored; an edit left in the editor would be lost without a word.
        return (
            f"The draft of {pause.id} was edited, and Accept sends it unedited; nothing was answered. "
            "Press Edit to send your version."
        )
    try:
        given, answer = _raw(form, index, contract)
    except (ValueError, json.JSONDecodeError) as error:
        return f"The answer to {pause.id} cannot be read ({error}); nothing was answered."
    if not given:
        return False, None
    try:
        reason = contracts.check(contract, answer)
    except InvalidArgumentError as error:
        return f"Pause {pause.id} has a contract this console cannot read ({error}); nothing was answered."
    if reason is not None:
        return f"The answer to {pause.id} does not fit: {reason}. Nothing was answered; correct it."
    return True, answer
