"""The controls of a pause with a contract (:mod:`ilmek.answers`), drawn from the contract alone.

choice: a button per option; review: the whole draft with *Accept*, *Edit*
(a text area holding the draft) and *Reject* (with a reason); text: a text
area (``maxlength``); number: a number field (``min``/``max``/``step``);
boolean: *Yes* and *No*; schema: the JSON editor with the schema shown.
Several pauses answered together get radio buttons and one submit button.
``kept`` is the form a refused answer came with: what the person typed or
chose is drawn again, to correct it. The fields are read by
:mod:`ilmek.web.contract_input`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .contract_input import draft_text
from .html import Markup, escape, join, tag
from .values import label

__all__ = ["contract_controls"]

_Kept = Mapping[str, str]


def _choices(name: str, labels: list[tuple[str, str]], kept: _Kept, several: bool, css: str) -> Markup:
    """One button per ``(value, label)``; radio buttons when several pauses share one submit."""
    if several:
        items = [
            tag(
                "label",
                {"class": "choice"},
                tag(
                    "input",
                    {"type": "radio", "name": name, "value": value, "checked": kept.get(name) == value},
                ),
                " ",
                text,
            )
            for value, text in labels
        ]
    else:
        items = [
            tag("button", {"type": "submit", "name": name, "value": value, "class": "option"}, text)
            for value, text in labels
        ]
    return tag("div", {"class": css}, tag("span", {"class": "label"}, "Answer with"), items)


def _review(contract: Mapping[str, Any], index: int, kept: _Kept, several: bool) -> Markup:
    draft = draft_text(contract.get("draft"))
    edited = kept.get(f"text.{index}", draft)
    action = f"review.{index}"
    buttons = (
        _choices(
            action, [("accept", "Accept"), ("edit", "Edit"), ("reject", "Reject")], kept, True, "options"
        )
        if several
        else None
    )

    def button(value: str, text: str, css: str | None = None) -> Markup | None:
        return (
            None
            if several
            else tag("button", {"type": "submit", "name": action, "value": value, "class": css}, text)
        )

    return join(
        tag(
            "div",
            {"class": "draft"},
            tag("span", {"class": "label"}, "Draft to review"),
            tag("div", {"class": "draft-text"}, escape(draft, keep_newlines=True)),
        ),
        buttons,
        tag("div", {"class": "draft-buttons"}, button("accept", "Accept", "primary")),
        tag("label", {"class": "label", "for": f"text-{index}"}, "Edit the draft, then send your version"),
        tag(
            "textarea",
            {
                "name": f"text.{index}",
                "id": f"text-{index}",
                "rows": min(max(draft.count("\n") + 2, 4), 18),
                "class": "draft-editor",
            },
            escape(edited, keep_newlines=True),
        ),
        tag("div", {"class": "draft-buttons"}, button("edit", "Edit")),
        tag("label", {"class": "label", "for": f"reason-{index}"}, "Or reject it, saying why"),
        tag(
            "input",
            {
                "type": "text",
                "name": f"reason.{index}",
                "id": f"reason-{index}",
                "value": kept.get(f"reason.{index}"),
            },
        ),
        tag("div", {"class": "draft-buttons"}, button("reject", "Reject", "reject")),
    )


def _field(caption: str, index: int, control: Markup, submit: Markup | None) -> Markup:
    return tag(
        "div",
        {"class": "free"},
        tag("label", {"class": "label", "for": f"answer-{index}"}, caption),
        control,
        submit,
    )


def _text(contract: Mapping[str, Any], index: int, kept: _Kept, submit: Markup | None) -> Markup:
    limit = contract.get("max_length")
    caption = "Your answer" + (f" (at most {limit} characters)" if isinstance(limit, int) else "")
    area = tag(
        "textarea",
        {
            "name": f"text.{index}",
            "id": f"answer-{index}",
            "rows": 4,
            "maxlength": limit,
            "required": submit is not None,
        },
        escape(kept.get(f"text.{index}", ""), keep_newlines=True),
    )
    return _field(caption, index, area, submit)


def _number(contract: Mapping[str, Any], index: int, kept: _Kept, submit: Markup | None) -> Markup:
    low, high = contract.get("minimum"), contract.get("maximum")
    bounds = " to ".join(str(bound) for bound in (low, high) if bound is not None)
    box = tag(
        "input",
        {
            "type": "number",
            "name": f"number.{index}",
            "id": f"answer-{index}",
            "min": low,
            "max": high,
            "step": 1 if contract.get("integer") else "any",
            "value": kept.get(f"number.{index}"),
            "required": submit is not None,
        },
    )
    return _field("A number" + (f" ({bounds})" if bounds else ""), index, box, submit)


def _schema(contract: Mapping[str, Any], index: int, kept: _Kept, submit: Markup | None) -> Markup:
    editor = tag(
        "textarea",
        {"name": f"answer.{index}", "id": f"answer-{index}", "rows": 6, "spellcheck": "false"},
        kept.get(f"answer.{index}", ""),
    )
    shown = tag(
        "details",
        {"class": "schema"},
        tag("summary", {}, "The answer's JSON Schema"),
        tag("pre", {}, json.dumps(contract.get("schema"), indent=2, ensure_ascii=False)),
    )
    return join(_field("Your answer, typed as JSON", index, editor, submit), shown)


def contract_controls(
    contract: Mapping[str, Any], index: int, *, several: bool, submit: Markup | None, kept: _Kept
) -> Markup:
    """The controls answering pause ``index`` as its stored ``contract`` allows.

    ``submit``: the button sending a typed answer (``None`` when several pauses share one).
    """
    kind = contract.get("kind")
    if kind == "choice":
        options = list(contract.get("options") or [])
        return _choices(
            f"option.{index}",
            [(str(i), label(option)) for i, option in enumerate(options)],
            kept,
            several,
            "options",
        )
    if kind == "boolean":
        return _choices(f"boolean.{index}", [("true", "Yes"), ("false", "No")], kept, several, "options")
    if kind == "review":
        return _review(contract, index, kept, several)
    if kind == "text":
        return _text(contract, index, kept, submit)
    if kind == "number":
        return _number(contract, index, kept, submit)
    return _schema(contract, index, kept, submit)
