"""SGLang's HTTP endpoints (entrypoints/http_server.py) on a stdlib threading server.

Readiness as in 0.5.23: the port is bound only after the model is up; `/health` and `/ready` answer 503
until the warm-up is done, `/v1/models` answers 200 at once. Access lines are logged uvicorn-style.
"""

from __future__ import annotations

import json
import socketserver
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from specdoctor.tools.simnode.engine import Engine
from specdoctor.tools.simnode.logging_fmt import Log


class ServerState:
    """What the handlers read; the launcher moves `status` Starting -> Up -> ShuttingDown."""

    def __init__(
        self,
        log: Log,
        engine: Engine,
        *,
        speed: float,
        server_info: dict[str, Any],
        model_info: dict[str, Any],
        context_len: int,
        enable_metrics: bool,
    ) -> None:
        self.log = log
        self.engine = engine
        self.speed = speed
        self.server_info = server_info
        self.model_info = model_info
        self.context_len = context_len
        self.enable_metrics = enable_metrics
        self.status = "Starting"
        self.started = time.time()

    @property
    def served_model_name(self) -> str:
        return self.server_info["served_model_name"]

    def info(self) -> dict[str, Any]:
        state = dict(self.server_info["internal_states"][0])
        state["last_gen_throughput"] = self.engine.last_gen_throughput
        accept = self.engine.average_accept_length()
        if accept is not None and self.engine.report_accept:
            state["avg_spec_accept_length"] = accept
        status = "ready" if self.status == "Up" else self.status.lower()
        return {**self.server_info, "status": status, "internal_states": [state]}


class SimServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # uvicorn (asyncio) binds with SO_REUSEADDR too

    def __init__(self, address: tuple[str, int], state: ServerState) -> None:
        super().__init__(address, Handler, bind_and_activate=False)
        self.state = state

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the host name up in DNS; uvicorn does not, and a slow resolver must not
        # slow the launch.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: SimServer

    def log_message(self, format: str, *args: Any) -> None:
        """Access lines are written by `_send`, in uvicorn's format."""

    def version_string(self) -> str:
        return "uvicorn"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        state = self.server.state
        if path in ("/health", "/health_generate"):
            self._health(state)
        elif path == "/ready":
            self._send(200 if state.status == "Up" else 503)
        elif path in ("/model_info", "/get_model_info"):
            self._deprecated(path, "/model_info")
            self._json(state.model_info)
        elif path in ("/server_info", "/get_server_info"):
            self._deprecated(path, "/server_info")
            self._json(state.info())
        elif path == "/v1/models":
            self._json(self._models(state))
        elif path == "/ping":
            self._send(200)
        elif path == "/metrics" and state.enable_metrics:
            self._send(200, _metrics(state).encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._json({"detail": "Not Found"}, 404)

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        body = self._body()
        if body is None:
            self._json({"detail": "There was an error parsing the body"}, 400)
        elif path == "/generate":
            self._generate(body)
        elif path == "/v1/chat/completions":
            self._openai(body, chat=True)
        elif path == "/v1/completions":
            self._openai(body, chat=False)
        elif path == "/freeze_gc":
            self._send(200)
        else:
            self._json({"detail": "Not Found"}, 404)

    # ---- endpoints ---------------------------------------------------------------------------
    def _health(self, state: ServerState) -> None:
        if state.status != "Up":
            if state.status == "ShuttingDown":
                state.log.info("Health check request received during shutdown. Returning 503.")
            self._send(503)
            return
        state.engine.health()
        time.sleep(1.0 * state.speed)  # the handler polls the detokenizer once a second
        self._send(200)

    def _generate(self, body: dict[str, Any]) -> None:
        params = body.get("sampling_params") or {}
        max_new = int(params.get("max_new_tokens", 128))
        prompts = body.get("text", body.get("input_ids", ""))
        engine = self.server.state.engine
        if isinstance(prompts, list) and prompts and not isinstance(prompts[0], int):
            self._json([engine.generate(p, max_new) for p in prompts])
        else:
            self._json(engine.generate(prompts, max_new))

    def _openai(self, body: dict[str, Any], *, chat: bool) -> None:
        state = self.server.state
        if chat:
            prompt = " ".join(
                str(m.get("content", "")) for m in body.get("messages") or [] if isinstance(m, dict)
            )
        else:
            prompt = str(body.get("prompt", ""))
        max_new = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        out = state.engine.generate(prompt, max_new)
        meta = out["meta_info"]
        usage = {
            "prompt_tokens": meta["prompt_tokens"],
            "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"],
            "completion_tokens": meta["completion_tokens"],
            "prompt_tokens_details": None,
            "reasoning_tokens": 0,
            "completion_tokens_details": None,
        }
        if chat:
            message = {"role": "assistant", "content": out["text"], "reasoning_content": None}
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "length",
                "matched_stop": None,
            }
        else:
            choice = {
                "index": 0,
                "text": out["text"],
                "logprobs": None,
                "finish_reason": "length",
                "matched_stop": None,
            }
        response: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": body.get("model") or state.served_model_name,
            "choices": [choice],
            "usage": usage,
            "metadata": {"weight_version": "default"},
        }
        spec = {k: v for k, v in meta.items() if k.startswith("spec_")}
        if spec and body.get("return_spec_tokens_details"):
            response["sglext"] = {"spec_tokens_details": spec}
        if body.get("stream"):
            self._stream(response, chat)
        else:
            self._json(response)

    def _stream(self, response: dict[str, Any], chat: bool) -> None:
        choice = response["choices"][0]
        delta = {"role": "assistant", "content": choice["message"]["content"]} if chat else None
        first = {**response, "object": "chat.completion.chunk" if chat else "text_completion", "usage": None}
        first["choices"] = [
            {"index": 0, "delta": delta, "finish_reason": "length"}
            if chat
            else {**choice, "finish_reason": "length"}
        ]
        events = [first, {**first, "choices": [], "usage": response["usage"]}]
        payload = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        self._send(200, payload.encode(), "text/event-stream")

    @staticmethod
    def _models(state: ServerState) -> dict[str, Any]:
        name = state.served_model_name
        card = {
            "id": name,
            "object": "model",
            "created": int(state.started),
            "owned_by": "sglang",
            "root": name,
            "parent": None,
            "max_model_len": state.context_len,
        }
        return {"object": "list", "data": [card]}

    # ---- plumbing ----------------------------------------------------------------------------
    def _deprecated(self, path: str, new: str) -> None:
        if path != new:
            self.server.state.log.info(
                f"Endpoint '{path}' is deprecated and will be removed in a future version. Please use '{new}' instead."
            )

    def _body(self) -> dict[str, Any] | None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def _json(self, payload: Any, code: int = 200) -> None:
        self._send(code, json.dumps(payload).encode(), "application/json")

    def _send(self, code: int, body: bytes = b"", content_type: str | None = None) -> None:
        # Logged before the response goes out, so a client never sees an answer whose line is not printed yet.
        host, port = self.client_address[:2]
        phrase = HTTPStatus(code).phrase
        self.server.state.log.info(
            f'INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" {code} {phrase}'
        )
        self.send_response_only(code)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-length", str(len(body)))
        if content_type:
            self.send_header("content-type", content_type)
        self.end_headers()
        if body:
            self.wfile.write(body)


def _metrics(state: ServerState) -> str:
    labels = f'model_name="{state.served_model_name}",tp_rank="0"'
    lines = [
        "# HELP sglang:gen_throughput The generation throughput (token/s).",
        "# TYPE sglang:gen_throughput gauge",
        f"sglang:gen_throughput{{{labels}}} {state.engine.last_gen_throughput}",
    ]
    accept = state.engine.average_accept_length()
    spec = state.engine.spec
    if spec is not None:
        lines += [
            "# HELP sglang:spec_accept_length Mean acceptance length of speculative decoding "
            "(accepted drafts + bonus token per forward).",
            "# TYPE sglang:spec_accept_length gauge",
            f"sglang:spec_accept_length{{{labels}}} {accept if accept is not None else 0.0}",
            "# TYPE sglang:spec_num_draft_tokens gauge",
            f"sglang:spec_num_draft_tokens{{{labels}}} {spec.num_draft_tokens}",
        ]
    return "\n".join(lines) + "\n"
