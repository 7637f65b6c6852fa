"""The one rule of which journals a new checkpoint inherits (``ilmek.journals``), case by case."""

from __future__ import annotations

import ast
import pathlib

import ilmek
from ilmek.journals import InheritedJournals, inherited_journals
from ilmek.types import Checkpoint, JournalEntry, Pending, ScheduledTask

TASK = ScheduledTask(node="pay", task_key="pay")
CARRIED = {"pay": (JournalEntry(key="order#0", value=1042),)}


def pause(checkpoint_id: str = "c3") -> Checkpoint:
    """A pause that inherits ``c1`` and ``c2`` and carries a 0.1 journal."""
    return Checkpoint(
        id=checkpoint_id,
        thread_id="t",
        next=(TASK,),
        pending=(
            Pending(id="pay:interrupt#0", task_id=f"t:{checkpoint_id}:pay", node="pay", key="interrupt#0"),
        ),
        task_journals=CARRIED,
        journal_chain=("c1", "c2"),
    )


def test_nothing_is_inherited_by_a_first_checkpoint_or_after_one_that_plans_nothing() -> None:
    """No parent, or a finished one: the graph starts again at START with nothing recorded."""
    finished = Checkpoint(id="c9", thread_id="t", journal_chain=("c1",), task_journals=CARRIED)

    assert inherited_journals(None).empty
    assert inherited_journals(finished).empty
    assert inherited_journals(finished, fork=True).empty


def test_the_same_branch_inherits_everything_its_tasks_saw_the_parents_own_journal_included() -> None:
    """A pause, an input over an unfinished plan, an edit: the parent's chain, itself and what it carries."""
    expected = InheritedJournals(task_journals=CARRIED, journal_chain=("c1", "c2", "c3"))

    assert expected == inherited_journals(pause())


def test_a_fork_from_a_pause_leaves_out_what_was_recorded_from_the_pause_itself() -> None:
    """Answers given to the pause, and the steps after them, belong to the branches already resumed."""
    expected = InheritedJournals(task_journals=CARRIED, journal_chain=("c1", "c2"))

    assert expected == inherited_journals(pause(), fork=True)


def test_a_fork_from_a_checkpoint_that_is_not_a_pause_inherits_it_whole() -> None:
    """What is still recorded from it (a superstep there that did not commit) replays on the fork."""
    planned = Checkpoint(id="c5", thread_id="t", next=(TASK,), journal_chain=("c4",))

    assert ("c4", "c5") == inherited_journals(planned, fork=True).journal_chain


def journal_fields_of_checkpoints_made_in(path: pathlib.Path) -> dict[str, dict[str, str]]:
    """Each ``Checkpoint(...)`` call in ``path`` that sets a journal field: those fields, as source."""
    found: dict[str, dict[str, str]] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Checkpoint":
            fields = {k.arg: ast.unparse(k.value) for k in node.keywords if k.arg in JOURNAL_FIELDS}
            if fields:
                found[f"{path.name}:{node.lineno}"] = fields
    return found


JOURNAL_FIELDS = ("journal_chain", "task_journals")


def test_every_checkpoint_a_run_or_a_helper_makes_takes_its_journals_from_the_rule() -> None:
    """Above storage (which rebuilds checkpoints from rows), the pause, the input, the fork and the edit
    each take both journal fields from ``inherited_journals``: the rule cannot drift in one copy again."""
    package = pathlib.Path(ilmek.__file__).parent
    found: dict[str, dict[str, str]] = {}
    for path in sorted(package.rglob("*.py")):
        if "checkpoint" not in path.relative_to(package).parts:
            found |= journal_fields_of_checkpoints_made_in(path)

    assert 4 == len(found), found
    from_the_rule = {field: f"inherited.{field}" for field in JOURNAL_FIELDS}
    assert dict.fromkeys(found, from_the_rule) == found
