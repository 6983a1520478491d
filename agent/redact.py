"""Secret redaction: the one function everything passes through before it is written to a transcript,
a report, or sent to an LLM.

It masks values, never structure: `--api-key sk-abc` becomes `--api-key ***`, so a redacted command still
reads (and parses) like the original.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

# Flags whose value is a secret, whatever it looks like (also any flag named like one, and abbreviations).
SECRET_FLAGS = (
    "--api-key",
    "--admin-api-key",
    "--hf-token",
    "--token",
    "--llm-api-key",
    "--openai-api-key",
    "--ssl-keyfile-password",
)
_SECRET_FLAG = re.compile(
    r"(?i)^--(?:[a-z0-9]+-)*(?:api-key|apikey|token|secret|password|passwd|credentials?)$"
)
# Environment variables whose value is a secret: a name with one of these words in it, or ending in KEY.
_SECRET_ENV_WORDS = {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "AUTH", "APIKEY"}

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bhf_[A-Za-z0-9]{8,}"), MASK),  # Hugging Face tokens
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"), MASK),  # OpenAI-style keys (sk-, sk-proj-)
    (re.compile(r"\b(?:ghp|gho|ghs|github_pat)_[A-Za-z0-9_]{12,}"), MASK),  # GitHub tokens
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), MASK),  # AWS access key ids
    (re.compile(r"(?i)\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=\-]{8,}"), r"\1 " + MASK),
    (
        re.compile(r"(?i)(\b[a-z][a-z0-9+.\-]*://)[^/\s:@]+:[^/\s@]+@"),
        r"\1" + MASK + "@",
    ),  # user:pass@ in URLs
    (
        re.compile(r"(?i)(--(?:[a-z0-9]+-)*(?:api-key|token|secret|password)(?:=|\s+))(\S+)"),
        r"\1" + MASK,
    ),
    (
        re.compile(r"(?i)\b([A-Z0-9_]*(?:TOKEN|API_?KEY|SECRET|PASSWORD)\s*[=:]\s*)(['\"]?)[^\s'\"]+\2"),
        r"\1\2" + MASK + r"\2",
    ),
    # Python/JSON dict entries such as SGLang's `server_args={... 'admin_api_key': 'x', 'hf_token': 'x'}`:
    # keys that END in a secret word (so `max_new_tokens` and `tokenizer_path` are left alone).
    (
        re.compile(r"(?i)(['\"]\w*(?:api_key|apikey|token|password|passwd|secret)['\"]\s*:\s*['\"])[^'\"]+"),
        r"\1" + MASK,
    ),
)


def redact_text(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def is_secret_env(name: str) -> bool:
    words = name.upper().split("_")
    return bool(_SECRET_ENV_WORDS & set(words)) or words[-1] == "KEY" or "API_KEY" in name.upper()


def is_secret_flag(name: str) -> bool:
    """A flag that carries a secret: a known one, one named like one, or an abbreviation of a known one."""
    name = name.split("=", 1)[0]
    if name in SECRET_FLAGS or _SECRET_FLAG.match(name):
        return True
    return len(name) >= 5 and any(f.startswith(name) for f in SECRET_FLAGS)


def redact_argv(argv: list[str]) -> list[str]:
    """Mask the value after (or `=` in) a secret flag, and any token that looks like a key."""
    out: list[str] = []
    hide_next = False
    for token in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        name, eq, _ = token.partition("=")
        if name.startswith("--") and is_secret_flag(name):
            if eq:
                out.append(f"{name}={MASK}")
            else:
                out.append(token)
                hide_next = True
            continue
        out.append(redact_text(token))
    return out


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_env(k) and v else redact_text(v)) for k, v in env.items()}


def redact(value: Any) -> Any:
    """Redact every string inside JSON-like data (dicts, lists, tuples); keys named like secrets too."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {
            k: (MASK if isinstance(k, str) and is_secret_env(k) and isinstance(v, str) and v else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    return value
