"""Size of the LLM planner's opening prompt, with the compacted root-cause log versus the whole log.

Run: `python bench/bench_prompt_size.py [--per-case]`. For every crash case in `tests/data/corpus/` and,
as a second set, every real recorded SGLang 0.5.23 launch output in `tests/data/sglang-outputs/` (whole
logs, usage dumps included), it builds the planner's system and user messages plus the tool schemas sent
with them, twice: as the planner does (root-cause block + compacted log, cut at PROMPT_LOG_CHARS) and
with the whole log in the log section. Tokens are counted with tiktoken's o200k_base encoding when
tiktoken is importable and its encoding loads offline; otherwise estimated as characters / 4 (about right
for English and code in GPT-style BPE vocabularies). The output says which was used.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdoctor.agent.llm_planner import PROMPT_LOG_CHARS, build_messages, log_section, propose_tool  # noqa: E402
from specdoctor.agent.llm_tools import TOOLS  # noqa: E402
from specdoctor.playbooks.base import Context  # noqa: E402
from specdoctor.tools.catalog_load import bundled  # noqa: E402
from specdoctor.tools.command import CommandError, LaunchCommand  # noqa: E402
from specdoctor.tools.gpu import parse_gpus_description  # noqa: E402
from specdoctor.tools.logs import compact, extract_root_cause  # noqa: E402
from specdoctor.tools.outcome import EXIT_KIND_TO_OUTCOME, Outcome  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "corpus"
CATALOG = bundled("0.5.23")
Case = tuple[str, str, str, "str | None", str]
"""(name, command, log, gpus, outcome kind)"""
OUTPUTS = ROOT / "tests" / "data" / "sglang-outputs"


def token_counter() -> tuple[Callable[[str], int], str]:
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("o200k_base")
        encoding.encode("probe")
    except Exception as exc:  # not installed, or the encoding file cannot be fetched offline
        reason = "tiktoken not installed" if isinstance(exc, ImportError) else f"tiktoken unusable: {exc}"
        return (lambda text: (len(text) + 3) // 4), f"estimate: characters / 4 ({reason})"
    return (lambda text: len(encoding.encode(text))), "tiktoken o200k_base"


@cache
def _tools_json() -> str:
    return json.dumps([t.schema_for_openai() for t in TOOLS] + [propose_tool()])


def prompt_text(ctx: Context, whole_log: bool) -> str:
    messages = build_messages(ctx, host=False, log_chars=None if whole_log else PROMPT_LOG_CHARS)
    return "\n".join(m["content"] for m in messages) + _tools_json()


def context(command: str, log: str, gpus: str | None, kind: str) -> Context:
    lines = log.splitlines()
    root = extract_root_cause(lines)
    return Context(
        spec=LaunchCommand.parse(command),
        catalog=CATALOG,
        outcome=Outcome(kind=kind),  # type: ignore[arg-type]
        root=root,
        log_text=compact(lines, root=root),
        gpus=parse_gpus_description(gpus) if gpus else None,
    )


def corpus_cases() -> list[Case]:
    cases = []
    for path in sorted(CORPUS.glob("*.json")):
        case = json.loads(path.read_text())
        kind = EXIT_KIND_TO_OUTCOME.get(case["exit_kind"], "exited")
        cases.append((case["id"], case["command"], case["log"], case.get("gpus"), kind))
    return cases


def recorded_outputs() -> list[Case]:
    cases = []
    for path in sorted(OUTPUTS.glob("*.rc*.txt")):
        lines = path.read_text().splitlines()
        end = next(i for i, line in enumerate(lines) if line.startswith("# ---- stdout"))
        header = dict(line[2:].partition(": ")[::2] for line in lines[:end])
        cases.append((path.name, header["command"], "\n".join(lines[end + 1 :]), None, "exited"))
    return cases


def measure(cases: list[Case], count: Callable[[str], int], per_case: bool) -> dict[str, tuple[float, int]]:
    """Median and max tokens of the whole prompt and of its log section, compacted and whole-log."""
    sizes: dict[str, list[int]] = {"prompt": [], "whole prompt": [], "log": [], "whole log": []}
    for name, command, log, gpus, kind in cases:
        try:
            small = context(command, log, gpus, kind)
            big = dataclasses.replace(small, log_text=log)
        except CommandError as exc:
            print(f"  skipped {name}: {exc}")
            continue
        row = {
            "prompt": count(prompt_text(small, whole_log=False)),
            "whole prompt": count(prompt_text(big, whole_log=True)),
            "log": count(log_section(small, PROMPT_LOG_CHARS)),
            "whole log": count(log_section(big, None)),
        }
        for key, value in row.items():
            sizes[key].append(value)
        if per_case:
            print(
                f"  {name:56s} prompt {row['prompt']:6,d} vs {row['whole prompt']:6,d}"
                f"   log section {row['log']:6,d} vs {row['whole log']:6,d}"
            )
    return {key: (statistics.median(v), max(v)) for key, v in sizes.items() if v}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-case", action="store_true", help="print every case's sizes")
    args = parser.parse_args()
    count, method = token_counter()
    print(f"token count: {method}")
    print("prompt = system + user messages + tool schemas (the opening request of one decision)\n")
    for title, cases in (
        ("corpus crash cases (log excerpts quoted in issues)", corpus_cases()),
        ("recorded SGLang 0.5.23 launch outputs (whole logs)", recorded_outputs()),
    ):
        print(f"{title}:")
        r = measure(cases, count, args.per_case)
        print(f"  {len(cases)} cases")
        for key, label in (
            ("prompt", "compacted prompt  "),
            ("whole prompt", "whole-log prompt  "),
            ("log", "  its log section (compacted)"),
            ("whole log", "  its log section (whole log)"),
        ):
            median, top = r[key]
            print(f"  {label:30s} median {median:7,.0f} tokens, max {top:7,d}")
        print()


if __name__ == "__main__":
    main()
