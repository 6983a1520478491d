"""How clients reach the server: names and routes a launch gives it that requests then misread.

SGLang reads a request's `model` as `base:adapter` (LoRA serving), so a `--served-model-name` with a colon
sends every request that names the model to an adapter that does not exist (400, "The following requested
LoRA adapters are not loaded: ..."): older releases start, yet no request that uses the name works; 0.5.23
refuses it at launch ("served_model_name cannot contain a colon").
"""

from __future__ import annotations

import re

from specdoctor.playbooks.base import Context, fix, playbook
from specdoctor.playbooks.decision import Decision, Finding
from specdoctor.playbooks.flag_checks import closest_choice
from specdoctor.playbooks.view import CommandView
from specdoctor.tools.command import Edit, RemoveFlag, SetFlag

_ADAPTER_MISSING = r"requested LoRA adapters? (?:are|is) not loaded: (?P<adapter>[^\s'\"\\,]+)"


def check_serving(view: CommandView) -> list[Finding]:
    name = view.get("--served-model-name")
    if not name or ":" not in name:
        return []
    plain = "-".join(part for part in name.split(":") if part)
    return [
        Finding(
            code="served-name-colon",
            severity="error",  # SGLang 0.5.2x refuses it at launch; older releases start and fail requests
            category="other",
            flag="--served-model-name",
            message=f"--served-model-name {name}: SGLang reads `model: {name}` in a request as base model "
            f"{name.split(':', 1)[0]!r} with LoRA adapter {name.split(':', 1)[1]!r}, so requests naming it fail",
            edits=(SetFlag(flag="--served-model-name", values=(plain,)),) if plain else (),
            why=f"without a colon ({plain}) the name is only a name",
            confidence=0.8,
        )
    ]


@playbook(
    id="sglang.serving.served-name-colon",
    category="other",
    when=("exited", "unhealthy", "degraded"),
    pattern=_ADAPTER_MISSING,
    priority=30,
)
def served_name_read_as_adapter(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Requests ask for a LoRA adapter named like what follows the colon in --served-model-name."""
    assert m is not None
    name = ctx.view.get("--served-model-name") or ""
    if ":" not in name or name.split(":", 1)[1] != m["adapter"]:
        return None
    found = check_serving(ctx.view)[0]
    return fix(ctx, found.edits, "other", found.message, why=found.why, confidence=0.8)


_NO_CHAT_TEMPLATE = (
    r"chat_template is not set|Cannot use chat template functions|does not (?:have|define) a chat template"
)


@playbook(
    id="sglang.serving.no-chat-template",
    category="model-path",
    when=("exited", "unhealthy", "degraded"),
    pattern=_NO_CHAT_TEMPLATE,
    priority=30,
)
def no_chat_template(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Chat requests fail because the tokenizer has no chat template: a base (pretrained) checkpoint has
    none, and SGLang formats /v1/chat/completions with the tokenizer's unless --chat-template names one."""
    if ctx.view.has("--chat-template"):
        return None
    return fix(
        ctx,
        [SetFlag(flag="--chat-template", values=("chatml",))],
        "model-path",
        "chat requests need a chat template, and this model's tokenizer has none",
        why="--chat-template chatml gives the server a generic chat format (one of SGLang's built-in "
        "templates); a base model was not trained on it, so its instruct or chat variant is the better model "
        "for chat, and /generate serves the base model without a template",
        evidence=(m.group(0),) if m else (),
        confidence=0.45,
    )


@playbook(
    id="sglang.serving.unknown-chat-template",
    category="other",
    pattern=r"(Chat|Completion) template (\S+) is not a built-in template name or a valid \w+ template file path",
    priority=30,
)
def unknown_chat_template(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """--chat-template or --completion-template names neither a template SGLang registers nor a file here
    (a chat template's name given to --completion-template is one: the two lists are separate)."""
    flag = f"--{m.group(1).lower()}-template" if m else "--chat-template"
    if not ctx.view.has(flag):
        return None
    built_in = ctx.view.facts.named_values(flag)
    value = ctx.view.get(flag) or ""
    if (meant := closest_choice(flag, value, built_in)) is not None:
        edit: Edit = SetFlag(flag=flag, values=(meant,))
        why = f"{meant} is the template SGLang registers under a name close to `{value}`"
    else:
        edit, why = RemoveFlag(flag=flag), _without(flag) + _naming_a_template(flag, built_in)
    return fix(
        ctx,
        [edit],
        "other",
        f"{flag} {value} is neither a template SGLang has for it nor a file",
        why=why,
        evidence=(m.group(0),) if m else (),
        confidence=0.6,
    )


@playbook(
    id="sglang.serving.unknown-hf-template-name",
    category="other",
    pattern=r"Specified template '([^']+)' not found\. Available templates: \[([^\]]*)\]",
    priority=30,
)
def unknown_hf_template_name(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """--hf-chat-template-name names no template of the model's tokenizer_config.json. SGLang logs the
    names it has and goes on with the whole list, which later code cannot read, so the launch dies
    elsewhere: the name is the fault."""
    if m is None or not ctx.view.has("--hf-chat-template-name"):
        return None
    available = tuple(re.findall(r"'([^']+)'", m.group(2)))
    first = f" ({available[0]})" if available else ""
    # The names come from the log (the model's tokenizer_config.json): data to show, never a value to set.
    return fix(
        ctx,
        [RemoveFlag(flag="--hf-chat-template-name")],
        "other",
        f"--hf-chat-template-name {m.group(1)} is not one of the model's chat templates "
        f"(the log lists: {', '.join(available) or 'none'})",
        why=f"without the flag SGLang uses the model's first template{first}; to choose another, give "
        "--hf-chat-template-name one of the listed names",
        evidence=(m.group(0),),
        confidence=0.6,
    )


def _without(flag: str) -> str:
    if flag == "--chat-template":
        return "without --chat-template SGLang uses the chat template the tokenizer ships; "
    return f"without {flag} SGLang serves /v1/completions with the prompt as given; "


def _naming_a_template(flag: str, built_in: tuple[str, ...]) -> str:
    names = f" ({', '.join(built_in[:6])}{', ...' if len(built_in) > 6 else ''})" if built_in else ""
    return f"another is named by {flag} NAME{names} or a file"


@playbook(
    id="sglang.serving.queue-too-small-for-warmup",
    category="other",
    when=("exited", "unhealthy", "degraded"),
    pattern=r"request queue is full",
    priority=30,
)
def queue_too_small_for_warmup(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """Requests are turned away (503) by the command's own --max-queued-requests: the server's warm-up
    request when the cap allows no waiting request at all, so the launch never reaches ready; or clients'
    requests under load, which the cap exists to shed (taking it back is the person's call)."""
    cap = ctx.view.get("--max-queued-requests")
    if cap is None:
        return None
    warmup = re.search(r"warmup|Initialization failed", ctx.search_text) is not None
    return fix(
        ctx,
        [RemoveFlag(flag="--max-queued-requests")],
        "other",
        f"--max-queued-requests {cap} leaves no room for the warm-up request"
        if warmup
        else f"requests are turned away with 503: --max-queued-requests {cap} lets only {cap} wait",
        why="SGLang sends one request of its own before it reports ready; without the cap the queue is unbounded"
        if warmup
        else "without the cap the queue is unbounded and requests wait instead of failing; keep a cap (larger) "
        "if shedding load is what it is for",
        evidence=(m.group(0),) if m else (),
        confidence=0.6 if warmup else 0.45,
    )


@playbook(
    id="sglang.serving.warmup-ids-beyond-the-vocabulary",
    category="other",
    pattern=r"index out of range in self|indexSelect\w*Index|vectorized_gather_kernel",
    priority=30,
)
def warmup_ids_beyond_the_vocabulary(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """--warmups names a warm-up that sends random token ids up to 65535; on a model with a smaller
    vocabulary the first of them indexes past the embedding table and the scheduler dies before ready."""
    given = ctx.view.spec.values("--warmups", ctx.catalog.canonical) or ()
    names = [n for v in given for n in v.split(",") if n]
    random_ids = [n for n in names if n in ctx.view.facts.random_id_warmups]
    if not random_ids or not re.search(r"embed", ctx.root_text, re.IGNORECASE):
        return None
    rest = [n for n in names if n not in random_ids]
    edit: Edit = SetFlag(flag="--warmups", values=(",".join(rest),)) if rest else RemoveFlag(flag="--warmups")
    return fix(
        ctx,
        [edit],
        "other",
        f"the {', '.join(random_ids)} warm-up sends token ids up to 65535, past this model's vocabulary: "
        "the embedding lookup fails",
        why="SGLang's own warm-up request still runs without it; these warm-ups are made for models whose "
        "vocabulary holds every id they draw",
        evidence=(m.group(0),) if m else (),
        confidence=0.7,
    )
