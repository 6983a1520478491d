"""Facts about the host a launch needs: ports, model folders and their config.json, host memory."""

from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.files import MiB, UnreadableFile, read_text

CONFIG_MAX_BYTES = 16 * MiB
"""The largest config.json read; real ones are kilobytes, so more is not a model's config."""


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Can a server bind this TCP port now? (A real bind, as uvicorn will do.)"""
    bind_host = "0.0.0.0" if host == "" else host.strip("[]")
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind_host, port))
        except socket.gaierror:
            return True  # an unresolvable --host is not a busy port; SGLang will report the name itself
        except OSError:
            return False
    return True


def address_is_local(host: str) -> bool:
    """Is `host` an address of this machine (can a server bind it)? A name that does not resolve, or a
    wildcard, counts as local: the engine reports names itself."""
    bind_host = host.strip("[]")
    if bind_host in ("", "0.0.0.0", "::"):
        return True
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((bind_host, 0))
        except socket.gaierror:
            return True
        except OSError as exc:
            return exc.errno != errno.EADDRNOTAVAIL
    return True


def find_free_port(
    start: int, host: str = "127.0.0.1", avoid: set[int] | None = None, span: int = 200
) -> int | None:
    """The first free port at or after `start`, skipping `avoid`; None if none in `span` ports.

    SGLang derives internal ports from `--port` upwards, so callers pass a start ~10 away from a busy one."""
    avoid = avoid or set()
    for port in range(start, min(start + span, 65536)):
        if port not in avoid and port_is_free(port, host):
            return port
    return None


class ModelFacts(BaseModel):
    """What a model's config.json says that matters for launching it."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    path: str
    local: bool = Field(description="A folder on this machine (not a Hub repo id).")
    exists: bool
    has_config: bool = False
    architectures: tuple[str, ...] = ()
    model_type: str | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    max_position_embeddings: int | None = None
    quantization: str | None = Field(default=None, description="quant_method of quantization_config.")
    torch_dtype: str | None = None
    auto_map: bool = Field(default=False, description="Ships custom code (needs --trust-remote-code).")
    error: str | None = Field(default=None, description="Why config.json could not be read.")
    broken_files: tuple[str, ...] = Field(
        default=(),
        description="The folder's other JSON files the engine parses (tokenizer and generation configs) that "
        "are not valid JSON, each with the parser's words.",
    )
    generation_defaults: dict[str, float] = Field(
        default_factory=dict,
        description="Sampling values generation_config.json gives: SGLang's requests default to them "
        "(`--sampling-defaults model`).",
    )

    @property
    def architecture(self) -> str | None:
        return self.architectures[0] if self.architectures else None

    @property
    def draft_kind(self) -> str | None:
        """EAGLE3 / EAGLE / None, from the draft's architecture name."""
        arch = " ".join(self.architectures).lower()
        if "eagle3" in arch:
            return "EAGLE3"
        if "eagle" in arch:
            return "EAGLE"
        return None


def looks_local(path: str) -> bool:
    """A path someone means as a folder here: absolute, relative with ./ or ~, or existing."""
    return path.startswith(("/", "./", "../", "~")) or os.path.exists(path)


def model_facts(path: str) -> ModelFacts:
    """Read `path`/config.json, or for a Hub id its copy in the local Hugging Face cache if there is one."""
    local = looks_local(path)
    folder = Path(os.path.expanduser(path)) if local else _hf_cache_snapshot(path)
    if folder is None:
        return ModelFacts(path=path, local=False, exists=False)
    if not folder.is_dir():
        return ModelFacts(path=path, local=local, exists=folder.exists(), error="not a folder")
    config = folder / "config.json"
    if not config.exists() and not config.is_symlink():
        return ModelFacts(path=path, local=local, exists=True, error="no config.json")
    try:
        raw = json.loads(read_text(config, "config.json", CONFIG_MAX_BYTES))
    except UnreadableFile as exc:
        return ModelFacts(path=path, local=local, exists=True, error=f"unreadable config.json: {exc.reason}")
    except (ValueError, RecursionError) as exc:
        return ModelFacts(path=path, local=local, exists=True, error=f"unreadable config.json ({exc})")
    if not isinstance(raw, dict):
        return ModelFacts(path=path, local=local, exists=True, error="config.json is not an object")
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}

    def pick(key: str) -> int | None:
        value = raw.get(key, text.get(key))
        return value if isinstance(value, int) else None

    quant = raw.get("quantization_config")
    broken, generation = _side_files(folder)
    return ModelFacts(
        path=path,
        local=local,
        exists=True,
        has_config=True,
        architectures=tuple(a for a in raw.get("architectures") or () if isinstance(a, str)),
        model_type=raw.get("model_type") if isinstance(raw.get("model_type"), str) else None,
        num_attention_heads=pick("num_attention_heads"),
        num_key_value_heads=pick("num_key_value_heads"),
        hidden_size=pick("hidden_size"),
        intermediate_size=pick("intermediate_size"),
        max_position_embeddings=pick("max_position_embeddings"),
        quantization=quant.get("quant_method") if isinstance(quant, dict) else None,
        torch_dtype=str(raw.get("torch_dtype") or raw.get("dtype") or "") or None,
        auto_map="auto_map" in raw,
        broken_files=broken,
        generation_defaults=generation,
    )


_SIDE_FILES = ("tokenizer_config.json", "generation_config.json", "special_tokens_map.json")
_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def _side_files(folder: Path) -> tuple[tuple[str, ...], dict[str, float]]:
    """(files that do not parse, with why; the sampling values generation_config.json gives)."""
    broken: list[str] = []
    generation: dict[str, float] = {}
    for name in _SIDE_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            data = json.loads(read_text(path, name, CONFIG_MAX_BYTES))
        except UnreadableFile:
            continue
        except (ValueError, RecursionError) as exc:
            broken.append(f"{name}: {exc}")
            continue
        if name == "generation_config.json" and isinstance(data, dict):
            generation = {
                k: float(v)
                for k in _SAMPLING_KEYS
                if isinstance(v := data.get(k), int | float) and not isinstance(v, bool)
            }
    return tuple(broken), generation


def _hf_cache_snapshot(repo_id: str) -> Path | None:
    if repo_id.count("/") != 1:
        return None
    hub = Path(
        os.environ.get("HF_HUB_CACHE")
        or Path(os.environ.get("HF_HOME") or "~/.cache/huggingface").expanduser() / "hub"
    )
    snapshots = hub / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    try:
        found = sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    return found[0] if found else None
