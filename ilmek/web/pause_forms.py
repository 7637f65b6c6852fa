"""A pause as a person answers it: what it asks, its draft or payload, and its controls.

A pause with a contract (:mod:`ilmek.answers`) gets the contract's own
controls (:mod:`ilmek.web.contract_fields`). Without one, the controls
follow :func:`ilmek.web.answers.shape_of`: a button per option
(*Approve* / *Reject* for a yes/no pair), a draft shown as text with
*Accept* and *Send edited text*, and a free answer typed as JSON that
starts empty. The thread page's answer and fork forms, and the inbox's
one-click rows, are all built here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ..types import JournalEntry, Pending
from .answers import AnswerShape, shape_of
from .contract_fields import contract_controls
from .contract_input import contract_of
from .html import Markup, escape, join, tag
from .payload_fields import payload_block
from .values import as_json_text, label

__all__ = ["INBOX_OPTIONS", "inbox_buttons", "option_label", "pause_fields"]

INBOX_OPTIONS: Final = 4
"""The most options a pause may offer to be answered from its inbox row."""

_JSON_HINT: Final = 'JSON: "yes", true, 42, {"approved": true, "note": "ok"}'


def option_label(shape: AnswerShape, index: int, width: int = 40) -> str:
    """What the button of option ``index`` reads: *Approve*/*Reject* for a yes/no pair, else the option."""
    if index == shape.yes:
        return "Approve"
    if index == shape.no:
        return "Reject"
    return label(shape.options[index], width)


def _option_title(shape: AnswerShape, index: int) -> str | None:
    if index in (shape.yes, shape.no):
        return f"answers {as_json_text(shape.options[index]) or label(shape.options[index])}"
    return None


def _option_css(shape: AnswerShape, index: int) -> str:
    """An option button's classes: an approving or rejecting one is coloured so."""
    if index == shape.yes:
        return "option approve"
    return "option reject" if index == shape.no else "option"


def _option_controls(shape: AnswerShape, index: int, several: bool) -> Markup | None:
    if not shape.options:
        return None
    controls = []
    for position, _option in enumerate(shape.options):
        css = _option_css(shape, position)
        if several:
            # Several pauses are answered together: a choice per pause, one button for all.
            controls.append(
                tag(
                    "label",
                    {"class": "choice"},
                    tag("input", {"type": "radio", "name": f"option.{index}", "value": str(position)}),
                    " ",
                    option_label(shape, position),
                )
            )
        else:
            controls.append(
                tag(
                    "button",
                    {
                        "type": "submit",
                        "name": f"option.{index}",
                        "value": str(position),
                        "class": css,
                        "title": _option_title(shape, position),
                        # The free answer's editor below may be empty: a choice needs none.
                        "formnovalidate": True,
                    },
                    option_label(shape, position),
                )
            )
    return tag("div", {"class": "options"}, tag("span", {"class": "label"}, "Answer with"), controls)


def _draft_controls(shape: AnswerShape, index: int, several: bool) -> Markup | None:
    if shape.draft is None:
        return None
    editor = tag(
        "textarea",
        {
            "name": f"text.{index}",
            "id": f"text-{index}",
            "rows": min(max(shape.draft.count("\n") + 2, 4), 18),
            "class": "draft-editor",
        },
        # A textarea keeps its text's line breaks; the browser shows them as lines.
        escape(shape.draft, keep_newlines=True),
    )
    if several:
        return join(
            tag("label", {"class": "label", "for": f"text-{index}"}, "The draft (sent as you leave it)"),
            editor,
            tag("input", {"type": "hidden", "name": f"edit.{index}", "value": "1"}),
        )
    return join(
        tag("label", {"class": "label", "for": f"text-{index}"}, "The draft: accept it, or edit it and send"),
        editor,
        tag(
            "div",
            {"class": "draft-buttons"},
            tag(
                "button",
                {
                    "type": "submit",
                    "name": f"accept.{index}",
                    "value": "1",
                    "class": "primary",
                    "formnovalidate": True,
                },
                "Accept the draft",
            ),
            tag(
                "button",
                {"type": "submit", "name": f"edit.{index}", "value": "1", "formnovalidate": True},
                "Send the edited text",
            ),
        ),
    )


def _free_answer(
    index: int,
    recorded: JournalEntry | None,
    offered: bool,
    several: bool,
    submit: Markup | None,
    typed: str | None = None,
) -> Markup:
    """The JSON editor: empty unless a failed run recorded an answer to send again; never ``null``.

    ``submit``: the button that sends it (one pause; several share one button below them all).
    """
    prefill = typed if typed else as_json_text(recorded.value) if recorded is not None else None
    editor = tag(
        "textarea",
        {
            "name": f"answer.{index}",
            "id": f"answer-{index}",
            "rows": 3,
            "spellcheck": "false",
            "autocomplete": "off",
            "placeholder": '"yes"',
            # The browser asks for it; the console refuses an empty one anyway.
            "required": not offered and not several,
            "aria-describedby": f"answer-hint-{index}",
        },
        prefill or "",
    )
    caption = "Another answer, typed as JSON" if offered else "Your answer, typed as JSON"
    field = join(
        tag("label", {"class": "label", "for": f"answer-{index}"}, caption),
        editor,
        tag("span", {"class": "hint", "id": f"answer-hint-{index}"}, _JSON_HINT),
        submit,
    )
    if offered and prefill is None:
        return tag("details", {"class": "free"}, tag("summary", {}, "Answer something else"), field)
    return tag("div", {"class": "free"}, field)


def pause_fields(
    pause: Pending,
    index: int,
    *,
    inputs: bool,
    several: bool = False,
    recorded: JournalEntry | None = None,
    submit: Markup | None = None,
    typed: str | None = None,
    kept: Mapping[str, str] | None = None,
) -> Markup:
    """One pause: what it asks, its draft or payload, and (with ``inputs``) the controls to answer it.

    ``recorded``: the answer a failed resume recorded; the editor starts with
    it, as sending it again is how the run is retried. ``submit``: the button
    sending a typed answer, placed with its editor. ``typed``: what the person
    typed in the editor before it was refused, kept for them to correct.
    ``kept``: the whole form a refused answer came with (a pause with a
    contract draws its fields again from it).

    A pause with a contract is drawn from the contract alone: its payload's
    ``options`` and ``draft`` are data then, not controls.
    """
    contract = contract_of(pause)
    payload_shape = shape_of(pause.payload)
    shape = payload_shape if contract is None else AnswerShape(question=payload_shape.question)
    offered = bool(shape.options) or shape.draft is not None
    if contract is not None:
        controls = contract_controls(contract, index, several=several, submit=submit, kept=kept or {})
    else:
        controls = join(
            _option_controls(shape, index, several),
            _draft_controls(shape, index, several),
            _free_answer(index, recorded, offered, several, submit, typed),
        )
    draft_view = (
        tag(
            "div",
            {"class": "draft"},
            tag("span", {"class": "label"}, "Draft to review"),
            tag("div", {"class": "draft-text"}, escape(shape.draft, keep_newlines=True)),
        )
        if shape.draft is not None and not inputs
        else None
    )
    return tag(
        "div",
        {"class": "pause"},
        tag(
            "div",
            {"class": "pause-head"},
            tag("span", {"class": "node"}, pause.node),
            tag("code", {"class": "pid"}, pause.id),
        ),
        tag("p", {"class": "question"}, escape(shape.question, keep_newlines=True))
        if shape.question is not None
        else None,
        draft_view,
        payload_block(pause.payload, shape),
        tag(
            "p",
            {"class": "hint warn"},
            "An answer was recorded, but the run that gave it failed: send the same answer again to retry "
            "(another answer is refused; answer differently with a fork).",
        )
        if recorded is not None
        else None,
        controls if inputs else None,
    )


def inbox_buttons(pause: Pending) -> list[tuple[str, str, str, str]] | None:
    """The one-click answers of an inbox row: ``(field, value, label, css class)`` per button, or ``None``.

    Only a pause whose options are few enough to read at a glance; a
    payload's or a choice's button names the option's index (``option.0``),
    and the action reads the option from the stored pause (the inbox shows a
    preview, never sends it); a yes/no contract's buttons send ``true`` or
    ``false`` as its form on the thread page does. A pause with a contract
    offers buttons only for a choice or a yes/no: a review's draft is not on
    the row, so it is never approved in one click from there.
    """
    contract = contract_of(pause)
    if contract is not None and contract.get("kind") == "boolean":
        return [("boolean.0", "true", "Yes", "option approve"), ("boolean.0", "false", "No", "option reject")]
    if contract is not None:
        options = list(contract.get("options") or ()) if contract.get("kind") == "choice" else []
        # The contract's options, read as a yes/no pair as the payload's would be.
        shape = shape_of({"options": options})
    else:
        shape = shape_of(pause.payload)
    if not shape.options or len(shape.options) > INBOX_OPTIONS:
        return None
    buttons = []
    for position in range(len(shape.options)):
        css = _option_css(shape, position)
        buttons.append(("option.0", str(position), option_label(shape, position, 24), css))
    return buttons
