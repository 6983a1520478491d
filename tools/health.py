"""Is the SGLang server ready, does it generate, and does speculative decoding actually accept drafts?

SGLang 0.5.23 binds its port before it is ready: `/health` answers 503 while starting and 200 once the
server is "fired up", while `/v1/models` already answers 200 during startup, so it proves nothing.
Acceptance comes from `/server_info` (`internal_states[i].avg_spec_accept_length`, one entry per DP
rank, present only with speculative decoding and after the first verify step) and per request from
`/generate`'s `meta_info.spec_accept_length` (completion tokens / verify steps, bonus token included).
An accept length of 1.00 means every draft token is rejected: the draft runs but buys nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.sglang_facts import Acceptance, facts_for

if TYPE_CHECKING:
    import httpx

__all__ = [
    "GenerateCheck",
    "HealthError",
    "HealthPolicy",
    "ProbeResult",
    "ProbeState",
    "SpecVerdict",
    "accept_length",
    "check_generate",
    "judge_speculation",
    "metrics_accept_length",
    "probe_ready",
    "wait_ready",
]

ProbeState = Literal["starting", "ready", "error", "exited"]
_PROMPT = "The capital of France is Paris. The capital of Germany is"
_RETRY_STATUS = frozenset({500, 502, 504})
_CHAT = "/v1/chat/completions"
_RETRY_WAIT_S = 0.2


class HealthError(RuntimeError):
    """The server could not be asked at all (refused, timed out, non-JSON); the message says which."""


class HealthPolicy(BaseModel):
    """How readiness and speculative decoding are checked."""

    model_config = ConfigDict(frozen=True)

    generation_tokens: int = Field(
        32,
        ge=1,
        description="max_new_tokens of the test generation; enough decode steps to measure acceptance.",
    )
    chat: bool = Field(
        True,
        description="After a generation succeeds, also send one chat request (/v1/chat/completions): a chat "
        "template that does not compile, a skipped tokenizer or a sampling default SGLang rejects breaks "
        "every chat client of a server that generates. Off for a base model served for completions only.",
    )


class ProbeResult(BaseModel):
    """One readiness answer (or the last one when `wait_ready` gave up)."""

    model_config = ConfigDict(frozen=True)

    state: ProbeState = Field(
        description="starting: refused or 503; ready: /health 200; error: any other answer; exited: the engine died."
    )
    status_code: int | None = Field(None, description="HTTP status of /health; None when nothing answered.")
    elapsed_s: float = Field(0.0, description="Seconds spent (the request, or the whole wait).")
    timed_out: bool = Field(False, description="wait_ready's deadline passed before the server was ready.")
    message: str = Field(description="One line for a person.")


class GenerateCheck(BaseModel):
    """Whether the server really generates, and the accept length that generation reported."""

    model_config = ConfigDict(frozen=True)

    ok: bool = Field(description="/health_generate and one real generation both succeeded.")
    endpoint: str = Field(description="The endpoint that decided the result, e.g. '/generate'.")
    status_code: int | None = Field(
        None, description="HTTP status of that endpoint; None when nothing answered."
    )
    completion_tokens: int | None = Field(None, description="Tokens generated, from meta_info or usage.")
    spec_accept_length: float | None = Field(
        None,
        description="Accepted tokens per verify step for this request; None without speculative decoding.",
    )
    message: str = Field(description="One line for a person.")


class SpecVerdict(BaseModel):
    """Whether speculative decoding pays off, judged from measured accept lengths."""

    model_config = ConfigDict(frozen=True)

    status: Literal["working", "low", "degraded", "unknown"] = Field(
        description="working: mean accept length >= the algorithm's working level; low: above none accepted but "
        "below that level (it works, weakly); degraded: no draft token accepted (~1.0); unknown: not measured."
    )
    accept_length: float | None = Field(None, description="Mean of the measured accept lengths.")
    samples: int = Field(0, description="How many measurements the mean is over.")
    algorithm: str | None = Field(None, description="--speculative-algorithm, as launched.")
    threshold: float = Field(description="The accept length a working drafter of this algorithm reaches.")
    message: str = Field(description="One line naming the number.")


# -- readiness -------------------------------------------------------------------------------------


def probe_ready(base_url: str, timeout: float = 10.0) -> ProbeResult:
    """One GET /health: starting (refused, no answer yet, 503), ready (200) or error (anything else)."""
    with _client(timeout) as client:
        return _probe(client, base_url)


def wait_ready(
    base_url: str,
    deadline_s: float,
    is_alive: Callable[[], bool],
    poll_s: float = 0.5,
    request_timeout_s: float = 10.0,
) -> ProbeResult:
    """Poll /health until ready, `deadline_s` seconds pass, or `is_alive()` turns false (checked often)."""
    began = time.monotonic()
    deadline = began + deadline_s
    last = ProbeResult(state="starting", message=f"nothing answered at {base_url} yet")
    with _client(request_timeout_s) as client:
        while True:
            if not is_alive():
                return _finished(last, began, "exited", f"the engine exited before {base_url} was ready")
            last = _probe(client, base_url, min(request_timeout_s, max(deadline - time.monotonic(), 0.1)))
            if last.state == "ready":
                return _finished(last, began, "ready", last.message)
            if time.monotonic() >= deadline:
                return _finished(
                    last,
                    began,
                    last.state,
                    f"not ready after {deadline_s:g} s ({last.message}); raise the startup timeout "
                    f"or read the engine log",
                    timed_out=True,
                )
            if not _sleep_while_alive(min(poll_s, deadline - time.monotonic()), is_alive):
                return _finished(last, began, "exited", f"the engine exited before {base_url} was ready")


def _probe(client: httpx.Client, base_url: str, timeout: float | None = None) -> ProbeResult:
    import httpx

    began = time.monotonic()
    url = _url(base_url, "/health")
    try:
        response = client.get(url, timeout=timeout) if timeout is not None else client.get(url)
    except (httpx.ConnectError, httpx.ConnectTimeout):
        return _probe_result("starting", None, began, f"connection refused at {base_url}: port not bound yet")
    except httpx.TimeoutException:
        return _probe_result(
            "starting", None, began, "/health did not answer in time: still starting or stuck"
        )
    except httpx.TransportError as exc:
        return _probe_result("error", None, began, f"/health failed: {type(exc).__name__}: {exc}")
    code = response.status_code
    if code == 200:
        return _probe_result("ready", code, began, f"{base_url} is ready (/health 200)")
    if code == 503:
        return _probe_result(
            "starting", code, began, "/health 503: the server is starting (or shutting down)"
        )
    return _probe_result("error", code, began, f"/health answered {code}: {_short_body(response)}")


def _probe_result(state: ProbeState, code: int | None, began: float, message: str) -> ProbeResult:
    return ProbeResult(
        state=state, status_code=code, elapsed_s=round(time.monotonic() - began, 3), message=message
    )


def _finished(
    last: ProbeResult, began: float, state: ProbeState, message: str, timed_out: bool = False
) -> ProbeResult:
    return last.model_copy(
        update={
            "state": state,
            "elapsed_s": round(time.monotonic() - began, 3),
            "timed_out": timed_out,
            "message": message,
        }
    )


def _sleep_while_alive(seconds: float, is_alive: Callable[[], bool]) -> bool:
    end = time.monotonic() + max(seconds, 0.0)
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, 0.05))
        if not is_alive():
            return False
    return True


# -- generation ------------------------------------------------------------------------------------


def check_generate(
    base_url: str,
    speculative: bool,
    timeout: float = 60.0,
    max_new_tokens: int = 32,
    retries: int = 3,
    api_key: str | None = None,
) -> GenerateCheck:
    """GET /health_generate, then one greedy generation via /generate (or /v1/chat/completions if 404)."""
    import httpx

    with _client(timeout, api_key) as client:
        try:
            return _check_generate(client, base_url, speculative, max_new_tokens, retries)
        except httpx.TimeoutException:
            return GenerateCheck(
                ok=False,
                endpoint="/generate",
                message=f"no answer within {timeout:g} s: the server is stuck or overloaded",
            )
        except httpx.TransportError as exc:
            return GenerateCheck(ok=False, endpoint="/generate", message=f"cannot reach {base_url}: {exc}")
        except HealthError as exc:
            return GenerateCheck(ok=False, endpoint="/generate", message=str(exc))


def check_chat(
    base_url: str, timeout: float = 60.0, retries: int = 3, api_key: str | None = None
) -> GenerateCheck:
    """One short chat completion, as a chat client sends it (the server's chat template and defaults)."""
    import httpx

    with _client(timeout, api_key) as client:
        try:
            return _check_chat(client, base_url, False, 1, retries)
        except httpx.TimeoutException:
            return GenerateCheck(ok=False, endpoint=_CHAT, message=f"no chat answer within {timeout:g} s")
        except (httpx.TransportError, HealthError) as exc:
            return GenerateCheck(ok=False, endpoint=_CHAT, message=str(exc))


def _check_generate(
    client: httpx.Client, base_url: str, speculative: bool, max_new_tokens: int, retries: int
) -> GenerateCheck:
    health = _request(client, "GET", _url(base_url, "/health_generate"), retries)
    if health.status_code != 200:
        return _failed("/health_generate", health)
    response = _request(
        client, "POST", _url(base_url, "/generate"), retries, json=_generate_body(max_new_tokens)
    )
    if response.status_code == 404:
        return _check_chat(client, base_url, speculative, max_new_tokens, retries)
    if response.status_code != 200:
        return _failed("/generate", response)
    meta = _json(response).get("meta_info") or {}
    return _generated("/generate", response.status_code, meta.get("completion_tokens"), meta, speculative)


def _check_chat(
    client: httpx.Client, base_url: str, speculative: bool, max_new_tokens: int, retries: int
) -> GenerateCheck:
    body = {
        "model": _served_model(client, base_url),
        "messages": [{"role": "user", "content": _PROMPT}],
        "max_tokens": max_new_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "return_spec_tokens_details": True,
    }
    response = _request(client, "POST", _url(base_url, "/v1/chat/completions"), retries, json=body)
    if response.status_code != 200:
        return _failed("/v1/chat/completions", response)
    data = _json(response)
    usage = data.get("usage") or {}
    details = (data.get("sglext") or {}).get("spec_tokens_details") or {}
    if isinstance(details, list):
        details = details[0] if details else {}
    return _generated(
        "/v1/chat/completions", response.status_code, usage.get("completion_tokens"), details, speculative
    )


def _generated(
    endpoint: str, code: int, completion_tokens: Any, spec: dict[str, Any], speculative: bool
) -> GenerateCheck:
    tokens = completion_tokens if isinstance(completion_tokens, int) else None
    if not tokens:
        return GenerateCheck(
            ok=False,
            endpoint=endpoint,
            status_code=code,
            completion_tokens=tokens,
            message=f"{endpoint} answered {code} but generated no tokens",
        )
    accept = _positive_float(spec.get("spec_accept_length"))
    message = f"{endpoint} generated {tokens} tokens"
    if accept is not None:
        message += f", accept length {accept:.2f}"
    elif speculative:
        message += "; no spec_accept_length reported, so speculative decoding may be off"
    return GenerateCheck(
        ok=True,
        endpoint=endpoint,
        status_code=code,
        completion_tokens=tokens,
        spec_accept_length=accept,
        message=message,
    )


def _failed(endpoint: str, response: httpx.Response) -> GenerateCheck:
    return GenerateCheck(
        ok=False,
        endpoint=endpoint,
        status_code=response.status_code,
        message=f"{endpoint} answered {response.status_code}: {_short_body(response)}",
    )


def _generate_body(max_new_tokens: int) -> dict[str, Any]:
    return {
        "text": _PROMPT,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True},
    }


def _served_model(client: httpx.Client, base_url: str) -> str:
    import httpx

    try:
        models = _json(client.get(_url(base_url, "/v1/models"))).get("data") or []
    except (httpx.HTTPError, HealthError):
        models = []
    # SGLang accepts any name for its single model; "default" is its own default.
    return models[0].get("id", "default") if models and isinstance(models[0], dict) else "default"


# -- acceptance ------------------------------------------------------------------------------------


def accept_length(
    base_url: str, timeout: float = 10.0, retries: int = 3, api_key: str | None = None
) -> float | None:
    """Mean of `internal_states[*].avg_spec_accept_length` over DP ranks; None when the server has none.

    Raises `HealthError` when the server cannot be asked.
    """
    import httpx

    with _client(timeout, api_key) as client:
        try:
            response = _request(client, "GET", _url(base_url, "/server_info"), retries)
            if response.status_code == 404:
                response = _request(client, "GET", _url(base_url, "/get_server_info"), retries)
        except httpx.TransportError as exc:
            raise HealthError(f"cannot read {base_url}/server_info: {type(exc).__name__}: {exc}") from exc
    if response.status_code != 200:
        raise HealthError(f"{base_url}/server_info answered {response.status_code}: {_short_body(response)}")
    states = _json(response).get("internal_states") or []
    values = [
        value
        for state in states
        if isinstance(state, dict)
        and (value := _positive_float(state.get("avg_spec_accept_length"))) is not None
    ]
    return sum(values) / len(values) if values else None


def metrics_accept_length(
    base_url: str, timeout: float = 10.0, retries: int = 3, api_key: str | None = None
) -> float | None:
    """Mean of `sglang:spec_accept_length` over its series (one per TP rank) in `/metrics`; None when the
    server exports no such series, or only zeros (nothing verified yet), or has no /metrics (404: it was
    launched without --enable-metrics).

    Raises `HealthError` when the server cannot be asked or the text is not Prometheus' format.
    """
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    with _client(timeout, api_key) as client:
        try:
            response = _request(client, "GET", _url(base_url, "/metrics"), retries)
        except httpx.TransportError as exc:
            raise HealthError(f"cannot read {base_url}/metrics: {type(exc).__name__}: {exc}") from exc
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise HealthError(f"{base_url}/metrics answered {response.status_code}: {_short_body(response)}")
    try:
        samples = [
            sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
            if sample.name == "sglang:spec_accept_length"
        ]
    except ValueError as exc:
        raise HealthError(f"{base_url}/metrics is not Prometheus text: {exc}") from exc
    values = [v for s in samples if (v := _positive_float(s)) is not None]
    return sum(values) / len(values) if values else None


def judge_speculation(
    accept_lengths: list[float],
    algorithm: str | None,
    acceptance: Acceptance | None = None,
    samples_needed: int = 1,
) -> SpecVerdict:
    """working / low / degraded (no draft token accepted) / unknown (fewer than `samples_needed` values),
    against the levels of `acceptance` (the SGLang facts table's, by default) for this algorithm."""
    levels = acceptance or facts_for().acceptance
    working = levels.working_for(algorithm)
    values = [v for v in accept_lengths if v > 0]
    name = algorithm or "speculative decoding"
    if len(values) < max(samples_needed, 1):
        return SpecVerdict(
            status="unknown",
            samples=len(values),
            algorithm=algorithm,
            threshold=working,
            message=_unknown_message(name, algorithm, len(values), samples_needed),
        )
    mean = sum(values) / len(values)
    verdict = {"accept_length": round(mean, 3), "samples": len(values), "algorithm": algorithm}
    if mean <= levels.none_accepted:
        return SpecVerdict(
            status="degraded",
            threshold=working,
            message=f"{name} accept length {mean:.2f}: no draft token is accepted, so drafting only costs "
            f"time; {_none_accepted_hint(algorithm)}",
            **verdict,
        )
    if mean < working:
        return SpecVerdict(
            status="low",
            threshold=working,
            message=f"{name} accept length {mean:.2f} is below {working:.2f}, the level a well-matched "
            f"{name} drafter reaches: it works, but most drafts are rejected",
            **verdict,
        )
    return SpecVerdict(
        status="working",
        threshold=working,
        message=f"{name} accept length {mean:.2f} >= {working:.2f}: speculative decoding is working",
        **verdict,
    )


def _none_accepted_hint(algorithm: str | None) -> str:
    if algorithm == "NGRAM":
        return "NGRAM copies drafts from earlier text of the same request, and this text had none to copy"
    if algorithm in ("EAGLE", "EAGLE3"):
        return (
            "check that the draft model matches the target and the algorithm (an EAGLE-3 draft needs "
            "--speculative-algorithm EAGLE3)"
        )
    return "check that the draft model was trained for this target model"


def _unknown_message(name: str, algorithm: str | None, seen: int, needed: int) -> str:
    if algorithm is None and seen == 0:
        return "no accept length reported: speculative decoding is not enabled"
    if seen == 0:
        return f"{name} reported no accept length yet: generate some tokens first"
    return f"{name}: {seen} accept-length sample(s), {needed} needed before judging"


# -- HTTP plumbing ---------------------------------------------------------------------------------


def _client(timeout: float, api_key: str | None = None) -> httpx.Client:
    import httpx

    # A server launched with --api-key answers its generation and info routes only with the key (its
    # /health and /metrics stay open); the key goes nowhere but to the server the command launched.
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    # The server is one we launched; a proxy from the environment must not sit in between.
    return httpx.Client(timeout=timeout, trust_env=False, headers=headers)


def _request(client: httpx.Client, method: str, url: str, retries: int, **kwargs: Any) -> httpx.Response:
    """The request, repeated on 500/502/504 or a dropped connection; the last answer or error wins."""
    import httpx
    from tenacity import (
        Retrying,
        retry_if_exception,
        retry_if_result,
        stop_after_attempt,
        wait_exponential,
    )

    def transient_error(exc: BaseException) -> bool:
        return isinstance(exc, httpx.TransportError) and not isinstance(exc, httpx.TimeoutException)

    retrying = Retrying(
        stop=stop_after_attempt(max(retries, 1)),
        wait=wait_exponential(multiplier=_RETRY_WAIT_S, max=2.0),
        retry=retry_if_result(lambda r: r.status_code in _RETRY_STATUS) | retry_if_exception(transient_error),
        retry_error_callback=lambda state: state.outcome.result(),
        reraise=True,
    )
    return retrying(client.request, method, url, **kwargs)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError as exc:
        raise HealthError(f"{response.request.url} did not answer JSON: {_short_body(response)}") from exc
    if not isinstance(data, dict):
        raise HealthError(f"{response.request.url} answered {type(data).__name__}, not a JSON object")
    return data


def _short_body(response: httpx.Response) -> str:
    text = " ".join(response.text.split())
    return (text[:200] + "...") if len(text) > 200 else (text or "(empty body)")


def _positive_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return float(value)


def _url(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + path
