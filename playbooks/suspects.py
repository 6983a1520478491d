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
from specdoctor.playbooks.code_paths import area_of, described_by_help
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.naming import category_of, field_of, named_exactly, named_in, squeeze, words_of
from specdoctor.playbooks.take_back import take_back
from specdoctor.tools.command import Edit, Option, SetEnv, UnsetEnv
from specdoctor.tools.edit_policy import edit_policy
from specdoctor.tools.flag_synonyms import vllm_names
from specdoctor.tools.help_parser import FlagInfo

WHAT_IS_SERVED = frozenset(
    {
        "--speculative-algorithm",
        "--trust-remote-code",
        "--device",
        "--nnodes",
        "--node-rank",
        "--dist-init-addr",
    }
)
"""Flags that define what is served rather than how; a failure never makes them the smallest change."""
_PARALLEL = re.compile(r"^--(?:tp|pp|dp|ep|attn-dp|moe-dense-tp)-size$")
TRUTHY = {"1": "0", "true": "false", "True": "False", "TRUE": "FALSE", "yes": "no", "on": "off"}
_WEIGHTS = {
    "value in error": 4,
    "value in stack": 3,
    "name in error": 2,
    "help in stack": 2,
    "area in stack": 2,
    "name in stack": 1,
    "module in stack": 2,
    "value in report": 2,
    "name in report": 2,
    "the one choice on a cut path": 1,
    "read by the failing line": 2,
    "its feature's flag in error": 3,
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
    prose = "\n".join(ctx.reported)
    found = (*_flag_suspects(ctx, error, stack, prose), *_env_suspects(ctx, error, stack))
    return [s for s in found if s and s.setting not in ignore]


def _flag_suspects(ctx: Context, error: str, stack: str, prose: str) -> Iterator[Suspect | None]:
    policy = edit_policy()
    failing = _failing_lines(ctx)[-2:]  # the raising line and the call into it, read once for every flag
    for option in ctx.spec.options():
        flag = ctx.view.canon(option.name)
        info = ctx.catalog.get(flag)
        if flag in WHAT_IS_SERVED or policy.flag(flag).edit_class == "identity" or not chosen(option, info):
            continue
        value = " ".join(option.values)
        names = (flag, *(info.aliases if info else ()))
        edits = take_back(flag, value, info, ctx)
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
        switch = not option.values or value.lower() in TRUTHY
        # A value that is also the model's family (`--reasoning-parser qwen3` for Qwen3-8B) is named by every
        # mention of the model: no evidence about the setting.
        family = squeeze(value) in squeeze(ctx.view.get("--model-path") or "")
        values = [value] if value and not _numeric(value) and not family else []
        found = _heaviest(
            _strongest(flag, values, names, error, stack, edits),
            _read_by_the_failing_line(flag, failing, edits),
            _its_feature_flag_written(flag, error, edits),
        ) or _other_name_suspect(flag, error, edits)
        if found is None or found.weight < MIN_WEIGHT:
            found = (
                _in_prose(flag, values, names, prose, edits)
                or _own_module(flag, ctx, edits)
                or _code_suspect(flag, info, ctx, edits, switch)
                or found
            )
        yield found


def _heaviest(*found: Suspect | None) -> Suspect | None:
    """The strongest of several namings of one setting (the first between equals)."""
    named = [f for f in found if f is not None]
    return max(named, key=lambda f: f.weight) if named else None


# How SGLang's runtime reads a setting after start-up: `get_serving().api_key`, `get_exec().moe.<field>`
# (srt/runtime_context.py groups the server arguments).
_ACCESSOR = r"get_[a-z]+\(\)(?:\.[a-z]+)?"


def _read_by_the_failing_line(flag: str, failing: list[str], edits: tuple[Edit, ...]) -> Suspect | None:
    """The line the error was raised on, or the call that led into it, as the traceback quotes them, reads
    the setting's field from the server arguments (`return server_args.numa_node[gpu_id]` → IndexError;
    `validate_ib_devices(cfg.disaggregation_ib_device)` → "InfiniBand sysfs path not found"; at run time
    through the runtime's accessors, `get_exec().moe.init_expert_location`): the engine failed on its value."""
    field = field_of(flag)
    for line in failing:
        if re.search(rf"\b(?:server_args|args|cfg|self\.server_args|{_ACCESSOR})\.{field}\b", line):
            return _suspect(flag, "read by the failing line", (line.strip(),), edits)
    return None


def _failing_lines(ctx: Context) -> list[str]:
    """The source lines of the traceback's frames (their quoted code), in order, where the log shows them."""
    code: list[str] = []
    after_frame = False
    for text in ctx.root.block:
        if text.lstrip().startswith('File "'):
            after_frame = True
        elif after_frame and text.strip() and not re.fullmatch(r"\s*[~^]+\s*", text):
            code.append(text)
            after_frame = False
    return code


def _in_prose(
    flag: str, values: list[str], names: tuple[str, ...], prose: str, edits: tuple[Edit, ...]
) -> Suspect | None:
    """What the person reporting the failure says they chose: its value, or its name in full (`EAGLE3`
    in a sentence is the algorithm, not --speculative-eagle-topk). Anyone can write a sentence: it weighs as
    a lead (below the unattended bar), never as the engine's own words."""
    if hit := next((h for v in values if (h := named_in(v, prose, every=True))), ()):
        return _suspect(flag, "value in report", hit, edits)
    if hit := next((h for n in names if (h := _written(n, prose) or named_in(n, prose, every=True))), ()):
        return _suspect(flag, "name in report", hit, edits)
    return None


def _own_module(flag: str, ctx: Context, edits: tuple[Edit, ...]) -> Suspect | None:
    """The failure runs through SGLang's own module for the setting, a folder or file named after the flag
    itself (`srt/kv_canary/` for --kv-canary, `hicache_storage.py` for --hicache-storage-backend's feature):
    that code runs only because the command switched the feature on. Only the innermost frames count: the
    outer ones are the scheduler's start-up, which calls every feature's set-up."""
    own = squeeze(re.sub(r"^--(?:enable|use)-", "", flag))
    family = re.sub(r"^--(?:enable-|use-)?", "", flag).split("-")[0]
    # The feature a choice flag picks the kind of (`--weight-cache-mode` → `weight_cache/`): a name of two
    # words or more once its last, generic word is gone.
    feature = re.fullmatch(r"--([a-z0-9]+(?:-[a-z0-9]+)+)-(?:mode|backend|type|method|policy)", flag)
    names = {own, squeeze(feature.group(1))} if feature else {own}
    if len(own) < 5:
        return None
    inner = [f for f in ctx.root.frames if "sglang" in f.path][-_INNER_FRAMES:]
    for frame in inner:
        parts = frame.path.rsplit("sglang/", 1)[-1].removesuffix(".py").split("/")
        if hit := next((squeeze(p) for p in parts if squeeze(p) in names), None):
            return _suspect(flag, "module in stack", (hit,), edits)
        # The feature's module named after the family its flags share (`offloader.py` for --offload-*).
        if (
            len(family) >= 6
            and family not in _JUDGED_TOGETHER
            and any(p.startswith(family) for p in parts[-1:])
        ):
            return _suspect(flag, "module in stack", (family,), edits)
    return None


# Settings the speculative rules judge with their algorithm; not taken back as one feature's.
_JUDGED_TOGETHER = frozenset({"speculative"})


_INNER_FRAMES = 4


def _other_name_suspect(flag: str, error: str, edits: tuple[Edit, ...]) -> Suspect | None:
    """The error names the setting as vLLM does, written out whole (`block_size should be aligned to 16`
    from a kernel both engines share, for --page-size)."""
    return next(
        (
            _suspect(flag, "name in error", hit, edits)
            for n in vllm_names(flag)
            if (hit := named_exactly(n, error))
        ),
        None,
    )


def _code_suspect(
    flag: str, info: FlagInfo | None, ctx: Context, edits: tuple[Edit, ...], switch: bool
) -> Suspect | None:
    """A chosen setting that governs the failing code without the error naming it (playbooks/code_paths)."""
    if switch and (words := described_by_help(flag, info, ctx)):
        return _suspect(flag, "help in stack", words, edits)
    if area := area_of(flag, ctx):
        return _suspect(flag, "area in stack", (area,), edits)
    return None


def _env_suspects(ctx: Context, error: str, stack: str) -> Iterator[Suspect | None]:
    for name, value in ctx.spec.env_dict().items():
        if not re.match(r"(?:SGLANG|SGL)_", name):
            continue
        listed = _listed_instead(name, value, error)
        # A value the error quotes as the wrong one is no switch to turn off, whatever it looks like.
        off = None if _quoted(name, value, error) else TRUTHY.get(value)
        edits: tuple[Edit, ...] = (
            (SetEnv(name=name, value=listed),)
            if listed
            else (SetEnv(name=name, value=off),)
            if off
            else (UnsetEnv(name=name),)
        )
        if _quoted(name, value, error):
            # `... does not support SGLANG_X=1`: the variable and its value, as the command set them.
            yield _suspect(name, "value in error", (f"{name}={value}",), edits)
            continue
        yield _strongest(name, [], (re.sub(r"^(?:SGLANG|SGL)_", "", name),), error, stack, edits)


_LISTED = re.compile(r"\[((?:\s*['\"][\w.-]+['\"]\s*,?)+)\]")
# "is not one of off / record / enforce", "must be one of: a, b or c"
_ONE_OF = re.compile(r"\bone of:?\s+([\w.-]+(?:\s*(?:/|,|\bor\b|\|)\s*[\w.-]+)+)")


def _quoted(name: str, value: str, error: str) -> bool:
    """The error names the variable with the command's value (`X='true'`, `X=true`): that value is its fault."""
    return re.search(rf"{re.escape(name)}\s*=\s*['\"]?{re.escape(value)}\b", error) is not None


def _listed_instead(name: str, value: str, error: str) -> str | None:
    """The first value the error lists for a variable it names with the command's value ("X='cpp' is not
    registered. Registered backends: ['python', 'rust']")."""
    if name not in error or value not in error:
        return None
    found = _LISTED.search(error)
    listed = re.findall(r"['\"]([\w.-]+)['\"]", found.group(1)) if found else []
    if not listed and (one_of := _ONE_OF.search(error)):
        listed = [v for v in re.split(r"\s*(?:/|,|\bor\b|\|)\s*", one_of.group(1)) if v]
    return next((v for v in listed if v != value), None)


def _strongest(
    setting: str, values: list[str], names: tuple[str, ...], error: str, stack: str, edits: tuple[Edit, ...]
) -> Suspect | None:
    checks = (
        ("value in error", values, error),
        ("value in stack", values, stack),
        ("name in error", names, error),
        ("name in stack", names, stack),
    )
    for how, candidates, text in checks[:3]:
        if hit := next((h for c in candidates if (h := named_in(c, text) or _written(c, text))), ()):
            return _suspect(setting, how, hit, edits)
    if hit := _split_naming(names[0], error, stack) or _named_by_its_field(names[0], error):
        return _suspect(setting, "name in error", hit, edits)
    how, candidates, text = checks[3]
    if hit := next((h for c in candidates if (h := named_in(c, text) or _written(c, text))), ()):
        return _suspect(setting, how, hit, edits)
    return None


def _split_naming(name: str, error: str, stack: str) -> tuple[str, ...]:
    """The error names the setting's subject and the code it failed in the rest (`--random-seed -1`:
    "Seed must be between 0 and 2**32 - 1" raised in `numpy/random`): every word of a name of two or more,
    the error holding at least one whole."""
    words = words_of(name)
    if len(words) < 2:
        return ()
    in_error = [w for w in words if re.search(rf"(?i)(?<![a-z0-9]){re.escape(w)}s?(?![a-z0-9])", error)]
    in_stack = [w for w in words if w not in in_error and named_in(w, stack)]
    return tuple(words) if in_error and len(in_error) + len(in_stack) == len(words) else ()


def _named_by_its_field(name: str, error: str) -> tuple[str, ...]:
    """The error spells the field the setting feeds, one word short (`gpu_id` for `--base-gpu-id`: "NUMA
    index 1 (derived from ... gpu_id) is out of range"): an identifier of two or more words is no
    accident, and the setting's own field is that identifier with one word added before or after."""
    field = field_of(name)
    for ident in set(re.findall(r"(?<![\w.])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?![\w(])", error)):
        if ident != field and re.fullmatch(rf"[a-z0-9]+_{ident}|{ident}_[a-z0-9]+", field):
            return (ident,)
    return ()


def _its_feature_flag_written(flag: str, error: str, edits: tuple[Edit, ...]) -> Suspect | None:
    """The error writes out another flag of the feature the setting switches on (`--enable-x-linker` and
    "--x-linker-config must be a JSON object."): the switch's feature needs that flag, which the command
    left out; stronger than a flag merely sharing the feature's words."""
    stem = re.sub(r"^--(?:enable-)?", "", flag)
    if not flag.startswith("--") or "-" not in stem:
        return None
    written = sorted(set(re.findall(rf"(?<![\w-])--{re.escape(stem)}-[a-z0-9-]+", error)))
    return _suspect(flag, "its feature's flag in error", tuple(written), edits) if written else None


def _written(name: str, text: str) -> tuple[str, ...]:
    """The flag itself, written out (`--enable-dp-attention`, whose words alone are too common to count)."""
    if not name.startswith("--"):
        return ()
    return (name,) if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) else ()


def _suspect(setting: str, how: str, words: tuple[str, ...], edits: tuple[Edit, ...]) -> Suspect:
    return Suspect(setting=setting, how=how, words=words, edits=edits)


def _numeric(value: str) -> bool:
    return bool(re.fullmatch(r"[-+.\d]+[kKMG]?i?", value))


def chosen(option: Option, info: FlagInfo | None) -> bool:
    """The command chose something other than SGLang's default: a switch it gives, or a value that
    differs from the flag's default."""
    if not option.values:
        return True
    if info is None:
        return False
    default = (info.default or "").strip("'\"")
    return " ".join(option.values).lower() != default.lower()


def ranked_suspects(ctx: Context, ignore: frozenset[str] = frozenset()) -> list[Suspect]:
    """Every suspect, strongest first (tuning before capability between equals)."""
    return sorted(suspects(ctx, ignore), key=_rank)


def prime_suspect(ctx: Context, ignore: frozenset[str] = frozenset()) -> Suspect | None:
    """The one setting the failure names most strongly, if one stands out and is strong enough. Between
    two named alike, a tuning setting (how the model runs) goes before one that changes what is loaded or
    served: taking it back keeps the deployment the user asked for."""
    ranked = ranked_suspects(ctx, ignore)
    if not ranked or ranked[0].weight < MIN_WEIGHT:
        return None
    if len(ranked) > 1 and _rank(ranked[1]) == _rank(ranked[0]):
        return _one_feature(ranked)  # two settings named alike: one feature's, or not a confident guess
    if ranked[0].how == "area in stack" and len(ranked) > 1:
        return None  # the code only ran there; another chosen setting on the path may be why it did
    return ranked[0]


def _one_feature(ranked: list[Suspect]) -> Suspect | None:
    """The settings tied at the top are all one feature's, found by its module (`--offload-group-size`
    and `--offload-num-in-group` in `offloader.py`): the feature is taken back whole."""
    top = [s for s in ranked if _rank(s) == _rank(ranked[0])]
    if any(s.how != "module in stack" or s.words != top[0].words for s in top):
        return None
    edits = tuple(e for s in top for e in s.edits)
    return Suspect(setting=top[0].setting, how=top[0].how, words=top[0].words, edits=edits)


def _rank(found: Suspect) -> tuple[int, int]:
    """Strongest naming first, then tuning before capability."""
    return -found.weight, _class_rank(found.setting)


def is_tuning(setting: str) -> bool:
    """How the same model runs (the edit policy's `tuning`), for a flag or an engine variable."""
    policy = edit_policy()
    classed = policy.flag(setting) if setting.startswith("--") else policy.env(setting)
    return classed.edit_class == "tuning"


def _class_rank(setting: str) -> int:
    return 0 if is_tuning(setting) else 1


def revert_prime_suspect(ctx: Context, failure: str, ignore: frozenset[str] = frozenset()) -> Decision | None:
    """Take back the setting the failure names (a fix), or None when no chosen setting stands out."""
    found = prime_suspect(ctx, ignore)
    if found is None:
        return None
    if corrected := _corrected_before_launch(ctx, found.setting):
        return corrected
    undo = "; ".join(e.describe() for e in found.edits)
    said = ctx.root.error_line or ""
    if ctx.root.kind == "traceback-cut":
        said = f"the log stops inside the traceback ({said.strip()})"
    return fix(
        ctx,
        found.edits,
        category_of(found.setting),
        f"{failure} on the path the command's {found.setting} takes it: {said}".strip(),
        why=(
            f"{_HOW[found.how]} ({', '.join(found.words)}), for {found.setting}, a setting the command chose; "
            f"back at SGLang's default ({undo}) the launch takes the engine's default path"
        ),
        # Taking back a capability (LoRA adapters, a quantization) changes what is served: a person's call.
        confidence=0.6 if found.weight >= 3 and is_tuning(found.setting) else 0.45,
    )


def _corrected_before_launch(ctx: Context, setting: str) -> Decision | None:
    """The failure names a setting preflight knows how to correct (`--json-model-override-args` in Python's
    syntax → its JSON spelling): the correction keeps the user's intent, taking it back does not."""
    found = next(
        (
            f
            for f in ctx.findings
            if f.severity == "error" and f.edits and f.flag and ctx.view.canon(f.flag) == setting
        ),
        None,
    )
    if found is None:
        return None
    return fix(
        ctx,
        list(found.edits),
        found.category,
        f"the failure names {setting}, and the command has a fault there: {found.message}",
        why=found.why,
        confidence=min(0.7, found.confidence),
    )


_HOW = {
    "value in error": "the error message names its value",
    "value in stack": "the traceback's files and functions name its value",
    "name in error": "the error message names it",
    "name in stack": "the traceback's files and functions name it",
    "module in stack": "the traceback runs through SGLang's own module for it",
    "help in stack": "its --help names the module the traceback runs through",
    "area in stack": "the traceback runs through the part of SGLang it chooses the code of",
    "value in report": "the report of the failure names its value",
    "name in report": "the report of the failure names it",
    "read by the failing line": "the line SGLang failed on reads it",
    "its feature's flag in error": "the error asks for another flag of the feature it switches on, which the "
    "command left out",
}
