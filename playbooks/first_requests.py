"""Launch settings the server starts with and its first requests fail on (SGLang's own warm-up request, or a
client's): the server is up, but no chat or generate request it was launched for can work.

- `--skip-tokenizer-init` leaves the server without a tokenizer: anything that needs text (a chat template,
  stop strings, detokenising) reads an attribute of None.
- `--is-embedding` runs the model as an embedding model: a causal LM's forward gives logits, not the
  `embeddings` the server then reads.
- Default sampling parameters a request did not send: `--preferred-sampling-params`, else (SGLang's
  `--sampling-defaults model`) the model's generation_config.json; `SamplingParams.verify` rejects a value
  out of its range in every request that uses it.
- A chat template that does not compile (Jinja): the command's own file, or the one the model ships.
"""

from __future__ import annotations

import re
from pathlib import Path

from specdoctor.playbooks.base import Context, fix, line_of, playbook, stop
from specdoctor.playbooks.decision import Decision
from specdoctor.playbooks.value_checks import preferred_sampling
from specdoctor.tools.command import RemoveFlag, SetFlag

_WHEN = ("exited", "unhealthy", "degraded")
_TOKENIZER_USE = (
    r"'NoneType' object has no attribute "
    r"'(?:apply_chat_template|encode|decode|batch_decode|convert_tokens_to_ids|convert_ids_to_tokens|"
    r"eos_token_id|chat_template|tokenize)'"
    r"|initialized with skip_tokenizer_init=True cannot accept text"
)
# SamplingParams.verify (srt/sampling/sampling_params.py): "<name> must be ..., got <value>."
_SAMPLING_REJECTED = (
    r"\b(?P<name>temperature|top_p|top_k|min_p|frequency_penalty|presence_penalty|repetition_penalty) "
    r"must be [^\n]*?got (?P<value>[-\w.]+)"
)
_TEMPLATE_MAX = 1 << 20
_LOADS_TEMPLATE = re.compile(r"_load_\w*chat_template|load_chat_template")
_TEMPLATE_BROKEN = r"Unexpected end of template|Jinja was looking for the following tags|jinja2\.exceptions\.TemplateSyntaxError"


@playbook(id="sglang.request.no-tokenizer", category="other", when=_WHEN, pattern=_TOKENIZER_USE, priority=28)
def no_tokenizer(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A request needed the tokenizer that --skip-tokenizer-init left out."""
    if not ctx.view.has("--skip-tokenizer-init"):
        return None
    return fix(
        ctx,
        [RemoveFlag(flag="--skip-tokenizer-init")],
        "other",
        "requests need a tokenizer, and --skip-tokenizer-init started the server without one",
        why="with --skip-tokenizer-init SGLang takes and returns token ids only; chat requests, stop strings "
        "and text output need the tokenizer it skipped",
        evidence=(m.group(0),) if m else (),
        confidence=0.6,
    )


@playbook(
    id="sglang.request.embedding-model-generates",
    category="other",
    when=_WHEN,
    pattern=r"has no attribute 'embeddings'",
    priority=28,
)
def embedding_model_generates(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """--is-embedding on a model whose forward gives logits: the server reads embeddings it never gets."""
    if not ctx.view.has("--is-embedding"):
        return None
    return fix(
        ctx,
        [RemoveFlag(flag="--is-embedding")],
        "other",
        "--is-embedding serves this model as an embedding model, and its forward pass gives no embeddings",
        why="a generative (causal LM) checkpoint returns logits; without --is-embedding SGLang serves it for "
        "generation (an embedding checkpoint is what /v1/embeddings needs)",
        evidence=(m.group(0),) if m else (),
        confidence=0.6,
    )


@playbook(
    id="sglang.request.sampling-default-rejected",
    category="other",
    when=_WHEN,
    pattern=_SAMPLING_REJECTED,
    priority=28,
)
def sampling_default_rejected(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A sampling parameter out of SGLang's range that came from the server's defaults, not the request."""
    assert m is not None
    name, value = m.group("name"), m.group("value").rstrip(".")
    if name in preferred_sampling(ctx.view):
        return fix(
            ctx,
            [RemoveFlag(flag="--preferred-sampling-params")],
            "other",
            f"--preferred-sampling-params sets {name} {value}, which SGLang rejects in every request using it",
            why="without it requests use SGLang's defaults; the intended value written in range can go back",
            evidence=(m.group(0),),
            confidence=0.7,
        )
    info = ctx.catalog.get("--sampling-defaults")
    if (
        info is None
        or "openai" not in (info.choices or ())
        or ctx.view.get("--sampling-defaults") == "openai"
    ):
        return None
    return fix(
        ctx,
        [SetFlag(flag="--sampling-defaults", values=("openai",))],
        "other",
        f"requests get {name} {value} from the model's generation config, and SGLang rejects it",
        why="SGLang's default --sampling-defaults model fills what a request leaves out from the checkpoint's "
        "generation_config.json; 'openai' uses SGLang's own defaults instead (or correct that file). A "
        "client that sends the value itself needs its own fix",
        evidence=(m.group(0),),
        # The log does not say the request left the parameter out.
        confidence=0.45,
    )


@playbook(
    id="sglang.request.chat-template-broken",
    category="other",
    when=_WHEN,
    pattern=_TEMPLATE_BROKEN,
    priority=28,
)
def chat_template_broken(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The chat template does not compile: the command's own template, else the one the model ships."""
    if ctx.view.has("--chat-template"):
        return fix(
            ctx,
            [RemoveFlag(flag="--chat-template")],
            "other",
            f"the chat template {ctx.view.get('--chat-template')} does not compile (Jinja)",
            why="without --chat-template SGLang formats chats with the template the tokenizer ships",
            evidence=(m.group(0),) if m else (),
            confidence=0.6,
        )
    return fix(
        ctx,
        [SetFlag(flag="--chat-template", values=("chatml",))],
        "other",
        "the chat template the model ships does not compile (Jinja)",
        why="--chat-template chatml is one of SGLang's built-in templates; the model's own format is better "
        "once its tokenizer_config.json template is repaired",
        evidence=(m.group(0),) if m else (),
        confidence=0.4,
    )


@playbook(id="sglang.request.chat-template-refuses", category="other", when=_WHEN, priority=29)
def chat_template_refuses(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The command's chat template file itself raises the error a chat request got (`raise_exception('System
    role not supported')` in a Gemma-style template): the messages clients send do not fit that template."""
    path, said = ctx.view.get("--chat-template"), ctx.root.error_line or ""
    if not path or ctx.root.kind != "message" or len(said) < 8:
        return None
    try:
        template = Path(path).read_text(encoding="utf-8", errors="replace")[:_TEMPLATE_MAX]
    except OSError:
        return None  # a built-in template's name, or a file not on this machine
    if said.rstrip(".") not in template:
        return None
    return fix(
        ctx,
        [RemoveFlag(flag="--chat-template")],
        "other",
        f"the chat template {path} itself refuses the request: {said}",
        why="the template raises this for messages it was not written for; without --chat-template SGLang uses "
        "the tokenizer's own template (or name a built-in one that takes them, e.g. chatml)",
        evidence=(said,),
        confidence=0.6,
    )


@playbook(
    id="sglang.request.api-key-missing",
    category="other",
    when=_WHEN,
    pattern=r'"(?:POST|GET) /[^"]*" 401|\{"error":\s*"Unauthorized"\}|HTTP 401',
    priority=27,
)
def api_key_missing(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The server was launched with --api-key and a request came without it: the client's to fix."""
    key = ctx.view.get("--api-key")
    if not key:
        return None
    if "," in key and all(part.strip() for part in key.split(",")):
        # Another server's list of keys (llama.cpp's --api-key a,b): SGLang takes one, the whole string.
        first = key.split(",")[0].strip()
        return fix(
            ctx,
            [SetFlag(flag="--api-key", values=(first,))],
            "other",
            "--api-key holds a comma list of keys, which SGLang reads as one key: no client key matches it",
            why="SGLang checks one key, the whole value; the first key of the list is kept (give the others' "
            "clients that key, or put a gateway that holds several keys in front)",
            evidence=(line_of(m),) if m else (),
            confidence=0.45,
        )
    return stop(
        ctx,
        "other",
        "the server runs with --api-key and answered 401 Unauthorized: the request did not carry the key",
        "Send the key with every request except /health and /metrics: `Authorization: Bearer <the --api-key "
        "value>` (the OpenAI client's api_key=...). specdoctor does not take the key away: that would open the "
        "server to anyone who can reach its port.",
        evidence=(line_of(m),) if m else (),
        confidence=0.8,
    )


@playbook(id="sglang.request.chat-template-unreadable", category="other", when=_WHEN, priority=31)
def chat_template_unreadable(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """SGLang died reading the command's --chat-template file (its JSON template loader, a Jinja file it
    cannot load): the file is not a template of a kind SGLang reads, whatever it holds."""
    path = ctx.view.get("--chat-template")
    innermost = [f for f in ctx.root.frames if "/sglang/" in f.path][-1:]
    if not path or not innermost or not _LOADS_TEMPLATE.search(innermost[0].function):
        return None
    return fix(
        ctx,
        [RemoveFlag(flag="--chat-template")],
        "other",
        f"SGLang cannot read {path} as a chat template: {ctx.root.error_line or ''}".strip(),
        why=f"it failed in {innermost[0].function}, loading the command's template; a .json file must be "
        "SGLang's own template format (a tokenizer_config.json is not), a Jinja one a .jinja file; without "
        "--chat-template the tokenizer's own template is used",
        confidence=0.6,
    )


@playbook(
    id="sglang.request.metrics-off",
    category="other",
    when=_WHEN,
    pattern=r'"GET /metrics[^"\s]* HTTP/[\d.]+" 404',
    priority=27,
)
def metrics_off(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """A scraper asked for /metrics and SGLang, launched without --enable-metrics, has no such route."""
    if ctx.view.has("--enable-metrics"):
        return None
    return fix(
        ctx,
        [SetFlag(flag="--enable-metrics")],
        "other",
        "/metrics answers 404: SGLang serves Prometheus metrics only with --enable-metrics",
        why="vLLM and TGI export /metrics by default; SGLang adds the route (and its counters) with the flag",
        evidence=(line_of(m),) if m else (),
        confidence=0.7,
    )


_EMPTY_ANSWER = re.compile(r'"content":\s*(?:""|null)\s*,\s*"reasoning_content":')
_IN_REASONING = re.compile(r'"reasoning_content":\s*"[^"]')
_COUNTED = re.compile(r'"completion_tokens":\s*(\d+).*?"reasoning_tokens":\s*(\d+)')


@playbook(
    id="sglang.request.reasoning-parser-takes-the-answer",
    category="other",
    when=("degraded", "unhealthy"),
    pattern=_EMPTY_ANSWER.pattern,
    priority=40,
)
def reasoning_parser_takes_the_answer(ctx: Context, m: re.Match[str] | None) -> Decision | None:
    """The answer comes back empty and all of it sits in `reasoning_content`: the command's --reasoning-parser
    waits for a thinking block this model never opens (or never closes), so it files the whole answer as
    reasoning. A parser for this model's own format, or none, gives the answer back."""
    parser = ctx.view.get("--reasoning-parser")
    answer = line_of(m) if m else ""
    counted = _COUNTED.search(answer)
    all_counted = counted is not None and counted.group(1) == counted.group(2) != "0"
    if not parser or not (_IN_REASONING.search(answer) or all_counted):
        return None
    return fix(
        ctx,
        [RemoveFlag(flag="--reasoning-parser")],
        "other",
        f"--reasoning-parser {parser} files the whole answer as reasoning: the content comes back empty",
        why="the parser splits on its own model family's thinking markers; this model's output has none, so "
        "everything lands in reasoning_content (or choose the parser of this model's family)",
        evidence=(line_of(m),) if m else (),
        confidence=0.6,
    )
