"""The page of an answer link, ``/answer/<token>``: that one pause, answerable with the token alone.

The token (from :func:`ilmek.answer_token`) is the page's only credential:
it needs no login, and it opens nothing but its pause. The form it draws is
the console's own for a pause; its POST carries a form token bound to the
thread and pause (cross-site requests are refused by the console before
this runs). A link that was altered or signed with another secret is a 400
page; an expired one, or one whose pause was already answered, a 410: never
a 500, and never a word about which part was wrong.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ..checkpoint.base import Checkpointer
from ..errors import AnswerRejectedError, IlmekError, ThreadBusyError
from ..graph import CompiledGraph
from ..links import open_pause, read_token, resume_with_token
from ..types import Pending
from .answers import answers_from_form
from .csrf import Guard
from .html import Child, Markup, tag
from .links import Links
from .pause_forms import pause_fields
from .reading import graph_for

__all__ = ["LinkPage", "answer_page"]

_ACTION = "answer-link"


@attrs.frozen(kw_only=True)
class LinkPage:
    """What the console sends back for an answer link: a status, a title and the page's body."""

    status: int
    title: str
    body: tuple[Child, ...]


def _refused(status: int, title: str, text: str) -> LinkPage:
    return LinkPage(
        status=status, title=title, body=(tag("h1", {}, title), tag("p", {"class": "note error"}, text))
    )


def answer_page(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    guard: Guard,
    links: Links,
    token: str,
    *,
    secret: str | bytes,
    form: Mapping[str, str] | None = None,
) -> LinkPage:
    """The page for ``token``: its pause's form (``form`` is None), or what answering with ``form`` did."""
    try:
        signed = read_token(token, secret=secret)
    except AnswerRejectedError as refusal:
        if refusal.reason == "expired":
            return _refused(410, "This link has expired", "Ask for a new link; nothing was answered.")
        return _refused(
            400, "This link is not valid", "Check that the whole link was copied; nothing was answered."
        )
    try:
        latest, pause = open_pause(checkpointer, signed)
    except AnswerRejectedError as refusal:
        if refusal.reason == "already answered":
            return _refused(410, "Already answered", "This question was answered already; a link works once.")
        return _refused(409, "Not answerable by link yet", str(refusal))
    here = links.to(f"/answer/{token}")
    if form is None:
        return _form_page(guard, here, pause, signed.thread_id, None, 200)
    if not guard.valid(form.get("token"), _ACTION, f"{signed.thread_id}\0{pause.id}"):
        return _refused(
            403, "The form has expired", "Reload the page and answer again; nothing was answered."
        )
    typed = form.get("answer.0")  # kept in the editor when the answer is refused
    answers = answers_from_form(form, [pause])
    if isinstance(answers, str):
        return _form_page(guard, here, pause, signed.thread_id, answers, 422, typed, form)
    _name, graph = graph_for(graphs, latest)
    if graph is None:
        return _refused(503, "Cannot answer here", "This console was not given the question's graph.")
    try:
        result = resume_with_token(graph, token, answers[pause.id], secret=secret, checkpointer=checkpointer)
    except AnswerRejectedError as refusal:
        if refusal.reason == "already answered":
            return _refused(410, "Already answered", "This question was answered already; a link works once.")
        return _form_page(
            guard,
            here,
            pause,
            signed.thread_id,
            f"That answer does not fit: {refusal.reason}",
            422,
            typed,
            form,
        )
    except ThreadBusyError:
        return _form_page(
            guard, here, pause, signed.thread_id, "The run is busy; send your answer again.", 409, typed, form
        )
    except IlmekError as error:
        return _refused(409, "Not answered", f"Nothing was answered: {error}")
    ended = "Thank you: your answer was recorded." + (
        "" if result.status in ("done", "interrupted") else " The run that followed did not finish."
    )
    return LinkPage(
        status=200, title="Answered", body=(tag("h1", {}, "Answered"), tag("p", {"class": "note ok"}, ended))
    )


def _form_page(
    guard: Guard,
    here: object,
    pause: Pending,
    thread_id: str,
    problem: str | None,
    status: int,
    typed: str | None = None,
    kept: Mapping[str, str] | None = None,
) -> LinkPage:
    submit = tag("button", {"type": "submit", "name": "send"}, "Send the answer")
    form: Markup = tag(
        "form",
        {"method": "post", "action": here, "class": "answer-link"},
        tag(
            "input",
            {"type": "hidden", "name": "token", "value": guard.token(_ACTION, f"{thread_id}\0{pause.id}")},
        ),
        pause_fields(pause, 0, inputs=True, submit=submit, typed=typed, kept=kept),
    )
    return LinkPage(
        status=status,
        title="A question for you",
        body=(
            tag("h1", {}, "A question for you"),
            tag("p", {"class": "note error", "role": "alert"}, problem) if problem is not None else None,
            form,
        ),
    )
