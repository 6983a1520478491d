"""Options and arguments several verbs share (argparse only: importing this stays cheap)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from specdoctor.tools.errors import UsageError


def add_command_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("command", nargs=argparse.REMAINDER, help="the launch command, after `--`")


def add_secrets_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--show-secrets",
        action="store_true",
        help="print commands on the terminal with their keys and passwords, ready to copy and paste "
        "(transcript, report and LLM requests stay redacted)",
    )


def add_catalog_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("flag catalog (default: the SGLang installed for the command's python)")
    g.add_argument(
        "--sglang-version", metavar="X", help="check against the bundled --help of SGLang X instead"
    )
    g.add_argument(
        "--catalog", metavar="FILE", help="check against a saved --help text (or exported catalog)"
    )
    g.add_argument(
        "--live-catalog",
        action="store_true",
        help="read the flags of the SGLang the command's python has by running it (with specdoctor's own "
        "environment, not the command's); check and diagnose otherwise run nothing and use a cached or "
        "bundled list",
    )
    g.add_argument(
        "--refresh-catalog",
        action="store_true",
        help="re-read the installed SGLang's --help (implies --live-catalog)",
    )


def add_gpu_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("GPU facts (default: ask nvidia-smi)")
    g.add_argument("--gpus", metavar="DESC", help="describe the GPUs instead, e.g. '8x H100 80GB'")
    g.add_argument("--nvidia-smi", metavar="FILE", help="read a saved `nvidia-smi` output instead")


def command_words(words: Sequence[str], verb: str = "check") -> list[str] | str:
    """The launch command from argparse's remainder: argv words, or one shell line to split."""
    words = list(words)
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        raise UsageError(
            f"no launch command: put it after `--`, e.g. `specdoctor {verb} -- python -m sglang.launch_server ...`"
        )
    if len(words) == 1 and any(c.isspace() for c in words[0]):
        return words[0]
    return words


def add_llm_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("LLM planner (asked when no playbook knows the failure)")
    g.add_argument("--no-llm", action="store_true", help="never ask an LLM")
    g.add_argument(
        "--llm-base-url", metavar="URL", help="OpenAI-compatible endpoint (or SPECDOCTOR_LLM_BASE_URL)"
    )
    g.add_argument("--llm-model", metavar="NAME", help="model name (or SPECDOCTOR_LLM_MODEL)")
    p.add_argument(
        "--playbooks",
        metavar="DIR",
        help="also use the YAML playbooks in DIR (besides ~/.config/specdoctor/playbooks)",
    )


def positive(kind: type) -> object:
    """An argparse type: a number above zero, with a one-line error otherwise."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def fraction(text: str) -> float:
    """An argparse type: a number from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def add_run_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("budget")
    g.add_argument(
        "--max-launches",
        type=positive(int),
        default=6,
        metavar="N",
        help="most launches before giving up (default 6)",
    )
    g.add_argument(
        "--timeout",
        type=positive(float),
        default=3600.0,
        metavar="S",
        help="wall-time budget in seconds (default 3600)",
    )
    g.add_argument(
        "--gpu-minutes",
        type=positive(float),
        default=None,
        metavar="M",
        help="GPU-minutes budget (default: none)",
    )
    _add_policy_options(p)
    g = p.add_argument_group("files")
    g.add_argument(
        "--run-dir",
        metavar="DIR",
        help="where logs, transcript and report go (default ~/.local/state/specdoctor/runs/<time>)",
    )
    g.add_argument("--report", metavar="FILE", help="also write the JSON report here")
    _add_simulation_options(p)


def _add_policy_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("what changes may be made unasked")
    g.add_argument(
        "--min-confidence",
        type=fraction,
        default=0.5,
        metavar="C",
        help="apply fixes at least this confident (default 0.5)",
    )
    g.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="FLAG",
        help="also let unattended changes touch FLAG (written without its dashes), beyond tuning flags: `--allow port` lets deploy move --port; repeatable",
    )
    g.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="FLAG",
        help="never let an automatic change touch FLAG (written without its dashes, like --allow), not even "
        "with --allow: a decision that would change it stops the run naming the pin; repeatable",
    )
    g.add_argument(
        "--allow-env",
        action="append",
        default=[],
        metavar="NAME",
        help="also let unattended changes set or unset environment variable NAME; repeatable",
    )
    g.add_argument(
        "--allow-kill",
        action="store_true",
        help="may stop other processes that hold the GPUs this launch needs",
    )
    g.add_argument(
        "--require-acceptance",
        action="store_true",
        help="stop (exit 3) when a speculative server's accept length cannot be measured, instead of "
        "reporting it healthy with its acceptance unmeasured",
    )
    g.add_argument(
        "--no-chat-check",
        action="store_true",
        help="call a server healthy once it generates, without also sending one chat request "
        "(/v1/chat/completions); for a base model served for completions only",
    )


DEFAULT_PINS = ("--port", "--host")
"""A load balancer, a Kubernetes Service or a probe points at them: unattended deploys never move them unasked."""


def add_no_pin_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-pin",
        action="store_true",
        help="lift the default pins on --port and --host (then `--allow port` lets a conflict move --port)",
    )


def _add_simulation_options(p: argparse.ArgumentParser) -> None:
    s = p.add_argument_group("simulated node (no GPU needed)")
    s.add_argument(
        "--simulate",
        metavar="PROFILE",
        help="launch on the built-in simulated GPU node: h200x8, h100x8, rtx4090x2, a100x2-busy, or a profile JSON",
    )
    s.add_argument(
        "--sim-speed",
        type=positive(float),
        default=1.0,
        metavar="X",
        help="time scale of the simulated node (default 1.0)",
    )
    s.add_argument(
        "--sim-nodes",
        type=positive(int),
        default=1,
        metavar="N",
        help="run a multi-node command as N simulated nodes on this machine: one process per --node-rank "
        "0..N-1 of the same command, meeting at its --dist-init-addr; node rank 0 serves HTTP; a change "
        "reaches every node, a node that fails stops them all. The command says --nnodes N --node-rank 0 "
        "--dist-init-addr 127.0.0.1:PORT (default 1)",
    )
