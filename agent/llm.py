"""The LLM endpoint: its configuration, and a client that talks to any OpenAI-compatible server.

Retries are ours alone (the `openai` package's own are switched off): a rate limit waits as long as the
server asks (capped), a 5xx, a timeout or a dropped connection is retried with backoff, an endpoint that
cannot be reached at all (refused, no route, no answer to connect within seconds) is retried once, and
anything the user must fix (a bad key, a wrong model name, a malformed request) fails at once with a
one-line message.
Every message is redacted here, at the one place that sends, so no caller can leak a secret by mistake.
"""

from __future__ import annotations

import email.utils
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from specdoctor.tools.redact import redact

OPENAI_API_URL = "https://api.openai.com/v1"
DEFAULT_OPENAI_MODEL = "gpt-4.1-mini"
"""Used only with OPENAI_API_KEY and no base URL: small, cheap, and reliable at function calling."""
NOT_CONFIGURED = (
    "no LLM endpoint configured (set SPECDOCTOR_LLM_BASE_URL and SPECDOCTOR_LLM_MODEL, or OPENAI_API_KEY, "
    "or pass --llm-base-url and --llm-model)"
)

AnswerMode = Literal["tools", "json_schema", "json"]
ErrorKind = Literal[
    "auth",
    "not-found",
    "bad-request",
    "tools-unsupported",
    "format-unsupported",
    "rate-limit",
    "timeout",
    "connection",
    "server",
]


class LLMError(RuntimeError):
    """The endpoint could not give an answer; `str(err)` is one line saying what to do."""

    def __init__(
        self, message: str, kind: ErrorKind, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.status = status
        self.retry_after = retry_after


class LLMConfig(BaseModel):
    """Where the LLM planner's model lives and how much of it one run may use."""

    model_config = ConfigDict(frozen=True)
    base_url: str = Field(description="OpenAI-compatible API root, e.g. `http://localhost:30000/v1`.")
    api_key: SecretStr | None = Field(default=None, description="Bearer key; None for a local server.")
    model: str = Field(description="Model name the endpoint serves.")
    timeout_s: float = Field(default=60.0, gt=0, description="Seconds one request may take.")
    connect_timeout_s: float = Field(
        default=3.0,
        gt=0,
        description="Seconds to open the connection: an endpoint that does not accept one by then is "
        "unreachable, not slow.",
    )
    max_retries: int = Field(
        default=3,
        ge=0,
        description="Retries of one request after a 429, a 5xx, a timeout or a lost connection.",
    )
    unreachable_retries: int = Field(
        default=1,
        ge=0,
        description="Retries (at most max_retries) when the endpoint cannot be reached at all: refused, no "
        "route, unknown name, no connection within connect_timeout_s. It rarely comes back within seconds.",
    )
    retry_wait_cap_s: float = Field(
        default=30.0, ge=0, description="Longest wait before a retry, whatever Retry-After asks for."
    )
    backoff_s: float = Field(default=1.0, ge=0, description="First backoff wait; doubles each retry.")
    max_tool_calls: int = Field(
        default=8, ge=0, description="Read-only tool calls the model may make per decision."
    )
    token_budget: int = Field(
        default=200_000, gt=0, description="Tokens (prompt + completion) the planner may spend in one run."
    )
    temperature: float = Field(default=0.0, ge=0, description="Sampling temperature; 0 for repeatable plans.")
    answer_mode: AnswerMode = Field(
        default="tools",
        description="How the final proposal is asked for: a `propose` function call, a `response_format` "
        "JSON schema, or plain JSON in the text. Lowered automatically when the endpoint refuses one.",
    )
    source: str = Field(default="options", description="Where the settings came from, for the user.")

    def describe(self) -> str:
        return f"{self.model} at {self.base_url} ({self.source})"

    @classmethod
    def setup(
        cls,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        env: Mapping[str, str] | None = None,
        **settings: Any,
    ) -> LLMSetup:
        """The configuration from explicit options, then SPECDOCTOR_LLM_*, then OPENAI_*; or why there is none."""
        env = os.environ if env is None else env
        url, url_from = _first(
            (base_url, "--llm-base-url"),
            (env.get("SPECDOCTOR_LLM_BASE_URL"), "SPECDOCTOR_LLM_BASE_URL"),
            (env.get("OPENAI_BASE_URL"), "OPENAI_BASE_URL"),
        )
        key, key_from = _first(
            (api_key, "--llm-api-key"),
            (env.get("SPECDOCTOR_LLM_API_KEY"), "SPECDOCTOR_LLM_API_KEY"),
            (env.get("OPENAI_API_KEY"), "OPENAI_API_KEY"),
        )
        name, name_from = _first(
            (model, "--llm-model"), (env.get("SPECDOCTOR_LLM_MODEL"), "SPECDOCTOR_LLM_MODEL")
        )
        own_url = url_from in ("--llm-base-url", "SPECDOCTOR_LLM_BASE_URL") and url is not None
        if own_url and key_from == "OPENAI_API_KEY" and url.rstrip("/") != OPENAI_API_URL:
            # An OpenAI key is for OpenAI (or the OPENAI_BASE_URL it was set with), never for another server.
            key, key_from = None, None
        if url is None and key is None:
            return LLMSetup(config=None, note=NOT_CONFIGURED)
        if url is None:
            url, url_from = OPENAI_API_URL, "default OpenAI API"
            if name is None:
                name, name_from = DEFAULT_OPENAI_MODEL, "default model"
        if name is None:
            return LLMSetup(
                config=None,
                note=f"LLM endpoint {url} (from {url_from}) has no model name: set SPECDOCTOR_LLM_MODEL or pass --llm-model",
            )
        if key is None and url.rstrip("/") == OPENAI_API_URL:
            return LLMSetup(
                config=None, note="the OpenAI API needs a key: set SPECDOCTOR_LLM_API_KEY or OPENAI_API_KEY"
            )
        sources = ", ".join(dict.fromkeys(s for s in (url_from, key_from, name_from) if s))
        config = cls(
            base_url=url,
            api_key=SecretStr(key) if key else None,
            model=name,
            source=sources,
            **settings,
        )
        return LLMSetup(config=config, note=f"LLM planner: {config.describe()}")

    @classmethod
    def resolve(cls, **options: Any) -> LLMConfig | None:
        """`setup(...)` without the note: the configuration, or None when no endpoint is configured."""
        return cls.setup(**options).config


class LLMSetup(BaseModel):
    """The resolved configuration (None when there is none) and a line saying where it came from, or why not."""

    model_config = ConfigDict(frozen=True)
    config: LLMConfig | None
    note: str


def _first(*pairs: tuple[str | None, str]) -> tuple[str | None, str | None]:
    for value, origin in pairs:
        if value and value.strip():
            return value.strip(), origin
    return None, None


# ---- replies -------------------------------------------------------------------------------------


class Usage(BaseModel):
    """Tokens one request (or a sum of them) used; `estimated` when the server did not report them."""

    model_config = ConfigDict(frozen=True)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            requests=self.requests + other.requests,
            estimated=self.estimated or other.estimated,
        )


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str
    name: str
    arguments: str = Field(description="The JSON text the model wrote, unparsed.")


class Reply(BaseModel):
    """The model's answer to one request."""

    model_config = ConfigDict(frozen=True)
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: Usage = Usage()

    def assistant_message(self) -> dict[str, Any]:
        """This reply as the assistant turn to send back with the next request."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


# ---- the client ----------------------------------------------------------------------------------

_TRANSIENT: tuple[ErrorKind, ...] = ("rate-limit", "timeout", "connection", "server")
_LOCAL_KEY = "not-needed"  # the openai package insists on a key; local servers ignore it


class LLMClient:
    """Chat completions against the configured endpoint, with our retries and a running token count."""

    def __init__(self, config: LLMConfig, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self.usage = Usage()
        self.waits: list[float] = []
        self._sleep = sleep
        self._openai: Any = None

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        response_format: Mapping[str, Any] | None = None,
    ) -> Reply:
        """One completion. Raises LLMError (one line, what to do) once retries are spent or not allowed."""
        import tenacity

        request: dict[str, Any] = {
            "model": self.config.model,
            "messages": redact([dict(m) for m in messages]),
            "temperature": self.config.temperature,
        }
        if tools:
            request["tools"] = list(tools)
        if response_format:
            request["response_format"] = dict(response_format)
        retrying = tenacity.Retrying(
            stop=self._stop,
            wait=self._wait,
            retry=tenacity.retry_if_exception(lambda e: isinstance(e, LLMError) and e.kind in _TRANSIENT),
            sleep=self._record_sleep,
            reraise=True,
        )
        try:
            reply = retrying(self._once, request)
        except LLMError as err:
            tries = retrying.statistics.get("attempt_number", 1)
            if err.kind in _TRANSIENT and tries > 1:
                raise LLMError(f"{err} (after {tries} tries)", err.kind, err.status) from None
            raise
        self.usage = self.usage + reply.usage
        return reply

    # -- one request -------------------------------------------------------------------------------
    def _client(self) -> Any:
        if self._openai is None:
            import httpx
            import openai

            key = self.config.api_key.get_secret_value() if self.config.api_key else _LOCAL_KEY
            timeout = httpx.Timeout(self.config.timeout_s, connect=self.config.connect_timeout_s)
            self._openai = openai.OpenAI(
                base_url=self.config.base_url, api_key=key, timeout=timeout, max_retries=0
            )
        return self._openai

    def _once(self, request: dict[str, Any]) -> Reply:
        import openai

        try:
            response = self._client().chat.completions.create(**request)
        except openai.APIStatusError as exc:
            raise self._status_error(exc) from None
        except openai.APITimeoutError as exc:
            if _connect_timed_out(exc):
                raise LLMError(
                    f"cannot reach the LLM endpoint {self.config.base_url} (no connection within "
                    f"{self.config.connect_timeout_s:g}s): check SPECDOCTOR_LLM_BASE_URL",
                    "connection",
                ) from None
            raise LLMError(
                f"the LLM endpoint {self.config.base_url} did not answer within {self.config.timeout_s:g}s: "
                "check that it is up, or raise the LLM timeout",
                "timeout",
            ) from None
        except openai.APIConnectionError as exc:
            raise LLMError(
                f"cannot reach the LLM endpoint {self.config.base_url} ({_cause(exc)}): check SPECDOCTOR_LLM_BASE_URL",
                "connection",
            ) from None
        return self._reply(response, request)

    def _reply(self, response: Any, request: dict[str, Any]) -> Reply:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise LLMError(
                f"the LLM endpoint {self.config.base_url} sent a reply with no choices: is it OpenAI-compatible?",
                "server",
            )
        message = choices[0].message
        calls = tuple(
            ToolCall(id=c.id or f"call_{i}", name=c.function.name, arguments=c.function.arguments or "")
            for i, c in enumerate(getattr(message, "tool_calls", None) or [])
            if getattr(c, "function", None) is not None
        )
        return Reply(
            content=message.content,
            tool_calls=calls,
            finish_reason=choices[0].finish_reason,
            usage=_usage(getattr(response, "usage", None), request, message.content, calls),
        )

    def _status_error(self, exc: Any) -> LLMError:
        status = exc.status_code
        detail = _error_detail(exc)
        where = f"the LLM endpoint {self.config.base_url}"
        if status == 401:
            return LLMError(
                f"{where} rejected the API key (401): check SPECDOCTOR_LLM_API_KEY", "auth", status
            )
        if status == 403:
            return LLMError(
                f"{where} refused access (403: {detail}): check the key's permissions for model {self.config.model}",
                "auth",
                status,
            )
        if status == 404:
            return LLMError(
                f"{where} does not know model {self.config.model!r} or this path (404: {detail}): "
                "check SPECDOCTOR_LLM_MODEL and that the base URL ends in /v1",
                "not-found",
                status,
            )
        if status == 429:
            return LLMError(
                f"{where} is rate-limiting requests (429: {detail})",
                "rate-limit",
                status,
                retry_after=_retry_after(exc.response.headers),
            )
        if status >= 500:
            return LLMError(f"{where} failed ({status}: {detail})", "server", status)
        lowered = detail.lower()
        if "tool" in lowered or "function" in lowered:
            return LLMError(
                f"{where} does not support function calling ({status}: {detail})", "tools-unsupported", status
            )
        if "response_format" in lowered or "json_schema" in lowered:
            return LLMError(
                f"{where} does not support structured output ({status}: {detail})",
                "format-unsupported",
                status,
            )
        return LLMError(f"{where} rejected the request ({status}: {detail})", "bad-request", status)

    # -- waiting -----------------------------------------------------------------------------------
    def _stop(self, state: Any) -> bool:
        """Whether the attempts are spent: fewer for an endpoint that cannot be reached at all."""
        error = state.outcome.exception() if state.outcome else None
        retries = self.config.max_retries
        if isinstance(error, LLMError) and error.kind == "connection":
            retries = min(retries, self.config.unreachable_retries)
        return state.attempt_number > retries

    def _wait(self, state: Any) -> float:
        error = state.outcome.exception() if state.outcome else None
        asked = error.retry_after if isinstance(error, LLMError) else None
        if asked is None:
            asked = self.config.backoff_s * 2 ** (state.attempt_number - 1)
        return min(max(0.0, asked), self.config.retry_wait_cap_s)

    def _record_sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self._sleep(seconds)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asks us to wait: `retry-after-ms`, else `retry-after` (seconds or an HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - time.time()


def _error_detail(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        if message:
            return " ".join(str(message).split())[:300]
    return " ".join(str(getattr(exc, "message", "") or exc).split())[:300]


def _connect_timed_out(exc: BaseException) -> bool:
    """The timeout was on opening the connection (nobody accepted it), not on the answer."""
    import httpx

    return isinstance(exc.__cause__, httpx.ConnectTimeout)


def _cause(exc: BaseException) -> str:
    root: BaseException = exc
    while root.__cause__ is not None:
        root = root.__cause__
    return " ".join(str(root).split())[:200] or type(root).__name__


def _usage(reported: Any, request: dict[str, Any], content: str | None, calls: Sequence[ToolCall]) -> Usage:
    if reported is not None and getattr(reported, "prompt_tokens", None) is not None:
        return Usage(
            prompt_tokens=reported.prompt_tokens or 0,
            completion_tokens=getattr(reported, "completion_tokens", 0) or 0,
            requests=1,
        )
    # Some local servers report nothing; the budget still has to hold, so count ~4 characters a token.
    sent = len(json.dumps(request.get("messages", []))) + len(json.dumps(request.get("tools", [])))
    answered = len(content or "") + sum(len(c.arguments) for c in calls)
    return Usage(prompt_tokens=sent // 4, completion_tokens=answered // 4, requests=1, estimated=True)
