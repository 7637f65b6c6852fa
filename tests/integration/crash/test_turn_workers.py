"""Worker processes taking a conversation's turns as a load balancer hands them out, one killed with SIGKILL.

Each worker remembers the checkpoints it committed and starts its turns from them; another worker's turn
makes that memory stale at once, and the kill leaves a hold to lapse and, at times, a turn half done. Every
turn a worker saw finish must be in its conversation once, followed by its reply; no message or reply is
there twice; nothing is lost. On a SQLite file and on Postgres through a pool.
"""

from __future__ import annotations

import collections
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.support.crashworker import open_target

pytestmark = pytest.mark.timeout(120)

CONVERSATIONS = 3
TURNS = 30

WORKER = textwrap.dedent(
    """
    import random, sys, time
    sys.path.insert(0, {repo!r})
    from ilmek import START, ThreadBusyError, channel, graph, run

    target, name, seed, turns, log_path = sys.argv[1:6]
    if target.startswith("postgresql://"):
        import psycopg2.pool
        from ilmek.checkpoint.postgres import PostgresCheckpointer

        pool = psycopg2.pool.ThreadedConnectionPool(1, 2, target)
        checkpointer = PostgresCheckpointer(pool, lease_seconds=1.0)
    else:
        from ilmek.checkpoint.sqlite import SqliteCheckpointer

        checkpointer = SqliteCheckpointer(target, lease_seconds=1.0)

    def reply(state):
        return {{"messages": ["reply to " + state["messages"][-1]]}}

    chat = graph("chat", {{"messages": channel.append()}}).node("reply", reply).edge(START, "reply").compile()
    rng = random.Random(int(seed))
    with open(log_path, "a", encoding="utf-8") as log:
        for number in range(int(turns)):
            conversation = "conversation-" + str(rng.randrange({conversations}))
            message = name + "-" + str(number)
            deadline = time.monotonic() + 60
            while True:
                try:
                    turn = {{"messages": [message]}}
                    result = run(chat, turn, thread_id=conversation, checkpointer=checkpointer)
                    break
                except ThreadBusyError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
            assert "done" == result.status, result
            log.write("done " + conversation + " " + message + "\\n")
            log.flush()
    """
)


def spawn(target: str, name: str, seed: int, turns: int, log: pathlib.Path) -> subprocess.Popen[bytes]:
    script = WORKER.format(repo=os.getcwd(), conversations=CONVERSATIONS)
    return subprocess.Popen(
        [sys.executable, "-c", script, target, name, str(seed), str(turns), str(log)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def finished_turns(log: pathlib.Path) -> list[tuple[str, str]]:
    """The (conversation, message) of each turn a worker saw finish."""
    if not log.exists():
        return []
    return [tuple(line.split()[1:3]) for line in log.read_text(encoding="utf-8").splitlines()]  # type: ignore[misc]


def test_round_robin_workers_one_killed_lose_and_repeat_no_turn(
    crash_db: str, tmp_path: pathlib.Path
) -> None:
    """Three workers take 30 turns each on three conversations in random order; one is killed with SIGKILL
    a third of the way through and a fourth takes over: every finished turn is in its conversation once,
    with its reply after it, and nothing appears twice."""
    logs = {name: tmp_path / f"{name}.log" for name in ("a", "b", "c", "d")}
    workers = {name: spawn(crash_db, name, seed, TURNS, logs[name]) for seed, name in enumerate("abc")}
    deadline = time.monotonic() + 60
    while len(finished_turns(logs["a"])) < TURNS // 3 and workers["a"].poll() is None:
        assert time.monotonic() < deadline, "worker a made no progress"
        time.sleep(0.005)
    workers["a"].send_signal(signal.SIGKILL)
    workers["d"] = spawn(crash_db, "d", 3, TURNS, logs["d"])
    for name, worker in workers.items():
        _, errors = worker.communicate(timeout=90)
        if name != "a":
            assert 0 == worker.returncode, errors.decode()

    checkpointer = open_target(crash_db)
    try:
        stored: dict[str, list[str]] = {}
        for number in range(CONVERSATIONS):
            latest = checkpointer.get(f"conversation-{number}")
            stored[f"conversation-{number}"] = list(latest.channels["messages"]) if latest is not None else []
    finally:
        checkpointer.close()
    for conversation, messages in stored.items():
        repeated = [text for text, count in collections.Counter(messages).items() if count > 1]
        assert [] == repeated, f"{conversation} holds these twice: {repeated}"
    for log in logs.values():
        for conversation, message in finished_turns(log):
            messages = stored[conversation]
            assert message in messages, f"{message}, finished, is not in {conversation}"
            later = messages[messages.index(message) + 1 :]
            assert any(text.startswith("reply to ") for text in later), f"{message} has no reply after it"
    assert sum(len(finished_turns(log)) for log in logs.values()) >= 3 * TURNS
