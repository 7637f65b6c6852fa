"""The port suite, encryption at rest (SPEC §7a): sealed round trips, nothing readable, fails closed.

Each test runs a real graph that stores every sealed kind (``tests.support.sealed``)
on the memory reference, a real SQLite file and a real Postgres database; the
tests that read or change rows behind ilmek's back do so with SQL.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ilmek import DecryptionError, pending_interrupts, resume, run, thread_state
from tests.support.backends import Backend, MemoryBackend, SqliteFileBackend
from tests.support.sealed import (
    KEY_TEXTS,
    SEALED_BACKENDS,
    SECRETS,
    SQL_BACKENDS,
    keyring,
    raw_sql,
    secret_graph,
    stored_text,
)

pytestmark = pytest.mark.timeout(120)

PAYLOAD = {"question": "PAUSE-SECRET", "draft": "SEND-SECRET"}


def _paused(backend: Backend, thread_id: str = "t", **options: Any) -> Any:
    """A thread of the secret graph paused on its question; returns the checkpointer."""
    checkpointer = backend.open(**options)
    result = run(secret_graph(), {}, thread_id=thread_id, checkpointer=checkpointer)
    assert result.status == "interrupted"
    return checkpointer


@pytest.mark.parametrize("backend", SEALED_BACKENDS, indirect=True)
def test_every_sealed_kind_reads_back_as_written(backend: Backend) -> None:
    """Channel values, list items, step results, a send input, a pause, an answer, a failure round-trip."""
    g = secret_graph()
    _paused(backend, cipher=keyring("k1"))
    _paused(backend, "t-fails", cipher=keyring("k1"))
    again = backend.open(cipher=keyring("k1"))
    [pause] = pending_interrupts(again, "t")
    assert pause.payload == PAYLOAD
    journal = again.get_journal(pause.task_id)
    assert [(e.key, e.value) for e in journal if e.kind == "step"] == [
        ("charge#0", "STEP-SECRET-charge"),
        ("receipt#0", "STEP-SECRET-receipt"),
    ]
    latest = again.get("t")
    assert latest is not None
    assert [task.input for task in latest.next] == [{"draft": "SEND-SECRET"}]
    assert thread_state(g, again, "t") == {
        "card": "CARD-SECRET",
        "note": "NOTE-SECRET",
        "log": ["LOG-SECRET-1", "LOG-SECRET-2"],
    }
    done = resume(g, "ANSWER-SECRET", thread_id="t", checkpointer=again)
    assert done.status == "done"
    assert done.state["log"] == ["LOG-SECRET-1", "LOG-SECRET-2", "answered ANSWER-SECRET"]
    assert again.read_channel("t", "log", offset=1, limit=2) == ["LOG-SECRET-2", "answered ANSWER-SECRET"]
    history = [dict(checkpoint.channels) for checkpoint in again.list("t")]
    assert "CARD-SECRET" in [channels.get("card") for channels in history]
    failed = resume(g, "fail", thread_id="t-fails", checkpointer=again)
    assert failed.status == "error"
    info = again.get_thread("t-fails")
    assert info is not None
    assert info.error is not None
    assert "FAIL-SECRET" in info.error.message


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_no_secret_is_readable_in_any_column_of_any_table(backend: Backend) -> None:
    """A scan of every stored column (paused, answered and failed threads) finds none of the secrets."""
    g = secret_graph()
    checkpointer = _paused(backend, cipher=keyring("k1"))
    _paused(backend, "t-done", cipher=keyring("k1"))
    resume(g, "ANSWER-SECRET", thread_id="t-done", checkpointer=checkpointer)
    _paused(backend, "t-fails", cipher=keyring("k1"))
    resume(g, "fail", thread_id="t-fails", checkpointer=checkpointer)
    with raw_sql(backend) as execute:
        text = stored_text(execute, isinstance(backend, SqliteFileBackend))
    assert "t-fails" in text
    assert "__ilmek__" in text
    assert [secret for secret in SECRETS if secret in text] == []
    assert not any(key in text for key in KEY_TEXTS)


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
def test_the_memory_reference_holds_only_sealed_values_too(backend: Backend) -> None:
    """The memory backend stores the same sealed texts: none of its held data shows a secret."""
    g = secret_graph()
    checkpointer = _paused(backend, cipher=keyring("k1"))
    _paused(backend, "t-fails", cipher=keyring("k1"))
    resume(g, "fail", thread_id="t-fails", checkpointer=checkpointer)
    held = repr(vars(checkpointer))  # white-box: every dict the reference keeps
    assert "__ilmek__" in held
    assert [secret for secret in SECRETS if secret in held] == []


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_the_scan_finds_the_secrets_of_a_store_without_a_keyring(backend: Backend) -> None:
    """The control for the scan above: unsealed, the same writes leave every secret readable."""
    g = secret_graph()
    checkpointer = _paused(backend)
    _paused(backend, "t-done")
    resume(g, "ANSWER-SECRET", thread_id="t-done", checkpointer=checkpointer)
    _paused(backend, "t-fails")
    resume(g, "fail", thread_id="t-fails", checkpointer=checkpointer)
    with raw_sql(backend) as execute:
        text = stored_text(execute, isinstance(backend, SqliteFileBackend))
    assert [secret for secret in SECRETS if secret not in text] == []


def _copy_blob(execute: Any, source: tuple[str, str], target: tuple[str, str], prefix: str = "ilmek") -> None:
    """Copy the stored value of one (thread, channel) blob over another's, by SQL."""
    [(value,)] = execute(
        "SELECT value FROM ilmek_blobs WHERE thread_id = ? AND channel = ?",
        *source,
    )
    changed = execute(
        f"UPDATE {prefix}_blobs SET value = ? WHERE thread_id = ? AND channel = ? RETURNING blob_id",
        value if isinstance(value, str) else json.dumps(value),
        *target,
    )
    assert changed


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
@pytest.mark.parametrize(
    ("source", "target"),
    [(("a", "card"), ("b", "card")), (("a", "card"), ("a", "note"))],
    ids=["to-another-thread", "to-another-channel"],
)
def test_a_channel_value_copied_elsewhere_does_not_open(
    backend: Backend, source: tuple[str, str], target: tuple[str, str]
) -> None:
    """A sealed channel value copied by SQL onto another thread's or channel's row is a DecryptionError."""
    checkpointer = _paused(backend, "a", cipher=keyring("k1"))
    _paused(backend, "b", cipher=keyring("k1"))
    with raw_sql(backend) as execute:
        _copy_blob(execute, source, target)
    with pytest.raises(DecryptionError) as caught:
        checkpointer.get(target[0])
    assert caught.value.thread_id == target[0]
    assert "does not open" in str(caught.value)
    assert target[0] in str(caught.value)
    if source[0] != target[0]:
        assert checkpointer.get(source[0]) is not None  # the original still opens


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_a_list_item_copied_to_another_thread_does_not_open(backend: Backend) -> None:
    """An appended item, sealed on its own, copied onto another thread's item row is refused."""
    _paused(backend, "a", cipher=keyring("k1"))
    checkpointer = _paused(backend, "b", cipher=keyring("k1"))
    with raw_sql(backend) as execute:
        [(value,)] = execute(
            "SELECT i.value FROM ilmek_items AS i JOIN ilmek_logs AS l ON l.log_id = i.log_id "
            "WHERE l.thread_id = 'a' AND i.idx = 0"
        )
        [(log_id,)] = execute("SELECT log_id FROM ilmek_logs WHERE thread_id = 'b'")
        execute(
            "UPDATE ilmek_items SET value = ? WHERE log_id = ? AND idx = 0",
            value if isinstance(value, str) else json.dumps(value),
            log_id,
        )
    with pytest.raises(DecryptionError):
        checkpointer.read_channel("b", "log")


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_a_step_result_moved_to_another_step_key_does_not_open(backend: Backend) -> None:
    """The sealed result of step ``charge`` put into step ``receipt``'s entry is refused."""
    checkpointer = _paused(backend, cipher=keyring("k1"))
    [pause] = pending_interrupts(checkpointer, "t")
    with raw_sql(backend) as execute:
        rows = {
            json.loads(key): entry if isinstance(entry, dict) else json.loads(entry)
            for key, entry in execute("SELECT entry_key, entry FROM ilmek_journals WHERE thread_id = 't'")
        }
        moved = dict(rows["receipt#0"], value=rows["charge#0"]["value"])
        execute(
            "UPDATE ilmek_journals SET entry = ? WHERE thread_id = 't' AND entry_key = ?",
            json.dumps(moved),
            json.dumps("receipt#0"),
        )
    with pytest.raises(DecryptionError) as caught:
        checkpointer.get_journal(pause.task_id)
    assert "receipt" in str(caught.value)


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_a_pause_copied_to_another_checkpoint_does_not_open(backend: Backend) -> None:
    """The sealed pause payload of the latest checkpoint copied onto its parent's row is refused."""
    checkpointer = _paused(backend, cipher=keyring("k1"))
    latest = checkpointer.get("t")
    assert latest is not None
    assert latest.parent_id is not None
    with raw_sql(backend) as execute:
        [(pending,)] = execute(
            "SELECT pending FROM ilmek_checkpoints WHERE thread_id = 't' AND checkpoint_id = ?", latest.id
        )
        execute(
            "UPDATE ilmek_checkpoints SET pending = ? WHERE thread_id = 't' AND checkpoint_id = ?",
            pending if isinstance(pending, str) else json.dumps(pending),
            latest.parent_id,
        )
    with pytest.raises(DecryptionError) as caught:
        checkpointer.get("t", latest.parent_id)
    assert caught.value.checkpoint_id == latest.parent_id


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_a_value_copied_to_another_store_prefix_does_not_open(backend: Backend) -> None:
    """The same thread and channel under another table prefix (another store) do not open a copied value."""
    _paused(backend, cipher=keyring("k1"))
    other = backend.open(cipher=keyring("k1"), table_prefix="other")
    other.migrate()  # type: ignore[attr-defined]
    run(secret_graph(), {}, thread_id="t", checkpointer=other)
    with raw_sql(backend) as execute:
        _copy_blob(execute, ("t", "card"), ("t", "card"), prefix="other")
    with pytest.raises(DecryptionError):
        other.get("t")


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_a_tampered_value_does_not_open(backend: Backend) -> None:
    """One flipped character of a sealed value is a DecryptionError, never a wrong value."""
    checkpointer = _paused(backend, cipher=keyring("k1"))
    with raw_sql(backend) as execute:
        [(value,)] = execute("SELECT value FROM ilmek_blobs WHERE thread_id = 't' AND channel = 'card'")
        sealed = value if isinstance(value, dict) else json.loads(value)
        body = sealed["v"][2]
        sealed["v"][2] = body[:10] + ("A" if body[10] != "A" else "B") + body[11:]
        execute(
            "UPDATE ilmek_blobs SET value = ? WHERE thread_id = 't' AND channel = 'card'", json.dumps(sealed)
        )
    with pytest.raises(DecryptionError):
        checkpointer.get("t")


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_a_plaintext_store_fails_closed_until_plaintext_is_allowed(backend: Backend) -> None:
    """A store written without a keyring is refused by one with a keyring, unless ``allow_plaintext``."""
    _paused(backend)
    with pytest.raises(DecryptionError) as caught:
        backend.open(cipher=keyring("k1")).get("t")
    assert "plaintext" in str(caught.value)
    assert "allow_plaintext" in str(caught.value)
    migrating = backend.open(cipher=keyring("k1", allow_plaintext=True))
    assert thread_state(secret_graph(), migrating, "t") == {
        "card": "CARD-SECRET",
        "note": "NOTE-SECRET",
        "log": ["LOG-SECRET-1", "LOG-SECRET-2"],
    }
    assert pending_interrupts(migrating, "t")[0].payload == PAYLOAD


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_an_unknown_key_id_is_named_and_no_key_is_shown(backend: Backend) -> None:
    """Values sealed under ``k1`` read with a keyring of ``k2`` alone name ``k1``, and show no key."""
    _paused(backend, cipher=keyring("k1"))
    with pytest.raises(DecryptionError) as caught:
        backend.open(cipher=keyring("k2")).get("t")
    assert caught.value.key_id == "k1"
    assert "'k1'" in str(caught.value)
    assert not any(key in str(caught.value) for key in KEY_TEXTS)
    # Both keys on the ring (k2 current): the old values open.
    assert backend.open(cipher=keyring("k2", "k1")).get("t") is not None


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_a_sealed_store_read_without_a_keyring_is_refused(backend: Backend) -> None:
    """Without a keyring a sealed value is a DecryptionError that says how to pass one."""
    _paused(backend, cipher=keyring("k1"))
    with pytest.raises(DecryptionError) as caught:
        backend.open().get("t")
    assert "keyring" in str(caught.value)


# --- rotation -------------------------------------------------------------------------------


def _every_value(checkpointer: Any, thread_ids: list[str]) -> list[Any]:
    """Everything the threads store, read back: states, pauses, journals and failures."""
    found: list[Any] = []
    for thread_id in thread_ids:
        found.append(thread_state(secret_graph(), checkpointer, thread_id))
        found.extend(dict(checkpoint.channels) for checkpoint in checkpointer.list(thread_id))
        for pause in pending_interrupts(checkpointer, thread_id):
            found.append((pause.payload, checkpointer.get_journal(pause.task_id)))
        info = checkpointer.get_thread(thread_id)
        found.append(info.error.message if info is not None and info.error is not None else None)
    return found


@pytest.mark.parametrize("backend", SEALED_BACKENDS, indirect=True)
def test_rekey_moves_every_value_to_the_current_key_once(backend: Backend) -> None:
    """After rekey from k1 to k2 a keyring of k2 alone reads everything; a second rekey rewrites nothing."""
    g = secret_graph()
    writer = _paused(backend, cipher=keyring("k1"))
    _paused(backend, "t-fails", cipher=keyring("k1"))
    resume(g, "fail", thread_id="t-fails", checkpointer=writer)
    before = _every_value(writer, ["t", "t-fails"])
    rotating = backend.open(cipher=keyring("k2", "k1"))
    seen: list[str] = []
    first = rotating.rekey(batch=3, progress=lambda progress: seen.append(str(progress)))
    assert first.batches == len(seen)
    second = rotating.rekey(batch=3)
    assert second.rewritten == 0
    assert second.checked == first.checked
    if isinstance(backend, MemoryBackend):
        # One memory store keeps the keyring it was made with: everything is already current.
        assert first.rewritten == 0
        assert first.checked > 0
        return
    assert first.rewritten > 0
    assert _every_value(backend.open(cipher=keyring("k2")), ["t", "t-fails"]) == before


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_rekey_seals_a_plaintext_store(backend: Backend) -> None:
    """A store written before encryption is sealed by rekey; then a strict keyring reads it all."""
    before = _every_value(_paused(backend), ["t"])
    report = backend.open(cipher=keyring("k1")).rekey()
    assert report.rewritten > 0
    assert _every_value(backend.open(cipher=keyring("k1")), ["t"]) == before
    with raw_sql(backend) as execute:
        text = stored_text(execute, isinstance(backend, SqliteFileBackend))
    assert [secret for secret in SECRETS if secret in text] == []


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_rekey_refuses_a_tampered_value_rather_than_launder_it(backend: Backend) -> None:
    """A value moved to another thread stops rekey with a DecryptionError; it is not resealed there."""
    _paused(backend, "a", cipher=keyring("k1"))
    _paused(backend, "b", cipher=keyring("k1"))
    with raw_sql(backend) as execute:
        _copy_blob(execute, ("a", "card"), ("b", "card"))
    with pytest.raises(DecryptionError):
        backend.open(cipher=keyring("k2", "k1")).rekey()


@pytest.mark.parametrize("backend", SEALED_BACKENDS, indirect=True)
def test_a_sealed_store_filters_threads_by_metadata(backend: Backend) -> None:
    """Metadata stays readable under a keyring (it is for searching): a filter finds the thread tagged so."""
    checkpointer = _paused(backend, "tagged", cipher=keyring("k1"))
    _paused(backend, "other", cipher=keyring("k1"))
    checkpointer.put_thread_metadata("tagged", {"customer": "acme", "tier": 2})
    checkpointer.put_thread_metadata("other", {"customer": "globex", "tier": 2.0})

    assert ["tagged"] == [info.id for info in checkpointer.list_threads(metadata={"customer": "acme"})]
    assert {"tagged", "other"} == {info.id for info in checkpointer.list_threads(metadata={"tier": 2})}
