"""The one redactor: each secret format masked wherever it stands, harmless names and real logs left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdoctor.tools.redact import (
    MASK,
    LogRedactor,
    help_says_secret,
    is_secret_env,
    is_secret_flag,
    redact,
    redact_argv,
    redact_command,
    redact_env,
    redact_shell,
    redact_text,
    unmask,
)

DATA = Path(__file__).parent / "data"


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


# ---- formats: every one masked wherever it stands ---------------------------------------------------

PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACDxk4mX2wYJq9pT0uVvS7hRz1mN8cLk3eFg5hIjK6lMnwAAAJgAAAAAAAAAAA\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
FORMATS = {
    "Hugging Face token": ("loading with hf_QwErTyUiOpAsDfGhJkLzXcVbNm123456", "QwErTyUiOp"),
    "OpenAI project key": ("key sk-proj-Tq9vLm2Xc8Rb4Nw7Yz1Kd5Hs in use", "Tq9vLm2Xc8"),
    "GitHub token": ("remote https://github.com ghp_Zx8Qm3Lr7Tn2Vb6Yc1Wd4Hs9Kf5Jg0Pa2Xe", "Zx8Qm3Lr7T"),
    "GitHub fine-grained": ("github_pat_11ABCDEFG0abcdefghij_KLMNOPqrstuv", "abcdefghij_KLMN"),
    "GitLab token": ("login glpat-Xy7Zq2Wm9Rt4Lk8Vn3Bc", "Xy7Zq2Wm9R"),
    "Slack bot token": ("posting with xoxb-2048-40962048-Tq9vLm2Xc8Rb4Nw7Yz1K", "40962048-Tq9v"),
    "Slack user token": ("xoxp-1111-2222-3333-abcdefABCDEF1234", "abcdefABCDEF"),
    "Slack webhook": (
        "notify https://hooks.slack.com/services/T0A1B2C3D/B0E4F5G6H/q7R8s9T0u1V2",
        "q7R8s9T0u1",
    ),
    "AWS access key id": ("id AKIAQ3EGVP7XNM2RZT5Y ok", "Q3EGVP7XNM"),
    "AWS secret (ini)": ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Xk2Lm0", "wJalrXUtn"),
    "Google API key": ("maps AIzaSyB1x2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "SyB1x2C3d4"),
    "Stripe key": ("billing sk_live_Rt6Wx9Yc4Vb1Nd7HsQm7Xr2L", "Rt6Wx9Yc4V"),
    "JWT": (
        "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzcGVjZG9jdG9yIn0.Zk3Qp8Lm2Rt6Wx9Yc4Vb1Nd7Hs seen",
        "Zk3Qp8Lm2R",
    ),
    "Bearer header": ("Authorization: Bearer abc.def-ghi_jkl~mno", "def-ghi_jkl"),
    "Basic header": ("Authorization: Basic dXNlcjpTM2NyZXRQYXNz", "dXNlcjpTM2Ny"),
    "x-api-key header": ("headers: x-api-key: XApiKeyValue0000", "XApiKeyValue"),
    "Cookie header": ("Cookie: session=CookieSess10n; theme=dark", "CookieSess10n"),
    "Set-Cookie header": ("Set-Cookie: sid=S3tC00kie; HttpOnly", "S3tC00kie"),
    "URL password": ("db postgres://app:Pa55w0rdXyz@db.internal:5432/app", "Pa55w0rdXyz"),
    "server_args dict": ("server_args={'api_key': 'ApiK3yInDump', 'tp_size': 8}", "ApiK3yInDump"),
    "ServerArgs repr": ("ServerArgs(model_path='/m', admin_api_key='Adm1nInRepr')", "Adm1nInRepr"),
    "JSON entry": ('{"client_secret": "JsonS3cretValue", "n": 1}', "JsonS3cretValue"),
    "env assignment": ("export GITLAB_PASSWORD=Gl4bPassw0rd", "Gl4bPassw0rd"),
    "flag in a shell line": (
        "python -m sglang.launch_server --api-key plainSecretValue1",
        "plainSecretValue1",
    ),
    "flag in an argv list": ("['python', '--admin-api-key', 'ListedSecret9']", "ListedSecret9"),
    "random token": ("header value Qm7Xr2Lp9Vt4Kw8Zn3Bc6Yd1Hf5Jg0Ts end", "Qm7Xr2Lp9V"),
    "random base64 with slashes": ("salt wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Xk2Lm0", "wJalrXUtn"),
    "PEM private key": (f"key:\n{PEM}\nafter", "b3BlbnNzaC1rZXkt"),
}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_format_is_masked_in_free_text(name: str) -> None:
    text, secret = FORMATS[name]
    out = redact_text(text)
    assert secret not in out and MASK in out
    assert redact_text(out) == out, "redacting twice changes nothing"


def test_a_pem_key_split_over_log_lines_is_masked_line_by_line() -> None:
    redactor = LogRedactor()
    lines = ["[x] loading key", *PEM.splitlines(), "[x] key loaded"]
    out = [redactor.line(line) for line in lines]
    assert not any("b3BlbnNzaC1rZXkt" in line or "QyNTUxOQ" in line for line in out)
    assert out[0] == "[x] loading key" and out[-1] == "[x] key loaded"
    assert "-----END OPENSSH PRIVATE KEY-----" in out[-2]


@pytest.mark.parametrize(
    "name",
    [
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SESSION_TOKEN",
        "OPENAI_API_KEY",
        "OPENAI_KEY",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "GITHUB_TOKEN",
        "GITLAB_PAT",
        "DB_PASSWORD",
        "SMTP_PASS",
        "SLACK_WEBHOOK_URL",
        "SESSION_COOKIE",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SSH_PRIVATE_KEY",
        "JWT_SECRET",
        "SENTRY_DSN",
        "BASIC_AUTH",
        "SPECDOCTOR_LLM_API_KEY",
        "apiKey",
        "x-api-key",
    ],
)
def test_secret_env_names(name: str) -> None:
    assert is_secret_env(name) and redact_env({name: "v4lue-Of-Some-Kind"}) == {name: MASK}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
        ("TOKENIZERS_PARALLELISM", "false"),
        ("MAX_TOKENS", "4096"),
        ("SGLANG_MAX_NEW_TOKENS", "512"),
        ("SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK", "128"),
        ("SGLANG_PREFILL_DELAYER_TOKEN_USAGE_LOW_WATERMARK", "0.3"),
        ("SGLANG_ENABLE_STREAMING_SESSION", "1"),
        ("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1"),
        ("HF_HUB_OFFLINE", "1"),
        ("HF_HUB_ENABLE_HF_TRANSFER", "1"),
        ("HF_TOKEN_PATH", "/root/.cache/huggingface/token"),
        ("NCCL_DEBUG", "INFO"),
        ("AWS_REGION", "us-east-1"),
        ("PYTHONHASHSEED", "0"),
        ("PWD", "/work"),
        ("TORCH_CUDA_ARCH_LIST", "9.0"),
        ("SGLANG_ENABLE_SPEC_V2", "1"),
    ],
)
def test_harmless_env_names_stay_shown(name: str, value: str) -> None:
    assert redact_env({name: value}) == {name: value}


def test_a_numeric_password_is_still_a_password() -> None:
    assert redact_env({"DB_PASSWORD": "1234567890"}) == {"DB_PASSWORD": MASK}
    assert redact_text("password=1234567890") == f"password={MASK}"


ORDINARY = [
    "python -m sglang.launch_server --model-path /models/Qwen3-235B-A22B-Instruct-2507-FP8 --tp-size 8",
    "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --max-total-tokens 4096",
    "python -m sglang.launch_server --model-path /m --tokenizer-path /m/tokenizer --max-prefill-tokens 16384",
    "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --revision 1cfa9a7208912126459214e8b04321603b3df60c",
    "python -m sglang.launch_server --model-path /m --speculative-algorithm EAGLE3 --speculative-num-draft-tokens 4",
    "python -m sglang.launch_server --model-path /m --served-model-name DeepseekV3ForCausalLMNextN --port 30000",
    "python -m sglang.launch_server --model-path /m --json-model-override-args "
    '\'{"architectures": ["LlamaForCausalLMEagle3"]}\'',
    "CUDA_VISIBLE_DEVICES=0,1 TOKENIZERS_PARALLELISM=false python -m sglang.launch_server --model-path /m --tp 2",
    "sglang serve /models/Kimi-K2.5 --speculative-token-map /maps/hot_token_id.pt --chunked-prefill-size 8192",
    "python -m sglang.launch_server --model-path /root/.cache/huggingface/hub/models--Qwen--Qwen3-8B/snapshots/"
    "9c925d64d72725edaf899c6cb9c377fd0709d9c5 --trust-remote-code",
]


@pytest.mark.parametrize("command", ORDINARY)
def test_ordinary_commands_stay_as_they_are(command: str) -> None:
    assert redact_shell(command) == command
    assert redact_text(command) == command


def test_the_real_corpus_commands_and_logs_stay_as_they_are() -> None:
    """Every command and every log line of the recorded real crashes: nothing there is a secret, so the
    diagnosis a person reads (and the LLM gets) loses nothing to the redactor. A case and a recording were
    made with made-up API keys (`--api-key sk-local-123`, `sk-recorded-test`, `sk-user-123`,
    `--admin-api-key sk-admin-123`, `sk-team-a,sk-team-b`, and TLS key passwords `test-pass-123`,
    `changeme`): exactly those values go.
    Redaction runs, as in every run of the tool, with a catalog loaded (its --help says which flags hold
    secrets: `--ssl-keyfile` holds a path)."""
    from specdoctor.tools.catalog_load import bundled

    bundled("0.5.23")
    texts: list[str] = []
    for path in sorted(DATA.rglob("*")):
        if path.suffix == ".json" and path.parent.name.startswith("corpus"):
            case = json.loads(path.read_text())
            texts += [case.get("command") or "", *str(case.get("log") or "").splitlines()]
        elif path.is_file() and path.suffix in (".txt", ".log"):
            texts += path.read_text(errors="replace").splitlines()
    keys = (
        "sk-local-123",
        "sk-recorded-test",
        "sk-user-123",
        "sk-admin-123",
        "sk-team-a",
        "sk-test-local-0001",
        "test-pass-123",
        "changeme",
        "sk-user-5b21",
        "sk-admin-9c40",
        "sk-admin-7f3a",
        "user-key",
        "admin-key",
    )
    keyed = [line for line in texts if any(k in line for k in keys)]
    changed = [line for line in texts if redact_text(line) != line and line not in keyed]
    assert len(texts) > 30_000 and changed == []
    assert len(keyed) >= 3 and all(k not in redact_text(line) for line in keyed for k in keys)


def test_secret_flags_are_learned_from_the_catalog() -> None:
    from specdoctor.tools.catalog_load import bundled

    catalog = bundled("0.5.23")
    says_secret = {f.name for f in catalog.flags if f.nargs != 0 and help_says_secret(f.help)}
    assert says_secret == {"--api-key", "--admin-api-key", "--ssl-keyfile-password"}
    assert all(is_secret_flag(name) for name in says_secret)
    keyish = [f.name for f in catalog.flags if "token" in f.name or "key" in f.name]
    assert [n for n in keyish if is_secret_flag(n)] == [
        "--ssl-keyfile-password",
        "--api-key",
        "--admin-api-key",
    ]


def test_a_masked_edit_stands_for_the_value_it_hides() -> None:
    from specdoctor.tools.command import LaunchCommand

    source = LaunchCommand.parse(
        "HF_TOKEN=hf_QwErTyUiOpAsDfGhJkLz python -m sglang.launch_server --api-key k1 --tp 2"
    )
    shown = redact_command(source)
    assert shown == f"HF_TOKEN={MASK} python -m sglang.launch_server --api-key {MASK} --tp 2"
    edited = LaunchCommand.parse(shown.replace("--tp 2", "--tp 4"))
    assert unmask(edited, source).shell() == source.shell().replace("--tp 2", "--tp 4")


def test_what_looks_like_a_key_but_is_a_logs_structure_stays() -> None:
    # A special token under a `token` key, an image a client sent as base64, a tuple printed after `*_key=`:
    # none hides a secret, and masking them would cut the words the diagnosis reads.
    kept = [
        '{"type": "token", "token": "<|close|>"}',
        '"data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"',
        "Grammar preprocessing timed out: req.grammar_key=('json', '{}')",
        "    return self.send(request, auth=auth, follow_redirects=follow_redirects)",
        '{"label_token_ids": [35, 36], "score_extraction_token": "#"}',  # punctuation: no secret is made of it
    ]
    assert [redact_text(line) for line in kept] == kept
    # A real key stays masked next to them.
    assert "sk-proj-" not in redact_text('"token": "sk-proj-Ab3dEf5hIj7kLm9nOp1qRs3tUv5wXy7z"')
