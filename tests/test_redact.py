from __future__ import annotations

from specdoctor.tools.redact import (
    MASK,
    is_secret_env,
    is_secret_flag,
    redact,
    redact_argv,
    redact_env,
    redact_text,
)


def test_sglang_server_args_dump_keeps_no_secret():
    dump = "server_args={'admin_api_key': 'a1', 'ssl_keyfile_password': 'a2', 'hf_token': 'a3', 'api_key': 'a4', 'max_new_tokens': 5, 'tokenizer_path': '/m'}"
    out = redact_text(dump)
    assert all(s not in out for s in ("a1", "a2", "a3", "a4"))
    assert "'max_new_tokens': 5" in out and "'tokenizer_path': '/m'" in out


def test_argv_secrets_by_name_shape_and_abbreviation():
    argv = ["--ssl-keyfile-password", "hunter2", "--api-k", "abc", "--admin-api-key=zz", "--tp", "2"]
    assert redact_argv(argv) == [
        "--ssl-keyfile-password",
        MASK,
        "--api-k",
        MASK,
        f"--admin-api-key={MASK}",
        "--tp",
        "2",
    ]
    assert (
        is_secret_flag("--hf-token")
        and not is_secret_flag("--tp-size")
        and not is_secret_flag("--tool-call-parser")
    )


def test_env_secrets_wherever_the_word_is():
    env = {
        "AWS_SECRET_ACCESS_KEY": "a",
        "OPENAI_KEY": "b",
        "HF_TOKEN": "c",
        "DB_PASSWORD": "d",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    assert redact_env(env) == {k: (MASK if k != "CUDA_VISIBLE_DEVICES" else "0,1") for k in env}
    assert not is_secret_env("SGLANG_ENABLE_SPEC_V2")


def test_text_patterns():
    text = "Authorization: Bearer abcdefghijklmnop https://u:p4ss@host/x hf_abcdefghijkl sk-proj-abcdefghij --api-key secret123"
    out = redact_text(text)
    for secret in ("abcdefghijklmnop", "p4ss", "hf_abcdefghijkl", "sk-proj-abcdefghij", "secret123"):
        assert secret not in out


def test_nested_data():
    data = {"env": {"HF_TOKEN": "hf_abcdefghijkl"}, "lines": ["token=abc123", "ok"], "n": 3}
    assert redact(data) == {"env": {"HF_TOKEN": MASK}, "lines": [f"token={MASK}", "ok"], "n": 3}
