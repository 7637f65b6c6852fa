"""What the pages read from the checkpointer, gathered before any HTML is written.

Reads are bounded so that a page costs the same on a store of a hundred
threads or a hundred thousand: the threads page asks ``list_threads`` for
one page and reads the open pauses of the paused threads on that page only
(each payload a bounded preview, :mod:`ilmek.web.previews`); a thread page
lists at most :data:`TREE_LIMIT` checkpoints (their channel values load only
for the checkpoint shown and its parent).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ..checkpoint.base import Checkpointer
from ..errors import IlmekError
from ..graph import CompiledGraph
from ..types import Checkpoint, JournalEntry, Pending, ThreadInfo
from . import json_input
from .children import ChildView, read_children
from .counts import thread_counts
from .previews import LatestSummary, latest_summary
from .tree import answered_pauses, pause_state

__all__ = [
    "GRAPH_SCAN",
    "MATCH_COUNT",
    "STATUSES",
    "TREE_LIMIT",
    "UPDATED",
    "InboxPage",
    "InboxQuery",
    "InboxRow",
    "PauseView",
    "ThreadView",
    "filtered",
    "graph_for",
    "inbox_query",
    "listing_filters",
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
    """What the threads page lists: a status filter, a search, metadata pairs, a graph, a time, a page.

    ``typed``: the metadata filters as the person typed them (shown back in
    the form, even one that could not be read). ``updated``: one of
    :data:`UPDATED` (``""``: any time).
    """

    status: str = "interrupted"
    search: str = ""
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    offset: int = 0
    limit: int = 50
    graph: str = ""
    updated: str = ""
    typed: tuple[str, ...] = ()


UPDATED: Final = {
    "": ("any time", None, None),
    "1h": ("in the last hour", 3600, None),
    "24h": ("in the last 24 hours", 86400, None),
    "7d": ("in the last 7 days", 7 * 86400, None),
    "30d": ("in the last 30 days", 30 * 86400, None),
    "old7d": ("more than 7 days ago", None, 7 * 86400),
    "old30d": ("more than 30 days ago", None, 30 * 86400),
}
"""The time filters: name -> (label, updated within so many seconds, updated longer ago than so many)."""
MATCH_COUNT: Final = 1000
"""The most matching threads a filtered list counts (more read as "1,000+")."""
GRAPH_SCAN: Final = 1000
"""The most threads one page filtered by graph looks through (a graph is named by each checkpoint)."""


@attrs.frozen(kw_only=True)
class InboxRow:
    """One thread on the threads page, with its open pauses if it waits for a person.

    Each pause's payload is a bounded preview (:func:`ilmek.web.previews.cut`), not the whole value.
    ``ran``: the nodes whose superstep wrote its latest checkpoint (read for a finished thread).
    """

    info: ThreadInfo
    pending: tuple[Pending, ...] = ()
    graph: str | None = None
    ran: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class InboxPage:
    """One page of threads; ``more`` says whether another page follows, from ``next_offset``.

    ``counts``: the threads of each tab in the whole store (``None`` when
    the store cannot count them). ``scanned``: how many threads a graph
    filter looked through for this page. ``matched``: how many threads a
    search, metadata or time filter matches, counted up to :data:`MATCH_COUNT`
    (``None`` when unfiltered, or filtered by graph).
    """

    rows: list[InboxRow]
    more: bool
    next_offset: int = 0
    counts: Mapping[str, int] | None = None
    scanned: int = 0
    matched: int | None = None


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


_MAX_LIMIT: Final = 500
_MAX_OFFSET: Final = 10_000_000


def _number(text: str | None, default: int, low: int, high: int, name: str, problems: list[str]) -> int:
    if text is None or not text.strip():
        return default
    try:
        value = int(text)
    except ValueError:
        problems.append(f"{name} must be a whole number")
        return default
    if not low <= value <= high:
        problems.append(f"{name} must be between {low} and {high}")
        return default
    return value


def inbox_query(args: Mapping[str, list[str]], page_size: int, problems: list[str]) -> InboxQuery:
    """The threads page's query from its URL's arguments; what cannot be taken is added to ``problems``."""

    def arg(name: str) -> str:
        values = args.get(name)
        return values[0] if values else ""

    status = arg("status") or "interrupted"
    if status not in STATUSES:
        problems.append(f"unknown status {status!r}")
        status = "interrupted"
    metadata: dict[str, Any] = {}
    # Kept as typed, to show them back (one that cannot be read too, to correct it).
    typed = tuple(text for text in args.get("meta", []) if text.strip())
    for text in typed:
        try:
            key, value = parse_metadata_filter(text)
        except ValueError as error:
            problems.append(str(error))
            continue
        metadata[key] = value
    updated = arg("updated")
    if updated not in UPDATED:
        problems.append(f"unknown time filter {updated!r}")
        updated = ""
    return InboxQuery(
        status=status,
        search=arg("q").strip()[:200],
        metadata=metadata,
        offset=_number(arg("offset"), 0, 0, _MAX_OFFSET, "offset", problems),
        limit=_number(arg("limit"), page_size, 1, _MAX_LIMIT, "limit", problems),
        graph=arg("graph").strip()[:200],
        updated=updated,
        typed=typed,
    )


def listing_filters(query: InboxQuery) -> dict[str, Any]:
    """The ``list_threads`` keywords of a threads page's status, search, metadata and time filters."""
    now = time.time()
    _, within, older = UPDATED.get(query.updated, UPDATED[""])
    return {
        "search": query.search or None,
        "metadata": dict(query.metadata) or None,
        "status": None if query.status == "all" else query.status,
        "updated_after": now - within if within is not None else None,
        "updated_before": now - older if older is not None else None,
    }


def _row(checkpointer: Checkpointer, info: ThreadInfo, summary: LatestSummary | None = None) -> InboxRow:
    if summary is None and info.status in ("interrupted", "done"):
        # Only the pauses, and of each payload a bounded preview: never a payload decoded whole;
        # of a finished thread, what ran last (its outcome).
        summary = latest_summary(checkpointer, info.id, pauses=info.status == "interrupted")
    if summary is None:
        return InboxRow(info=info)
    return InboxRow(info=info, pending=summary.pauses, graph=summary.graph, ran=summary.ran)


def _by_graph(checkpointer: Checkpointer, query: InboxQuery, filters: dict[str, Any]) -> InboxPage:
    """A page of the threads whose latest checkpoint names ``query.graph``, looking through at most
    :data:`GRAPH_SCAN` threads from ``query.offset`` on."""
    rows: list[InboxRow] = []
    position = query.offset
    end: int | None = None  # where the threads end, once a short batch shows it
    while len(rows) < query.limit and position - query.offset < GRAPH_SCAN and end is None:
        batch = checkpointer.list_threads(**filters, offset=position, limit=100)
        if len(batch) < 100:
            end = position + len(batch)
        for info in batch:
            position += 1
            summary = latest_summary(checkpointer, info.id, pauses=info.status == "interrupted")
            if summary.graph == query.graph:
                rows.append(_row(checkpointer, info, summary))
                if len(rows) == query.limit:
                    break
    return InboxPage(
        rows=rows,
        more=end is None or position < end,
        next_offset=position,
        scanned=position - query.offset,
    )


def read_inbox(checkpointer: Checkpointer, query: InboxQuery) -> InboxPage:
    """One page of threads, the open pauses of the paused ones among them, and the tabs' counts."""
    filters = listing_filters(query)
    counts = thread_counts(checkpointer)
    if query.graph:
        return attrs.evolve(_by_graph(checkpointer, query, filters), counts=counts)
    infos = checkpointer.list_threads(
        **filters,
        offset=query.offset,
        # One more than shown tells whether a next page exists, without counting.
        limit=query.limit + 1,
    )
    rows = [_row(checkpointer, info) for info in infos[: query.limit]]
    return InboxPage(
        rows=rows,
        more=len(infos) > query.limit,
        next_offset=query.offset + query.limit,
        counts=counts,
        matched=_matched(checkpointer, query, filters, len(infos)),
    )


def filtered(query: InboxQuery) -> bool:
    """Whether a search, metadata or time filter narrows the list (the tabs count the whole store)."""
    return bool(query.search or query.metadata or query.updated)


def _matched(
    checkpointer: Checkpointer, query: InboxQuery, filters: dict[str, Any], listed: int
) -> int | None:
    """How many threads the filters match, up to :data:`MATCH_COUNT` + 1 (``None`` unfiltered)."""
    if not filtered(query):
        return None
    if query.offset == 0 and listed <= query.limit:
        return listed  # the whole match is on this page
    return len(checkpointer.list_threads(**filters, limit=MATCH_COUNT + 1))


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
        answers: The answers given at the listed pause checkpoints a run
            went on from (as far as their journals keep them), by
            checkpoint id and pause id.
        older: Where the next page of older checkpoints starts (a
            ``before`` id), when there are more than the tree lists.
        paged: The tree lists a page of older checkpoints, not the newest.
        next_waiting: The most recently updated other thread waiting for an answer.
        reached: The checkpoints drawn from outside the tree's page: the
            parents of its forks (they are in ``checkpoints`` too).
        kept: The form of an answer the console refused, drawn again in the
            answer form so the person corrects it rather than starts over.
        children: The subgraphs the selected checkpoint's tasks ran, by task key.
        children_cut: More subgraph runs were found than a page reads
            (:data:`ilmek.web.children.CHILD_READS`); the rest are not shown.
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
    answers: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    older: str | None = None
    paged: bool = False
    next_waiting: str | None = None
    reached: frozenset[str] = frozenset()
    kept: Mapping[str, str] = attrs.field(factory=dict)
    children: Mapping[str, tuple[ChildView, ...]] = attrs.field(factory=dict)
    children_cut: bool = False


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


TREE_ANSWERS: Final = 60
"""The most answered pause checkpoints of a tree whose answers are read (one journal read each)."""


def _listing(
    checkpointer: Checkpointer, thread_id: str, selected: Checkpoint, before: str | None
) -> tuple[list[Checkpoint], str | None, bool]:
    """The checkpoints the tree draws, where older ones start, and whether this is an older page.

    The newest :data:`TREE_LIMIT`, or those before ``before``; a selected
    checkpoint older than the newest page brings the page that ends with it.
    """
    paged = before is not None
    listed = checkpointer.list(thread_id, limit=TREE_LIMIT + 1, before=before)
    # The 301st is listed only to tell whether more exist: a selected checkpoint there is not drawn.
    if not paged and all(checkpoint.id != selected.id for checkpoint in listed[:TREE_LIMIT]):
        listed = [selected, *checkpointer.list(thread_id, limit=TREE_LIMIT, before=selected.id)]
        paged = True
    more = len(listed) > TREE_LIMIT
    listed = listed[:TREE_LIMIT]
    return listed, (listed[-1].id if more else None), paged


FORK_PARENTS: Final = 20
"""The most fork parents older than the tree's page that it fetches and draws."""


def _fork_parents(checkpointer: Checkpointer, thread_id: str, listed: list[Checkpoint]) -> list[Checkpoint]:
    """The checkpoints the listed forks start from that the page does not list (at most :data:`FORK_PARENTS`).

    Without its parent a fork would be drawn as a root, and read as if it
    continued whatever branch ends below it.
    """
    ids = {checkpoint.id for checkpoint in listed}
    wanted = dict.fromkeys(
        checkpoint.parent_id
        for checkpoint in listed
        if checkpoint.metadata.get("source") == "fork"
        and checkpoint.parent_id is not None
        and checkpoint.parent_id not in ids
    )
    found = []
    for parent_id in list(wanted)[:FORK_PARENTS]:
        assert parent_id is not None
        parent = checkpointer.get(thread_id, parent_id)
        if parent is not None:
            found.append(parent)
    return found


def _tree_answers(
    checkpointer: Checkpointer, listed: list[Checkpoint], answered: set[str], problems: list[str]
) -> dict[str, dict[str, Any]]:
    """The answers of the answered pauses the tree lists, newest first, at most :data:`TREE_ANSWERS`."""
    found: dict[str, dict[str, Any]] = {}
    for checkpoint in [c for c in listed if c.pending and c.id in answered][:TREE_ANSWERS]:
        journals = _journals(checkpointer, checkpoint, problems)
        given = {
            pause.id: entry.value
            for pause in checkpoint.pending
            if (entry := _recorded_answer(journals, pause)) is not None
        }
        if given:
            found[checkpoint.id] = given
    return found


def _next_waiting(checkpointer: Checkpointer, thread_id: str) -> str | None:
    try:
        waiting = checkpointer.list_threads(status="interrupted", limit=2)
    except (NotImplementedError, IlmekError):
        return None
    return next((info.id for info in waiting if info.id != thread_id), None)


def read_thread(
    checkpointer: Checkpointer,
    graphs: Mapping[str, CompiledGraph],
    thread_id: str,
    checkpoint_id: str | None = None,
    *,
    tree_before: str | None = None,
) -> ThreadView | None:
    """A thread as its page shows it, or ``None`` when it has no checkpoint (or not ``checkpoint_id``).

    ``tree_before``: draw the page of the tree older than this checkpoint.
    """
    latest = checkpointer.get(thread_id)
    if latest is None:
        return None
    selected = (
        latest if checkpoint_id in (None, "", latest.id) else checkpointer.get(thread_id, checkpoint_id)
    )
    if selected is None:
        return None
    listed, older, paged = _listing(checkpointer, thread_id, selected, tree_before or None)
    reached = _fork_parents(checkpointer, thread_id, listed)
    parent = checkpointer.get(thread_id, selected.parent_id) if selected.parent_id else None
    problems: list[str] = []
    journals = _journals(checkpointer, selected, problems)
    answered = answered_pauses(listed)
    if paged and selected.pending and selected.id not in answered:
        # Whether a run went on from it is known from its children, which an older page may not list.
        answered |= answered_pauses(checkpointer.list(thread_id, limit=TREE_LIMIT))
    latest_journals = journals if selected.id == latest.id else _journals(checkpointer, latest, problems)
    recorded = {
        pause.id: entry
        for pause in latest.pending
        if (entry := _recorded_answer(latest_journals, pause)) is not None
    }
    answers = _tree_answers(checkpointer, listed, answered, problems)
    # The tree's rule (one for both): answered, waiting (the latest), or passed.
    state = pause_state(selected, answered | set(answers), latest.id, latest.id if recorded else None)
    pauses = [
        PauseView(
            pause=pause,
            state="answered"
            if (entry := _recorded_answer(journals, pause)) is not None
            else state or "passed",
            answer=entry,
        )
        for pause in selected.pending
    ]
    graph_name, graph = graph_for(graphs, latest)
    children, children_cut = read_children(checkpointer, graph, thread_id, selected, journals)
    return ThreadView(
        thread_id=thread_id,
        info=thread_info(checkpointer, thread_id),
        latest=latest,
        checkpoints=[*listed, *reached],
        reached=frozenset(checkpoint.id for checkpoint in reached),
        truncated=older is not None or paged,
        selected=selected,
        parent=parent,
        journals=journals,
        pauses=pauses,
        recorded=recorded,
        graph_name=graph_name,
        graph=graph,
        problems=tuple(problems),
        answers=answers,
        older=older,
        paged=paged,
        next_waiting=_next_waiting(checkpointer, thread_id),
        children=children,
        children_cut=children_cut,
    )
