"""Secret redaction: the one redactor every sink passes through (terminal, transcript, report, LLM requests,
the engine's log as specdoctor tees it).

It masks values, never structure: `--api-key sk-abc` becomes `--api-key ***`, so a redacted command still
reads (and parses) like the original. A value is a secret because of where it sits (after a secret flag,
in a variable or header named like one) or because of what it looks like (a known token prefix, a JWT, a
PEM private key, a long random string), whatever its name.
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specdoctor.tools.command import LaunchCommand
    from specdoctor.tools.help_parser import FlagInfo
    from specdoctor.tools.wrappers import Wrapper

MASK = "***"

# Flags whose value is a secret whatever it looks like. Any flag named like one counts too, and so does a
# flag whose own --help calls its value a key or password (`learn_secret_flags`, fed by every catalog).
SECRET_FLAGS = (
    "--api-key",
    "--admin-api-key",
    "--hf-token",
    "--token",
    "--llm-api-key",
    "--openai-api-key",
    "--ssl-keyfile-password",
)
_learned: set[str] = set()
_plain: set[str] = set()
"""Flags a catalog knows whose help says nothing of a secret (`--ssl-keyfile`, `--bucket-time-to-first-token`)."""
_SECRET_FLAG = re.compile(
    r"(?i)^--(?:[a-z0-9]+[-_])*(?:api[-_]?key|(?:access|secret|private)[-_]key|(?<!per-)(?<!first-)token"
    r"|secret|password|passwd|passphrase|credentials?|cookie)$"
)
_SECRET_HELP = re.compile(
    r"(?i)\b(?:api[ -]?key|password|passphrase|secret|credentials?|(?:access|auth|bearer|api|hf) token)s?\b"
)

# ---- names ---------------------------------------------------------------------------------------
# A word that says "the value is a secret" wherever it stands in a name.
_STRONG = {
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "CREDENTIALS",
    "APIKEY",
    "AUTHORIZATION",
}
# As the last word: `HF_TOKEN`, `OPENAI_KEY`, `DB_PASS`. Earlier (`TOKEN_USAGE`) it is only weak.
_STRONG_LAST = {"TOKEN", "KEY", "PASS", "PAT", "PRIVATEKEY", "ACCESSKEY", "SECRETKEY"}
# Secret-ish words that also name switches (`SGLANG_ENABLE_STREAMING_SESSION=1`): a number stays shown.
# `TOKEN` and `KEY` before the last word (`TOKEN_USAGE`, `hot_token_id`) name no secret at all.
_WEAK = {"AUTH", "COOKIE", "COOKIES", "SESSION", "WEBHOOK", "PRIVATE", "DSN", "SIGNATURE"}
# Tokenizer vocabulary (`eos_token='</s>'`), not credentials.
_VOCAB_TOKENS = {"EOS", "BOS", "PAD", "UNK", "SEP", "CLS", "MASK", "SPECIAL", "START", "END", "STOP"}
_AWS_HARMLESS = {"REGION", "PROFILE", "OUTPUT"}
# Only these hold a secret that may be all digits (a PIN); `#new-token: 7` is a count.
_NUMERIC_SECRETS = {"PASSWORD", "PASSWD", "PASSPHRASE", "PASS", "PIN", "SECRET"}
_LITERALS = {"", "0", "1", "true", "false", "yes", "no", "on", "off", "none", "null", "unset", MASK}
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def _words(name: str) -> list[str]:
    return [w.upper() for w in _WORD.findall(name)]


def _strength(name: str) -> int:
    """2: the name says secret; 1: it may (a number is then shown); 0: it does not."""
    words = _words(name)
    if not words:
        return 0
    last, pairs = words[-1], {a + b for a, b in itertools.pairwise(words)}
    if last == "TOKEN" and len(words) > 1 and words[-2] in _VOCAB_TOKENS:
        return 0
    if _STRONG & set(words) or pairs & {"APIKEY", "ACCESSKEY", "PRIVATEKEY", "SECRETKEY", "AUTHTOKEN"}:
        return 2
    if words[0] == "AWS" and not (_AWS_HARMLESS & set(words) or "ENDPOINT" in words):
        return 2
    if last in _STRONG_LAST and (last != "KEY" or len(words) > 1):
        return 2
    return 1 if _WEAK & set(words) else 0


def _hidden(name: str, value: str, *, strict: bool = False) -> bool:
    """Whether `value`, found under `name`, is masked. `strict` (free text): a bare `key` is not enough."""
    strength = _strength(name)
    literal = value.strip("'\"").lower()
    if strength == 0 or literal in _LITERALS or re.fullmatch(r"<\|?[\w -]*\|?>", literal):
        return False  # a placeholder (SGLang's own `'<redacted>'`) or a special token (`<|close|>`) hides nothing
    if not re.search(r"[a-z0-9]", literal):
        return False  # punctuation alone (a scoring token `"#"`): no secret is made of it
    if strict and _words(name) in (["KEY"], ["KEYS"]):
        return False
    if re.fullmatch(r"[-+]?\d+(\.\d+)?", literal):
        return bool(_NUMERIC_SECRETS & set(_words(name)))
    return True


def is_secret_env(name: str, value: str | None = None) -> bool:
    """An environment variable (or dict key) whose value is a secret; with `value`, also whether that value
    is worth masking (`SGLANG_ENABLE_STREAMING_SESSION=1` is not)."""
    return _hidden(name, "x" if value is None else value)


def learn_secret_flags(flags: Iterable[FlagInfo]) -> None:
    """Remember the flags an engine's own --help describes as taking a key or password, and those it
    describes as anything else."""
    for f in flags:
        secret = f.nargs != 0 and help_says_secret(f.help)
        (_learned if secret else _plain).update(f.spellings)


def help_says_secret(help_text: str) -> bool:
    return bool(_SECRET_HELP.search(help_text))


def is_secret_flag(name: str) -> bool:
    """A flag that carries a secret: a known one, one named like one, or an abbreviation of a known one."""
    name = name.split("=", 1)[0]
    known = (*SECRET_FLAGS, *_learned)
    if name in known:
        return True
    if name in _plain:
        return False  # the engine's own help says what it is; argparse takes an exact name as itself
    return bool(_SECRET_FLAG.match(name)) or (len(name) >= 5 and any(f.startswith(name) for f in known))


# ---- values that look like secrets whatever their name ---------------------------------------------
_PEM = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY( BLOCK)?-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.S,
)
_PEM_BEGIN = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_PREFIXED = re.compile(
    r"(?<![/.\w])hf_(?!transfer|transformers|hub)[A-Za-z0-9]{10,}"  # Hugging Face (not the modules)
    r"|\bsk-[A-Za-z0-9_\-]{8,}"  # OpenAI, Anthropic (sk-proj-, sk-ant-)
    r"|\b(?:ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{12,}|\bgithub_pat_[A-Za-z0-9_]{12,}"  # GitHub
    r"|\bglpat-[A-Za-z0-9_\-]{12,}"  # GitLab
    r"|\bxox[abposer]-[A-Za-z0-9\-]{10,}|\bxapp-[A-Za-z0-9\-]{10,}"  # Slack
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key ids
    r"|\bAIza[0-9A-Za-z_\-]{30,}"  # Google API keys
    r"|\bya29\.[0-9A-Za-z_\-]{20,}"  # Google OAuth access tokens
    r"|\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe
    r"|\bnpm_[A-Za-z0-9]{30,}|\bpypi-[A-Za-z0-9_\-]{40,}"  # package registries
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{4,}"  # JWT
    r"|\b(?:https?://)?(?:hooks\.slack\.com/(?:services|workflows)|discord(?:app)?\.com/api/webhooks)/[A-Za-z0-9/_\-]+"
)
# What every _PREFIXED match contains: a line without any of these skips that (slow) alternation.
_PREFIX_HINTS = (
    "hf_",
    "sk-",
    "ghp_",
    "gho_",
    "ghs_",
    "ghu_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xox",
    "xapp-",
    "AKIA",
    "ASIA",
    "AIza",
    "ya29.",
    "k_live_",
    "k_test_",
    "npm_",
    "pypi-",
    "eyJ",
    "hooks.slack.com",
    "/api/webhooks/",
)
# `Bearer` is never prose; `Basic`/`Token` often are, so their credential must hold a digit or `=`.
_AUTH_SCHEME = re.compile(
    r"(?i)\b(Bearer)(\s+)[A-Za-z0-9._~+/=\-]{8,}"
    r"|\b(Basic|Token|Digest)(\s+)(?=[A-Za-z._~+/\-]*[\d=])[A-Za-z0-9._~+/=\-]{8,}"
)
_SCHEMES = {"bearer", "basic", "token", "digest"}
_URL_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.\-]*://)[^/\s:@'\"]+:[^/\s@'\"]+@")
_COOKIE = re.compile(r"(?i)\b((?:set-)?cookie)(\s*:\s*)[^\r\n'\"]+")
# `name = value`, `name: value`, `'name': 'value'`: only the name and separator are matched, so a value
# that is not masked is scanned again (`headers: x-api-key: k` holds two).
_NAME_SEP = re.compile(r"(?<![\w\-.])(['\"]?)([A-Za-z_][\w.\-]*)\1(\s*[=:]\s*)")
_CALL = re.compile(r"[A-Za-z_][\w.]*\(")
_VALUE = re.compile(r"'([^'\n]*)'|\"([^\"\n]*)\"|([^\s,;'\"&)}\]]+)")
# The separator may be `=`, blanks, or `', '` of an argv printed as a Python list.
_FLAG_VALUE = re.compile(
    r"(?<![\w\-])(--[A-Za-z0-9][\w\-]*)(=|[ \t]+|['\"],[ \t]*(?=['\"]))('[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)"
)
# After `--api-key` in prose ("ambiguous option: --api-key could match ..."), not a value.
_PROSE = {
    "could",
    "is",
    "must",
    "requires",
    "expected",
    "and",
    "or",
    "not",
    "with",
    "was",
    "has",
    "needs",
    "to",
    "be",
}
_RUN = re.compile(r"(?<![A-Za-z0-9_+/\-.])[A-Za-z0-9_+/\-]{20,}={0,2}(?![A-Za-z0-9_+/=\-.])")
_WORDY = re.compile(r"[A-Z]?[a-z]{3,}")
# How base64 of a PNG, JPEG, GIF or WebP file begins: an image a client sent, not a key.
_IMAGE_MAGIC = ("iVBORw0KGgo", "/9j/", "R0lGOD", "UklGR")


def looks_random(run: str) -> bool:
    """A long run of mixed letters and digits that is not made of words: a key, not a name or a digest.
    Lower-case hex (commit shas, digests), CamelCase names (`DeepseekV3ForCausalLM`) and paths are not."""
    run = run.rstrip("=")
    if run[:1] in "/~" or run.startswith(_IMAGE_MAGIC):
        return False
    # A run with `/` and no other separator is base64 (a key); with them it is a path, read part by part.
    chunks = [run] if "/" in run and not re.search(r"[-_.]", run) else re.split(r"[-_./]", run)
    return any(_random_chunk(c) for c in chunks if len(c) >= 20)


def _random_chunk(chunk: str) -> bool:
    if not (re.search(r"[a-z]", chunk) and re.search(r"[A-Z]", chunk) and re.search(r"\d", chunk)):
        return False
    return sum(len(w) for w in _WORDY.findall(chunk)) / len(chunk) < 0.5


def _pem(m: re.Match[str]) -> str:
    kind = f"{m.group(1)}PRIVATE KEY{m.group(2) or ''}"
    end = f"-----END {kind}-----" if _PEM_END.search(m.group(0)) else ""
    return f"-----BEGIN {kind}-----{MASK}{end}"


def _assignments(text: str) -> str:
    out, pos = [], 0
    for m in _NAME_SEP.finditer(text):
        value = _VALUE.match(text, m.end())
        if m.start() < pos or value is None:
            continue
        quoted = value.group(1) if value.group(1) is not None else value.group(2)
        raw = quoted if quoted is not None else value.group(3)
        if quoted is None and _CALL.match(raw) and not _STRONG & set(_words(m.group(2))):
            continue  # a call in code (`..._token = Histogram(`), under a name that is not a password's
        if quoted is None and raw in ("(", "[", "{") and not _STRONG & set(_words(m.group(2))):
            continue  # a tuple or list printed (`grammar_key=('json', ...)`): structure, not a token
        if quoted is None and raw == m.group(2):
            continue  # code passing a variable on under its own name (`auth=auth`)
        if not _hidden(m.group(2), raw, strict=True) or raw.lower() in _SCHEMES:
            continue
        quote = "'" if value.group(1) is not None else '"' if value.group(2) is not None else ""
        out += [text[pos : value.start()], f"{quote}{MASK}{quote}"]
        pos = value.end()
    return "".join([*out, text[pos:]])


def _flag_value(m: re.Match[str]) -> str:
    name, sep, value = m.group(1), m.group(2), m.group(3)
    bare = value.strip("'\"[]{}(),")
    metavar = name.lstrip("-").upper().replace("-", "_")
    if not is_secret_flag(name) or value.startswith("-") or bare.lower() in _PROSE or bare == metavar:
        return m.group(0)
    return f"{name}{sep}{MASK}"


def _random_run(m: re.Match[str]) -> str:
    return MASK if looks_random(m.group(0)) else m.group(0)


def redact_text(text: str) -> str:
    """Every secret in free text (a log, a message, a shell line) masked; idempotent."""
    if "PRIVATE KEY" in text:
        text = _PEM.sub(_pem, text)
    text = _URL_USERINFO.sub(r"\1" + MASK + "@", text)
    if any(hint in text for hint in _PREFIX_HINTS):
        text = _PREFIXED.sub(MASK, text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group(1) or m.group(3)}{m.group(2) or m.group(4)}{MASK}", text)
    text = _COOKIE.sub(r"\1\2" + MASK, text)
    text = _assignments(text)
    text = _FLAG_VALUE.sub(_flag_value, text)
    return _RUN.sub(_random_run, text)


class LogRedactor:
    """Redacts a log one line at a time, remembering an open PEM private key across lines."""

    def __init__(self) -> None:
        self._in_key = False

    def line(self, text: str) -> str:
        if self._in_key:
            end = _PEM_END.search(text)
            if end is None:
                return MASK
            self._in_key = False
            return MASK + end.group(0) + redact_text(text[end.end() :])
        begin = _PEM_BEGIN.search(text)
        if begin is not None and _PEM_END.search(text, begin.end()) is None:
            self._in_key = True
            return redact_text(text[: begin.start()]) + begin.group(0) + MASK
        return redact_text(text)


# ---- structured data -----------------------------------------------------------------------------


def redact_argv(argv: Iterable[str]) -> list[str]:
    """Mask the value after (or `=` in) a secret flag, and any token that looks like a key."""
    out: list[str] = []
    hide_next = False
    for token in argv:
        if hide_next and not token.startswith("--"):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        name, eq, _ = token.partition("=")
        if name.startswith("--") and is_secret_flag(name):
            out.append(f"{name}={MASK}" if eq else token)
            hide_next = not eq
            continue
        out.append(redact_text(token))
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_env(k, v) else redact_text(v)) for k, v in env.items()}


def redact(value: Any) -> Any:
    """Redact every string inside JSON-like data (dicts, lists, tuples); values under secret keys too."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {
            k: (MASK if isinstance(k, str) and isinstance(v, str) and is_secret_env(k, v) else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(redact(v) for v in value)
    return value


def redact_spec(spec: LaunchCommand) -> LaunchCommand:
    """The command with every secret masked: values of secret flags and env vars, key-like tokens anywhere."""
    from specdoctor.tools.command import Positional

    args = []
    for a in spec.args:
        if isinstance(a, Positional):
            args.append(Positional(value=redact_text(a.value)))
            continue
        secret = is_secret_flag(a.name)
        values = tuple(MASK if secret else redact_text(v) for v in a.values)
        args.append(a.model_copy(update={"values": values}))
    env = tuple(redact_env(spec.host_env()).items())
    prefix = tuple(_redact_wrapper(w) for w in spec.prefix)
    return spec.model_copy(update={"env": env, "prefix": prefix, "args": tuple(args)})


def _redact_wrapper(wrapper: Wrapper) -> Wrapper:
    """A wrapper with the values of the secrets it sets masked (`-e HF_TOKEN=***`, `env OPENAI_KEY=***`), and
    key-like words anywhere in it."""
    for index, name, value in wrapper.env_items():
        if value is not None and is_secret_env(name, value):
            wrapper = wrapper.with_env_value(index, MASK)
    return wrapper.model_copy(
        update={
            "program": tuple(map(redact_text, wrapper.program)),
            "options": tuple(tuple(map(redact_text, g)) for g in wrapper.options),
            "operand": tuple(map(redact_text, wrapper.operand)),
        }
    )


def redact_command(spec: LaunchCommand) -> str:
    """The command as a shell line with every secret masked; `***` stays unquoted so it reads as a mask."""
    masked = redact_spec(spec)
    env = [f"{k}={_quote(v)}" for k, v in masked.env]
    return redact_text(" ".join([*env, *(_quote(t) for t in masked.argv())]))


def redact_shell(line: str) -> str:
    """A shell line (a launch command) with every secret masked; text that is not a launch command is
    redacted as free text."""
    from specdoctor.tools.command import CommandError, LaunchCommand

    try:
        spec = LaunchCommand.parse(line)
    except CommandError:
        return redact_text(line)
    masked = redact_spec(spec)
    return line if masked == spec and redact_text(line) == line else redact_command(spec)


def _quote(token: str) -> str:
    plain = token.replace(MASK, "x")
    return token if shlex.quote(plain) == plain else shlex.quote(token)


def unmask(edited: LaunchCommand, source: LaunchCommand) -> LaunchCommand:
    """`edited` (a person's edit of `redact_command(source)`) with every masked value they left as it was
    put back from `source`, so a command can be edited on screen without its secrets being shown."""
    from specdoctor.tools.command import Option, Positional

    masked = redact_spec(source)
    values: dict[tuple[str, str], str] = {}
    for m, o in zip(masked.args, source.args, strict=True):
        if isinstance(m, Option) and isinstance(o, Option):
            values.update({(o.name, mv): ov for mv, ov in zip(m.values, o.values, strict=True)})
        elif isinstance(m, Positional) and isinstance(o, Positional):
            values[("", m.value)] = o.value
    env = {k: (mv, ov) for (k, mv), (_, ov) in zip(masked.env, source.env, strict=True)}

    def back(where: str, value: str) -> str:
        return values.get((where, value), value) if MASK in value else value

    args = [
        Positional(value=back("", a.value))
        if isinstance(a, Positional)
        else a.model_copy(update={"values": tuple(back(a.name, v) for v in a.values)})
        for a in edited.args
    ]
    restored = tuple(
        (k, env[k][1] if k in env and env[k][0] == v and MASK in v else v) for k, v in edited.env
    )
    words = {
        m: o
        for mw, ow in zip(masked.prefix, source.prefix, strict=True)
        for m, o in zip(mw.words(), ow.words(), strict=True)
        if MASK in m
    }
    prefix = tuple(_put_back(w, words) for w in edited.prefix)
    return edited.model_copy(update={"env": restored, "prefix": prefix, "args": tuple(args)})


def _put_back(wrapper: Wrapper, words: dict[str, str]) -> Wrapper:
    """A wrapper whose masked words (`HF_TOKEN=***`) are the source's real ones again."""
    return wrapper.model_copy(
        update={"options": tuple(tuple(words.get(t, t) for t in g) for g in wrapper.options)}
    )
