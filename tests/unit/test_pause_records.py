"""How a pause's terms and an answer's ``by`` are stored: old records load, new ones round-trip."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from ilmek.checkpoint import _records
from ilmek.errors import CorruptCheckpointError
from ilmek.types import JournalEntry, Pending

OLD_PAUSE = '[{"id": "a:interrupt#0", "task_id": "t:c:a", "node": "a", "key": "interrupt#0", "payload": "q"}]'


def test_a_pause_stored_before_contracts_loads_with_no_terms() -> None:
    """A pause written without answers/deadline/kind/ns reads as a plain person's pause at the root."""
    (pause,) = _records.decode_pending(OLD_PAUSE, thread_id="t")
    assert (None, None, None) == (pause.answers, pause.deadline, pause.on_timeout)
    assert ("person", ()) == (pause.kind, pause.ns)
    # Written back, a plain pause is stored exactly as before.
    assert json.loads(OLD_PAUSE) == json.loads(_records.encode_pending([pause]))


def test_a_pause_with_terms_round_trips() -> None:
    """Contract, deadline (to the microsecond, UTC), on_timeout, kind and ns come back as stored."""
    pause = Pending(
        id="ns/a:sleep#0",
        task_id="t:c:a",
        node="a",
        key="sleep#0",
        payload={"until": dt.datetime(2030, 5, 6, tzinfo=dt.UTC)},
        answers={"kind": "review", "draft": ("a", b"b")},
        deadline=dt.datetime(2030, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC),
        on_timeout={"action": "accept"},
        kind="timer",
        ns=("outer:outer",),
    )
    assert (pause,) == _records.decode_pending(_records.encode_pending([pause]), thread_id="t")
    assert pause.deadline is not None
    assert pause.deadline.timestamp() == _records.due_at([pause])


@pytest.mark.parametrize(
    "terms",
    [{"kind": "robot"}, {"deadline": "soon"}, {"deadline": True}, {"ns": "a"}, {"answers": [1]}],
)
def test_malformed_terms_are_a_corrupt_checkpoint(terms: dict[str, object]) -> None:
    """A stored pause whose terms are not what ilmek writes is refused as corrupt, naming the thread."""
    stored = json.dumps([json.loads(OLD_PAUSE)[0] | terms])
    with pytest.raises(CorruptCheckpointError, match="'t'"):
        _records.decode_pending(stored, thread_id="t")


def test_an_answer_stored_before_by_loads_with_by_none() -> None:
    """A journal entry written without ``by`` loads as answered by nobody named (None)."""
    old = '{"key": "interrupt#0", "kind": "interrupt", "payload": "q", "answered": true, "value": "yes"}'
    entry = _records.decode_entry(old, thread_id="t")
    assert ("yes", True, None) == (entry.value, entry.answered, entry.by)


@pytest.mark.parametrize("by", ["person", "deadline", "token", "timer"])
def test_who_answered_round_trips(by: str) -> None:
    """Every kind of answerer is stored with the answer and read back."""
    entry = JournalEntry(key="k#0", kind="interrupt", payload=None, value=1, answered=True, by=by)  # type: ignore[arg-type]
    assert entry == _records.decode_entry(_records.encode_entry(entry, "j"), thread_id="t")


def test_an_unknown_answerer_is_a_corrupt_journal() -> None:
    """A ``by`` ilmek never writes is refused as corrupt."""
    stored = '{"key": "k#0", "kind": "interrupt", "answered": true, "value": 1, "by": "robot"}'
    with pytest.raises(CorruptCheckpointError):
        _records.decode_entry(stored, thread_id="t")
