"""All playbooks: the built-in families (registered on import) plus a user's YAML rules."""

from __future__ import annotations

from specdoctor.playbooks.base import REGISTRY, Playbook

_FAMILIES = (
    "flags",
    "json_keys",
    "json_numbers",
    "not_a_number",
    "env_paths",
    "config_file",
    "speculative",
    "draft_files",
    "memory",
    "cuda_graph",
    "parallel",
    "mlp_sync",
    "network",
    "addresses",
    "tls",
    "serving",
    "watchdog",
    "zeros",
    "waits",
    "output_paths",
    "first_requests",
    "parsers",
    "lora_requests",
    "input_embeds",
    "architectures",
    "overrides",
    "hub",
    "hub_env",
    "host_env",
    "python_env",
    "model",
    "weights",
    "weight_shapes",
    "devices",
    "hardware",
    "packages",
    "message_asks",
    "engine_advice",
    "features",
    "defaults",
    "backends",
    "grounded",
    "engine_bugs",
)


def all_playbooks() -> list[Playbook]:
    """The built-in playbooks, each family module imported once so its decorators register."""
    import importlib

    for name in _FAMILIES:
        importlib.import_module(f"{__package__}.{name}")
    # Family order breaks priority ties, whatever order the modules happened to import each other in.
    rank = {f"{__package__}.{name}": i for i, name in enumerate(_FAMILIES)}
    return sorted(REGISTRY, key=lambda pb: rank.get(pb.fn.__module__, len(rank)))
