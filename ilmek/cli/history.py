"""The ``history`` command: a thread's checkpoints drawn as a tree (:func:`render_history`), or as JSON."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from ..types import Checkpoint
from .arguments import _THREAD_HELP, Subcommands, _json_option, _positive, _text
from .failures import _CommandFailed
from .output import _align, _json_time, _json_value, _pending_json, _print_json, _q, _say
from .stores import _database, _opened, _shown_database


def _children_of(checkpoints: Sequence[Checkpoint]) -> dict[str, list[str]]:
    """Each listed checkpoint's listed children, oldest first."""
    ids = {checkpoint.id for checkpoint in checkpoints}
    children: dict[str, list[str]] = {}
    for checkpoint in sorted(checkpoints, key=lambda c: c.id):
        if checkpoint.parent_id is not None and checkpoint.parent_id in ids:
            children.setdefault(checkpoint.parent_id, []).append(checkpoint.id)
    return children


def _resumed(checkpoints: Sequence[Checkpoint]) -> set[str]:
    """The pauses among ``checkpoints`` that a run answered: a child grew from them.

    A fork's first checkpoint (a copy of the pause it forks from) is not an
    answer: the fork answers its own copy.
    """
    return {
        checkpoint.parent_id
        for checkpoint in checkpoints
        if checkpoint.parent_id is not None and checkpoint.metadata.get("source") != "fork"
    }


def _answered_by(checkpoints: Sequence[Checkpoint]) -> dict[str, dict[str, str]]:
    """Who answered each resumed pause, by pause checkpoint: what its child's metadata keeps.

    Only checkpoints written since ilmek kept it say; for older ones the pause is just answered.
    """
    found: dict[str, dict[str, str]] = {}
    for checkpoint in checkpoints:
        by = checkpoint.metadata.get("answered_by")
        if checkpoint.parent_id is not None and isinstance(by, dict):
            found[checkpoint.parent_id] = {str(k): str(v) for k, v in by.items()}
    return found


def _pauses_note(checkpoint: Checkpoint, resumed: bool, by: Mapping[str, str]) -> str:
    """``answered: <ids> (by ...)`` for a resumed pause, else ``waiting: <ids>``."""
    ids = ", ".join(p.id + (f" (by {by[p.id]})" if p.id in by else "") for p in checkpoint.pending)
    return f"{'answered' if resumed else 'waiting'}: {ids}"


def render_history(checkpoints: Sequence[Checkpoint], *, truncated: bool = False) -> list[str]:
    """Draw a thread's checkpoints as a tree, oldest at the top.

    A chain of checkpoints stays at one indentation; a checkpoint with several
    children opens one branch per child with box-drawing characters. A
    checkpoint whose parent is not among ``checkpoints`` is drawn as a root
    and says why (pruned, or cut off by a limit when ``truncated``). A pause
    with a child was resumed: its pauses read ``answered``, an open one's
    ``waiting``. Stored text is escaped (:func:`ilmek.redact.printable`).

    Args:
        checkpoints: A thread's checkpoints, in any order.
        truncated: The list was cut by a limit, so a missing parent may exist.

    Returns:
        One line per checkpoint.
    """
    by_id = {checkpoint.id: checkpoint for checkpoint in checkpoints}
    children = _children_of(checkpoints)
    resumed = _resumed(checkpoints)
    answered_by = _answered_by(checkpoints)
    roots = [checkpoint_id for checkpoint_id in sorted(by_id) if by_id[checkpoint_id].parent_id not in by_id]
    latest = max(by_id, default=None)

    # Depth-first with an explicit stack: a linear history of ten thousand
    # checkpoints is ten thousand levels deep, too deep for recursion.
    drawn: list[tuple[str, Checkpoint]] = []
    seen: set[str] = set()
    looped: set[str] = set()

    def draw_from(starts: Sequence[str]) -> None:
        stack = [(start, "", "") for start in reversed(starts)]
        while stack:
            checkpoint_id, first, rest = stack.pop()
            if checkpoint_id in seen:
                continue  # damaged rows whose parents loop: each is drawn once
            seen.add(checkpoint_id)
            drawn.append((first, by_id[checkpoint_id]))
            kids = [kid for kid in children.get(checkpoint_id, []) if kid not in seen]
            if len(kids) == 1:
                stack.append((kids[0], rest, rest))
                continue
            for index in reversed(range(len(kids))):
                last = index == len(kids) - 1
                stack.append(
                    (kids[index], rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "))
                )

    draw_from(roots)
    # Checkpoints no root leads to have parents that loop back to them (a
    # damaged store): show them anyway, each loop from its oldest id.
    while len(seen) < len(by_id):
        start = min(checkpoint_id for checkpoint_id in by_id if checkpoint_id not in seen)
        before = len(drawn)
        draw_from([start])
        looped.update(checkpoint.id for _, checkpoint in drawn[before:])

    rows = []
    for prefix, checkpoint in drawn:
        notes = []
        if checkpoint.id in looped:
            notes.append("(damaged: its parents loop)")
        if checkpoint.pending:
            notes.append(
                _pauses_note(checkpoint, checkpoint.id in resumed, answered_by.get(checkpoint.id, {}))
            )
        if checkpoint.parent_id is not None and checkpoint.parent_id not in by_id:
            notes.append("(parent not shown)" if truncated else "(parent pruned)")
        if checkpoint.id == latest:
            notes.append("(latest)")
        rows.append(
            [
                prefix + checkpoint.id,
                str(checkpoint.metadata.get("source", "?")),
                f"step {checkpoint.step}",
                checkpoint.status,
                "  ".join(notes),
            ]
        )
    return _align(rows)


def _history_json(checkpoints: Sequence[Checkpoint]) -> list[dict[str, Any]]:
    resumed = _resumed(checkpoints)
    answered_by = _answered_by(checkpoints)
    ids = {checkpoint.id for checkpoint in checkpoints}
    latest = max(ids, default=None)
    return [
        {
            "id": checkpoint.id,
            "parent_id": checkpoint.parent_id,
            "parent_shown": checkpoint.parent_id is None or checkpoint.parent_id in ids,
            "step": checkpoint.step,
            "status": checkpoint.status,
            "source": _json_value(checkpoint.metadata.get("source")),
            "ts": _json_time(checkpoint.ts),
            "latest": checkpoint.id == latest,
            "answered": bool(checkpoint.pending) and checkpoint.id in resumed,
            "answered_by": answered_by.get(checkpoint.id),
            "pending": [_pending_json(pause) for pause in checkpoint.pending],
        }
        for checkpoint in sorted(checkpoints, key=lambda c: c.id)
    ]


def _cmd_history(args: argparse.Namespace) -> int:
    with _opened(args) as checkpointer:
        checkpoints = checkpointer.list(args.thread, limit=args.limit)
    if not checkpoints:
        raise _CommandFailed(
            f"thread {_q(args.thread)} has no checkpoints in {_shown_database(_database(args))}"
        )
    truncated = args.limit is not None and len(checkpoints) == args.limit
    if args.json:
        _print_json(
            {
                "thread": args.thread,
                "truncated": truncated,
                "checkpoints": _history_json(checkpoints),
            }
        )
        return 0
    for line in render_history(checkpoints, truncated=truncated):
        _say(line)
    return 0


def add_history_parser(commands: Subcommands) -> None:
    """Add ``history``, which draws a thread's checkpoint tree, to the commands."""
    history = commands.add(
        "history",
        _cmd_history,
        "Draw a thread's checkpoint tree, oldest first, forks as branches; a resumed pause reads answered.",
        only_shows=True,
    )
    history.add_argument("thread", type=_text, metavar="THREAD", help=_THREAD_HELP)
    history.add_argument("--limit", type=_positive, metavar="N", help="only the N newest checkpoints")
    _json_option(
        history,
        '{"thread", "truncated", "checkpoints": [{"id", "parent_id", "parent_shown", "step", "status", '
        '"source", "ts", "latest", "answered", "answered_by", "pending"}, ...]}, oldest first',
    )
