"""An OpenAI Agents SDK agent for the gateway's tests: a fake chat-completions model on loopback that
scripts the agent's tool calls, and the agent loop (MCPServerStreamableHttp) run in a thread of its own."""
from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedModel:
    """A chat-completions server: each request gets the next scripted turn, a tool call or a final
    answer (a function of the last tool output it was sent, so the test sees what the agent saw)."""

    def __init__(self, turns):
        self.turns = list(turns)
        self.requests: list[dict] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                model.requests.append(body)
                payload = json.dumps(model.answer(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def tool_outputs(self, body) -> list[str]:
        """The text of each tool message (a string, or a list of text parts)."""
        return [m["content"] if isinstance(m["content"], str) else "".join(p.get("text", "") for p in m["content"])
                for m in body.get("messages", []) if m.get("role") == "tool"]

    def answer(self, body) -> dict:
        turn = self.turns.pop(0) if self.turns else ("say", lambda outputs: "out of script")
        n = len(self.requests)
        if turn[0] == "call":
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{n}", "type": "function",
                 "function": {"name": turn[1], "arguments": json.dumps(turn[2])}}]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": turn[1](self.tool_outputs(body))}, "stop"
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": "fake",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def run_agent(mcp_url: str, token: str, model: ScriptedModel, task: str, *, timeout_s: float = 60):
    """The agent loop in its own thread and event loop (a browser test's loop may own this thread's).

    timeout_s: how long one tools/call may take (a call held on an approval needs longer)."""
    from agents import Agent, Runner, set_default_openai_api, set_default_openai_client, set_tracing_disabled
    from agents.mcp import MCPServerStreamableHttp
    from openai import AsyncOpenAI

    async def go():
        set_default_openai_client(AsyncOpenAI(base_url=model.base_url, api_key="x"), use_for_tracing=False)
        set_default_openai_api("chat_completions")
        set_tracing_disabled(True)
        server = MCPServerStreamableHttp(name="agentops", params={
            "url": mcp_url, "headers": {"Authorization": f"Bearer {token}"}, "timeout": 30,
            "sse_read_timeout": timeout_s}, client_session_timeout_seconds=timeout_s, cache_tools_list=True)
        async with server:
            agent = Agent(name="sdk-agent", instructions="Use the tools.", model="fake-model", mcp_servers=[server])
            return await Runner.run(agent, task, max_turns=8)

    box: dict = {}

    def target():
        try:
            box["result"] = asyncio.run(go())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=3 * timeout_s)
    if "error" in box:
        raise box["error"]
    if thread.is_alive():
        raise TimeoutError(f"the agent still runs after {3 * timeout_s:g} s")
    return box["result"]
