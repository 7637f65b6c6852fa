"""What the pages read from the checkpointer, gathered before any HTML is written.

Reads are bounded so that a page costs the same on a store of a hundred
threads or a hundred thousand: the threads page asks ``list_threads`` for
one page and reads the open pauses of the paused threads on that page only
(each payload a bounded preview, :mod:`ilmek.web.previews`); a thread page
lists at most :data:`TREE_LIMIT` checkpoints (their channel values load only
for the checkpoint shown and its parent).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from ..checkpoint.base import Checkpointer
from ..errors import IlmekError
from ..graph import CompiledGraph
from ..types import Checkpoint, JournalEntry, Pending, ThreadInfo
from . import json_input
from .previews import latest_pauses
from .tree import answered_pauses

__all__ = [
    "STATUSES",
    "TREE_LIMIT",
    "InboxPage",
    "InboxQuery",
    "InboxRow",
    "PauseView",
    "ThreadView",
    "graph_for",
    "parse_metadata_filter",
    "read_inbox",
    "read_thread",
    "thread_info",
]

STATUSES: Final = ("interrupted", "error", "running", "unfinished", "done", "all")
"""The threads page's filters, the inbox (``interrupted``) first."""
TREE_LIMIT: Final = 300
"""The most checkpoints a thread page lists and draws."""


@attrs.frozen(kw_only=True)
class InboxQuery:
    """What the threads page lists: a status filter, a search, metadata pairs, a page."""

    status: str = "interrupted"
    search: str = ""
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    offset: int = 0
    limit: int = 50


@attrs.frozen(kw_only=True)
class InboxRow:
    """One thread on the threads page, with its open pauses if it waits for a person.

    Each pause's payload is a bounded preview (:func:`ilmek.web.previews.cut`), not the whole value.
    """

    info: ThreadInfo
    pending: tuple[Pending, ...] = ()


@attrs.frozen(kw_only=True)
class InboxPage:
    """One page of threads; ``more`` says whether another page follows."""

    rows: list[InboxRow]
    more: bool


def parse_metadata_filter(text: str) -> tuple[str, Any]:
    """``key=value`` as a metadata filter pair.

    The value is read as JSON when it is a JSON number, ``true``, ``false``,
    ``null`` or a quoted string (``tier=3`` matches the number 3,
    ``tier="3"`` the text), and as plain text otherwise.

    Raises:
        ValueError: no ``=``, an empty key, or a value nested deeper than
            :data:`ilmek.web.json_input.MAX_DEPTH` levels.
    """
    key, equals, raw = text.partition("=")
    key = key.strip()
    if not equals or not key:
        raise ValueError(f"a metadata filter is key=value, got {text!r}")
    raw = raw.strip()
    try:
        value = json_input.loads(raw)
    except json_input.TooDeepError as error:
        raise ValueError(f"the value of the metadata filter {key!r} is not taken: {error}") from None
    except ValueError:
        return key, raw
    if isinstance(value, (list, dict)):
        return key, raw
    return key, value


def read_inbox(checkpointer: Checkpointer, query: InboxQuery) -> InboxPage:
    """One page of threads, and the open pauses of the paused ones among them."""
    status = None if query.status == "all" else query.status
    infos = checkpointer.list_threads(
        search=query.search or None,
        metadata=dict(query.metadata) or None,
        status=status,
        offset=query.offset,
        # One more than shown tells whether a next page exists, without counting.
        limit=query.limit + 1,
    )
    rows = []
    for info in infos[: query.limit]:
        pending: tuple[Pending, ...] = ()
        if info.status == "interrupted":
            # Only the pauses, and of each payload a bounded preview: never a payload decoded whole.
            pending = latest_pauses(checkpointer, info.id)
        rows.append(InboxRow(info=info, pending=pending))
    return InboxPage(rows=rows, more=len(infos) > query.limit)


def graph_for(
    graphs: Mapping[str, CompiledGraph], checkpoint: Checkpoint | None
) -> tuple[str | None, CompiledGraph | None]:
    """The name a checkpoint records for its graph, and that graph if the console was given it.

    A checkpoint that names no graph (written before graphs were named) is
    taken to be of the only graph, when exactly one was given.
    """
    name = checkpoint.metadata.get("graph") if checkpoint is not None else None
    if isinstance(name, str):
        return name, graphs.get(name)
    if name is None and len(graphs) == 1:
        only = next(iter(graphs))
        return only, graphs[only]
    return None, None


def thread_info(checkpointer: Checkpointer, thread_id: str) -> ThreadInfo | None:
    """The thread's summary, or ``None`` (also from a store that keeps no summaries)."""
    try:
        return checkpointer.get_thread(thread_id)
    except NotImplementedError:
        return None


def held_since(info: ThreadInfo | None) -> str:
    """When the run holding the thread took it, as a cancel form carries it ('' when none does).

    It tells one run from the next on the same thread.
    """
    return info.held_since.isoformat() if info is not None and info.held_since is not None else ""


@attrs.frozen(kw_only=True)
class PauseView:
    """A pause of the checkpoint shown, and what became of it.

    Attributes:
        pause: The pause.
        state: ``waiting`` (the thread's latest checkpoint, no answer yet),
            ``answered`` (a run went on from it, or its answer is recorded),
            or ``passed`` (the thread moved on elsewhere: a fork or an edit).
        answer: The journal entry holding the answer, while it is kept.
    """

    pause: Pending
    state: str
    answer: JournalEntry | None = None


@attrs.frozen(kw_only=True)
class ThreadView:
    """Everything a thread page shows.

    Attributes:
        thread_id: The thread.
        info: Its summary (status, error, whether a run holds it).
        latest: Its latest checkpoint.
        checkpoints: Its newest checkpoints (at most :data:`TREE_LIMIT`).
        truncated: Older checkpoints exist that are not listed.
        selected: The checkpoint shown, with its channel values.
        parent: Its parent, for the difference (``None`` for a first checkpoint or a pruned parent).
        journals: The journals of the selected checkpoint's tasks, by task key.
        pauses: The selected checkpoint's pauses.
        recorded: Answers recorded for the latest checkpoint's pauses by a
            resume that did not finish (it failed), by pause id.
        graph_name: The graph the thread's latest checkpoint names.
        graph: That graph, if the console was given it.
        problems: What could not be read (damaged rows), for the page to say.
    """

    thread_id: str
    info: ThreadInfo | None
    latest: Checkpoint
    checkpoints: list[Checkpoint]
    truncated: bool
    selected: Checkpoint
    parent: Checkpoint | None
    journals: Mapping[str, tuple[JournalEntry, ...]]
    pauses: list[PauseView]
    recorded: Mapping[str, JournalEntry]
    graph_name: str | None
    graph: CompiledGraph | None
    problems: tuple[str, ...] = ()


def _recorded_answer(journals: Mapping[str, tuple[JournalEntry, ...]], pause: Pending) -> JournalEntry | None:
    """The journal entry holding a pause's answer, while its task's journal keeps it."""
    entries = journals.get(pause.task_key, ())
    return next((entry for entry in entries if entry.key == pause.key and entry.answered), None)


def _journals(
    checkpointer: Checkpointer, checkpoint: Checkpoint, problems: list[str]
) -> Mapping[str, tuple[JournalEntry, ...]]:
    """The journals of a checkpoint's tasks; none, and a problem noted, when they cannot be read."""
    try:
        return checkpointer.load_journals(checkpoint, [task.task_key for task in checkpoint.next])
    except (IlmekError, UnicodeError) as error:
        # A damaged row (a journal chain naming an id no text column can hold, a malformed
        # entry): the rest of the thread is still worth showing.
        problems.append(
            f"The journals of checkpoint {checkpoint.id} could not be read, so its recorded steps "
            f"and answers are not shown: {type(error).__name__}: {error}"
        )
        return {}


def read_thread(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    thread_id: str,
    checkpoint_id: str | None = None,
) -> ThreadView | None:
    """A thread as its page shows it, or ``None`` when it has no checkpoint (or not ``checkpoint_id``)."""
    latest = checkpointer.get(thread_id)
    if latest is None:
        return None
    selected = (
        latest if checkpoint_id in (None, "", latest.id) else checkpointer.get(thread_id, checkpoint_id)
    )
    if selected is None:
        return None
    listed = checkpointer.list(thread_id, limit=TREE_LIMIT + 1)
    truncated = len(listed) > TREE_LIMIT
    listed = listed[:TREE_LIMIT]
    parent = checkpointer.get(thread_id, selected.parent_id) if selected.parent_id else None
    problems: list[str] = []
    journals = _journals(checkpointer, selected, problems)
    answered = answered_pauses(listed)
    pauses = []
    for pause in selected.pending:
        entry = _recorded_answer(journals, pause)
        if selected.id in answered or entry is not None:
            state = "answered"
        elif selected.id == latest.id:
            state = "waiting"
        else:
            state = "passed"
        pauses.append(PauseView(pause=pause, state=state, answer=entry))
    latest_journals = journals if selected.id == latest.id else _journals(checkpointer, latest, problems)
    recorded = {
        pause.id: entry
        for pause in latest.pending
        if (entry := _recorded_answer(latest_journals, pause)) is not None
    }
    graph_name, graph = graph_for(graphs, latest)
    return ThreadView(
        thread_id=thread_id,
        info=thread_info(checkpointer, thread_id),
        latest=latest,
        checkpoints=listed,
        truncated=truncated,
        selected=selected,
        parent=parent,
        journals=journals,
        pauses=pauses,
        recorded=recorded,
        graph_name=graph_name,
        graph=graph,
        problems=tuple(problems),
    )
