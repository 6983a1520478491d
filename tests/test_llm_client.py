"""LLMConfig resolution and LLMClient against a local stub server, through the real `openai` client."""

from __future__ import annotations

import email.utils
import socket
import time

import pytest

from specdoctor.agent.llm import (
    DEFAULT_OPENAI_MODEL,
    NOT_CONFIGURED,
    OPENAI_API_URL,
    LLMClient,
    LLMConfig,
    LLMError,
)
from tests.llm_stub import StubLLM, content, error, slow, tool_calls


@pytest.fixture(autouse=True)
def _stub_not_proxied(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stub listens on 127.0.0.1: a proxy set in the environment must not sit in between."""
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")


# ---- configuration -------------------------------------------------------------------------------


def test_nothing_configured_says_how_to_configure() -> None:
    setup = LLMConfig.setup(env={})
    assert setup.config is None
    assert setup.note == NOT_CONFIGURED
    assert "SPECDOCTOR_LLM_BASE_URL" in setup.note and "--llm-base-url" in setup.note
    assert LLMConfig.resolve(env={}) is None


def test_explicit_options_win_over_specdoctor_env_over_openai_env() -> None:
    env = {
        "SPECDOCTOR_LLM_BASE_URL": "http://sd:1/v1",
        "SPECDOCTOR_LLM_API_KEY": "sd-key",
        "SPECDOCTOR_LLM_MODEL": "sd-model",
        "OPENAI_BASE_URL": "http://oa:2/v1",
        "OPENAI_API_KEY": "oa-key",
    }
    from_env = LLMConfig.resolve(env=env)
    assert from_env is not None
    assert (from_env.base_url, from_env.model) == ("http://sd:1/v1", "sd-model")
    assert from_env.api_key is not None and from_env.api_key.get_secret_value() == "sd-key"
    explicit = LLMConfig.resolve(base_url="http://cli:3/v1", model="cli-model", env=env)
    assert explicit is not None
    assert (explicit.base_url, explicit.model) == ("http://cli:3/v1", "cli-model")
    assert explicit.api_key is not None and explicit.api_key.get_secret_value() == "sd-key"
    assert explicit.source == "--llm-base-url, SPECDOCTOR_LLM_API_KEY, --llm-model"


def test_openai_key_alone_means_the_openai_api_and_a_default_model() -> None:
    setup = LLMConfig.setup(env={"OPENAI_API_KEY": "sk-test-abcdefghijkl"})
    assert setup.config is not None
    assert (setup.config.base_url, setup.config.model) == (OPENAI_API_URL, DEFAULT_OPENAI_MODEL)
    # The key never shows in what a user or a transcript sees.
    assert "sk-test" not in repr(setup.config) and "sk-test" not in setup.note


def test_a_custom_endpoint_needs_a_model_name() -> None:
    setup = LLMConfig.setup(env={"OPENAI_BASE_URL": "http://localhost:30000/v1"})
    assert setup.config is None
    assert "SPECDOCTOR_LLM_MODEL" in setup.note and "http://localhost:30000/v1" in setup.note
    local = LLMConfig.resolve(
        env={"OPENAI_BASE_URL": "http://localhost:30000/v1", "SPECDOCTOR_LLM_MODEL": "m"}
    )
    assert local is not None and local.api_key is None


def test_settings_pass_through_and_defaults() -> None:
    config = LLMConfig.resolve(base_url="http://x/v1", model="m", env={}, timeout_s=5, token_budget=1000)
    assert config is not None
    assert (config.timeout_s, config.token_budget, config.max_tool_calls, config.temperature) == (
        5,
        1000,
        8,
        0.0,
    )


# ---- the client ----------------------------------------------------------------------------------


def _client(stub: StubLLM, **settings: object) -> tuple[LLMClient, list[float]]:
    slept: list[float] = []
    config = LLMConfig(base_url=stub.url, model="stub-model", backoff_s=0.01, **settings)  # type: ignore[arg-type]
    return LLMClient(config, sleep=slept.append), slept


MESSAGES = [{"role": "user", "content": "hello"}]


def test_a_reply_with_tool_calls_and_reported_usage() -> None:
    with StubLLM(tool_calls(("grep_help", {"pattern": "tp"}), usage=(120, 7))) as stub:
        client, _ = _client(stub)
        reply = client.chat(MESSAGES, tools=[{"type": "function", "function": {"name": "grep_help"}}])
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("grep_help", '{"pattern": "tp"}')]
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.estimated) == (
        120,
        7,
        False,
    )
    assert client.usage.total_tokens == 127
    request = stub.requests[0]
    assert request["model"] == "stub-model" and request["temperature"] == 0.0
    assert request["tools"][0]["function"]["name"] == "grep_help"


def test_usage_is_estimated_when_the_server_reports_none() -> None:
    with StubLLM(content("x" * 400)) as stub:
        client, _ = _client(stub)
        reply = client.chat(MESSAGES)
    assert reply.usage.estimated and reply.usage.completion_tokens == 100 and reply.usage.prompt_tokens > 0


def test_429_waits_as_long_as_retry_after_says() -> None:
    with StubLLM(error(429, "slow down", {"Retry-After": "2"}), content("ok")) as stub:
        client, slept = _client(stub)
        assert client.chat(MESSAGES).content == "ok"
    assert slept == [2.0]
    assert len(stub.requests) == 2


def test_429_retry_after_ms_and_the_cap() -> None:
    with StubLLM(
        error(429, "slow down", {"retry-after-ms": "1500"}),
        error(429, "slow down", {"Retry-After": "3600"}),
        content("ok"),
    ) as stub:
        client, slept = _client(stub, retry_wait_cap_s=7)
        assert client.chat(MESSAGES).content == "ok"
    assert slept == [1.5, 7.0]


def test_429_retry_after_as_an_http_date() -> None:
    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    with StubLLM(error(429, "slow down", {"Retry-After": when}), content("ok")) as stub:
        client, slept = _client(stub)
        assert client.chat(MESSAGES).content == "ok"
    assert 18 <= slept[0] <= 20


def test_5xx_is_retried_with_backoff() -> None:
    with StubLLM(error(503, "overloaded"), error(500, "boom"), content("ok")) as stub:
        client, slept = _client(stub)
        assert client.chat(MESSAGES).content == "ok"
    assert slept == [0.01, 0.02]


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (401, "rejected the API key (401): check SPECDOCTOR_LLM_API_KEY"),
        (403, "refused access (403"),
        (404, "does not know model 'stub-model'"),
        (400, "rejected the request (400: bad temperature)"),
    ],
)
def test_errors_the_user_must_fix_are_not_retried(status: int, words: str) -> None:
    message = "bad temperature" if status == 400 else "nope"
    with StubLLM(error(status, message), content("never")) as stub:
        client, slept = _client(stub)
        with pytest.raises(LLMError) as caught:
            client.chat(MESSAGES)
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)
    assert len(stub.requests) == 1 and slept == []


def test_endpoint_without_tools_is_recognised() -> None:
    with StubLLM(error(400, "tools not supported by this model")) as stub:
        client, _ = _client(stub)
        with pytest.raises(LLMError) as caught:
            client.chat(MESSAGES, tools=[{"type": "function", "function": {"name": "f"}}])
    assert caught.value.kind == "tools-unsupported" and caught.value.status == 400


def test_a_timeout_is_retried_then_reported_clearly() -> None:
    with StubLLM(slow(1.0), slow(1.0)) as stub:
        client, slept = _client(stub, timeout_s=0.2, max_retries=1)
        with pytest.raises(LLMError) as caught:
            client.chat(MESSAGES)
    assert caught.value.kind == "timeout"
    assert str(caught.value) == (
        f"the LLM endpoint {stub.url} did not answer within 0.2s: check that it is up, "
        "or raise the LLM timeout (after 2 tries)"
    )
    assert len(stub.requests) == 2 and slept == [0.01]


def test_a_timeout_then_an_answer_succeeds() -> None:
    # The slow answer outlasts the timeout many times over; the retry's has room on a loaded machine.
    with StubLLM(slow(4.0), content("late but fine")) as stub:
        client, _ = _client(stub, timeout_s=1.0)
        assert client.chat(MESSAGES).content == "late but fine"


def test_nothing_listening_is_a_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1, backoff_s=0)
    with pytest.raises(LLMError) as caught:
        LLMClient(config, sleep=lambda _: None).chat(MESSAGES)
    assert caught.value.kind == "connection"
    assert f"cannot reach the LLM endpoint http://127.0.0.1:{port}/v1" in str(caught.value)


def test_an_unreachable_endpoint_is_tried_twice_not_four_times() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = LLMClient(LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m"), sleep=lambda _: None)
    with pytest.raises(LLMError) as caught:
        client.chat(MESSAGES)
    assert caught.value.kind == "connection" and str(caught.value).endswith("(after 2 tries)")
    assert client.waits == [1.0]


def test_a_connection_nobody_accepts_is_unreachable_within_the_connect_timeout() -> None:
    # A listener whose accept queue is full drops new connection attempts, as a firewalled host does.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        queued = [socket.socket() for _ in range(4)]
        for s in queued:
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
        time.sleep(0.2)
        config = LLMConfig(
            base_url=f"http://127.0.0.1:{port}/v1", model="m", connect_timeout_s=0.3, unreachable_retries=0
        )
        began = time.monotonic()
        with pytest.raises(LLMError) as caught:
            LLMClient(config, sleep=lambda _: None).chat(MESSAGES)
        elapsed = time.monotonic() - began
        for s in queued:
            s.close()
    assert caught.value.kind == "connection" and "no connection within 0.3s" in str(caught.value)
    assert elapsed < config.timeout_s


def test_messages_are_redacted_before_they_are_sent() -> None:
    secret = [
        {"role": "user", "content": "run with HF_TOKEN=hf_abcdefghijklmnop --api-key sk-test-0123456789"}
    ]
    with StubLLM(content("ok")) as stub:
        client, _ = _client(stub)
        client.chat(secret)
    assert "hf_abcdefghijklmnop" not in stub.bodies[0] and "sk-test-0123456789" not in stub.bodies[0]
    assert "--api-key ***" in stub.requests[0]["messages"][0]["content"]


def test_an_openai_key_is_never_sent_to_another_endpoint():
    from specdoctor.agent.llm import LLMConfig

    env = {
        "SPECDOCTOR_LLM_BASE_URL": "http://10.0.0.5:8000/v1",
        "SPECDOCTOR_LLM_MODEL": "m",
        "OPENAI_API_KEY": "sk-real-openai-key",
    }
    config = LLMConfig.setup(env=env).config
    assert config is not None and config.api_key is None
    own = LLMConfig.setup(env={**env, "SPECDOCTOR_LLM_API_KEY": "local-key"}).config
    assert own is not None and own.api_key.get_secret_value() == "local-key"
