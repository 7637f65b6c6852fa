"""What the console's buttons do: answer a pause, fork from an old one, cancel, recover, delete.

Each action is a function of the store, the graphs, the thread and the
submitted form, returning an :class:`Outcome` the page shows after the
redirect. Nothing here raises for a refusal ilmek explains (a busy thread,
a pause already answered, a thread that moved on): the explanation is the
outcome. A resume or a recovery runs the graph to its end or its next
pause in the console's :class:`~ilmek.web.background.Background` pool: the
request waits only a moment for it, and a longer run goes on after the
request has returned (without a pool, in the request, as ``run`` does).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

import attrs

from ..checkpoint.base import Checkpointer
from ..engine import collect_result, resume_keyed, resume_run, run
from ..errors import IlmekError, ThreadBusyError
from ..execution.lifecycle import MovedOn
from ..graph import CompiledGraph
from ..operations import request_cancel
from ..types import Checkpoint, Result, ThreadInfo
from .answers import answers_from_form
from .background import Background, console_process, quick_result
from .contract_input import contract_of
from .reading import graph_for, held_since, thread_info
from .values import question_of

__all__ = [
    "ACTIONS",
    "Outcome",
    "answer",
    "cancel",
    "delete",
    "fork",
    "off_the_request",
    "recover",
    "recover_now",
    "recoverable",
]

Form = Mapping[str, str]


@attrs.frozen
class Outcome:
    """What an action did: ``tone`` is ``ok`` or ``error``; ``gone`` when the thread was deleted.

    ``cancelling``: the run a cancel was asked of (when it took the thread), so
    the page can say the request is on its way until that run ends.
    ``refused``: the form's answer was refused before anything was written
    (the page is drawn again with what was typed, to correct it).
    """

    tone: str
    text: str
    gone: bool = False
    cancelling: str | None = None
    refused: bool = False


def _failed(text: str) -> Outcome:
    return Outcome("error", text)


def off_the_request(
    background: Background | None, key: str, work: Callable[[threading.Event], Outcome], going_on: str
) -> Outcome:
    """Run ``work`` in the console's pool under ``key`` (a thread id); its outcome if it ends at once,
    else ``going_on``: what the page says of a run that goes on after it."""
    if background is None:
        return work(threading.Event())
    started = background.start(key, work)
    if isinstance(started, str):
        return _failed(started)
    ended, outcome = quick_result(started)
    if ended:
        assert isinstance(outcome, Outcome)
        return outcome
    return Outcome("ok", going_on)


def _going_on(doing: str) -> str:
    return (
        f"{doing} in {console_process()}: the run goes on after this page, which refreshes itself "
        "until the run gives the thread back."
    )


def _ended(result: Result, done: str, tried: str, *, again: bool = False) -> Outcome:
    """How a run the action started ended: ``done`` says what was done, ``tried`` what was tried."""
    if result.status == "done":
        return Outcome("ok", f"{done} The run finished.")
    if result.status == "interrupted":
        asks = "; ".join(question_of(pause.payload, 100) for pause in result.pending)
        return Outcome("ok", f"{done} The run paused again: {asks}")
    if result.status == "aborted":
        return Outcome("error", f"{tried} The run was cancelled: {result.abort_reason or 'no reason given'}.")
    failures = "; ".join(f"node {node!r}: {type(error).__name__}: {error}" for node, error in result.errors)
    failed = "The run failed again" if again else "The run failed"
    return Outcome("error", f"{tried} {failed}, {failures or 'for an unknown reason'}.")


def cancel_reason(typed: str | None, user: str | None) -> str:
    """The reason a cancel from the console records: where it came from, who asked, and why."""
    said = "cancelled in the web console" + (f" by {user}" if user else "")
    why = (typed or "").strip()[:200]
    return f"{said}: {why}" if why else said


def _graph(
    checkpointer: Checkpointer, graphs: Mapping[str, CompiledGraph], thread_id: str
) -> tuple[CompiledGraph | None, str]:
    name, graph = graph_for(graphs, checkpointer.get(thread_id))
    if graph is None:
        named = f"graph {name!r}" if name else "the thread's graph"
        return None, f"The console was not given {named}: start it with --graph MODULE:GRAPH (or graphs=)."
    return graph, ""


def _resume(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    thread_id: str,
    checkpoint_id: str | None,
    form: Form,
    *,
    forking: bool,
    background: Background | None,
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
    # The whole payloads, as stored: an option or a draft is sent as the pause holds it.
    answers = answers_from_form(form, checkpoint.pending)
    if isinstance(answers, str):
        # A pause with a contract draws its page again with what was typed (a 422); else, as before, a note.
        contracted = any(contract_of(pause) is not None for pause in checkpoint.pending)
        return Outcome("error", answers, refused=contracted)

    # A fork names the latest checkpoint the page saw: sent twice, the second finds it moved on.
    expect = form.get("expect") or None

    def work(cancel: threading.Event) -> Outcome:
        return _resumed(
            graph,
            checkpointer,
            thread_id,
            checkpoint_id,
            answers,
            forking=forking,
            cancel=cancel,
            expect=expect,
        )

    return off_the_request(background, thread_id, work, _going_on("Answered; the run is going on"))


def _resumed(
    graph: CompiledGraph,
    checkpointer: Checkpointer,
    thread_id: str,
    checkpoint_id: str,
    answers: dict[str, object],
    *,
    forking: bool,
    cancel: threading.Event,
    expect: str | None = None,
) -> Outcome:
    """Answer (or fork, expecting the latest checkpoint to be ``expect``) and run to the end or the next
    pause: what the page says of it."""
    try:
        if forking:
            result = resume_keyed(
                graph,
                answers,
                thread_id=thread_id,
                checkpointer=checkpointer,
                checkpoint_id=checkpoint_id,
                cancel=cancel,
                expect_checkpoint_id=expect,
            )
        else:
            # The page showed these pauses; if the thread has moved on, an
            # answer meant for them must not go to whatever is open now (a
            # later pause may have the same id). The run checks that, with
            # the write that records the answers.
            options = {"thread_id": thread_id, "checkpointer": checkpointer, "cancel": cancel}
            the_run = resume_run(graph, answers, True, options)
            the_run.answer_only_at = checkpoint_id
            result = collect_result(graph, the_run)
    except MovedOn as moved:
        if forking:
            return _failed(
                "The thread moved on since the page was drawn: this fork was made already (its branch "
                f"ends at checkpoint {moved.checkpoint_id}), or another answer came first; nothing was "
                "run again. Look at the thread's latest checkpoint."
            )
        return _failed(
            "The thread moved on since the page was drawn (answered elsewhere?); nothing was "
            "answered. Look at it again."
        )
    except IlmekError as error:
        return _failed(f"Nothing was answered: {error}")
    if forking:
        return _ended(result, "Forked with a new answer.", "Forked with a new answer, but it did not finish.")
    return _ended(result, "Answered.", "The answer was recorded, but the run did not finish.")


def answer(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    thread_id: str,
    checkpoint_id: str | None,
    form: Form,
    *,
    user: str | None = None,
    background: Background | None = None,
) -> Outcome:
    """Answer the open pauses of the thread's latest checkpoint (``resume_keyed``)."""
    return _resume(checkpointer, graphs, thread_id, checkpoint_id, form, forking=False, background=background)


def fork(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    thread_id: str,
    checkpoint_id: str | None,
    form: Form,
    *,
    user: str | None = None,
    background: Background | None = None,
) -> Outcome:
    """Answer an earlier pause differently: a new branch from ``checkpoint_id``."""
    return _resume(checkpointer, graphs, thread_id, checkpoint_id, form, forking=True, background=background)


def cancel(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    thread_id: str,
    checkpoint_id: str | None,
    form: Form,
    *,
    user: str | None = None,
    background: Background | None = None,
) -> Outcome:
    """Ask the run holding the thread to stop at its next superstep boundary."""
    reason = cancel_reason(form.get("reason"), user)
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
    return Outcome(
        "ok",
        f"Asked the run to stop ({reason}): it ends aborted at its next superstep boundary.",
        cancelling=shown or held_since(thread_info(checkpointer, thread_id)) or None,
    )


def recoverable(info: ThreadInfo | None, latest: Checkpoint | None) -> bool:
    """Whether Recover may continue a thread: it failed or stalled, no run holds it, no pause is open.

    ``run(graph, None)`` on a finished thread would start it again from
    ``START``, and on a paused one it would refuse: neither is a recovery.
    """
    # A store that keeps no thread summaries: the latest checkpoint's own status.
    status = info.status if info is not None else latest.status if latest is not None else None
    running = info is not None and info.running
    return status in ("error", "unfinished") and not running and (latest is None or not latest.pending)


def recover_now(
    checkpointer: Checkpointer, graphs: Mapping[str, CompiledGraph], thread_id: str, cancel: threading.Event
) -> Outcome:
    """Continue a failed or stalled thread in this thread of the process, until it ends or pauses."""
    latest = checkpointer.get(thread_id)
    if not recoverable(thread_info(checkpointer, thread_id), latest):
        return _failed("The thread has not failed or stalled (or a run holds it); nothing was run.")
    graph, problem = _graph(checkpointer, graphs, thread_id)
    if graph is None:
        return _failed(problem)
    try:
        result = run(graph, None, thread_id=thread_id, checkpointer=checkpointer, cancel=cancel)
    except IlmekError as error:
        return _failed(f"Nothing was run: {error}")
    return _ended(result, "Recovered.", "Recovery did not succeed.", again=True)


def recover(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    thread_id: str,
    checkpoint_id: str | None,
    form: Form,
    *,
    user: str | None = None,
    background: Background | None = None,
) -> Outcome:
    """Continue a stalled thread with ``run(graph, None, ...)``, replaying its recorded steps."""
    graph, problem = _graph(checkpointer, graphs, thread_id)
    if graph is None:
        return _failed(problem)

    def work(cancel: threading.Event) -> Outcome:
        return recover_now(checkpointer, graphs, thread_id, cancel)

    return off_the_request(background, thread_id, work, _going_on("Recovering"))


def delete(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    thread_id: str,
    checkpoint_id: str | None,
    form: Form,
    *,
    user: str | None = None,
    background: Background | None = None,
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
