"""The port suite, encryption at rest (SPEC §7a): a sealed value moved from its place does not open.

A writer with access to the database copies one stored value over another
(the value only, as a DBA's ``UPDATE`` would): a channel value onto another
checkpoint's value of the same channel, a list item onto another position or
another branch's item, a step result onto another key, thread or store, a
pause's payload or answer onto another pause. Each read must refuse with a
:class:`~ilmek.errors.DecryptionError` naming the thread and the row, never a
wrong value and never key material. Memory, a real SQLite file and a real
Postgres database alike (``tests.support.sealed_rows``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ilmek import DecryptionError, pending_interrupts, resume, run, update_state
from tests.support.backends import Backend
from tests.support.sealed import KEY_TEXTS, SEALED_BACKENDS, SQL_BACKENDS, keyring, secret_graph
from tests.support.sealed_rows import reader, stored_rows

pytestmark = pytest.mark.timeout(120)


def _paused(backend: Backend, thread_id: str = "t", **options: Any) -> Any:
    """A thread of the secret graph paused on its question, sealed under ``k1``; returns the checkpointer."""
    checkpointer = backend.open(cipher=keyring("k1"), **options)
    result = run(secret_graph(), {}, thread_id=thread_id, checkpointer=checkpointer)
    assert result.status == "interrupted"
    return checkpointer


def _refused(read: Callable[[], Any], thread_id: str, table: str) -> DecryptionError:
    """The DecryptionError ``read`` raises, checked to name the thread and the table, and no key."""
    with pytest.raises(DecryptionError) as caught:
        read()
    error = caught.value
    assert error.thread_id == thread_id
    assert repr(thread_id) in str(error)
    assert f"({table})" in str(error)
    assert "does not open" in str(error)
    assert not any(key in str(error) for key in KEY_TEXTS)
    return error


@pytest.mark.parametrize("backend", SEALED_BACKENDS, indirect=True)
def test_a_channel_value_copied_onto_a_later_checkpoint_of_its_channel_does_not_open(
    backend: Backend,
) -> None:
    """The first value of ``card`` copied over the value a later checkpoint wrote to ``card`` is refused."""
    g = secret_graph()
    checkpointer = _paused(backend)
    update_state(g, checkpointer, "t", {"card": "CARD-EDITED"})
    with stored_rows(backend) as rows:
        [(_, first), (later_id, _)] = rows.blobs("t", "card")
        rows.set_blob("t", later_id, first)
    _refused(lambda: reader(backend, cipher=keyring("k1")).get("t"), "t", "blobs")


@pytest.mark.parametrize("backend", SEALED_BACKENDS, indirect=True)
def test_an_item_copied_onto_an_item_a_later_checkpoint_appended_does_not_open(backend: Backend) -> None:
    """Item 0 of ``log`` copied over item 2 (appended by the resume's checkpoint) is refused."""
    checkpointer = _paused(backend)
    assert resume(secret_graph(), "yes", thread_id="t", checkpointer=checkpointer).status == "done"
    with stored_rows(backend) as rows:
        items = rows.items("t", "log")
        assert [index for _, index, _ in items] == [0, 1, 2]
        rows.set_item("t", items[2][0], 2, items[0][2])
    _refused(lambda: reader(backend, cipher=keyring("k1")).read_channel("t", "log"), "t", "items")


@pytest.mark.parametrize("backend", SEALED_BACKENDS, indirect=True)
def test_two_items_swapped_do_not_open(backend: Backend) -> None:
    """The stored values of items 0 and 1 exchanged (the list reordered) are refused, not read reordered."""
    _paused(backend)
    with stored_rows(backend) as rows:
        [(log_id, _, first), (_, _, second)] = rows.items("t", "log")
        rows.set_item("t", log_id, 0, second)
        rows.set_item("t", log_id, 1, first)
    _refused(lambda: reader(backend, cipher=keyring("k1")).read_channel("t", "log"), "t", "items")
    _refused(lambda: reader(backend, cipher=keyring("k1")).get("t"), "t", "items")


@pytest.mark.parametrize("backend", SEALED_BACKENDS, indirect=True)
def test_an_item_copied_onto_another_branch_at_the_same_position_does_not_open(backend: Backend) -> None:
    """Two answers to one pause fork the list: one branch's item 2 copied over the other's is refused."""
    g = secret_graph()
    checkpointer = _paused(backend)
    pause_id = checkpointer.get("t").id
    assert resume(g, "A", thread_id="t", checkpointer=checkpointer).status == "done"
    forked = resume(g, "B", thread_id="t", checkpointer=checkpointer, checkpoint_id=pause_id)
    assert forked.state["log"][2] == "answered B"
    with stored_rows(backend) as rows:
        at_two = {log_id: value for log_id, index, value in rows.items("t", "log") if index == 2}
        assert len(at_two) == 2
        first_log, second_log = sorted(at_two)
        rows.set_item("t", second_log, 2, at_two[first_log])
    _refused(lambda: reader(backend, cipher=keyring("k1")).get("t"), "t", "items")


def _journal_of(checkpointer: Any, thread_id: str) -> Callable[[], Any]:
    """A read of the journal of the thread's open pause's task (journals are read afresh each time)."""
    [pause] = pending_interrupts(checkpointer, thread_id)
    return lambda: checkpointer.get_journal(pause.task_id)


@pytest.mark.parametrize("backend", SEALED_BACKENDS, indirect=True)
@pytest.mark.parametrize(
    ("source", "target"),
    [(("t", "charge#0"), ("t", "receipt#0")), (("a", "charge#0"), ("t", "charge#0"))],
    ids=["onto-another-step-key", "onto-another-thread"],
)
def test_a_step_result_copied_elsewhere_does_not_open(
    backend: Backend, source: tuple[str, str], target: tuple[str, str]
) -> None:
    """A step's sealed result put into another key's entry, or another thread's, is refused."""
    _paused(backend, "a")
    checkpointer = _paused(backend, "t")
    with stored_rows(backend) as rows:
        moved = rows.entry(*source)[1]["value"]
        base, entry = rows.entry(*target)
        rows.set_entry(target[0], base, target[1], dict(entry, value=moved))
    error = _refused(_journal_of(checkpointer, target[0]), target[0], "journals")
    assert target[1].split("#")[0] in str(error)


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_a_step_result_copied_into_another_store_prefix_does_not_open(backend: Backend) -> None:
    """The same thread and step key in a store under another table prefix do not open a copied result."""
    _paused(backend)
    other = backend.open(cipher=keyring("k1"), table_prefix="other")
    other.migrate()  # type: ignore[attr-defined]
    assert run(secret_graph(), {}, thread_id="t", checkpointer=other).status == "interrupted"
    with stored_rows(backend) as rows:
        moved = rows.entry("t", "charge#0")[1]["value"]
    with stored_rows(backend, prefix="other") as rows:
        base, entry = rows.entry("t", "charge#0")
        rows.set_entry("t", base, "charge#0", dict(entry, value=moved))
    _refused(_journal_of(other, "t"), "t", "journals")


@pytest.mark.parametrize("backend", SEALED_BACKENDS, indirect=True)
def test_a_pause_payload_copied_onto_another_pause_does_not_open(backend: Backend) -> None:
    """Thread ``a``'s sealed pause payload put into thread ``t``'s pause is refused."""
    _paused(backend, "a")
    checkpointer = _paused(backend, "t")
    source, target = checkpointer.get("a").id, checkpointer.get("t").id
    with stored_rows(backend) as rows:
        [stolen] = rows.pending("a", source)
        [pause] = rows.pending("t", target)
        rows.set_pending("t", target, [dict(pause, payload=stolen["payload"])])
    error = _refused(lambda: reader(backend, cipher=keyring("k1")).get("t"), "t", "checkpoints")
    assert error.checkpoint_id == target


@pytest.mark.parametrize("backend", SEALED_BACKENDS, indirect=True)
def test_an_answer_copied_onto_another_pause_does_not_open(backend: Backend) -> None:
    """The recorded answer of thread ``a``'s pause put into thread ``t``'s answered pause is refused."""
    g = secret_graph()
    _paused(backend, "a")
    checkpointer = _paused(backend, "t")
    journals = {thread_id: _journal_of(checkpointer, thread_id) for thread_id in ("a", "t")}
    for thread_id in ("a", "t"):
        assert resume(g, "fail", thread_id=thread_id, checkpointer=checkpointer).status == "error"
    with stored_rows(backend) as rows:
        answer = rows.entry("a", "ok#0", answered=True)[1]["value"]
        base, entry = rows.entry("t", "ok#0", answered=True)
        rows.set_entry("t", base, "ok#0", dict(entry, value=answer))
    assert [e.value for e in journals["a"]() if e.kind == "interrupt"] == ["fail"]
    _refused(journals["t"], "t", "journals")
