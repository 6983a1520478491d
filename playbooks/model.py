"""The model itself: paths, the Hub, custom code, architectures, context length."""

from __future__ import annotations

import json
import re

from specdoctor.playbooks.base import Context, StopRule, fix, playbook, stop, stop_rules
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.flag_checks import check_flags
from specdoctor.playbooks.repo_ids import check_repo_ids
from specdoctor.tools.command import RemoveFlag, SetEnv, SetFlag

# The user's --context-length against the model's, or (speculative) the target's against the draft's.
_DERIVED = re.compile(
    r"(?:User-specified|Target model's) context_length \((\d+)\) is greater than the derived context_length "
    r"\((\d+)\)"
)


@playbook(
    id="sglang.model.missing",
    category="model-path",
    pattern=r"Repo id must (?:be in the form|use alphanumeric)|HFValidationError|is not a local folder and is not a valid model identifier|Unrecognized model in|"
    r"does not appear to have a file named config\.json|Incorrect path_or_model_id",
    priority=30,
)
def missing(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The model (or draft) path is neither a folder with config.json nor a Hub repo."""
    fixable = [f for f in check_repo_ids(ctx.view) if f.edits]
    if fixable:
        found = fixable[0]
        return fix(ctx, found.edits, "model-path", found.message, why=found.why, confidence=found.confidence)
    tokenizer = ctx.view.get("--tokenizer-path")
    if tokenizer and tokenizer != ctx.view.get("--model-path") and _quoted(tokenizer, ctx.root_text):
        return fix(
            ctx,
            [RemoveFlag(flag="--tokenizer-path")],
            "model-path",
            f"the tokenizer path {tokenizer} is neither a folder nor a Hub repo",
            why="without --tokenizer-path SGLang reads the tokenizer from --model-path, which is where most "
            "checkpoints keep it",
            confidence=0.6,
        )
    adapters = ctx.view.spec.values("--lora-paths", ctx.catalog.canonical) or ()
    if any(_quoted(a.split("=", 1)[-1], ctx.root_text) for a in adapters):
        # The path is an adapter's (`name=path`), not the model's: the server runs without it.
        return fix(
            ctx,
            [RemoveFlag(flag="--lora-paths")],
            "model-path",
            "a LoRA adapter path of --lora-paths is neither a folder nor a Hub repo",
            why="without --lora-paths the server starts with no adapter loaded (adapters can be loaded later "
            "through /load_lora_adapter); or point it at the adapter's folder",
            confidence=0.6,
        )
    return stop(
        ctx,
        "model-path",
        f"a model path cannot be found: {ctx.root.error_line or 'see the log'}",
        "Point --model-path (and --speculative-draft-model-path) at a folder containing config.json, or at a "
        "valid Hugging Face repo id.",
    )


def _quoted(path: str, text: str) -> bool:
    """The error names this path (quoted or at a word boundary), not merely a path that contains it."""
    return re.search(rf"(?<![\w/.-]){re.escape(path)}(?![\w/.-])", text) is not None


stop_rules(
    __name__,
    [
        StopRule(
            id="sglang.model.offline",
            category="model-path",
            pattern=r"We couldn't connect to 'https://huggingface\.co'|LocalEntryNotFoundError|"
            r"cannot find the requested files in the (?:local|disk) cache",
            priority=30,
            doc="The model is not on disk and the Hub cannot be reached.",
            summary="the model is not in the local cache and the Hugging Face Hub cannot be reached",
            advice="Download it first (`hf download REPO`), point --model-path at the local folder, or set "
            "HF_ENDPOINT to a mirror.",
        ),
        StopRule(
            id="sglang.model.gated",
            category="model-path",
            pattern=r"gated repo|401 Client Error|Access to model .* is restricted",
            priority=30,
            doc="A gated repo without an accepted licence or token.",
            summary="the model repo is gated",
            advice="Accept its licence on the Hub and export HF_TOKEN before launching.",
        ),
    ],
)


@playbook(
    id="sglang.model.tokenizer-file-read-as-tiktoken",
    category="model-path",
    pattern=r"tiktoken",
    priority=30,
)
def tokenizer_file_read_as_tiktoken(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang takes a --tokenizer-path ending in .json for a tiktoken tokenizer file (get_tokenizer in
    srt/utils/hf_transformers/tokenizer.py branches on the suffix alone). A Hugging Face tokenizer.json or
    tokenizer_config.json given there fails in that reader, or on the tiktoken import: HF tokenizers are
    given by their folder."""
    path = ctx.view.get("--tokenizer-path") or ""
    if not path.endswith(".json") or not _not_a_tiktoken_file(path, ctx.root_text):
        return None
    folder = path.rsplit("/", 1)[0] if "/" in path else "."
    same = folder.rstrip("/") == (ctx.view.get("--model-path") or "").rstrip("/")
    edit = RemoveFlag(flag="--tokenizer-path") if same else SetFlag(flag="--tokenizer-path", values=(folder,))
    return fix(
        ctx,
        [edit],
        "model-path",
        f"--tokenizer-path {path} is a file: SGLang reads a path ending in .json as a tiktoken tokenizer",
        why="a Hugging Face tokenizer is loaded from its folder"
        + (", which is the model's own: SGLang reads it from --model-path without the flag" if same else ""),
        evidence=ctx.evidence(r"tiktoken"),
        confidence=0.7,
    )


_HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json")


def _not_a_tiktoken_file(path: str, error: str) -> bool:
    # The reader failing on the file's keys says it is no tiktoken file, whatever its name; a missing tiktoken
    # package says so only for the file names a Hugging Face tokenizer folder holds (a real tiktoken .json
    # needs the package installed instead).
    if re.search(r"tiktoken_tokenizer\.py", error) and "No module named" not in error:
        return True
    return "No module named 'tiktoken'" in error and path.rsplit("/", 1)[-1] in _HF_TOKENIZER_FILES


@playbook(
    id="sglang.model.remote-code",
    category="trust-remote-code",
    # transformers' own wording; a bare `trust_remote_code=True` anywhere in a log is not a request for it.
    pattern=r"set the option `?trust_remote_code=True`?|requires you to execute (?:the )?(?:configuration|custom) "
    r"(?:file|code)|contains custom code which must be executed",
    priority=25,
)
def remote_code(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The model ships its own code; transformers runs it only when allowed."""
    if ctx.view.has("--trust-remote-code"):
        return None
    return fix(
        ctx,
        [SetFlag(flag="--trust-remote-code")],
        "trust-remote-code",
        "the model's config or tokenizer is custom code that needs --trust-remote-code",
        why="the repository's auto_map points at its own Python code; read it before trusting it",
        confidence=0.9,
    )


@playbook(
    id="sglang.model.remote-code-missing",
    category="trust-remote-code",
    pattern=r"does not appear to have a file named (?P<file>[\w.-]+\.py)",
    priority=25,
    scope="root",
)
def remote_code_missing(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """--trust-remote-code, and the folder's auto_map names a code file the folder does not ship (left over
    from a conversion): without --trust-remote-code transformers uses its own class for the config's
    model_type and never looks for that file."""
    if m is None or not ctx.view.has("--trust-remote-code"):
        return None
    if not any("dynamic_module_utils" in f.path for f in ctx.root.frames):
        return None  # not transformers' loading of a repository's own code
    return fix(
        ctx,
        [RemoveFlag(flag="--trust-remote-code")],
        "trust-remote-code",
        f"--trust-remote-code, and the model's auto_map names {m['file']}, which the folder does not ship",
        why="with --trust-remote-code transformers loads the classes auto_map names from the folder's own "
        "files; without it, the class transformers has for the config's model_type (or copy the missing "
        "file in, or take auto_map out of config.json)",
        evidence=(m.group(0),),
        confidence=0.45,
    )


@playbook(
    id="sglang.model.architecture",
    category="other",
    pattern=r"does not recognize this architecture|are not supported for now|Model architectures? \[.*\] (?:is|are) not supported",
    priority=40,
)
def architecture(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """An architecture the installed SGLang (or its transformers) cannot load."""
    text = ctx.search_text
    if "does not recognize this architecture" in text and not ctx.view.has("--trust-remote-code"):
        return _unknown_to_transformers(ctx)
    import_failed = re.search(r"Ignore import error when loading (\S+)", text)
    if import_failed:
        return stop(
            ctx,
            "other",
            f"SGLang has this architecture, but importing {import_failed.group(1)} failed, so it looks unsupported",
            "Fix the Python environment (the import error above: kernel packages that do not match SGLang, a "
            "missing compiler); reinstall sglang with its pinned sgl-kernel/flashinfer.",
        )
    return stop(
        ctx,
        "other",
        "the installed SGLang has no implementation of this model's architecture",
        "Upgrade SGLang to a release that supports it (or try --model-impl transformers, which runs it through "
        "the Transformers implementation where SGLang has that fallback).",
    )


def _unknown_to_transformers(ctx: Context) -> Decision | None:
    """transformers says it does not know the model type: the repository ships its own code (config.json's
    `auto_map`: --trust-remote-code loads it), or transformers is older than the model."""
    model = ctx.model
    if model is not None and model.has_config and not model.auto_map:
        return stop(
            ctx,
            "other",
            "transformers does not know this model type, and the checkpoint ships no code of its own (no "
            "auto_map in its config.json): the installed transformers is older than the model",
            "Upgrade transformers (and SGLang, whose pins may hold it back) to a release that has this model "
            "type; no launch flag adds a model type to transformers.",
        )
    shipped = model is not None and model.auto_map
    return fix(
        ctx,
        [SetFlag(flag="--trust-remote-code")],
        "trust-remote-code",
        "transformers does not know this architecture; the repo "
        + ("ships its own code (auto_map in config.json)" if shipped else "may ship its own code"),
        why="with --trust-remote-code transformers loads the architecture from the repository"
        + ("" if shipped else "; if it ships none, transformers is older than the model: upgrade it"),
        # Unread, the checkpoint may as well be a model type newer than this transformers.
        confidence=0.7 if shipped else 0.45,
    )


@playbook(id="sglang.model.context-length", category="context-length", pattern=_DERIVED.pattern, priority=25)
def context_length(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """--context-length above what the model was built for."""
    assert m is not None
    derived = m.group(2)
    return fix(
        ctx,
        [SetFlag(flag="--context-length", values=(derived,))],
        "context-length",
        f"--context-length {m.group(1)} is above the model's {derived}",
        why=f"{derived} is the longest context the model config allows; set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 "
        "instead only if its RoPE scaling really supports more",
        confidence=0.85,
    )


@playbook(
    id="sglang.model.required",
    category="model-path",
    pattern=r"--model-path is required|arguments are required: --model-path",
    priority=25,
)
def model_required(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """No --model-path: fix a bare positional model, else say what is missing."""
    found = [f for f in check_flags(ctx.spec, ctx.catalog) if f.code in ("positional-model", "missing-model")]
    if found and found[0].edits:
        return fix(ctx, found[0].edits, "flag-name", found[0].message, why=found[0].why, confidence=0.9)
    return stop(
        ctx,
        "model-path",
        "the command gives no model",
        "Add --model-path with a model folder or Hub repo id.",
    )


_RESERVED_TOKENS = 16
_TOO_LONG = re.compile(
    r"(?i)(?:input|prompt|request)[^\n]*?(?:longer than|exceeds)[^\n]*?(?:context length|allowed length|max context)[^\n]*?\((\d+)(?: tokens)?\)"
    # A completion budget over what the context leaves (SGLang's OpenAI routes).
    r"|max_completion_tokens is too large[^\n]*?supports at most (\d+) completion tokens"
    # Prompt plus max_new_tokens over the context (tokenizer_manager's total-token check).
    r"|Requested token count exceeds the model's maximum context length of (\d+) tokens[^\n]*?(\d+) tokens from "
    r"the input",
)


@playbook(
    id="sglang.model.prompt-too-long",
    category="context-length",
    when=("exited", "unhealthy", "degraded"),
    pattern=_TOO_LONG.pattern,
    priority=35,
)
def prompt_too_long(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Requests are refused as too long: a context the model config caps, or a KV pool that came out small."""
    assert m is not None  # the trigger is _TOO_LONG itself
    allowed = int(m.group(1) or m.group(2) or m.group(3))
    scaled = _rope_scaled_length(ctx.view.get("--json-model-override-args"))
    if scaled and scaled > allowed:
        return fix(
            ctx,
            [
                SetFlag(flag="--context-length", values=(str(scaled),)),
                SetEnv(name="SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", value="1"),
            ],
            "context-length",
            f"RoPE scaling is on, but the context length stayed at the config's {allowed}",
            why=f"original_max_position_embeddings × factor = {scaled}; SGLang does not derive it from the override",
            confidence=0.8,
        )
    asked = ctx.view.int("--context-length")
    return (
        _the_commands_pool_cap(ctx, allowed, asked)
        # A completion budget is what the prompt leaves of the context: it says nothing of the pool.
        or (_pool_came_out_small(ctx, allowed, asked) if m.group(1) else None)
        or _the_commands_context_cap(ctx, allowed, asked)
        or _the_models_context_fails_warmup(ctx, allowed, asked)
        or (_truncate_the_completion(ctx, allowed, int(m.group(4))) if m.group(4) else None)
        or _embed_the_first_tokens(ctx, allowed)
        or stop(
            ctx,
            "context-length",
            f"requests are longer than the {allowed} tokens this server accepts",
            "Shorten the prompts, or use a model (or RoPE scaling) with a longer context. --allow-auto-truncate "
            "is no remedy for a prompt over the context: SGLang keeps its first tokens, drops the rest, and "
            "leaves no room to generate (an empty answer instead of an error).",
        )
    )


def _embed_the_first_tokens(ctx: Context, allowed: int) -> Decision | None:
    """An embedding server turned away an input over the context. Nothing is generated from an embedding,
    so truncating to the first tokens is the usual remedy (what embedding pipelines do), unlike a prompt
    that would leave no room to answer; the person decides whether the tail of a document may go."""
    if not ctx.view.has("--is-embedding") or ctx.view.has("--allow-auto-truncate"):
        return None
    return fix(
        ctx,
        [SetFlag(flag="--allow-auto-truncate")],
        "context-length",
        f"inputs longer than the {allowed} tokens of the model's context are turned away by this embedding server",
        why="with --allow-auto-truncate SGLang embeds the first tokens of a longer input (the tail is not "
        "read); an embedding generates nothing, so no room is needed after the input",
        confidence=0.45,
    )


def _the_commands_pool_cap(ctx: Context, allowed: int, asked: int | None) -> Decision | None:
    """The command capped the KV pool below what a request needs: the cap is the limit."""
    pool_cap = ctx.view.int("--max-total-tokens")
    if pool_cap is None or allowed > pool_cap or (asked is not None and pool_cap >= asked):
        return None
    if pool_cap - allowed > _RESERVED_TOKENS:
        return None  # the pool holds more than the limit: the cap comes from the context, not the pool
    return fix(
        ctx,
        [RemoveFlag(flag="--max-total-tokens")],
        "context-length",
        f"requests are longer than the {allowed} tokens the KV pool the command capped at --max-total-tokens "
        f"{pool_cap} can hold",
        why="a request must fit in the KV cache; without the cap SGLang sizes the pool from the memory left",
        confidence=0.6,
    )


def _pool_came_out_small(ctx: Context, allowed: int, asked: int | None) -> Decision | None:
    """SGLang caps a request at min(context length, KV pool size) less a few reserved tokens: a cap well
    under the --context-length the user set can only come from the pool."""
    if not asked or allowed >= asked - _RESERVED_TOKENS:
        return None
    pool = re.search(r"max_total_num_tokens=(\d+)", ctx.search_text)
    held = f" (the pool: max_total_num_tokens={pool.group(1)})" if pool else ""
    return stop(
        ctx,
        "oom",
        f"the KV cache holds only {allowed} tokens although --context-length is {asked}{held}: the pool came "
        "out too small for the context asked",
        "Give the KV cache more memory (a higher --mem-fraction-static if the GPU has room, more GPUs), "
        "or find out what held memory when SGLang measured it.",
        confidence=0.6,
    )


def _truncate_the_completion(ctx: Context, allowed: int, prompt: int) -> Decision | None:
    """The prompt fits the context, the completion asked for does not: with --allow-auto-truncate SGLang
    cuts max_new_tokens to what the context leaves (tokenizer_manager's total-token check) instead of 400."""
    if prompt >= allowed or ctx.view.has("--allow-auto-truncate"):
        return None
    return fix(
        ctx,
        [SetFlag(flag="--allow-auto-truncate")],
        "context-length",
        f"a request's prompt ({prompt} tokens) fits the {allowed}-token context but its completion budget "
        "does not",
        why="--allow-auto-truncate makes SGLang shorten max_tokens to what the context leaves; clients that "
        "ask for less need no change",
        confidence=0.5,
    )


def _the_commands_context_cap(ctx: Context, allowed: int, asked: int | None) -> Decision | None:
    """The cap is the command's own --context-length: without it the model's own length applies."""
    if asked is None or allowed > asked or not _model_allows_more(ctx, asked):
        return None
    return fix(
        ctx,
        [RemoveFlag(flag="--context-length")],
        "context-length",
        f"requests are longer than the {allowed} tokens --context-length {asked} allows",
        why="the server turns away what does not fit the context the command set; without --context-length "
        "SGLang uses the model's own (max_position_embeddings)",
        confidence=0.6 if ctx.model and ctx.model.max_position_embeddings else 0.45,
    )


_WARMUP = re.compile(r"warmup error|_execute_server_warmup")
_FALLBACK_CONTEXT = 2048
"""The context given a model whose config is shorter than the warm-up, when the command caps no pool."""


def _the_models_context_fails_warmup(ctx: Context, allowed: int, asked: int | None) -> Decision | None:
    """No request of anyone's fits: SGLang's own warm-up prompt is longer than the context the model's
    config gives. No real model is that short; its config.json says less than the model was built for."""
    if asked is not None or not _WARMUP.search(ctx.search_text):
        return None
    length = ctx.view.int("--max-total-tokens") or _FALLBACK_CONTEXT
    return fix(
        ctx,
        [
            SetFlag(flag="--context-length", values=(str(length),)),
            SetEnv(name="SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", value="1"),
        ],
        "context-length",
        f"the model's config allows {allowed} tokens, fewer than SGLang's own warm-up request",
        why=f"a context of {allowed} tokens is no model's: its config.json (max_position_embeddings) is likely "
        f"wrong; {length} tokens lets the server start — check the length the model was trained for",
        confidence=0.45,
    )


def _model_allows_more(ctx: Context, asked: int) -> bool:
    """The model is built for more than the command's --context-length (unknown: it may be)."""
    limit = ctx.model.max_position_embeddings if ctx.model else None
    return limit is None or limit > asked


def _rope_scaled_length(override: str | None) -> int | None:
    if not override:
        return None
    try:
        data = json.loads(override)
    except ValueError:
        return None
    rope = data.get("rope_scaling") if isinstance(data, dict) else None
    if not isinstance(rope, dict):
        return None
    factor, original = rope.get("factor"), rope.get("original_max_position_embeddings")
    if isinstance(factor, (int, float)) and isinstance(original, int):
        return int(original * factor)
    return None
