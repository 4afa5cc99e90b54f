"""A LangGraph agent whose tools come from the gateway through langchain-mcp-adapters.

Run by the Python of `.venv-langgraph` (tests/gateway/langgraph-requirements.txt): the adapters need
`mcp<2`, which cannot be installed beside AgentOps's `mcp` 2, so the client lives in an environment of
its own, as it would on an agent team's machine. Everything in it is real (the adapters' streamable
HTTP client, LangGraph's graph and ToolNode) except the model: a node that proposes the tool calls the
test scripts, one per turn (a call whose approval is pending is made again, as its guidance says),
then answers "done".

    python langgraph_client.py URL '[["gw_echo", {"text": "hello"}], ...]'   (token: AGENTOPS_MCP_TOKEN)

Prints one JSON object: the tools the agent was given, and each ToolMessage (its text, status and structured content).
"""
from __future__ import annotations

import asyncio
import json
import os
import sys

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


def scripted_model(script: list[list]):
    turns = iter(script)
    asked = {"turn": None, "again": 0}

    def model(state: MessagesState) -> dict:
        last = state["messages"][-1]
        # As the result's retry guidance says: an approval still pending is asked again, same arguments.
        if isinstance(last, ToolMessage) and '"approval_pending"' in text_of(last.content) and asked["again"] < 60:
            asked["again"] += 1
            turn = asked["turn"]
        else:
            turn = asked["turn"] = next(turns, None)
        if turn is None:
            return {"messages": [AIMessage("done")]}
        name, arguments = turn
        call = {"name": name, "args": arguments, "id": f"call-{len(state['messages'])}", "type": "tool_call"}
        return {"messages": [AIMessage("", tool_calls=[call])]}

    return model


def text_of(content) -> str:
    """What the model reads: a string, or the text of the content blocks."""
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if isinstance(block, dict))


async def main(url: str, script: list[list]) -> dict:
    client = MultiServerMCPClient({"agentops": {
        "transport": "streamable_http", "url": url,
        "headers": {"Authorization": f"Bearer {os.environ['AGENTOPS_MCP_TOKEN']}"}}})
    # One MCP session for the whole conversation, so its calls are one governed run (without it the
    # adapters open a session, so a run, per call).
    async with client.session("agentops") as session:
        tools = await load_mcp_tools(session)
        graph = StateGraph(MessagesState)
        graph.add_node("model", scripted_model(script))
        graph.add_node("tools", ToolNode(tools))
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", tools_condition)
        graph.add_edge("tools", "model")
        final = await graph.compile().ainvoke({"messages": [HumanMessage("Do the task with the tools.")]})
    messages = [m for m in final["messages"] if isinstance(m, ToolMessage)]
    return {"tools": sorted(t.name for t in tools),
            "results": [{"text": text_of(m.content), "status": m.status,
                         "structured": getattr(m.artifact, "get", lambda _k: None)("structured_content")}
                        for m in messages]}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], json.loads(sys.argv[2]))), default=str))
