"""A local server that speaks the OpenAI Chat Completions wire format (JSON and SSE), scripted
to play the demo's support conversation. No network: it listens on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _turn_reply(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message for this request: look up, refund, then answer."""
    assistants = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if assistants == 0:
        call = {
            "id": "call_lookup",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": '{"order_id": "17"}'},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if assistants == 1:
        call = {
            "id": "call_refund",
            "type": "function",
            "function": {"name": "refund", "arguments": '{"order_id": "17", "amount": 49.0}'},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"role": "assistant", "content": "Your order 17 has been refunded: 49.00."}


class FakeOpenAI:
    """``answer_delay`` seconds pass before the final answer, as with a real model (so a test
    can kill the process while that call is in flight)."""

    def __init__(self, answer_delay: float = 0.3, rate_limited: int = 0) -> None:
        """The first ``rate_limited`` requests get a real 429 with ``retry-after: 7``."""
        self.requests: list[dict[str, Any]] = []
        self.rate_limited = rate_limited
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self.send_error(404)
                    return
                length = int(self.headers["Content-Length"])
                body = json.loads(self.rfile.read(length))
                server.requests.append(body)
                if server.rate_limited > 0:
                    server.rate_limited -= 1
                    error = json.dumps(
                        {
                            "error": {
                                "message": "Rate limit reached for requests",
                                "type": "requests",
                                "param": None,
                                "code": "rate_limit_exceeded",
                            }
                        }
                    ).encode()
                    self.send_response(429)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("retry-after", "7")
                    self.send_header("Content-Length", str(len(error)))
                    self.end_headers()
                    self.wfile.write(error)
                    return
                reply = _turn_reply(body)
                if reply.get("content"):
                    time.sleep(answer_delay)
                usage = {
                    "prompt_tokens": 100 + 10 * len(body["messages"]),
                    "completion_tokens": 20,
                    "total_tokens": 120,
                }
                finish = "tool_calls" if reply.get("tool_calls") else "stop"
                if body.get("stream"):
                    self._stream(body, reply, usage, finish)
                    return
                payload = json.dumps(
                    {
                        "id": "chatcmpl-1",
                        "object": "chat.completion",
                        "created": 1,
                        "model": body["model"],
                        "choices": [{"index": 0, "message": reply, "finish_reason": finish}],
                        "usage": usage,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _stream(
                self,
                body: dict[str, Any],
                reply: dict[str, Any],
                usage: dict[str, int],
                finish: str,
            ) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()

                def chunk(
                    delta: dict[str, Any],
                    finish_reason: str | None = None,
                    with_usage: bool = False,
                ) -> None:
                    data: dict[str, Any] = {
                        "id": "chatcmpl-1",
                        "object": "chat.completion.chunk",
                        "created": 1,
                        "model": body["model"],
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                    }
                    if with_usage:
                        data["choices"] = []
                        data["usage"] = usage
                    self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()

                chunk({"role": "assistant", "content": ""})
                if reply.get("content"):
                    words = reply["content"].split(" ")
                    for index, word in enumerate(words):
                        chunk({"content": word if index == len(words) - 1 else word + " "})
                for index, call in enumerate(reply.get("tool_calls") or []):
                    chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": index,
                                    "id": call["id"],
                                    "type": "function",
                                    "function": {"name": call["function"]["name"], "arguments": ""},
                                }
                            ]
                        }
                    )
                    arguments = call["function"]["arguments"]
                    for start in range(0, len(arguments), 8):
                        chunk(
                            {
                                "tool_calls": [
                                    {
                                        "index": index,
                                        "function": {"arguments": arguments[start : start + 8]},
                                    }
                                ]
                            }
                        )
                chunk({}, finish)
                chunk({}, with_usage=True)
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @contextmanager
    def running(self) -> Iterator[FakeOpenAI]:
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join()
