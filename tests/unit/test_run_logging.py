"""What a run logs: one DEBUG record as it starts, one as it ends (INFO; WARNING naming the node and the
exception when it fails), and a Result whose repr leads with the error. A failed run is never silent."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from ilmek import (
    END,
    START,
    InMemoryCheckpointer,
    RetryPolicy,
    ThreadBusyError,
    channel,
    graph,
    resume,
    run,
    stream,
)


def records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name.startswith("ilmek")]


def declined(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
    raise ValueError("card declined")


def one_node(name: str, fn: Any, **node: Any) -> Any:
    return (
        graph("logged", {"log": channel.append()})
        .node(name, fn, **node)
        .edge(START, name)
        .edge(name, END)
        .compile(checkpointer=InMemoryCheckpointer())
    )


def test_a_failed_node_logs_one_warning_naming_the_thread_node_and_exception(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """run() returns status error without raising; one WARNING on ilmek.run says which thread, which node,
    which exception, with its traceback, and carries thread_id, run_id and node as record attributes."""
    caplog.set_level(logging.DEBUG, logger="ilmek")
    result = run(one_node("charge", declined), {}, thread_id="order-7")
    assert "error" == result.status
    warnings = [record for record in records(caplog) if record.levelno >= logging.WARNING]
    assert 1 == len(warnings), [record.getMessage() for record in warnings]
    [warning] = warnings
    message = warning.getMessage()
    assert "ilmek.run" == warning.name
    assert "thread 'order-7'" in message
    assert "node 'charge'" in message
    assert "ValueError: card declined" in message
    assert result.checkpoint_id is not None
    assert result.checkpoint_id in message
    assert warning.exc_info is not None
    assert warning.exc_info[1] is result.errors[0][1]
    assert ("order-7", result.run_id, "charge") == (warning.thread_id, warning.run_id, warning.node)  # type: ignore[attr-defined]


def test_a_retry_that_succeeds_and_a_run_that_pauses_log_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Only a run that ends in error warns: a node that failed once and then succeeded does not."""
    caplog.set_level(logging.DEBUG, logger="ilmek")
    tries: list[int] = []

    def flaky(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("hung up")
        return {"log": ["ok"]}

    assert "done" == run(one_node("flaky", flaky, retry=RetryPolicy(backoff=0.0)), {}, thread_id="r").status
    paused = one_node("ask", lambda state, ctx: {"log": [ctx.interrupt("ok?")]})
    assert "interrupted" == run(paused, {}, thread_id="p").status
    assert [] == [record.getMessage() for record in records(caplog) if record.levelno >= logging.WARNING]


def test_each_run_logs_its_start_at_debug_and_its_end_at_info_with_status_and_duration(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run and its resume: two runs, each one DEBUG 'started' and one INFO 'ended <status> after N ms'."""
    caplog.set_level(logging.DEBUG, logger="ilmek.run")
    g = one_node("ask", lambda state, ctx: {"log": [ctx.interrupt("ok?")]})
    first = run(g, {}, thread_id="conv")
    second = resume(g, "yes", thread_id="conv")
    lines = [(r.levelname, r.getMessage()) for r in records(caplog) if r.name == "ilmek.run"]
    assert [
        ("DEBUG", f"run {first.run_id} of graph 'logged' on thread 'conv' started (run)"),
        ("INFO", f"run {first.run_id} on thread 'conv' ended interrupted after"),
        ("DEBUG", f"run {second.run_id} of graph 'logged' on thread 'conv' started (resume)"),
        ("INFO", f"run {second.run_id} on thread 'conv' ended done after"),
    ] == [(level, re.sub(r" after [0-9.]+ ms.*", " after", text)) for level, text in lines]
    assert all(
        (r.thread_id, r.run_id) in {("conv", first.run_id), ("conv", second.run_id)}  # type: ignore[attr-defined]
        for r in records(caplog)
        if r.name == "ilmek.run"
    )


def test_a_run_that_raises_and_a_stream_closed_early_log_their_end_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A busy thread: the run raises ThreadBusyError and logs that at INFO; a stream its reader closes
    logs that it was stopped. Neither warns: the caller has the exception, or chose to stop."""
    caplog.set_level(logging.DEBUG, logger="ilmek.run")
    g = one_node("ask", lambda state, ctx: {"log": [ctx.interrupt("ok?")]})
    held = stream(g, {}, thread_id="busy")
    next(held)  # the run has started and holds the thread
    with pytest.raises(ThreadBusyError):
        run(g, {}, thread_id="busy")
    held.close()  # type: ignore[attr-defined]
    ends = [r.getMessage() for r in records(caplog) if r.levelno > logging.DEBUG]
    assert 2 == len(ends), ends
    assert re.search(r"on thread 'busy' raised ThreadBusyError after [0-9.]+ ms", ends[0]), ends[0]
    assert re.search(r"on thread 'busy' was stopped by its reader \(stream closed\)", ends[1]), ends[1]
    assert all(r.levelno < logging.WARNING for r in records(caplog))


def test_a_failed_results_repr_leads_with_the_node_and_its_error() -> None:
    """print(result) of a failed run shows the node and the exception first; other results are unchanged."""
    failed = run(one_node("charge", declined), {}, thread_id="repr")
    leading = "Result(status='error', node='charge', error=ValueError('card declined'), "
    assert repr(failed).startswith(leading)
    assert "state=" not in repr(failed)
    done = run(one_node("fine", lambda state: {"log": ["ok"]}), {}, thread_id="fine")
    assert repr(done).startswith("Result(status='done', state={'log': ['ok']}, pending=(), errors=(), ")
    with pytest.raises(ValueError, match="card declined") as raised:
        failed.raise_for_status()
    assert any("node 'charge'" in note for note in getattr(raised.value, "__notes__", ()))


HOSTILE_ERROR = "\x1b[31mred\x1b[0m \x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\ \rforged\x07bell"
"""ESC[31m colour, an OSC 8 hyperlink, a carriage return and BEL: what a node's error may carry."""


def formatted(caplog: pytest.LogCaptureFixture) -> str:
    """The ilmek records as a real handler writes them: messages and tracebacks."""
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(formatter.format(record) for record in records(caplog))


def assert_no_control_characters(text: str) -> None:
    """Only the line breaks between records and traceback lines; no ESC, BEL or CR."""
    assert [] == [char for char in text if not char.isprintable() and char != "\n"], text


def test_the_failure_warning_escapes_the_node_s_error_text(caplog: pytest.LogCaptureFixture) -> None:
    """A node's error holding ESC/OSC sequences, CR and BEL: the WARNING and its traceback show escapes."""
    caplog.set_level(logging.DEBUG, logger="ilmek")

    def hostile(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        raise ValueError(HOSTILE_ERROR)

    assert "error" == run(one_node("charge", hostile), {}, thread_id="t-esc").status
    text = formatted(caplog)
    assert_no_control_characters(text)
    assert "ValueError: \\x1b[31mred\\x1b[0m" in text
    assert "\\rforged\\x07bell" in text
    assert 2 == text.count("\\x1b[31mred"), "the message and the traceback's last line"


def test_a_node_s_own_log_and_every_ilmek_logger_escape(caplog: pytest.LogCaptureFixture) -> None:
    """ctx.log and each of ilmek's loggers escape control characters in messages and arguments alike."""
    caplog.set_level(logging.DEBUG, logger="ilmek")

    def chatty(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.log.warning("card said %s", HOSTILE_ERROR)
        return {}

    assert "done" == run(one_node("charge", chatty), {}, thread_id="t-log").status
    from ilmek.logs import logger

    for name in ("ilmek.run", "ilmek.node", "ilmek.holds", "ilmek.storage", "ilmek.operations", "ilmek.web"):
        logger(name).warning(HOSTILE_ERROR)
    text = formatted(caplog)
    assert_no_control_characters(text)
    assert 7 == text.count("\\x1b]8;;https://evil.example"), text


def test_no_module_takes_a_logger_around_the_escaping_one() -> None:
    """Every logger ilmek writes to comes from ilmek.logs.logger, which escapes; none from getLogger."""
    import pathlib

    package = pathlib.Path(__file__).resolve().parents[2] / "ilmek"
    direct = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.name != "logs.py" and "getLogger(" in path.read_text(encoding="utf-8")
    ]
    assert [] == direct


def test_a_message_whose_arguments_do_not_fit_still_reaches_the_handler() -> None:
    """The escaping filter never raises at the call site: a bad %-format is the handler's to report."""
    import logging

    from ilmek.logs import logger

    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    log = logger("ilmek.node")
    log.addHandler(handler)
    log.propagate = False  # pytest's own capture handler would raise on the bad format
    try:
        log.warning("%d items", "many")
    finally:
        log.propagate = True
        log.removeHandler(handler)
    assert ["%d items"] == [record.msg for record in seen]
