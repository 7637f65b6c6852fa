"""The ``threads`` and ``show`` commands: the threads of a store, and one checkpoint of a thread in full.

Both say the same about a thread as a whole, in the same words: whether a
run holds it now, and why its last run failed.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import attrs

from ..checkpoint.base import Checkpointer
from ..checks import STATUS_ALIASES
from ..operations import why_stalled
from ..redact import printable
from ..types import Checkpoint, JournalEntry, Pending, ThreadError, ThreadInfo
from .arguments import _MOMENT_HELP, _THREAD_HELP, Subcommands, _json_option, _moment, _positive, _text
from .failures import _CommandFailed
from .output import (
    _NOTE_TEXT,
    _align,
    _clip,
    _json_time,
    _json_value,
    _one_line,
    _pending_json,
    _print_json,
    _q,
    _say,
    _shell_word,
    _shorten,
    _when,
)
from .rendering import _MAX_TEXT, render_value
from .stores import _database, _opened, _shown_database

_THREAD_STATUSES = ("done", "interrupted", "unfinished", "error", "running")
# `show` prints "label  value" lines with the values in one column.
_LABEL_WIDTH = 13


def _failure(error: ThreadError) -> str:
    """A failure as ``Type: message`` (escaped when printed, like every stored text)."""
    return f"{error.type}: {error.message}" if error.message else error.type


def _error_json(error: ThreadError | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {
        "type": error.type,
        "message": error.message,
        "node": error.node,
        "checkpoint_id": error.checkpoint_id,
        "at": _json_time(error.at),
    }


# --- threads ----------------------------------------------------------------------------


def _thread_json(info: ThreadInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "status": info.status,
        "step": info.step,
        "created_at": _json_time(info.created_at),
        "updated_at": _json_time(info.updated_at),
        "checkpoint_id": info.checkpoint_id,
        "metadata": _json_value(dict(info.metadata)),
        "running": info.running,
        "held_since": _json_time(info.held_since) if info.held_since is not None else None,
        "error": _error_json(info.error),
    }


def _thread_note(info: ThreadInfo) -> str:
    """What a `threads` row adds about a thread: the run holding it, why its last run failed."""
    notes = []
    if info.running:
        since = f" since {_when(info.held_since)}" if info.held_since is not None else ""
        notes.append(f"running{since}")
    if info.error is not None:
        notes.append(_clip(_one_line(_failure(info.error)) or info.error.type, _NOTE_TEXT))
    elif (why := why_stalled(info)) is not None:
        notes.append(_clip(_one_line(f"stalled: {why}"), _NOTE_TEXT))
    return "; ".join(notes)


def _cmd_threads(args: argparse.Namespace) -> int:
    with _opened(args) as checkpointer:
        # One more than asked, to know whether to say there are more.
        threads = checkpointer.list_threads(
            search=args.search,
            status=args.status,
            limit=args.limit + 1,
            updated_before=args.updated_before,
            updated_after=args.updated_after,
        )
    shown = threads[: args.limit]
    more = len(threads) > args.limit
    if args.json:
        _print_json({"threads": [_thread_json(info) for info in shown], "more": more})
        return 0
    if not threads:
        _say("no threads")
        return 0
    header = ["THREAD", "STATUS", "STEP", "UPDATED", "LATEST CHECKPOINT"]
    rows = [[t.id, t.status, str(t.step), _when(t.updated_at), t.checkpoint_id or "-"] for t in shown]
    notes = [_thread_note(t) for t in shown]
    if any(notes):
        # Only when a row has something to say, so the usual listing stays five columns.
        header.append("NOTE")
        rows = [[*row, note or "-"] for row, note in zip(rows, notes, strict=True)]
    for line in _align([header, *rows]):
        _say(line)
    if more:
        _say(f"(the {args.limit} most recently updated; --limit N shows more)")
    return 0


def add_threads_parser(commands: Subcommands) -> None:
    """Add ``threads``, which lists a store's threads, to the commands."""
    threads = commands.add(
        "threads", _cmd_threads, "List threads, most recently updated first.", only_shows=True
    )
    threads.add_argument(
        "--status",
        choices=(*_THREAD_STATUSES, *STATUS_ALIASES),
        help="only threads in this status (paused and waiting mean interrupted)",
    )
    threads.add_argument("--search", type=_text, metavar="TEXT", help="only threads whose id contains TEXT")
    threads.add_argument("--limit", type=_positive, default=50, metavar="N", help="at most N (default: 50)")
    threads.add_argument(
        "--updated-before",
        type=_moment,
        metavar="WHEN",
        help=f"only threads last updated before WHEN: {_MOMENT_HELP}",
    )
    threads.add_argument(
        "--updated-after",
        type=_moment,
        metavar="WHEN",
        help="only threads last updated at or after WHEN (as above)",
    )
    _json_option(
        threads,
        '{"threads": [{"id", "status", "step", "created_at", "updated_at", "checkpoint_id", "metadata", '
        '"running", "held_since", "error"}, ...], "more"}',
    )


# --- show -------------------------------------------------------------------------------


def _print_field(label: str, text: str) -> None:
    _say(label.ljust(_LABEL_WIDTH) + text)


@attrs.frozen(kw_only=True)
class _PauseReport:
    """A pause as ``show`` reports it: its task's journal, and its answer if one is known.

    ``resumed``: a later checkpoint grew from the pause. ``answer``: the
    journal entry that records the answer, where one is still kept.
    """

    pause: Pending
    journal: tuple[JournalEntry, ...]
    resumed: bool
    answer: JournalEntry | None

    @property
    def answered(self) -> bool:
        return self.resumed or self.answer is not None


def _pause_journal(
    checkpointer: Checkpointer, checkpoint: Checkpoint, pause: Pending
) -> tuple[JournalEntry, ...]:
    """The journal of the task a pause belongs to: its completed steps, its pauses and their answers."""
    return checkpointer.get_journal(pause.task_id)


def _answer_in(entries: Sequence[JournalEntry], pause: Pending) -> JournalEntry | None:
    for entry in entries:
        if entry.key == pause.key and entry.kind == "interrupt" and entry.answered:
            return entry
    return None


def _pause_reports(
    checkpointer: Checkpointer, checkpoint: Checkpoint, children: Sequence[Checkpoint]
) -> list[_PauseReport]:
    """What ``show`` says about each pause (``children``: the checkpoints resumed from it)."""
    reports = []
    for pause in checkpoint.pending:
        journal = _pause_journal(checkpointer, checkpoint, pause)
        # The answer is in the journal while a resume is under way (or failed);
        # once the task paused again, in the next pause's copy of the journal.
        found = _answer_in(journal, pause)
        reports.append(_PauseReport(pause=pause, journal=journal, resumed=bool(children), answer=found))
    return reports


def _print_pause(report: _PauseReport, full: bool) -> None:
    pause = report.pause
    _say(printable(f"  {pause.id}  (node {pause.node})"))
    _say(f"    {render_value(pause.payload, full=full, indent='    ')}")
    if report.answer is not None:
        # Recorded, but no checkpoint grew from it: the resume failed or is running.
        unfinished = "" if report.resumed else "  (recorded; the resume that gave it has not finished)"
        by = f" (by {report.answer.by})" if report.answer.by is not None else ""
        _say(f"    answer{by}: {render_value(report.answer.value, full=full, indent='    ')}{unfinished}")
    elif report.resumed:
        _say("    answer: (not kept once its task finished)")
    others = [entry for entry in report.journal if entry.key != pause.key]
    steps = [entry for entry in others if entry.kind != "interrupt"]
    pauses = [entry for entry in others if entry.kind == "interrupt"]
    if steps:
        _say("    completed steps:")
        for entry in steps:
            _say(f"      {printable(entry.key)}: {_step_result(entry, full)}")
    if pauses:
        _say("    answered pauses:")
        for entry in pauses:
            asked = render_value(entry.payload, full=full, indent="      ")
            answer = render_value(entry.value, full=full, indent="      ") if entry.answered else "(waiting)"
            by = f" (by {entry.by})" if entry.answered and entry.by is not None else ""
            _say(f"      {printable(entry.key)}: {asked} -> {answer}{by}")


def _step_result(entry: JournalEntry, full: bool) -> str:
    if entry.kind == "unstored":
        return printable(f"(ran; its result, of type {entry.payload}, could not be stored)")
    return render_value(entry.value, full=full, indent="      ")


def _journal_json(entry: JournalEntry) -> dict[str, Any]:
    return {
        "key": entry.key,
        "kind": entry.kind,
        "value": _json_value(entry.value),
        "payload": _json_value(entry.payload),
        "answered": entry.answered,
        "by": entry.by,
    }


def _show_json(
    checkpoint: Checkpoint, reports: Sequence[_PauseReport], info: ThreadInfo | None
) -> dict[str, Any]:
    pauses = []
    for report in reports:
        pause = _pending_json(report.pause)
        pause["answered"] = report.answered
        pause["resumed"] = report.resumed
        if report.answer is not None:
            pause["answer"] = _json_value(report.answer.value)
            pause["by"] = report.answer.by
        pause["journal"] = [_journal_json(entry) for entry in report.journal]
        pauses.append(pause)
    return {
        "thread": checkpoint.thread_id,
        "checkpoint": checkpoint.id,
        "parent_id": checkpoint.parent_id,
        "step": checkpoint.step,
        "status": checkpoint.status,
        "ts": _json_time(checkpoint.ts),
        "metadata": _json_value(dict(checkpoint.metadata)),
        "next": [
            {
                "node": task.node,
                "task_key": task.task_key,
                "is_send": task.is_send,
                "input": _json_value(task.input),
            }
            for task in checkpoint.next
        ],
        "pending": pauses,
        "channels": _json_value(dict(checkpoint.channels)),
        "thread_status": info.status if info is not None else None,
        "running": info is not None and info.running,
        "held_since": _json_time(info.held_since)
        if info is not None and info.held_since is not None
        else None,
        "error": _error_json(info.error if info is not None else None),
    }


def _print_thread_run(info: ThreadInfo | None, full: bool) -> None:
    """`show`'s lines about the thread as a whole: whether a run holds it now, why its last run failed."""
    if info is None:
        return
    if info.running:
        since = f" since {_when(info.held_since)}" if info.held_since is not None else ""
        _print_field("running", f"yes: a live run holds the thread{since}")
    else:
        _print_field("running", "no")
    why = why_stalled(info)
    if why is not None:
        _print_field("stalled", printable(why))
    error = info.error
    if error is None:
        return
    failure = _failure(error)
    _print_field("failed", printable(failure if full else _shorten(failure, _MAX_TEXT)))
    where = [f"in node {_q(error.node)}" if error.node is not None else "outside any node"]
    if error.checkpoint_id is not None:
        where.append(f"running from checkpoint {_q(error.checkpoint_id)}")
    where.append(f"at {_when(error.at)}")
    _print_field("", printable(", ".join(where)))


def _cmd_show(args: argparse.Namespace) -> int:
    with _opened(args) as checkpointer:
        checkpoint = checkpointer.get(args.thread, args.checkpoint)
        if checkpoint is None:
            where = _shown_database(_database(args))
            if args.checkpoint is None or checkpointer.get(args.thread) is None:
                raise _CommandFailed(f"thread {_q(args.thread)} has no checkpoints in {where}")
            raise _CommandFailed(
                f"thread {_q(args.thread)} has no checkpoint {_q(args.checkpoint)}; "
                f"list them with: history {_shell_word(args.thread)}"
            )
        children = []
        if checkpoint.pending:
            # A pause with a child (not a fork's copy) was resumed: its pauses are answered.
            children = [
                c
                for c in checkpointer.list(args.thread)
                if c.parent_id == checkpoint.id and c.metadata.get("source") != "fork"
            ]
        reports = _pause_reports(checkpointer, checkpoint, children)
        channels = dict(checkpoint.channels)
        info = checkpointer.get_thread(args.thread)
    if args.json:
        _print_json(_show_json(checkpoint, reports, info))
        return 0
    pad = " " * _LABEL_WIDTH
    _print_field("thread", printable(checkpoint.thread_id))
    _print_field("checkpoint", printable(checkpoint.id))
    _print_field("parent", printable(checkpoint.parent_id or "-"))
    _print_field("step", str(checkpoint.step))
    status = checkpoint.status + (" (answered)" if children else "")
    if info is not None and info.checkpoint_id == checkpoint.id and info.status != checkpoint.status:
        # A failed run leaves its checkpoint planning tasks; the thread reads `error`.
        status += f" (the thread: {info.status})"
    _print_field("status", status)
    _print_thread_run(info, args.full)
    _print_field("written", _when(checkpoint.ts))
    _print_field("metadata", render_value(dict(checkpoint.metadata), full=args.full, indent=pad))
    if checkpoint.next:
        _say("next")
        for task in checkpoint.next:
            line = f"  {printable(task.task_key)}"
            if task.is_send:
                shown_input = render_value(task.input, full=args.full, indent="    ")
                line += f"  (send to {printable(task.node)}) input: {shown_input}"
            _say(line)
    else:
        _print_field("next", "- (nothing scheduled)")
    if reports:
        _say("pauses (answered)" if children else "pending")
        for report in reports:
            _print_pause(report, args.full)
    if not channels:
        _print_field("channels", "- (none written yet)")
    else:
        _say("channels")
        for name, value in channels.items():
            _say(f"  {printable(name)}: {render_value(value, full=args.full, indent='  ')}")
    return 0


def add_show_parser(commands: Subcommands) -> None:
    """Add ``show``, which shows one checkpoint, to the commands."""
    show = commands.add(
        "show",
        _cmd_show,
        "Show a checkpoint: its place, status, next tasks, channel values, and each pause "
        "with its task's completed steps and the answers given so far.",
        only_shows=True,
    )
    show.add_argument("thread", type=_text, metavar="THREAD", help=_THREAD_HELP)
    show.add_argument(
        "checkpoint", type=_text, nargs="?", metavar="CHECKPOINT", help="a checkpoint id (default: latest)"
    )
    show.add_argument("--full", action="store_true", help="print long values whole")
    _json_option(
        show,
        '{"thread", "checkpoint", "parent_id", "step", "status", "ts", "metadata", "next", "pending" '
        '(each pause with "answered", "resumed", "journal"), "channels", "thread_status", "running", '
        '"held_since", "error"}',
    )
