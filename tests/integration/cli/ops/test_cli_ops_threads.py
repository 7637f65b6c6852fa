"""``ilmek threads --status error|running`` and ``show``: failed and held threads, and why a run failed.

Errors are shown shortened and escaped; a held thread is listed with its start;
ages filter by when a thread was last updated.
"""

from __future__ import annotations

import json
import time

import pytest

from ilmek.checkpoint.base import Checkpointer
from ilmek.types import ThreadInfo
from tests.support.cli_ops import DAY, EVIL, Modules, Store, failed_threads
from tests.support.cli_support import cli, forked_order, history_rows, raw_controls
from tests.support.crashworker import Effects

pytestmark = pytest.mark.timeout(120)


# --- threads --status error|running, and show ---------------------------------------------------


def test_threads_lists_failed_threads_with_the_error_shortened_and_escaped(
    capsys: pytest.CaptureFixture[str],
    store: Store,
    checkpointer: Checkpointer,
    modules: Modules,
    effects: Effects,
) -> None:
    """`threads --status error` lists failed threads; NOTE shows the error's type and message, escaped."""
    reference = modules.flaky(effects, modules.folder / "never")
    failed_threads(checkpointer, reference, ["failed " + EVIL])
    forked_order(checkpointer, "fine")

    status, out, err = cli(capsys, "--db", store.db, "threads", "--status", "error")
    assert (0, "") == (status, err)
    assert [] == raw_controls(out)
    header, row = out.splitlines()
    assert ["THREAD", "STATUS", "STEP", "UPDATED", "LATEST", "CHECKPOINT", "NOTE"] == header.split()
    assert row.startswith("failed \\x1b]0;pwned\\x07")
    assert "  error  " in row
    # One line: the message's own line break is escaped, and it is cut short.
    assert row.endswith("ValueError: card declined; \\x1b]0;pwned\\x07\\x1b[2J\\u202e\\x9b")

    status, out, _ = cli(capsys, "--db", store.db, "threads")
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert rows["fine"].endswith("  -")  # the column is there, the finished thread has nothing to say


def test_threads_json_carries_status_running_and_the_error(
    capsys: pytest.CaptureFixture[str], store: Store, checkpointer: Checkpointer, broken: ThreadInfo
) -> None:
    """`threads --json` gives each thread `running`, `held_since` and `error` (type, message, node...)."""

    info, error = broken, broken.error
    assert error is not None
    status, out, _ = cli(capsys, "--db", store.db, "threads", "--json", "--status", "error")
    assert 0 == status
    [thread] = json.loads(out)["threads"]
    assert {
        "id": "broken",
        "status": "error",
        "running": False,
        "held_since": None,
        "error": {
            "type": "ValueError",
            "message": "card declined\n" + EVIL,
            "node": "work",
            "checkpoint_id": info.checkpoint_id,
            "at": error.at.isoformat(),
        },
    } == {key: thread[key] for key in ("id", "status", "running", "held_since", "error")}


def test_threads_status_running_lists_a_held_thread_with_its_start(
    capsys: pytest.CaptureFixture[str], store: Store, checkpointer: Checkpointer
) -> None:
    """A thread a run holds is listed by `--status running`, NOTE saying since when; released, it is not."""
    forked_order(checkpointer, "busy")
    forked_order(checkpointer, "idle")
    with checkpointer.hold("busy"):
        status, out, _ = cli(capsys, "--db", store.db, "threads", "--status", "running")
        info = checkpointer.get_thread("busy")
        assert info is not None
        assert info.held_since is not None
        _, out_json, _ = cli(capsys, "--db", store.db, "threads", "--status", "running", "--json")
    assert 0 == status
    [row] = history_rows(out)[1:]
    assert "busy" == row[0]
    assert ["running", "since"] == row[-4:-2]
    [thread] = json.loads(out_json)["threads"]
    assert (True, info.held_since.isoformat()) == (thread["running"], thread["held_since"])
    assert (0, "no threads\n") == cli(capsys, "--db", store.db, "threads", "--status", "running")[:2]


def test_threads_filters_by_when_each_thread_was_last_updated(
    capsys: pytest.CaptureFixture[str], store: Store, checkpointer: Checkpointer
) -> None:
    """--updated-before / --updated-after take an age (40d, 1w2d) or an ISO date and select by last update."""
    for thread_id in ("recent", "month-old", "year-old"):
        forked_order(checkpointer, thread_id)
    store.age("month-old", 40)
    store.age("year-old", 400)

    def listed(*options: str) -> list[str]:
        status, out, err = cli(capsys, "--db", store.db, "threads", "--json", *options)
        assert (0, "") == (status, err)
        return [thread["id"] for thread in json.loads(out)["threads"]]

    assert ["month-old", "year-old"] == listed("--updated-before", "30d")
    assert ["recent"] == listed("--updated-after", "4w2d")
    assert ["month-old"] == listed("--updated-before", "1w", "--updated-after", "365 d")
    year_ago = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 365 * DAY))
    assert ["year-old"] == listed("--updated-before", year_ago)
    assert ["recent", "month-old", "year-old"] == listed("--updated-after", "1970-01-01")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["threads", "--updated-before", "soon"], "argument --updated-before: not an age (10m, 2h, 30d)"),
        (["threads", "--updated-after", "10"], "argument --updated-after: not an age"),
        (["threads", "--updated-after=-3d"], "argument --updated-after: not an age"),
        (["threads", "--updated-before", "9" * 5000 + "d"], "argument --updated-before: not an age"),
        (["threads", "--updated-before", "999999999999w"], "must be at most a century"),
        (["gc", "--older-than", "2999-01-01"], "argument --older-than: is in the future: '2999-01-01'"),
        (["gc"], "the following arguments are required: --older-than"),
        (["gc", "--older-than", "1d", "--status", "running"], "argument --status: invalid choice"),
        (["recover"], "the following arguments are required: MODULE:GRAPH"),
        (["recover", "m:g", "--limit", "0"], "argument --limit: must be at least 1"),
        (["cancel"], "the following arguments are required: THREAD"),
    ],
)
def test_bad_ages_and_missing_arguments_are_one_line_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """A malformed age, a date in the future for --older-than, or a missing argument: exit 2, one line."""
    status, out, err = cli(capsys, *argv)
    assert (2, "") == (status, out)
    assert err.startswith("ilmek: ")
    assert message in err
    assert 1 == err.count("\n")
    assert len(err) < 400


def test_show_says_why_the_last_run_failed_and_whether_a_run_holds_the_thread(
    capsys: pytest.CaptureFixture[str], store: Store, checkpointer: Checkpointer, broken: ThreadInfo
) -> None:
    """`show` of a failed thread: its error (type, message escaped, node, checkpoint, time) and `running`."""

    info, error = broken, broken.error
    assert error is not None
    status, out, err = cli(capsys, "--db", store.db, "show", "broken")
    assert (0, "") == (status, err)
    assert [] == raw_controls(out)
    lines = out.splitlines()
    assert "status       unfinished (the thread: error)" in lines
    assert "running      no" in lines
    assert "failed       ValueError: card declined\\n\\x1b]0;pwned\\x07\\x1b[2J\\u202e\\x9b" in lines
    assert (
        f"             in node 'work', running from checkpoint {info.checkpoint_id!r}, "
        f"at {error.at.strftime('%Y-%m-%d %H:%M:%SZ')}"
    ) in lines

    with checkpointer.hold("broken"):
        status, out, _ = cli(capsys, "--db", store.db, "show", "broken")
        _, shown, _ = cli(capsys, "--db", store.db, "show", "broken", "--json")
    assert 0 == status
    assert any(
        line.startswith("running      yes: a live run holds the thread since ") for line in out.splitlines()
    )
    document = json.loads(shown)
    assert ("error", True) == (document["thread_status"], document["running"])
    assert {"type": "ValueError", "node": "work", "checkpoint_id": info.checkpoint_id} == {
        key: document["error"][key] for key in ("type", "node", "checkpoint_id")
    }
