"""specdoctor.tools.health against a local HTTP server that answers like SGLang 0.5.23 did in the recorded runs.

Bodies come from tests/data/sglang-outputs/serve-serve-endpoints.txt and serve-serve-server_info.json
(a real `sglang serve` of a tiny model); the speculative fields are added the way SGLang computes them.
"""

from __future__ import annotations

import copy
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from specdoctor.tools.health import (
    HealthError,
    HealthPolicy,
    accept_length,
    check_chat,
    check_generate,
    judge_speculation,
    metrics_accept_length,
    probe_ready,
    wait_ready,
)
from specdoctor.tools.sglang_facts import Acceptance, facts_for

OUTPUTS = Path(__file__).parent / "data" / "sglang-outputs"


def recorded_body(title: str) -> dict[str, Any]:
    """The JSON body of the `=== <title>` section of the recorded endpoint dump."""
    lines = (OUTPUTS / "serve-serve-endpoints.txt").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"=== {title}"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=== ")), len(lines))
    return json.loads(next(line for line in reversed(lines[start:end]) if line.startswith("{")))


def recorded_metrics() -> str:
    """The `sglang:` lines of the recorded `/metrics` after traffic: the body without its comments."""
    text = (OUTPUTS / "serve-serve-endpoints.txt").read_text(encoding="utf-8")
    section = text.split("=== GET /metrics (sglang: lines, after traffic)\n", 1)[1].split("\n=== ", 1)[0]
    return section.rstrip("\n") + "\n"


MODELS = recorded_body("GET /v1/models")
GENERATE = recorded_body("POST /generate")
CHAT = recorded_body("POST /v1/chat/completions")
SERVER_INFO = json.loads((OUTPUTS / "serve-serve-server_info.json").read_text(encoding="utf-8"))


def spec_meta(completion_tokens: int, verify_ct: int, num_draft_tokens: int = 4) -> dict[str, Any]:
    """meta_info speculative fields as tokenizer_manager.py computes them."""
    proposed = verify_ct * (num_draft_tokens - 1)
    correct = completion_tokens - verify_ct  # every verify step adds one bonus token
    return {
        "spec_accept_rate": correct / proposed,
        "spec_accept_length": completion_tokens / verify_ct,
        "spec_num_correct_drafts": correct,
        "spec_num_proposed_drafts": proposed,
        "spec_verify_ct": verify_ct,
    }


class FakeSglang:
    """Scripted answers; each list is consumed in order and its last entry repeats."""

    def __init__(self) -> None:
        self.health: list[int] = [200]
        self.health_generate: list[int] = [200]
        self.generate: list[int] = [200]
        self.chat: list[int] = [200]
        self.chat_error: dict[str, Any] = {"detail": "error"}
        self.server_info: list[int] = [200]
        self.spec_verify_ct: int | None = None
        self.metrics: str | None = None
        self.internal_states: list[dict[str, Any]] = copy.deepcopy(SERVER_INFO["internal_states"])
        self.requests: list[tuple[str, str, dict[str, Any] | None]] = []
        self.lock = threading.Lock()

    def next_status(self, name: str) -> int:
        script = getattr(self, name)
        return script.pop(0) if len(script) > 1 else script[0]

    def count(self, path: str) -> int:
        return sum(1 for _, p, _ in self.requests if p == path)

    def answer(
        self, method: str, path: str, body: dict[str, Any] | None
    ) -> tuple[int, dict[str, Any] | str | None]:
        with self.lock:
            self.requests.append((method, path, body))
            if path == "/health":
                return self.next_status("health"), None
            if path == "/health_generate":
                return self.next_status("health_generate"), None
            if path == "/v1/models":
                return 200, MODELS
            if path == "/generate" and method == "POST":
                return self._generate(body or {})
            if path == "/v1/chat/completions" and method == "POST":
                return self._chat(body or {})
            if path == "/metrics":
                return (200, self.metrics) if self.metrics is not None else (404, {"detail": "Not Found"})
            if path in ("/server_info", "/get_server_info"):
                status = self.next_status("server_info") if path == "/server_info" else 200
                return status, {**SERVER_INFO, "internal_states": self.internal_states}
            return 404, {"detail": "Not Found"}

    def _generate(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        status = self.next_status("generate")
        if status != 200:
            return status, {"detail": "Internal Server Error"} if status == 500 else {"detail": "Not Found"}
        tokens = body["sampling_params"]["max_new_tokens"]
        answer = copy.deepcopy(GENERATE)
        answer["output_ids"] = answer["output_ids"][:tokens]
        answer["meta_info"]["completion_tokens"] = tokens
        if self.spec_verify_ct:
            answer["meta_info"].update(spec_meta(tokens, self.spec_verify_ct))
        return 200, answer

    def _chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        status = self.next_status("chat")
        if status != 200:
            return status, self.chat_error
        answer = copy.deepcopy(CHAT)
        tokens = answer["usage"]["completion_tokens"]
        if self.spec_verify_ct and body.get("return_spec_tokens_details"):
            answer["sglext"] = {"spec_tokens_details": spec_meta(tokens, self.spec_verify_ct)}
        return 200, answer


def make_handler(fake: FakeSglang) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._reply(fake.answer("GET", self.path, None))

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            self._reply(fake.answer("POST", self.path, json.loads(self.rfile.read(length) or b"{}")))

        def _reply(self, answer: tuple[int, dict[str, Any] | str | None]) -> None:
            status, body = answer
            text = isinstance(body, str)
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode() if body else b""
            self.send_response(status)
            self.send_header("content-length", str(len(data)))
            if body is not None:
                self.send_header("content-type", "text/plain; version=0.0.4" if text else "application/json")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def fake() -> Iterator[FakeSglang]:
    yield FakeSglang()


@pytest.fixture
def base_url(fake: FakeSglang) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(fake))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# -- readiness -------------------------------------------------------------------------------------


def test_models_answers_while_health_says_starting(fake: FakeSglang, base_url: str) -> None:
    fake.health = [503]
    assert httpx.get(f"{base_url}/v1/models").status_code == 200
    probe = probe_ready(base_url, timeout=5)
    assert (probe.state, probe.status_code) == ("starting", 503)


def test_ready_after_503s(fake: FakeSglang, base_url: str) -> None:
    fake.health = [503, 503, 503, 200]

    result = wait_ready(base_url, deadline_s=30, is_alive=lambda: True, poll_s=0.01)

    assert (result.state, result.status_code, result.timed_out) == ("ready", 200, False)
    assert fake.count("/health") == 4
    assert "ready" in result.message


def test_connection_refused_is_starting(closed_port_url: str) -> None:
    probe = probe_ready(closed_port_url, timeout=2)
    assert (probe.state, probe.status_code) == ("starting", None)
    assert "connection refused" in probe.message


def test_unexpected_status_is_an_error(fake: FakeSglang, base_url: str) -> None:
    fake.health = [401]
    probe = probe_ready(base_url, timeout=5)
    assert (probe.state, probe.status_code) == ("error", 401)
    assert "/health answered 401" in probe.message


def test_dead_engine_stops_the_wait_at_once(closed_port_url: str) -> None:
    calls = []

    def is_alive() -> bool:
        calls.append(1)
        return len(calls) < 3

    result = wait_ready(closed_port_url, deadline_s=60, is_alive=is_alive, poll_s=0.05)

    assert result.state == "exited" and not result.timed_out
    assert len(calls) == 3
    assert result.elapsed_s < 30
    assert "exited before" in result.message


def test_deadline_reports_the_last_answer(fake: FakeSglang, base_url: str) -> None:
    fake.health = [503]

    # A deadline with room for several polls on a loaded 2-core machine.
    result = wait_ready(base_url, deadline_s=1.5, is_alive=lambda: True, poll_s=0.05)

    assert (result.state, result.status_code, result.timed_out) == ("starting", 503, True)
    assert result.message.startswith("not ready after 1.5 s (/health 503")
    assert fake.count("/health") >= 2


# -- generation ------------------------------------------------------------------------------------


def test_generate_reports_the_request_accept_length(fake: FakeSglang, base_url: str) -> None:
    fake.spec_verify_ct = 13

    check = check_generate(base_url, speculative=True, timeout=10)

    assert check.ok and check.endpoint == "/generate" and check.status_code == 200
    assert check.completion_tokens == 32
    assert check.spec_accept_length == pytest.approx(32 / 13)
    assert "accept length 2.46" in check.message
    assert [p for _, p, _ in fake.requests] == ["/health_generate", "/generate"]
    sent = fake.requests[1][2]
    assert sent["sampling_params"] == {"max_new_tokens": 32, "temperature": 0, "ignore_eos": True}


def test_generate_without_speculation_has_no_accept_length(base_url: str) -> None:
    plain = check_generate(base_url, speculative=False, timeout=10)
    expected = check_generate(base_url, speculative=True, timeout=10)

    assert plain.ok and plain.spec_accept_length is None
    assert plain.message == "/generate generated 32 tokens"
    assert expected.ok and expected.spec_accept_length is None
    assert "no spec_accept_length reported" in expected.message


def test_generate_404_falls_back_to_chat_completions(fake: FakeSglang, base_url: str) -> None:
    fake.generate = [404]
    fake.spec_verify_ct = 4

    check = check_generate(base_url, speculative=True, timeout=10)

    assert check.ok and check.endpoint == "/v1/chat/completions"
    assert check.completion_tokens == CHAT["usage"]["completion_tokens"] == 8
    assert check.spec_accept_length == pytest.approx(2.0)
    chat_request = next(body for _, path, body in fake.requests if path == "/v1/chat/completions")
    assert chat_request["model"] == MODELS["data"][0]["id"]
    assert chat_request["max_tokens"] == 32 and chat_request["return_spec_tokens_details"] is True


def test_transient_500_is_retried(fake: FakeSglang, base_url: str) -> None:
    fake.generate = [500, 200]

    check = check_generate(base_url, speculative=False, timeout=10)

    assert check.ok and check.status_code == 200
    assert fake.count("/generate") == 2


def test_persistent_500_fails_after_the_retries(fake: FakeSglang, base_url: str) -> None:
    fake.generate = [500]

    check = check_generate(base_url, speculative=False, timeout=10, retries=3)

    assert not check.ok and (check.endpoint, check.status_code) == ("/generate", 500)
    assert fake.count("/generate") == 3
    assert check.message.startswith("/generate answered 500:")


def test_unhealthy_health_generate_fails_first(fake: FakeSglang, base_url: str) -> None:
    fake.health_generate = [503]

    check = check_generate(base_url, speculative=False, timeout=10)

    assert not check.ok and (check.endpoint, check.status_code) == ("/health_generate", 503)
    assert fake.count("/generate") == 0


def test_unreachable_server_is_a_failed_check(closed_port_url: str) -> None:
    check = check_generate(closed_port_url, speculative=False, timeout=2, retries=1)
    assert not check.ok and check.status_code is None
    assert check.message.startswith(f"cannot reach {closed_port_url}")


# -- acceptance ------------------------------------------------------------------------------------


def test_accept_length_from_server_info(fake: FakeSglang, base_url: str) -> None:
    fake.internal_states[0]["avg_spec_accept_length"] = 1.0
    assert accept_length(base_url) == 1.0


def test_accept_length_averages_dp_ranks(fake: FakeSglang, base_url: str) -> None:
    rank = fake.internal_states[0]
    fake.internal_states = [{**rank, "avg_spec_accept_length": 2.0}, {**rank, "avg_spec_accept_length": 3.0}]
    assert accept_length(base_url) == 2.5


def test_accept_length_absent_without_speculation(base_url: str) -> None:
    assert "avg_spec_accept_length" not in SERVER_INFO["internal_states"][0]
    assert accept_length(base_url) is None


def test_accept_length_falls_back_to_get_server_info(fake: FakeSglang, base_url: str) -> None:
    fake.server_info = [404]
    fake.internal_states[0]["avg_spec_accept_length"] = 2.4
    assert accept_length(base_url) == 2.4
    assert [p for _, p, _ in fake.requests] == ["/server_info", "/get_server_info"]


def test_accept_length_of_unreachable_server_is_an_error(closed_port_url: str) -> None:
    with pytest.raises(HealthError, match="cannot read"):
        accept_length(closed_port_url, retries=1)


def test_eagle3_draft_run_as_eagle_is_degraded(fake: FakeSglang, base_url: str) -> None:
    fake.internal_states[0]["avg_spec_accept_length"] = 1.0

    verdict = judge_speculation([accept_length(base_url)], "EAGLE")

    assert verdict.status == "degraded" and verdict.accept_length == 1.0
    assert "accept length 1.00" in verdict.message and "EAGLE3" in verdict.message


def test_verdicts() -> None:
    working = judge_speculation([2.4], "EAGLE3")
    low = judge_speculation([1.2, 1.1], "EAGLE3")
    none = judge_speculation([], "EAGLE3")
    off = judge_speculation([], None)
    too_few = judge_speculation([2.0, 2.2], "NGRAM", samples_needed=3)

    assert (working.status, working.accept_length) == ("working", 2.4)
    assert "2.40" in working.message
    # Low but above "none accepted": it works, weakly; reported, never a reason to call the server degraded.
    assert (low.status, low.accept_length, low.samples) == ("low", 1.15, 2)
    assert "1.15 is below 1.30" in low.message and "working" not in low.message.split(": ")[-1]
    assert (none.status, none.accept_length) == ("unknown", None)
    assert off.status == "unknown" and "not enabled" in off.message
    assert (too_few.status, too_few.samples) == ("unknown", 2)
    stricter = Acceptance(working={"EAGLE3": 2.0})
    assert judge_speculation([1.5], "EAGLE3", acceptance=stricter).status == "low"
    assert judge_speculation([1.04], "EAGLE3", acceptance=stricter).status == "degraded"


def test_levels_are_per_algorithm_from_the_facts_table() -> None:
    levels = facts_for("0.5.23").acceptance
    assert (levels.none_accepted, levels.working_for("EAGLE3"), levels.working_for("NGRAM")) == (
        1.05,
        1.3,
        1.1,
    )
    ngram = judge_speculation([1.2], "NGRAM")
    eagle = judge_speculation([1.2], "EAGLE3")
    assert (ngram.status, ngram.threshold) == ("working", 1.1)  # a working NGRAM at 1.2 is not degraded
    assert (eagle.status, eagle.threshold) == ("low", 1.3)
    useless = judge_speculation([1.0], "NGRAM")
    assert (
        useless.status == "degraded" and "train" not in useless.message and "copies drafts" in useless.message
    )


def test_policy_rejects_impossible_limits() -> None:
    with pytest.raises(ValidationError):
        HealthPolicy(generation_tokens=0)
    assert "min_accept_length" not in HealthPolicy.model_fields  # the levels live in sglang_facts only


def test_metrics_of_a_server_without_speculation(fake: FakeSglang, base_url: str) -> None:
    # SGLang exports the gauge at 0.0 without speculative decoding (recorded): that is no measurement.
    fake.metrics = recorded_metrics()
    assert "sglang:spec_accept_length{" in fake.metrics
    assert metrics_accept_length(base_url) is None


def test_metrics_accept_length_is_the_mean_over_ranks(fake: FakeSglang, base_url: str) -> None:
    line = next(x for x in recorded_metrics().splitlines() if x.startswith("sglang:spec_accept_length{"))
    rank1 = line.replace('tp_rank="0"', 'tp_rank="1"').replace(" 0.0", " 3.0")
    fake.metrics = recorded_metrics().replace(line, line.replace(" 0.0", " 2.0") + "\n" + rank1)
    assert metrics_accept_length(base_url) == 2.5


def test_metrics_off_or_unreadable(fake: FakeSglang, base_url: str, closed_port_url: str) -> None:
    assert metrics_accept_length(base_url) is None  # 404: launched without --enable-metrics
    fake.metrics = "sglang:spec_accept_length{tp_rank=0} not-a-number\n"
    with pytest.raises(HealthError, match="not Prometheus text"):
        metrics_accept_length(base_url)
    with pytest.raises(HealthError, match="cannot read"):
        metrics_accept_length(closed_port_url, retries=1)


def test_a_chat_request_reports_why_the_server_turned_it_away(fake: FakeSglang, base_url: str) -> None:
    # SGLang 0.5.23's answer when the chat template does not compile (tests/data/sglang-outputs).
    message = "Unexpected end of template. Jinja was looking for the following tags: 'endfor' or 'else'."
    fake.chat = [400]
    fake.chat_error = {
        "object": "error",
        "message": message,
        "type": "BadRequest",
        "param": None,
        "code": 400,
    }

    check = check_chat(base_url, timeout=10)

    assert not check.ok and check.endpoint == "/v1/chat/completions" and check.status_code == 400
    assert "Unexpected end of template" in check.message
    chat_request = next(body for _, path, body in fake.requests if path == "/v1/chat/completions")
    assert chat_request["max_tokens"] == 1  # a probe, not a measurement


def test_a_chat_request_that_answers_is_ok(fake: FakeSglang, base_url: str) -> None:
    assert check_chat(base_url, timeout=10).ok
