"""A LangChain chat graph stores real message objects on every backend (pydantic models, registered)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage

import ilmek
from ilmek import END, START, Checkpointer, NodeContext, graph, resume, run, serde, thread_state

pytestmark = pytest.mark.timeout(60)

for message_class in (AIMessage, HumanMessage, SystemMessage, ToolMessage):
    serde.register(message_class)


class Chat(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], ilmek.messages]


def _fake_llm(history: list[AnyMessage]) -> AIMessage:
    # What a chat model returns: an AIMessage with an id, tool calls and metadata.
    last = history[-1].content
    return AIMessage(
        content=f"echo: {last}",
        id=f"ai-{len(history)}",
        tool_calls=[{"name": "lookup", "args": {"q": last}, "id": f"call-{len(history)}"}],
        response_metadata={"model": "fake", "tokens": len(history)},
    )


def _chat_graph(calls: list[str]) -> Any:
    def agent(state: Chat, ctx: NodeContext) -> Chat:
        def call_model() -> AIMessage:
            calls.append("llm")
            return _fake_llm(state["messages"])

        reply = ctx.step("llm", call_model)
        answer = ctx.interrupt({"question": "Reply?", "draft": reply.content})
        return {"messages": [reply, HumanMessage(content=str(answer))]}

    return graph("chat", Chat).node("agent", agent).edge(START, "agent").edge("agent", END).compile()


def test_a_chat_thread_keeps_langchain_messages_as_themselves(
    checkpointer: Checkpointer, reopen: Callable[[], Checkpointer]
) -> None:
    """Messages without ids get one, come back as their own classes, and the model call is never repeated."""
    calls: list[str] = []
    chat = _chat_graph(calls)
    opening = [SystemMessage(content="Be brief."), HumanMessage(content="hi")]
    first = run(chat, {"messages": opening}, thread_id="c1", checkpointer=checkpointer)
    assert first.status == "interrupted"
    done = resume(chat, "thanks", thread_id="c1", checkpointer=reopen())
    assert done.status == "done", done.errors
    state = thread_state(chat, reopen(), "c1")
    assert state is not None
    messages = state["messages"]
    assert [type(m) for m in messages] == [SystemMessage, HumanMessage, AIMessage, HumanMessage]
    assert all(isinstance(m.id, str) and m.id for m in messages)
    reply = messages[2]
    assert reply.tool_calls == [{"name": "lookup", "args": {"q": "hi"}, "id": "call-2", "type": "tool_call"}]
    assert reply.response_metadata == {"model": "fake", "tokens": 2}
    assert messages[3].content == "thanks"
    assert calls == ["llm"]  # the resume replayed the recorded AIMessage


def test_a_message_written_again_with_its_id_replaces_it(checkpointer: Checkpointer) -> None:
    """The messages fold keeps LangChain messages by id, as add_messages does."""

    def edit(state: Chat) -> Chat:
        first = state["messages"][0]
        return {"messages": [first.model_copy(update={"content": "edited"})]}

    g = graph("edit", Chat).node("edit", edit).edge(START, "edit").edge("edit", END).compile()
    opening = {"messages": [HumanMessage(content="draft", id="m1")]}
    result = run(g, opening, thread_id="e", checkpointer=checkpointer)
    assert result.status == "done", result.errors
    assert result.state["messages"] == [HumanMessage(content="edited", id="m1")]
