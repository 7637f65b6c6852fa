"""What the console's buttons do: answer a pause, fork from an old one, cancel, recover, delete.

Each action is a function of the store, the graphs, the thread and the
submitted form, returning an :class:`Outcome` the page shows after the
redirect. Nothing here raises for a refusal ilmek explains (a busy thread,
a pause already answered, a thread that moved on): the explanation is the
outcome. A resume or a recovery runs the graph in the calling request, to
its end or its next pause, as ``run`` always does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..checkpoint.base import Checkpointer
from ..engine import collect_result, resume_keyed, resume_run, run
from ..errors import IlmekError, ThreadBusyError
from ..execution.lifecycle import MovedOn
from ..graph import CompiledGraph
from ..operations import request_cancel
from ..types import Result
from . import json_input
from .reading import graph_for, held_since, thread_info
from .values import question_of

__all__ = ["ACTIONS", "Outcome", "answer", "cancel", "delete", "fork", "recover"]

Form = Mapping[str, str]


@attrs.frozen
class Outcome:
    """What an action did: ``tone`` is ``ok`` or ``error``; ``gone`` when the thread was deleted."""

    tone: str
    text: str
    gone: bool = False


def _failed(text: str) -> Outcome:
    return Outcome("error", text)


def _ended(result: Result, what: str) -> Outcome:
    if result.status == "done":
        return Outcome("ok", f"{what} The run finished.")
    if result.status == "interrupted":
        asks = "; ".join(question_of(pause.payload, 100) for pause in result.pending)
        return Outcome("ok", f"{what} The run paused again: {asks}")
    if result.status == "aborted":
        return Outcome("error", f"{what} The run was cancelled: {result.abort_reason or 'no reason given'}.")
    failures = "; ".join(f"node {node!r}: {type(error).__name__}: {error}" for node, error in result.errors)
    return Outcome("error", f"{what} The run failed, {failures or 'for an unknown reason'}.")


def _graph(
    checkpointer: Checkpointer, graphs: Mapping[str, CompiledGraph], thread_id: str
) -> tuple[CompiledGraph | None, str]:
    name, graph = graph_for(graphs, checkpointer.get(thread_id))
    if graph is None:
        named = f"graph {name!r}" if name else "the thread's graph"
        return None, f"The console was not given {named}: start it with --graph MODULE:GRAPH (or graphs=)."
    return graph, ""


def _answers(form: Form, count: int, ids: list[str]) -> dict[str, Any] | str:
    """The answers a form gives, by pause id, or what is wrong with them."""
    answers: dict[str, Any] = {}
    for index in range(count):
        text = form.get(f"choice.{index}")
        if text is None:
            text = form.get(f"answer.{index}", "null")
        try:
            answers[ids[index]] = json_input.loads(text)
        except ValueError as error:
            return (
                f"The answer to {ids[index]} is not JSON ({error}); nothing was answered. "
                'Write text in quotes: "yes".'
            )
    return answers


def _resume(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    thread_id: str,
    checkpoint_id: str | None,
    form: Form,
    *,
    forking: bool,
) -> Outcome:
    if not checkpoint_id:
        return _failed("The form named no checkpoint; nothing was answered.")
    graph, problem = _graph(checkpointer, graphs, thread_id)
    if graph is None:
        return _failed(problem)
    checkpoint = checkpointer.get(thread_id, checkpoint_id)
    if checkpoint is None or not checkpoint.pending:
        return _failed(
            f"Checkpoint {checkpoint_id} of this thread has no pause to answer; nothing was answered."
        )
    answers = _answers(form, len(checkpoint.pending), [pause.id for pause in checkpoint.pending])
    if isinstance(answers, str):
        return _failed(answers)
    try:
        if forking:
            result = resume_keyed(
                graph, answers, thread_id=thread_id, checkpointer=checkpointer, checkpoint_id=checkpoint_id
            )
        else:
            # The page showed these pauses; if the thread has moved on, an
            # answer meant for them must not go to whatever is open now (a
            # later pause may have the same id). The run checks that, with
            # the write that records the answers.
            the_run = resume_run(graph, answers, True, {"thread_id": thread_id, "checkpointer": checkpointer})
            the_run.answer_only_at = checkpoint_id
            result = collect_result(graph, the_run)
    except MovedOn:
        return _failed(
            "The thread moved on since the page was drawn (answered elsewhere?); nothing was "
            "answered. Look at it again."
        )
    except IlmekError as error:
        return _failed(f"Nothing was answered: {error}")
    return _ended(result, "Forked with a new answer." if forking else "Answered.")


def answer(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    thread_id: str,
    checkpoint_id: str | None,
    form: Form,
) -> Outcome:
    """Answer the open pauses of the thread's latest checkpoint (``resume_keyed``)."""
    return _resume(checkpointer, graphs, thread_id, checkpoint_id, form, forking=False)


def fork(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    thread_id: str,
    checkpoint_id: str | None,
    form: Form,
) -> Outcome:
    """Answer an earlier pause differently: a new branch from ``checkpoint_id``."""
    return _resume(checkpointer, graphs, thread_id, checkpoint_id, form, forking=True)


def cancel(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    thread_id: str,
    checkpoint_id: str | None,
    form: Form,
) -> Outcome:
    """Ask the run holding the thread to stop at its next superstep boundary."""
    reason = (form.get("reason") or "").strip()[:200] or "cancelled in the web console"
    shown = form.get("held_since")
    if shown:
        # The page was drawn while one run held the thread; ask only that run.
        info = thread_info(checkpointer, thread_id)
        if held_since(info) != shown:
            return _failed(
                "The run this page showed has ended"
                + ("; another run holds the thread now" if info is not None and info.running else "")
                + ". Nothing was cancelled: look at the thread again."
            )
    try:
        asked = request_cancel(checkpointer, thread_id, reason)
    except IlmekError as error:
        return _failed(f"Could not ask the run to stop: {error}")
    if not asked:
        return _failed("No run was holding the thread; there is nothing to cancel.")
    return Outcome("ok", "Asked the run to stop: it ends aborted at its next superstep boundary.")


def recover(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    thread_id: str,
    checkpoint_id: str | None,
    form: Form,
) -> Outcome:
    """Continue a stalled thread with ``run(graph, None, ...)``, replaying its recorded steps."""
    graph, problem = _graph(checkpointer, graphs, thread_id)
    if graph is None:
        return _failed(problem)
    try:
        result = run(graph, None, thread_id=thread_id, checkpointer=checkpointer)
    except IlmekError as error:
        return _failed(f"Nothing was run: {error}")
    return _ended(result, "Recovered.")


def delete(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    thread_id: str,
    checkpoint_id: str | None,
    form: Form,
) -> Outcome:
    """Delete the thread, its checkpoints and its journals; never one a live run holds."""
    if form.get("confirm") != "yes":
        return _failed("Tick the box to confirm; nothing was deleted.")
    try:
        checkpointer.delete_idle_thread(thread_id)
    except ThreadBusyError:
        return _failed("A run holds the thread: cancel it first; nothing was deleted.")
    except IlmekError as error:
        return _failed(f"Nothing was deleted: {error}")
    return Outcome("ok", f"Deleted thread {thread_id!r}.", gone=True)


ACTIONS = {"answer": answer, "fork": fork, "cancel": cancel, "recover": recover, "delete": delete}
"""Every action by the name its form posts to."""
