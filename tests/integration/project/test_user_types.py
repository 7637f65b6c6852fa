"""What ``mypy --strict`` says about users' programs: typed state, bound graphs, misspelt options, events.

Small programs are written to a temporary folder, outside the repository,
and type-checked together in one mypy run against the installed ilmek (as
``test_packaging_devinstall`` does). Each test reads what mypy said about
its own file.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from tests.integration.project.test_packaging_devinstall import child_env

pytestmark = pytest.mark.timeout(300)

HEADER = """\
from __future__ import annotations

from typing import Annotated, Any, TypedDict

import attrs

import ilmek
from ilmek import END, START, InMemoryCheckpointer, NodeContext, graph


class State(TypedDict, total=False):
    log: Annotated[list[str], ilmek.append]
    turns: Annotated[int, ilmek.last_write(0)]
    messages: Annotated[list[dict[str, Any]], ilmek.messages]
    topic: str
"""

PROGRAMS = {
    "typed_ok.py": HEADER
    + """

def greet(state: State) -> State:
    return {"log": [f"turn {state.get('turns', 0)}"], "turns": state.get("turns", 0) + 1}


def ask(state: State, ctx: NodeContext) -> State:
    answer: str = ctx.interrupt({"question": "ok?"})
    return {"messages": [{"role": "user", "text": answer}], "topic": answer}


@attrs.define
class Order:
    total: float = 0.0
    log: list[str] = ilmek.append_field()


cp = InMemoryCheckpointer()
g = (
    graph("typed", State)
    .node("greet", greet)
    .node("ask", ask)
    .node("done", lambda state: {"log": ["done"]})
    .edge(START, "greet")
    .edge("greet", "ask", when=lambda state: state.get("turns", 0) < 3)
    .edge("ask", "done")
    .edge("done", END)
    .compile(checkpointer=cp, recursion_limit=10)
)
paused = ilmek.run(g, {"topic": "start"}, thread_id="t")
reveal_type(paused)
finished = ilmek.resume(g, "yes", thread_id="t", expect_checkpoint_id=paused.checkpoint_id)
reveal_type(finished.state)
reveal_type(ilmek.thread_state(g, thread_id="t"))
reveal_type(ilmek.pending_interrupts(g, thread_id="t"))
reveal_type(ilmek.history(g, thread_id="t", limit=2))
ilmek.update_state(g, thread_id="t", update={"topic": "edited"})
ilmek.pending_interrupts(cp, "t")
ilmek.thread_state(g, cp, "t")

orders = (
    graph("orders", Order)
    .node("bill", lambda order: {"total": order.total * 1.2})
    .edge(START, "bill")
    .compile(checkpointer=cp)
)
reveal_type(ilmek.thread_state(orders, thread_id="o"))
plain = graph("plain", {"n": ilmek.last_write(0)}).node("inc", lambda s: {"n": s["n"] + 1}).edge(START, "inc")
reveal_type(ilmek.run(plain.compile(), {}).state)
""",
    "typed_bad_write.py": HEADER
    + """

def unknown_key(state: State) -> State:
    return {"log": ["x"], "lgo": ["typo"]}


def wrong_type(state: State) -> State:
    return {"turns": "three"}


def untyped_return(state: State) -> dict[str, Any]:
    return {"log": ["x"]}


b = graph("bad", State)
b.node("loose", untyped_return)
b.node("lambda", lambda state: {"topik": "typo"})
""",
    "typo_keyword.py": HEADER
    + """
g = graph("typo", State).node("n", lambda state: None).edge(START, "n").compile()
ilmek.resume(g, "yes", thred_id="t")
ilmek.resume_keyed(g, {}, thread_id="t", chekpointer=InMemoryCheckpointer())
ilmek.stream(g, {}, recursion_limt=3)
graph("typo", State).node("n", lambda state: None).edge(START, "n").compile(thread_id="t")
""",
    "narrowing.py": HEADER
    + """
g = graph("events", State).node("n", lambda state: None).edge(START, "n").compile()
for event in ilmek.stream(g, {}):
    if event.type == "custom":
        reveal_type(event)
        print(event.payload)
    elif event.type == "run_end":
        print(event.status)
custom: ilmek.CustomEvent | None = None
""",
    "contracts.py": HEADER
    + """
from ilmek import answers


def charge(amount: float, currency: str = "EUR") -> str:
    return f"{amount} {currency}"


def decide(state: State, ctx: NodeContext) -> State:
    reveal_type(ctx.interrupt("ok?", answers=answers.choice("yes", "no")))
    reveal_type(ctx.interrupt("how many?", answers=answers.number(integer=True)))
    reveal_type(ctx.interrupt("send?", answers=answers.review("draft")))
    reveal_type(ctx.interrupt("free?"))
    reveal_type(ctx.step("charge", charge, 9.5, currency="USD"))
    ctx.step("charge", charge, "9.5")
    return {}
""",
    "typed_input.py": HEADER
    + """

class Refund(TypedDict, total=False):
    amount: float
    reason: str


def pay(state: Refund) -> Refund:
    return {"reason": f"paid {state.get('amount', 0.0)}"}


refunds = graph("refunds", Refund).node("pay", pay).edge(START, "pay").compile()
ilmek.run(refunds, {"amuont": 1.0})
ilmek.stream(refunds, {"amount": "one"})
ilmek.run(refunds, 3)
reveal_type(ilmek.run(refunds, {"amount": 1.0}))
start: Refund = {"amount": 2.0}
for event in ilmek.stream(refunds, start):
    print(event.type)
print(ilmek.run(refunds).status)


@attrs.define
class Order:
    total: float = 0.0


orders = graph("orders", Order).node("bill", lambda o: {"total": o.total * 2}).edge(START, "bill").compile()
reveal_type(ilmek.run(orders, {"total": 2.0}))
ilmek.run(orders, Order(total=1.0))
ilmek.run(orders, 3)
plain = graph("plain", {"n": ilmek.last_write(0)}).node("inc", lambda s: {"n": s["n"] + 1}).edge(START, "inc")
print(ilmek.run(plain.compile(), {"n": 1}).state)
""",
    "langchain_chat.py": HEADER
    + """
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage

for message_class in (AIMessage, HumanMessage):
    ilmek.serde.register(message_class)


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], ilmek.messages]


def agent(state: Chat, ctx: NodeContext) -> Chat:
    last = state["messages"][-1]
    reply = ctx.step("llm", lambda: AIMessage(content=f"echo: {last.content}", id="ai-1"))
    return {"messages": [reply]}


chat = (
    graph("chat", Chat)
    .node("agent", agent)
    .edge(START, "agent")
    .edge("agent", END)
    .compile(checkpointer=ilmek.SqliteCheckpointer("chat.db"))
)
ilmek.run(chat, {"messages": [HumanMessage(content="hi")]}, thread_id="c").raise_for_status()
stored = ilmek.thread_state(chat, ilmek.SqliteCheckpointer("chat.db"), "c")
assert stored is not None
reveal_type(stored["messages"])
print([type(m).__name__ for m in stored["messages"]], stored["messages"][-1].content)
""",
    "pydantic_field.py": HEADER
    + """
import pydantic


@ilmek.serde.register
class Address(pydantic.BaseModel):
    city: str
    postcode: str = ""


class Customer(TypedDict, total=False):
    address: Address
    visits: Annotated[int, ilmek.last_write(0)]


def move(state: Customer) -> Customer:
    return {"address": state["address"].model_copy(update={"postcode": "34000"}), "visits": 1}


customers = (
    graph("customers", Customer)
    .node("move", move)
    .edge(START, "move")
    .compile(checkpointer=ilmek.SqliteCheckpointer("customers.db"))
)
ilmek.run(customers, {"address": Address(city="Istanbul")}, thread_id="c").raise_for_status()
moved = ilmek.thread_state(customers, ilmek.SqliteCheckpointer("customers.db"), "c")
assert moved is not None
reveal_type(moved["address"])
print(repr(moved["address"]))
""",
}


@pytest.fixture(scope="module")
def mypy_says(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """mypy --strict's messages on each program, by file name, as ``line: message`` strings."""
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    folder = tmp_path_factory.mktemp("user_programs")
    for name, text in PROGRAMS.items():
        (folder / name).write_text(textwrap.dedent(text), encoding="utf-8")
    command = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--show-error-codes"]
    command += ["--cache-dir", str(folder / "cache"), *PROGRAMS]
    checked = subprocess.run(
        command, cwd=folder, capture_output=True, text=True, env=child_env(), timeout=280
    )
    said: dict[str, list[str]] = {name: [] for name in PROGRAMS}
    for line in checked.stdout.splitlines():
        found = re.match(r"(\w+\.py):(\d+): (.*)", line)
        if found is not None:
            said[found.group(1)].append(f"{found.group(2)}: {found.group(3)}")
    assert checked.returncode in (0, 1), checked.stdout + checked.stderr
    return said


def lines_of(program: str, text: str) -> list[int]:
    """The line numbers of ``program`` holding ``text``."""
    lines = textwrap.dedent(PROGRAMS[program]).splitlines()
    return [number for number, line in enumerate(lines, 1) if text in line]


def test_a_typed_dict_program_with_a_bound_checkpointer_passes_strict_mypy_and_its_state_is_typed(
    mypy_says: dict[str, list[str]],
) -> None:
    """TypedDict nodes, compile(checkpointer=...), keyword host helpers: no errors, and typed results."""
    said = mypy_says["typed_ok.py"]
    assert [] == [line for line in said if ": error:" in line], said
    notes = [line.split("Revealed type is ", 1)[1] for line in said if "Revealed type is" in line]
    state = "TypedDict(typed_ok.State, {'log'?: list[str], 'turns'?: int, "
    state += "'messages'?: list[dict[str, Any]], 'topic'?: str})"
    assert [
        f'"ilmek.types.Result[{state}]"',  # run()
        f'"{state}"',  # Result.state
        f'"{state} | None"',  # thread_state(g, thread_id=...)
        '"tuple[ilmek.types.Pending, ...]"',
        '"list[ilmek.types.Checkpoint]"',
        '"typed_ok.Order | None"',  # an attrs state
        '"dict[str, Any]"',  # a channel map
    ] == notes


def test_a_wrong_write_to_a_typed_dict_state_fails_mypy(mypy_says: dict[str, list[str]]) -> None:
    """An unknown key, a value of the wrong type, a node not returning the TypedDict: each a mypy error."""
    errors = [line for line in mypy_says["typed_bad_write.py"] if ": error:" in line]
    program = "typed_bad_write.py"
    expected = [
        (lines_of(program, '"lgo"')[0], 'Extra key "lgo" for TypedDict "State"'),
        (lines_of(program, '"three"')[0], 'TypedDict item "turns" has type "int"'),
        (lines_of(program, 'b.node("loose"')[0], 'incompatible type "Callable[[State], dict[str, Any]]"'),
        (lines_of(program, '"topik"')[0], 'incompatible type "Callable[[State], dict[str, str]]"'),
    ]
    for line, text in expected:
        assert any(e.startswith(f"{line}: ") and text in e for e in errors), (line, text, errors)
    assert len(expected) <= len(errors)


def test_a_misspelt_run_option_fails_mypy(mypy_says: dict[str, list[str]]) -> None:
    """resume(g, "yes", thred_id=...) and its kin fail mypy, not only at run time; binding thread_id too."""
    errors = [line for line in mypy_says["typo_keyword.py"] if ": error:" in line]
    program = "typo_keyword.py"
    for text, said in [
        ("thred_id", 'Unexpected keyword argument "thred_id" for "resume"'),
        ("chekpointer", 'Unexpected keyword argument "chekpointer" for "resume_keyed"'),
        ("recursion_limt", 'Unexpected keyword argument "recursion_limt" for overloaded function "stream"'),
        (
            'compile(thread_id="t")',
            'Argument "thread_id" to "compile" of "GraphBuilder" has incompatible type',
        ),
    ]:
        line = lines_of(program, text)[0]
        assert any(e.startswith(f"{line}: ") and said in e for e in errors), (text, errors)


def test_event_type_narrows_the_event(mypy_says: dict[str, list[str]]) -> None:
    """`if event.type == "custom":` narrows the event to a CustomEvent, so .payload type-checks."""
    said = mypy_says["narrowing.py"]
    assert [] == [line for line in said if ": error:" in line], said
    reveal = lines_of("narrowing.py", "reveal_type(event)")[0]
    assert f'{reveal}: note: Revealed type is "ilmek.events.CustomEvent"' in said, said


def test_the_programs_mypy_checks_run(tmp_path: pathlib.Path) -> None:
    """The program that type-checks clean also runs: its graph pauses, resumes and reads back typed state."""
    path = tmp_path / "typed_ok.py"
    path.write_text(
        textwrap.dedent(PROGRAMS["typed_ok.py"]).replace("reveal_type(", "print("), encoding="utf-8"
    )
    ran = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, env=child_env(), timeout=60
    )
    assert 0 == ran.returncode, ran.stderr
    assert "'topic': 'yes'" in ran.stdout


def test_an_interrupt_returns_what_its_contract_gives_and_a_step_checks_its_arguments(
    mypy_says: dict[str, list[str]],
) -> None:
    """ctx.interrupt is typed by its shape (str, int, Review; Any without one); ctx.step checks fn's
    arguments against its signature (ParamSpec) and returns fn's type."""
    said = mypy_says["contracts.py"]
    notes = [line.split("Revealed type is ", 1)[1] for line in said if "Revealed type is" in line]
    assert ['"str"', '"int"', '"ilmek.answers.Review"', '"Any"', '"str"'] == notes
    errors = [line for line in said if ": error:" in line]
    bad = lines_of("contracts.py", 'ctx.step("charge", charge, "9.5")')[0]
    assert [bad] == [int(line.split(":", 1)[0]) for line in errors], errors
    assert 'incompatible type "str"; expected "float"' in errors[0]


def test_a_misspelt_or_mistyped_input_fails_mypy_on_a_typed_dict_graph(
    mypy_says: dict[str, list[str]],
) -> None:
    """run(g, {"amuont": 1.0}) on a CompiledGraph[Refund], a wrong value, a non-mapping: each an error."""
    errors = [line for line in mypy_says["typed_input.py"] if ": error:" in line]
    program = "typed_input.py"
    expected = [
        (lines_of(program, '"amuont"')[0], 'Argument 2 to "run" has incompatible type "dict[str, float]"'),
        (lines_of(program, '"one"')[0], 'Argument 2 to "stream" has incompatible type "dict[str, str]"'),
        (lines_of(program, "ilmek.run(refunds, 3)")[0], 'No overload variant of "run"'),
        (lines_of(program, "ilmek.run(orders, 3)")[0], 'No overload variant of "run"'),
    ]
    assert [line for line, _ in expected] == [int(e.split(":", 1)[0]) for e in errors], errors
    for (line, text), error in zip(expected, errors, strict=True):
        assert error.startswith(f"{line}: "), (line, error)
        assert text in error, (text, error)
    assert all('expected "Refund | ' in e for e in errors[:2]), errors


def test_a_well_typed_input_passes_mypy_and_types_the_result(mypy_says: dict[str, list[str]]) -> None:
    """A TypedDict literal, a Refund variable, no input; an attrs graph's mapping or instance: all pass."""
    said = mypy_says["typed_input.py"]
    notes = [line.split("Revealed type is ", 1)[1] for line in said if "Revealed type is" in line]
    refund = "TypedDict(typed_input.Refund, {'amount'?: float, 'reason'?: str})"
    assert [f'"ilmek.types.Result[{refund}]"', '"ilmek.types.Result[typed_input.Order]"'] == notes


@pytest.mark.parametrize("program", ["langchain_chat.py", "pydantic_field.py"])
def test_a_langchain_chat_graph_and_a_pydantic_state_field_pass_strict_mypy(
    mypy_says: dict[str, list[str]], program: str
) -> None:
    """LangChain messages in a messages channel, a pydantic model as a field: no mypy error, typed reads."""
    said = mypy_says[program]
    assert [] == [line for line in said if ": error:" in line], said
    notes = [line.split("Revealed type is ", 1)[1] for line in said if "Revealed type is" in line]
    expected = {
        "langchain_chat.py": '"list[langchain_core.messages.ai.AIMessage | langchain_core.messages.human.',
        "pydantic_field.py": '"pydantic_field.Address"',
    }[program]
    assert 1 == len(notes), notes
    assert notes[0].startswith(expected), notes


@pytest.mark.parametrize(
    ("program", "printed"),
    [
        ("langchain_chat.py", "['HumanMessage', 'AIMessage'] echo: hi"),
        ("pydantic_field.py", "Address(city='Istanbul', postcode='34000')"),
    ],
)
def test_the_langchain_and_pydantic_programs_store_their_objects_in_sqlite(
    tmp_path: pathlib.Path, program: str, printed: str
) -> None:
    """The programs mypy passes run: their objects go through a SQLite file and come back as themselves."""
    path = tmp_path / program
    path.write_text(textwrap.dedent(PROGRAMS[program]).replace("reveal_type(", "print("), encoding="utf-8")
    ran = subprocess.run(
        [sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, env=child_env(), timeout=60
    )
    assert 0 == ran.returncode, ran.stderr
    assert printed == ran.stdout.splitlines()[-1], ran.stdout
