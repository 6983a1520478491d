"""The settings on the failing path. When SGLang crashes in its own code, the first suspects are the
optional settings the command chose — a backend, a cache dtype, a switch, a parallel size, an engine
environment variable — whose value or name the failure itself names: in the error's words, or in the files
and functions the traceback runs through. Turning that one setting back to SGLang's default is the smallest
change that can work. When no chosen setting is named, the failure is on SGLang's default path: an engine
bug, and the catch-all rules stop instead (issue: a crash with only defaults on the failing path is a bug)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from specdoctor.playbooks.base import Context, fix
from specdoctor.playbooks.decision import Decision
from specdoctor.tools.command import Edit, Option, RemoveFlag, SetEnv, UnsetEnv
from specdoctor.tools.edit_policy import edit_policy
from specdoctor.tools.help_parser import FlagInfo

# Words too common in logs or flag names to tie an error to one setting.
GENERIC = frozenset(
    [
        "enable",
        "disable",
        "use",
        "spec",
        "speculative",
        "cuda",
        "graph",
        "cache",
        "mode",
        "size",
        "backend",
        "attention",
        "model",
        "decode",
        "prefill",
        "server",
        "support",
        "path",
        "max",
        "min",
        "num",
        "custom",
        "kernel",
        "sglang",
        "sgl",
        "true",
        "false",
        "none",
        "auto",
        "config",
        "type",
    ]
)
# Flags that define what is served rather than how; a crash never makes them the smallest change.
_NOT_SUSPECTS = frozenset(
    {
        "--speculative-algorithm",
        "--trust-remote-code",
        "--device",
        "--nnodes",
        "--node-rank",
        "--dist-init-addr",
    }
)
_PARALLEL = re.compile(r"^--(?:tp|pp|dp|ep|attn-dp|moe-dense-tp)-size$")
_TRUTHY = {"1": "0", "true": "false", "True": "False", "TRUE": "FALSE", "yes": "no", "on": "off"}
_WEIGHTS = {
    "value in error": 4,
    "value in stack": 3,
    "name in error": 2,
    "help in stack": 2,
    "name in stack": 1,
}
MIN_WEIGHT = 2
"""A setting named only by a traceback frame's words is not enough (`tensor_model_parallel_*` frames run
through nearly every model's forward)."""


@dataclass(frozen=True)
class Suspect:
    """A setting the command chose that the failure names, and the edit that takes it back."""

    setting: str
    how: str
    """Which of its words the failure shows, and where: `value in error`, `name in stack`, ..."""
    words: tuple[str, ...]
    edits: tuple[Edit, ...]

    @property
    def weight(self) -> int:
        return _WEIGHTS[self.how]


def squeeze(text: str) -> str:
    """Lower case without separators, so `expert_distribution`, `ExpertDistribution` and
    `expert-distribution` read alike."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def words_of(name: str) -> list[str]:
    """The distinctive words of a flag, value or variable name."""
    parts = re.split(r"[-_.:/=\s]+", name.lower().lstrip("-"))
    return [w for w in parts if len(w) >= 3 and w not in GENERIC and not w.isdigit()]


def named_in(name: str, text: str, every: bool = False) -> tuple[str, ...]:
    """The words of `name` the text shows, when they are most of its words (`every`: all of them) and one
    is long enough to be distinctive (≥5 letters, or the whole of a one-word name); else ()."""
    words = words_of(name)
    squeezed = squeeze(text)
    hits = tuple(w for w in words if w in squeezed and _shown_as_word(w, text))
    enough = (len(hits) == len(words) if every else len(hits) * 2 >= len(words)) and any(
        len(w) >= 5 or len(words) == 1 for w in hits
    )
    return hits if words and enough else ()


def _shown_as_word(word: str, text: str) -> bool:
    """`word` ends a word of the text (`context` in `context_length` or `ContextLength`, not in
    `contextlib`), and a short one also begins it (`fp8` in `Fp8MoEMethod`, not `mla` in `formlayer`); a
    name written run together (`flashinfer` in `FlashInferBackend`) counts as one word."""
    start = r"(?<![A-Za-z0-9])" if len(word) < 5 else ""
    letters = "[^A-Za-z0-9]*".join(re.escape(c) for c in word)
    return re.search(rf"(?i:{start}{letters})(?![a-z])", text) is not None


def failing_path(ctx: Context) -> tuple[str, str]:
    """(the error's own words, the code it failed in): message and chained errors; frames' files and
    functions plus the traceback block."""
    root = ctx.root
    # A traceback cut before its exception has no error of its own: its "error line" is its last frame.
    said = "" if root.kind == "traceback-cut" else root.error_line or ""
    error = "\n".join(p for p in (said, root.message, *root.chain) if p)
    stack = "\n".join([*(f"{f.path} {f.function}" for f in root.frames), *root.block])
    return error, stack


def suspects(ctx: Context, ignore: frozenset[str] = frozenset()) -> list[Suspect]:
    """Every chosen setting the failure names (but those in `ignore`: a rule that has ruled them out)."""
    error, stack = failing_path(ctx)
    found = (*_flag_suspects(ctx, error, stack), *_env_suspects(ctx, error, stack))
    return [s for s in found if s and s.setting not in ignore]


def _flag_suspects(ctx: Context, error: str, stack: str) -> Iterator[Suspect | None]:
    policy = edit_policy()
    for option in ctx.spec.options():
        flag = ctx.view.canon(option.name)
        info = ctx.catalog.get(flag)
        if flag in _NOT_SUSPECTS or policy.flag(flag).edit_class == "identity" or not _chosen(option, info):
            continue
        value = " ".join(option.values)
        names = (flag, *(info.aliases if info else ()))
        edits = (RemoveFlag(flag=flag),)
        if _PARALLEL.match(flag):
            # A size is named only in the error's own words, and in full: "Pipeline Parallel is not
            # compatible ...", not "The size of tensor a ...".
            yield next(
                (
                    _suspect(flag, "name in error", h, edits)
                    for n in names
                    if (h := named_in(n, error, every=True))
                ),
                None,
            )
            continue
        yield _strongest(
            flag, [value] if value and not _numeric(value) else [], names, error, stack, edits
        ) or (_described(flag, info, ctx, edits) if not option.values or value.lower() in _TRUTHY else None)


_PLAIN = frozenset(
    [
        "the",
        "a",
        "an",
        "of",
        "to",
        "for",
        "with",
        "and",
        "or",
        "in",
        "on",
        "is",
        "be",
        "by",
        "this",
        "that",
        "when",
        "if",
        "it",
        "as",
        "at",
        "from",
        "use",
        "used",
        "will",
        "not",
        "only",
        "default",
        "which",
        "are",
        "can",
        "its",
        "than",
        "set",
        "into",
        "per",
        "all",
        "each",
    ]
)


def _described(flag: str, info: FlagInfo | None, ctx: Context, edits: tuple[Edit, ...]) -> Suspect | None:
    """A switch whose own --help names the code that failed: `--enable-deterministic-inference` "with batch
    invariant ops", and the traceback runs through `batch_invariant_ops.py`. Three distinctive words in a
    row, found in a frame's file or function, tie them; fewer tie half the engine to every flag, and help
    that restates the flag's own name says no more than the name does."""
    if info is None:
        return None
    frames = " ".join(f"{f.path} {f.function}" for f in ctx.root.frames)
    code = squeeze(f"{frames} {' '.join(_code_words(ctx))}")
    words = [w.lower() for w in re.findall(r"[A-Za-z][A-Za-z0-9]*", info.help or "")]
    own = set(words_of(flag))
    for i in range(len(words) - 2):
        three = words[i : i + 3]
        distinctive = all(len(w) >= 3 and w not in _PLAIN and w not in GENERIC for w in three)
        if distinctive and not set(three) <= own and "".join(three) in code:
            return _suspect(flag, "help in stack", tuple(three), edits)
    return None


def _code_words(ctx: Context) -> list[str]:
    """Source files a trace printed in another shape names (`sglang/srt/x/y.py:305  in fn`)."""
    return re.findall(r"[\w/.-]+\.py\b", ctx.log_text or ctx.root_text)


def _env_suspects(ctx: Context, error: str, stack: str) -> Iterator[Suspect | None]:
    for name, value in ctx.spec.env_dict().items():
        if not re.match(r"(?:SGLANG|SGL)_", name):
            continue
        off = _TRUTHY.get(value)
        edits: tuple[Edit, ...] = (SetEnv(name=name, value=off),) if off else (UnsetEnv(name=name),)
        yield _strongest(name, [], (re.sub(r"^(?:SGLANG|SGL)_", "", name),), error, stack, edits)


def _strongest(
    setting: str, values: list[str], names: tuple[str, ...], error: str, stack: str, edits: tuple[Edit, ...]
) -> Suspect | None:
    checks = (
        ("value in error", values, error),
        ("value in stack", values, stack),
        ("name in error", names, error),
        ("name in stack", names, stack),
    )
    for how, candidates, text in checks:
        if hit := next((h for c in candidates if (h := named_in(c, text))), ()):
            return _suspect(setting, how, hit, edits)
    return None


def _suspect(setting: str, how: str, words: tuple[str, ...], edits: tuple[Edit, ...]) -> Suspect:
    return Suspect(setting=setting, how=how, words=words, edits=edits)


def _numeric(value: str) -> bool:
    return bool(re.fullmatch(r"[-+.\d]+[kKMG]?i?", value))


def _chosen(option: Option, info: FlagInfo | None) -> bool:
    """The command chose something other than SGLang's default: a switch it gives, or a value that
    differs from the flag's default."""
    if not option.values:
        return True
    if info is None:
        return False
    default = (info.default or "").strip("'\"")
    return " ".join(option.values).lower() != default.lower()


def prime_suspect(ctx: Context, ignore: frozenset[str] = frozenset()) -> Suspect | None:
    """The one setting the failure names most strongly, if one stands out and is strong enough. Between
    two named alike, a tuning setting (how the model runs) goes before one that changes what is loaded or
    served: taking it back keeps the deployment the user asked for."""
    ranked = sorted(suspects(ctx, ignore), key=_rank)
    if not ranked or ranked[0].weight < MIN_WEIGHT:
        return None
    if len(ranked) > 1 and _rank(ranked[1]) == _rank(ranked[0]):
        return None  # two settings named alike: not a confident guess
    return ranked[0]


def _rank(found: Suspect) -> tuple[int, int]:
    """Strongest naming first, then tuning before capability."""
    return -found.weight, _class_rank(found.setting)


def _class_rank(setting: str) -> int:
    policy = edit_policy()
    edit_class = policy.flag(setting) if setting.startswith("--") else policy.env(setting)
    return 0 if edit_class.edit_class == "tuning" else 1


def revert_prime_suspect(ctx: Context, failure: str, ignore: frozenset[str] = frozenset()) -> Decision | None:
    """Take back the setting the failure names (a fix), or None when no chosen setting stands out."""
    found = prime_suspect(ctx, ignore)
    if found is None:
        return None
    undo = "; ".join(e.describe() for e in found.edits)
    where = "the error message" if found.how.endswith("error") else "the traceback's files and functions"
    part = "value" if found.how.startswith("value") else "name"
    return fix(
        ctx,
        found.edits,
        category_of(found.setting),
        f"{failure} on the path the command's {found.setting} takes it: {ctx.root.error_line or ''}".strip(),
        why=(
            f"{where} names {found.setting}'s {part} ({', '.join(found.words)}), a setting the command chose; "
            f"back at SGLang's default ({undo}) the launch takes the engine's default path"
        ),
        confidence=0.6 if found.weight >= 3 else 0.45,
    )


_CATEGORIES = (
    (r"speculative|eagle|draft|ngram|spec", "spec-config"),
    (r"attention|attn|mla", "attention-backend"),
    (r"quantiz|fp8|fp4|awq|gptq|moe|deepgemm|gemm", "quantization"),
    (r"cuda.graph|graph_runner|torch.compile|piecewise", "cuda-graph"),
    (r"tp.size|pp.size|dp.size|ep.size|parallel|nnodes", "tp-config"),
    (r"mem.fraction|max.total.tokens|chunked.prefill|memory", "oom"),
    (r"context.len", "context-length"),
)


def category_of(names: str) -> str:
    """The failure family a setting (or a check's fields and file) belongs to."""
    for pattern, category in _CATEGORIES:
        if re.search(pattern, names, re.I):
            return category
    return "other"
