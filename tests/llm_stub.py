"""A local OpenAI-compatible chat-completions server with scripted replies, for tests of the LLM planner
through the real `openai` client: no network, no key.

Each request to `POST /v1/chat/completions` is recorded (its raw body and parsed JSON) and answered with
the next scripted reply: a completion with tool calls or content, an HTTP error with headers, optionally
after a delay (to make the client time out). An exhausted script answers 400, so a test that expected
fewer requests fails clearly instead of hanging.

Below the server: Contexts built from real recorded logs, as the loop builds them, for the tests.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from specdoctor.playbooks.base import Context
from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.command import LaunchCommand
from specdoctor.tools.gpu import GpuReport
from specdoctor.tools.logs import compact, extract_root_cause
from specdoctor.tools.outcome import Outcome


@dataclass(frozen=True)
class Scripted:
    """One reply: HTTP status, JSON body, headers, and seconds to wait before answering."""

    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def tool_calls(*calls: tuple[str, dict[str, Any] | str], usage: tuple[int, int] | None = None) -> Scripted:
    """A completion whose message calls these functions; a str argument is sent as written (malformed JSON)."""
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls)
        ],
    }
    return Scripted(body=_completion(message, "tool_calls", usage))


def content(text: str, usage: tuple[int, int] | None = None) -> Scripted:
    """A completion whose message is plain text."""
    return Scripted(body=_completion({"role": "assistant", "content": text}, "stop", usage))


def error(status: int, message: str, headers: dict[str, str] | None = None) -> Scripted:
    """An OpenAI-style error body with this status."""
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return Scripted(status=status, body=body, headers=headers or {})


def slow(delay_s: float, then: Scripted | None = None) -> Scripted:
    """`then` (by default an empty answer) after `delay_s` seconds: longer than the client's timeout."""
    reply = then or content("")
    return Scripted(status=reply.status, body=reply.body, headers=reply.headers, delay_s=delay_s)


def _completion(message: dict[str, Any], finish: str, usage: tuple[int, int] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": "stub-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return body


class StubLLM:
    """The server. Use as a context manager; `url` is the base URL to give the client."""

    def __init__(self, *script: Scripted) -> None:
        self.script: list[Scripted] = list(script)
        self.bodies: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.block_on_close = False  # a delayed reply must not hold up the test's teardown
        # A short poll interval: shutdown waits for the next poll, and every test shuts a stub down.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def add(self, *replies: Scripted) -> None:
        with self._lock:
            self.script.extend(replies)

    def all_bodies(self) -> str:
        return "\n".join(self.bodies)

    def __enter__(self) -> StubLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, raw: str, path: str) -> Scripted:
        with self._lock:
            self.bodies.append(raw)
            self.paths.append(path)
            try:
                self.requests.append(json.loads(raw))
            except ValueError:
                self.requests.append({})
            if not self.script:
                return error(400, "stub: no scripted reply left for this request")
            return self.script.pop(0)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                if not self.path.endswith("/chat/completions"):
                    self._send(error(404, f"stub: no route {self.path}"))
                    return
                reply = stub._next(raw, self.path)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                self._send(reply)

            def _send(self, reply: Scripted) -> None:
                data = json.dumps(reply.body or {}).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (a timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


# ---- contexts built from real recorded logs, for the planner and tool tests ------------------------

DATA = Path(__file__).parent / "data"


@cache
def catalog_0523() -> FlagCatalog:
    from specdoctor.tools.catalog_load import bundled

    return bundled("0.5.23")


def recorded_output(name: str) -> list[str]:
    """The output lines of a real SGLang run in `tests/data/sglang-outputs/` (its `# key:` header dropped)."""
    lines = (DATA / "sglang-outputs" / name).read_text().splitlines()
    if lines and lines[0].startswith("# case:"):
        lines = lines[next(i for i, line in enumerate(lines) if line.startswith("# ---- stdout")) + 1 :]
    return lines


def model_folder(path: Path, architecture: str) -> str:
    """A model folder with a config.json, as preflight and inspect_model read it."""
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": [architecture],
        "model_type": "llama",
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "hidden_size": 8192,
        "max_position_embeddings": 131072,
    }
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def make_context(
    command: str,
    lines: list[str],
    *,
    outcome: Outcome | None = None,
    gpus: GpuReport | None = None,
    tried: tuple[LaunchCommand, ...] = (),
) -> Context:
    """A Context as the loop builds it: root cause and compacted log from the real lines."""
    root = extract_root_cause(lines)
    return Context(
        spec=LaunchCommand.parse(command),
        catalog=catalog_0523(),
        outcome=outcome or Outcome(kind="exited", exit_code=1),
        root=root,
        log_text=compact(lines, root=root),
        gpus=gpus,
        tried=tried,
    )
