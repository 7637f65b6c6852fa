"""The port suite, ``prune`` and ``commit``: what pruning keeps; a commit wins only on the expected latest."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import attrs
import pytest

from ilmek import Checkpointer, CheckpointNotFoundError, ConcurrentUpdateError, CorruptCheckpointError
from ilmek.types import Extend, Replace, task_id_for
from tests.support.port import JOURNAL, TASK, channels_at, cid, ids_of, make_checkpoint, pause, put_chain

pytestmark = pytest.mark.timeout(60)


# --- prune --------------------------------------------------------------------------------


def test_prune_keeps_the_newest_and_the_latest_still_loads(checkpointer: Checkpointer) -> None:
    """``keep_last`` newest stay, the rest go; kept ones still read values pruned ones wrote."""
    ids = put_chain(
        checkpointer,
        "t",
        ({"config": {"model": "m"}, "log": list(range(n + 1)), "n": n} for n in range(10)),
    )

    assert 7 == checkpointer.prune("t", keep_last=3)

    assert ids[:-4:-1] == ids_of(checkpointer.list("t"))
    assert None is checkpointer.get("t", ids[0])
    assert {"config": {"model": "m"}, "log": list(range(10)), "n": 9} == channels_at(checkpointer, "t")
    assert {"config": {"model": "m"}, "log": list(range(8)), "n": 7} == channels_at(checkpointer, "t", ids[7])
    assert list(range(10)) == checkpointer.read_channel("t", "log")
    assert 0 == checkpointer.prune("t", keep_last=3)


def test_a_pruned_thread_keeps_growing(checkpointer: Checkpointer) -> None:
    """After a prune, a child of the latest appends and replaces as before."""
    ids = put_chain(checkpointer, "t", ({"config": "c", "log": list(range(n + 1))} for n in range(5)))
    checkpointer.prune("t", keep_last=1)

    checkpointer.put("t", make_checkpoint("t", cid(5), ids[-1], config="c", log=list(range(6))))
    checkpointer.put("t", make_checkpoint("t", cid(6), cid(5), config="new", log=list(range(7))))

    assert {"config": "c", "log": list(range(6))} == channels_at(checkpointer, "t", cid(5))
    assert {"config": "new", "log": list(range(7))} == channels_at(checkpointer, "t")
    assert [cid(6), cid(5), cid(4)] == ids_of(checkpointer.list("t"))


def test_prune_keeps_branch_tips_and_fork_points(checkpointer: Checkpointer) -> None:
    """Every leaf (an open pause sits on one) and every fork point survives, with its values."""
    tree = [
        ("c0001", None, ["a"]),
        ("c0002", "c0001", ["a", "b"]),
        ("c0003", "c0002", ["a", "b", "c"]),
        ("c0004", "c0003", ["a", "b", "c", "d"]),
        ("c0005", "c0002", ["a", "b", "x"]),
        ("c0006", "c0004", ["a", "b", "c", "d", "e"]),
        ("c0007", "c0006", ["a", "b", "c", "d", "e", "f"]),
    ]
    for checkpoint_id, parent_id, log in tree:
        checkpointer.put("t", make_checkpoint("t", checkpoint_id, parent_id, log=log, origin=checkpoint_id))
    paused = make_checkpoint("t", "c0008", "c0005", log=["a", "b", "x"], origin="c0008")
    checkpointer.put("t", attrs.evolve(paused, next=(TASK,), pending=(pause("t", "c0005", "ok?"),)))

    assert 5 == checkpointer.prune("t", keep_last=1)

    assert ["c0008", "c0007", "c0002"] == ids_of(checkpointer.list("t"))
    assert {"log": ["a", "b"], "origin": "c0002"} == channels_at(checkpointer, "t", "c0002")
    assert {"log": list("abcdef"), "origin": "c0007"} == channels_at(checkpointer, "t", "c0007")
    kept_pause = checkpointer.get("t", "c0008")
    assert kept_pause is not None
    assert ({"log": ["a", "b", "x"], "origin": "c0008"}, (pause("t", "c0005", "ok?"),)) == (
        dict(kept_pause.channels),
        kept_pause.pending,
    )


def test_prune_of_an_unknown_thread_drops_nothing(checkpointer: Checkpointer) -> None:
    """Pruning a thread without checkpoints returns 0."""
    assert 0 == checkpointer.prune("nobody", keep_last=1)


def test_a_checkpoint_pruned_after_it_was_listed_reads_as_not_found(checkpointer: Checkpointer) -> None:
    """A listing's values load when first read; pruned meanwhile, that read says the checkpoint is gone
    (``CheckpointNotFoundError`` naming it), never that the stored data is corrupt."""
    ids = put_chain(checkpointer, "t", ({"log": list(range(n + 1)), "n": n} for n in range(6)))
    listed = {checkpoint.id: checkpoint for checkpoint in checkpointer.list("t")}

    assert 5 == checkpointer.prune("t", keep_last=1)

    for pruned in ids[:-1]:
        with pytest.raises(CheckpointNotFoundError, match="pruned or deleted") as caught:
            dict(listed[pruned].channels)
        assert not isinstance(caught.value, CorruptCheckpointError)
        assert "t" == caught.value.thread_id
        assert pruned == caught.value.checkpoint_id
        with pytest.raises(CheckpointNotFoundError):
            checkpointer.read_channel("t", "log", checkpoint_id=pruned)
        assert None is checkpointer.get("t", pruned)
    assert {"log": list(range(6)), "n": 5} == dict(listed[ids[-1]].channels)


@pytest.mark.parametrize("keep_last", [0, -1])
def test_prune_must_keep_at_least_one(checkpointer: Checkpointer, keep_last: int) -> None:
    """``keep_last`` below 1 is a ValueError and drops nothing."""
    put_chain(checkpointer, "t", ({"n": n} for n in range(3)))

    with pytest.raises(ValueError, match="keep_last"):
        checkpointer.prune("t", keep_last=keep_last)

    assert 3 == len(checkpointer.list("t"))


# --- commit ------------------------------------------------------------------------------


def test_commit_succeeds_when_the_latest_is_as_expected(checkpointer: Checkpointer) -> None:
    """``expect_latest`` naming the thread's latest commits; ``None`` commits a thread's first."""
    checkpointer.commit("t", make_checkpoint("t", "c0001", n=1), expect_latest=None)
    checkpointer.commit("t", make_checkpoint("t", "c0002", "c0001", n=2), expect_latest="c0001")

    assert ["c0002", "c0001"] == ids_of(checkpointer.list("t"))
    assert {"n": 2} == channels_at(checkpointer, "t")


@pytest.mark.parametrize(
    ("existing", "expect_latest"),
    [
        (["c0001", "c0002"], "c0001"),
        (["c0001"], None),
        ([], "c0001"),
        (["c0001"], "c0009"),
    ],
)
def test_commit_refuses_when_the_thread_moved_on(
    checkpointer: Checkpointer, existing: list[str], expect_latest: str | None
) -> None:
    """A stale ``expect_latest`` is ConcurrentUpdateError naming the thread; nothing is written or dropped."""
    parent = None
    for checkpoint_id in existing:
        checkpointer.put("t", make_checkpoint("t", checkpoint_id, parent, n=checkpoint_id))
        parent = checkpoint_id
    journal_id = task_id_for("t", expect_latest or "c0000", "agent")
    checkpointer.put_journal(journal_id, JOURNAL)

    with pytest.raises(ConcurrentUpdateError) as caught:
        checkpointer.commit(
            "t",
            make_checkpoint("t", "c0005", expect_latest, n="new"),
            expect_latest=expect_latest,
            drop_journals=[journal_id],
        )

    assert "t" == caught.value.thread_id
    assert "'t'" in str(caught.value)
    assert existing[::-1] == ids_of(checkpointer.list("t"))
    assert None is checkpointer.get("t", "c0005")
    assert JOURNAL == checkpointer.get_journal(journal_id)


def test_commit_drops_the_superseded_journals(checkpointer: Checkpointer) -> None:
    """``drop_journals`` are gone once the commit returns; other journals stay."""
    checkpointer.put("t", make_checkpoint("t", "c0001"))
    dropped = [task_id_for("t", "c0001", "a"), task_id_for("t", "c0001", "b")]
    kept = task_id_for("t", "c0001", "c")
    checkpointer.put_journals({dropped[0]: JOURNAL, dropped[1]: JOURNAL, kept: JOURNAL})

    checkpointer.commit(
        "t", make_checkpoint("t", "c0002", "c0001"), expect_latest="c0001", drop_journals=dropped
    )

    assert {kept: JOURNAL} == checkpointer.get_journals([*dropped, kept])


def test_commit_may_precede_the_thread_by_metadata_only(checkpointer: Checkpointer) -> None:
    """A thread that has metadata but no checkpoint accepts ``expect_latest=None``."""
    checkpointer.put_thread_metadata("t", {"owner": "ada"})

    checkpointer.commit("t", make_checkpoint("t", "c0001", n=1), expect_latest=None)

    assert {"n": 1} == channels_at(checkpointer, "t")


def test_commit_with_changes_stores_only_them_and_reads_whole(checkpointer: Checkpointer) -> None:
    """With ``changes``, an Extend adds items and a Replace sets a value; reads see full values."""
    checkpointer.commit(
        "t", make_checkpoint("t", "c0001", log=["a"], n=1), changes={"log": Extend(["a"]), "n": Replace(1)}
    )
    checkpointer.commit(
        "t",
        make_checkpoint("t", "c0002", "c0001", log=["a", "b", "c"], n=2),
        changes={"log": Extend(["b", "c"]), "n": Replace(2)},
        expect_latest="c0001",
    )

    assert {"log": ["a", "b", "c"], "n": 2} == channels_at(checkpointer, "t")
    assert ["b", "c"] == checkpointer.read_channel("t", "log", 1)
    assert {"log": ["a"], "n": 1} == channels_at(checkpointer, "t", "c0001")


def test_racing_commits_on_one_expected_latest_let_exactly_one_win(checkpointer: Checkpointer) -> None:
    """Eight threads commit children of one latest at once: one lands, seven get ConcurrentUpdateError."""
    checkpointer.put("t", make_checkpoint("t", "c0001", n=0))
    start = threading.Barrier(8)

    def attempt(worker: int) -> bool:
        checkpoint = make_checkpoint("t", f"c0002-{worker}", "c0001", n=worker)
        start.wait()
        try:
            checkpointer.commit("t", checkpoint, expect_latest="c0001")
        except ConcurrentUpdateError:
            return False
        return True

    with ThreadPoolExecutor(max_workers=8) as pool:
        won = [worker for worker, landed in enumerate(pool.map(attempt, range(8))) if landed]

    assert 1 == len(won)
    assert [f"c0002-{won[0]}", "c0001"] == ids_of(checkpointer.list("t"))
    assert {"n": won[0]} == channels_at(checkpointer, "t")
