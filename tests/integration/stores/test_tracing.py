"""OpenTelemetry: the spans a run records, their parents and attributes, on a SQLite file and on Postgres;
ilmek's SQL under the application's psycopg2 instrumentation; and nothing at all without the API.

Spans are recorded by the OpenTelemetry SDK's in-memory exporter, set up once for this process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import psycopg2
import psycopg2.extras
import psycopg2.pool
import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.psycopg2 import Psycopg2Instrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ilmek import END, START, PostgresCheckpointer, RetryPolicy, channel, graph, resume, run, stream
from tests.support.stores import Store, store_fixture  # noqa: F401 - the store fixture

pytestmark = pytest.mark.timeout(60)

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> None:
    """The process's tracer provider (OpenTelemetry allows one): every span goes to EXPORTER."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(tracer_provider)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


APP = trace.get_tracer("the-application")


def named(finished: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in finished if span.name == name]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    context = span.context
    assert context is not None
    return context.span_id


def checkout_graph(failures: list[str]) -> Any:
    """plan (a step that makes a span of the application's own) → charge (fails once, retried) → END."""

    def lookup(item: str) -> str:
        with APP.start_as_current_span("app.lookup"):
            return f"found {item}"

    def plan(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.step("lookup", lookup, "mug")]}

    def charge(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if not failures:
            failures.append("once")
            raise ConnectionError("the card network hung up")
        return {"log": [ctx.step("charge", lambda: "charged")]}

    return (
        graph("traced", {"log": channel.append()})
        .node("plan", plan)
        .node("charge", charge, retry=RetryPolicy(max_attempts=2, backoff=0.0))
        .edge(START, "plan")
        .edge("plan", "charge")
        .edge("charge", END)
        .compile()
    )


def test_a_run_records_run_superstep_task_and_step_spans_under_the_callers_span(
    store: Store, spans: InMemorySpanExporter
) -> None:
    """A run in a request's span: one ilmek.run under it, a superstep span per superstep under that, a task
    span per task under its superstep, a step span per step function under its task, and the application's
    own span made inside a step under that step's."""
    checkpointer = store.open()
    with APP.start_as_current_span("request") as request:
        result = run(checkout_graph([]), {}, thread_id="traced", checkpointer=checkpointer)
    assert "done" == result.status
    finished = spans.get_finished_spans()

    [run_span] = named(finished, "ilmek.run")
    assert request.get_span_context().span_id == parent_of(run_span)
    assert {
        "ilmek.graph": "traced",
        "ilmek.thread_id": "traced",
        "ilmek.run_id": result.run_id,
        "ilmek.mode": "run",
        "ilmek.status": "done",
        "ilmek.checkpoint_id": result.checkpoint_id,
    } == dict(run_span.attributes or {})

    supersteps = named(finished, "ilmek.superstep")
    assert [0, 1] == sorted(int((s.attributes or {})["ilmek.step"]) for s in supersteps)  # type: ignore[arg-type]
    assert {span_id(run_span)} == {parent_of(s) for s in supersteps}
    by_step = {(s.attributes or {})["ilmek.step"]: s for s in supersteps}

    tasks = {(t.attributes or {})["ilmek.node"]: t for t in named(finished, "ilmek.task")}
    assert {"plan", "charge"} == set(tasks)
    assert span_id(by_step[0]) == parent_of(tasks["plan"])
    assert span_id(by_step[1]) == parent_of(tasks["charge"])
    assert 2 == (tasks["charge"].attributes or {})["ilmek.attempts"]
    assert "ok" == (tasks["charge"].attributes or {})["ilmek.outcome"]

    steps = {(s.attributes or {})["ilmek.step_key"]: s for s in named(finished, "ilmek.step")}
    # The journal's keys: a key's first use in a pass is #0.
    assert {"lookup#0", "charge#0"} == set(steps)
    assert span_id(tasks["plan"]) == parent_of(steps["lookup#0"])
    assert span_id(tasks["charge"]) == parent_of(steps["charge#0"])
    [lookup] = named(finished, "app.lookup")
    assert span_id(steps["lookup#0"]) == parent_of(lookup)
    assert all(s.status.status_code is not StatusCode.ERROR for s in [run_span, *supersteps, *steps.values()])


def test_a_failed_node_marks_its_task_superstep_and_run_spans_failed(
    store: Store, spans: InMemorySpanExporter
) -> None:
    """A node that raises: its task span, its superstep's and the run's end with status ERROR and the
    exception recorded; the step that raised has its own ERROR span."""

    def failing(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.step("charge", _declined)
        return {}

    g = graph("failing", {"log": channel.append()}).node("charge", failing).edge(START, "charge").compile()
    result = run(g, {}, thread_id="failing", checkpointer=store.open())
    assert "error" == result.status
    finished = spans.get_finished_spans()
    for name in ("ilmek.run", "ilmek.superstep", "ilmek.task", "ilmek.step"):
        [span] = named(finished, name)
        assert StatusCode.ERROR is span.status.status_code, name
        assert "card declined" in (span.status.description or ""), name
        assert any(event.name == "exception" for event in span.events), name
    [run_span] = named(finished, "ilmek.run")
    assert "error" == (run_span.attributes or {})["ilmek.status"]


def _declined() -> str:
    raise ValueError("card declined")


def test_a_resume_and_a_stream_record_their_runs_and_the_readers_code_keeps_its_own_context(
    store: Store, spans: InMemorySpanExporter
) -> None:
    """A pause then its resume are two ilmek.run spans (mode run, then resume), the first ending
    interrupted. While a stream's reader handles an event, ilmek's spans are not current: the reader's
    own span is a child of the reader's context, not of the run."""

    def ask(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"log": [ctx.interrupt("charge?")]}

    checkpointer = store.open()
    g = graph("asking", {"log": channel.append()}).node("ask", ask).edge(START, "ask").compile()
    seen_parents: list[int | None] = []
    with APP.start_as_current_span("reader") as reader:
        for _ in stream(g, {}, thread_id="asking", checkpointer=checkpointer):
            with APP.start_as_current_span("reader.handles") as handling:
                seen_parents.append(handling.parent.span_id if handling.parent is not None else None)  # type: ignore[attr-defined]
    assert seen_parents
    assert {reader.get_span_context().span_id} == set(seen_parents)
    assert "done" == resume(g, "yes", thread_id="asking", checkpointer=checkpointer).status
    runs = named(spans.get_finished_spans(), "ilmek.run")
    assert [("run", "interrupted"), ("resume", "done")] == [
        ((s.attributes or {})["ilmek.mode"], (s.attributes or {})["ilmek.status"]) for s in runs
    ]


def test_a_stream_closed_early_ends_its_run_span_as_closed(store: Store, spans: InMemorySpanExporter) -> None:
    """The reader breaks out after the first event and closes the stream: the run's span still ends."""
    events = stream(checkout_graph(["already failed"]), {}, thread_id="closed", checkpointer=store.open())
    next(events)
    events.close()  # type: ignore[attr-defined]
    [run_span] = named(spans.get_finished_spans(), "ilmek.run")
    assert "closed" == (run_span.attributes or {})["ilmek.status"]


@pytest.mark.postgres
@pytest.mark.parametrize("factory", [None, psycopg2.extras.RealDictCursor, psycopg2.extras.NamedTupleCursor])
def test_ilmeks_statements_show_under_the_applications_psycopg2_instrumentation(
    postgres_dsn: str, spans: InMemorySpanExporter, factory: Any
) -> None:
    """With OpenTelemetry's psycopg2 instrumentor on, ilmek's SQL on the application's pool is traced like
    the application's own, the superstep's commit under the superstep's span. A pool whose connections
    make dict rows still works (ilmek then asks for a plain cursor, which the instrumentor does not see)."""
    Psycopg2Instrumentor().instrument(skip_dep_check=True)
    try:
        extra = {} if factory is None else {"cursor_factory": factory}
        pool = psycopg2.pool.ThreadedConnectionPool(1, 4, postgres_dsn, **extra)
        try:
            checkpointer = PostgresCheckpointer(pool)
            checkpointer.migrate()
            spans.clear()
            result = run(
                checkout_graph(["already failed"]), {}, thread_id=f"sql-{factory}", checkpointer=checkpointer
            )
        finally:
            pool.closeall()
    finally:
        Psycopg2Instrumentor().uninstrument()
    assert "done" == result.status
    assert ["found mug", "charged"] == result.state["log"]
    finished = spans.get_finished_spans()
    statements = [s for s in finished if "ilmek_" in str((s.attributes or {}).get("db.statement", ""))]
    if factory is psycopg2.extras.RealDictCursor:
        assert [] == statements
        return
    assert statements, [s.name for s in finished]
    supersteps = {span_id(s) for s in named(finished, "ilmek.superstep")}
    assert any(parent_of(s) in supersteps for s in statements)


def ilmek_ancestor(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> str | None:
    """The name of the nearest ``ilmek.*`` span above ``span``, or None."""
    parent = parent_of(span)
    while parent is not None and parent in by_id:
        above = by_id[parent]
        if above.name.startswith("ilmek."):
            return above.name
        parent = parent_of(above)
    return None


def approval_graph() -> Any:
    """A step, a pause, a step after the answer: statements on the reader's thread and on workers."""

    def approve(state: dict[str, Any], ctx: Any) -> dict[str, Any]:
        quote = ctx.step("quote", lambda: 12.5)
        answer = ctx.interrupt({"question": f"Pay {quote}?"})
        return {"log": [ctx.step("pay", lambda: f"paid {quote} ({answer})")]}

    return (
        graph("approval", {"log": channel.append()})
        .node("approve", approve)
        .edge(START, "approve")
        .edge("approve", END)
        .compile()
    )


@pytest.mark.postgres
@pytest.mark.parametrize("client", ["pool", "connection"])
def test_every_statement_ilmek_sends_belongs_to_an_ilmek_span(
    postgres_dsn: str, spans: InMemorySpanExporter, client: str
) -> None:
    """The input commit, the pause's commit, the answers' record and giving the hold back: each of ilmek's
    statements, on a pool or a single connection, has an ilmek span above it, never only the request's."""
    Psycopg2Instrumentor().instrument(skip_dep_check=True)
    try:
        pool = psycopg2.pool.ThreadedConnectionPool(1, 4, postgres_dsn)
        connection = pool.getconn() if client == "connection" else None
        try:
            checkpointer = PostgresCheckpointer(connection if connection is not None else pool)
            checkpointer.migrate()
            spans.clear()
            with APP.start_as_current_span("app.request"):
                paused = run(approval_graph(), {"log": ["asked"]}, thread_id="t", checkpointer=checkpointer)
            with APP.start_as_current_span("app.request"):
                done = resume(approval_graph(), "yes", thread_id="t", checkpointer=checkpointer)
        finally:
            if connection is not None:
                pool.putconn(connection)
            pool.closeall()
    finally:
        Psycopg2Instrumentor().uninstrument()
    assert ("interrupted", "done") == (paused.status, done.status)
    finished = spans.get_finished_spans()
    by_id = {span_id(s): s for s in finished}
    statements = [s for s in finished if "ilmek_" in str((s.attributes or {}).get("db.statement", ""))]
    assert len(statements) >= 4, [s.name for s in finished]
    orphans = [
        str((s.attributes or {}).get("db.statement", ""))[:80]
        for s in statements
        if ilmek_ancestor(s, by_id) is None
    ]
    assert [] == orphans


@pytest.mark.parametrize("api", ["absent", "without-a-provider"])
def test_without_the_api_or_a_provider_a_run_makes_no_span(api: str) -> None:
    """With ``opentelemetry`` not importable, runs (a step, a pause, a resume) work and never import it;
    with the API but no tracer provider set, they make no span (not even non-recording ones), and each
    run asks once, as it starts, never again for its supersteps, tasks and steps."""
    script = textwrap.dedent(
        f"""
        import sys
        if {api!r} == "absent":
            sys.modules["opentelemetry"] = None  # as if it were not installed
        from ilmek import END, START, InMemoryCheckpointer, channel, graph, resume, run, tracing

        made = []
        start = tracing.start
        tracing.start = lambda *args: made.append(start(*args))

        def ask(state, ctx):
            return {{"log": [ctx.step("s", lambda: "stepped"), ctx.interrupt("ok?")]}}

        g = graph("plain", {{"log": channel.append()}}).node("ask", ask).edge(START, "ask").edge("ask", END)
        g = g.compile(checkpointer=InMemoryCheckpointer())
        assert run(g, {{}}, thread_id="t").status == "interrupted"
        assert resume(g, "yes", thread_id="t").state == {{"log": ["stepped", "yes"]}}
        assert [None, None] == made, made  # the run's and the resume's: nothing asked per part
        if {api!r} == "absent":
            assert tracing._tracer is None
            loaded = [name for name in sys.modules if name.startswith("opentelemetry") and sys.modules[name]]
            assert not loaded, loaded
        print("ok")
        """
    )
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": repo},
    )
    assert (0, "ok\n") == (done.returncode, done.stdout), done.stderr
