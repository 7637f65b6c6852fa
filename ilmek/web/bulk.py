"""Bulk actions: recover, cancel or delete the threads an operator ticked, or every thread of a list.

Two requests, as a careful person would want them. The threads page's
bulk forms (``GET /bulk``) name an action and either the ticked threads
(``thread=`` repeated) or the list's filter (``every=1`` with its
``status``, ``q``, ``meta`` and ``updated``); the console answers with a
page that says how many threads the action would touch, names them, and
carries a token for exactly that action on exactly that scope. Its
``POST /bulk`` acts thread by thread through the very functions a thread
page's buttons call (:data:`ilmek.web.actions.ACTIONS`, one rule each), so
a thread a run took meanwhile is left alone the same way, and the threads
page then says how many were done and why any others were not.

A filter's scope is fixed when the confirmation page is drawn: a recover
or a delete touches only the threads the filter matched then and that have
not been updated since (``updated_before`` that moment), at most
:data:`BULK_LIMIT` of them; a thread that changed meanwhile is not what the
person confirmed. A cancel is asked of the threads running when it is
sent (a running thread is updated at every superstep, and asking a run to
stop can be undone by recovering it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Final

import attrs

from .. import checks
from ..checkpoint.base import Checkpointer
from ..errors import InvalidArgumentError
from ..graph import CompiledGraph
from ..types import ThreadInfo
from .actions import ACTIONS, Outcome, off_the_request, recover_now, recoverable
from .background import Background, console_process
from .reading import InboxQuery, inbox_query, listing_filters

__all__ = [
    "BULK_ACTIONS",
    "BULK_LIMIT",
    "LEFT_ALONE",
    "BulkScope",
    "applies",
    "bulk_scope",
    "run_bulk",
    "scope_threads",
]

BULK_ACTIONS: Final = ("recover", "cancel", "delete")
"""The actions a bulk form may ask for."""
BULK_LIMIT: Final = 1000
"""The most threads one bulk action touches (the rest: confirm again)."""
_MAX_TICKED: Final = 500
_BACKGROUND_KEY: Final = "\0bulk recover"  # never a thread id: ids hold no NUL

VERBS: Final = {"recover": "Recover", "cancel": "Cancel", "delete": "Delete"}
"""How each bulk action is named on its buttons."""


@attrs.frozen(kw_only=True)
class BulkScope:
    """What a bulk action acts on: ``ticked`` threads, or every thread of ``query`` as of ``at``.

    ``at``: the moment the confirmation page was drawn (seconds since the
    epoch), for a filter's scope; ``None`` until then. ``back``: the list
    the form was sent from, where the browser returns after the action.
    """

    action: str
    ticked: tuple[str, ...] = ()
    query: InboxQuery | None = None
    at: float | None = None
    back: InboxQuery = attrs.field(factory=InboxQuery)

    @property
    def every(self) -> bool:
        """Whether the scope is every thread of a filter (rather than ticked threads)."""
        return self.query is not None

    def token_subject(self) -> str:
        """What a bulk form's token is made for: the ticked ids, or the filter and its moment."""
        if self.query is None:
            return "threads\0" + "\0".join(self.ticked)
        query = self.query
        metadata = "\0".join(sorted(f"{key}={value!r}" for key, value in query.metadata.items()))
        return f"filter\0{query.status}\0{query.search}\0{metadata}\0{query.updated}\0{self.at!r}"


def bulk_scope(args: Mapping[str, Sequence[str]], page_size: int) -> BulkScope | str:
    """The scope a bulk form or confirmation names, or why it names none (a sentence).

    ``args``: the form's fields, each with every value it was sent.
    """

    def first(name: str) -> str:
        values = args.get(name)
        return values[0] if values else ""

    action = first("action")
    if action not in BULK_ACTIONS:
        return "The form names no action to do (recover, cancel or delete)."
    problems: list[str] = []
    # The list the form was sent from: the filter of every thread, or where ticked ones go back to.
    query = inbox_query({name: list(values) for name, values in args.items()}, page_size, problems)
    if first("every") == "1":
        if problems:
            return f"The list's filter cannot be read ({'; '.join(problems)}); nothing was done."
        if query.graph:
            return (
                "A list filtered by graph is a scan, not a filter the store answers: tick the threads "
                "instead; nothing was done."
            )
        at = _moment(first("at"))
        return BulkScope(action=action, query=query, at=at, back=query)
    ticked = tuple(dict.fromkeys(thread for thread in args.get("thread", ()) if thread))
    if not ticked:
        return "No thread was ticked: tick the threads to act on, or use the buttons for every thread."
    if len(ticked) > _MAX_TICKED:
        return f"At most {_MAX_TICKED} ticked threads at once; nothing was done."
    for thread_id in ticked:
        try:
            checks.thread_id(thread_id)
        except InvalidArgumentError as error:
            return f"A ticked thread is not a thread id ({error}); nothing was done."
    return BulkScope(action=action, ticked=ticked, back=query)


def _moment(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value > 0 else None


def applies(action: str, info: ThreadInfo) -> bool:
    """Whether ``action`` would do anything to a thread as its summary stands.

    Recover: a failed or stalled thread no run holds (the action itself
    checks again, with the latest checkpoint); cancel: a thread a run holds;
    delete: a thread no run holds.
    """
    if action == "recover":
        return recoverable(info, None)
    if action == "cancel":
        return info.running
    return not info.running


def scope_threads(checkpointer: Checkpointer, scope: BulkScope) -> list[ThreadInfo]:
    """The threads ``scope`` names, as stored now (a ticked thread that is gone is left out).

    A filter's threads are those it matches (to recover or delete: updated
    before ``scope.at``, or now), at most :data:`BULK_LIMIT` + 1 (one more tells there are more).
    """
    if scope.query is None:
        found = (checkpointer.get_thread(thread_id) for thread_id in scope.ticked)
        return [info for info in found if info is not None]
    filters = listing_filters(scope.query)
    if scope.action != "cancel":
        moment = scope.at if scope.at is not None else time.time()
        before = filters.get("updated_before")
        filters["updated_before"] = moment if before is None else min(before, moment)
    listed: list[ThreadInfo] = checkpointer.list_threads(**filters, limit=BULK_LIMIT + 1)
    return listed


def run_bulk(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    scope: BulkScope,
    form: Mapping[str, str],
    *,
    user: str | None,
    background: Background | None,
) -> Outcome:
    """Do the scope's action to each of its threads; what the threads page says of it."""
    infos = scope_threads(checkpointer, scope)[:BULK_LIMIT]
    if not infos:
        return Outcome("error", "None of those threads is stored any more; nothing was done.")
    # As the confirmation counted them; each action checks its thread again as it acts.
    threads = [info.id for info in infos if applies(scope.action, info)]
    skipped = len(infos) - len(threads)
    if scope.action == "recover":
        return _recover_all(checkpointer, graphs, threads, skipped, background)
    act = ACTIONS[scope.action]
    # The same form a thread page's button sends: a delete confirmed (this page was the confirmation).
    fields = {"confirm": "yes", "reason": form.get("reason", "")}
    outcomes = {
        thread_id: act(checkpointer, graphs, thread_id, None, fields, user=user, background=background)
        for thread_id in threads
    }
    return summary(scope.action, outcomes, skipped)


def _recover_all(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    threads: list[str],
    skipped: int,
    background: Background | None,
) -> Outcome:
    """Recover the threads one after another, in one of the console's background runs."""

    def work(cancel: threading.Event) -> Outcome:
        outcomes: dict[str, Outcome] = {}
        for thread_id in threads:
            if cancel.is_set():
                break  # the console is closing: the rest stay as they are
            outcomes[thread_id] = recover_now(checkpointer, graphs, thread_id, cancel)
        return summary("recover", outcomes, skipped)

    going_on = (
        f"Recovering {_threads(len(threads))} one after another in {console_process()}: the runs go on "
        "after this page. The Failed and Unfinished tabs show what is left."
    )
    return off_the_request(background, _BACKGROUND_KEY, work, going_on)


LEFT_ALONE: Final = {
    "recover": "not failed or stalled, or a run holds them",
    "cancel": "no run holds them",
    "delete": "a run holds them: cancel those first",
}
"""Why a bulk action leaves a thread alone, by action (see :func:`applies`)."""
_DONE: Final = {"recover": "Recovered", "cancel": "Asked to stop", "delete": "Deleted"}
_SHOWN_FAILURES: Final = 5


def _threads(count: int) -> str:
    return "1 thread" if count == 1 else f"{count:,} threads"


def summary(action: str, outcomes: Mapping[str, Outcome], skipped: int = 0) -> Outcome:
    """One note for a bulk action: how many threads it did, which it could not, how many it left alone."""
    done = [thread_id for thread_id, outcome in outcomes.items() if outcome.tone == "ok"]
    failed = {thread_id: outcome for thread_id, outcome in outcomes.items() if outcome.tone != "ok"}
    if failed:
        lines = [f"{_DONE[action]} {len(done):,} of {_threads(len(outcomes))}."]
    else:
        lines = [f"{_DONE[action]} {_threads(len(done))}."]
    if skipped:
        lines.append(f"Left alone ({LEFT_ALONE[action]}): {_threads(skipped)}.")
    if failed:
        lines.append(f"Not done: {_threads(len(failed))}:")
        shown = list(failed.items())[:_SHOWN_FAILURES]
        lines += [f"{thread_id}: {outcome.text}" for thread_id, outcome in shown]
        if len(failed) > _SHOWN_FAILURES:
            lines.append(f"and {len(failed) - _SHOWN_FAILURES:,} more.")
    return Outcome("ok" if done and not failed else "error", "\n".join(lines))
