"""Reading checks out of engine source text, and building the index, on small sources written here."""

from __future__ import annotations

import gzip
import json
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from specdoctor.tools.engine_source.build import build_release, main, wheel_for
from specdoctor.tools.engine_source.extract import FileContext, extract_sites
from specdoctor.tools.engine_source.index import SourceIndex
from specdoctor.tools.engine_source.model import Constraint
from specdoctor.tools.engine_source.sources import from_tree, from_wheel, matches
from specdoctor.tools.engine_source.template import segments

FIELDS = frozenset(
    {"page_size", "attention_backend", "speculative_eagle_topk", "tp_size", "dp_size", "device"}
)


def sites_of(source: str, rel: str = "srt/arg_groups/x_hook.py", fields: frozenset[str] = FIELDS):
    return extract_sites(FileContext.parse(textwrap.dedent(source), rel, fields))


def test_if_raise_gives_template_condition_fields_and_failing_constraints() -> None:
    (site,) = sites_of(
        """
        _PAGE_TREE = ("flashinfer", "fa3", "triton")

        def _handle_eagle(server_args):
            cfg = resolving_view(server_args)
            if cfg.speculative_eagle_topk > 1 and cfg.page_size > 1 and cfg.attention_backend not in _PAGE_TREE:
                raise ValueError(
                    f"topk > 1 with page_size > 1 is only supported on {_PAGE_TREE}; "
                    f"got attention_backend={cfg.attention_backend!r}."
                )
        """
    )
    assert (site.kind, site.exception, site.function, site.line) == (
        "raise",
        "ValueError",
        "_handle_eagle",
        7,
    )
    assert site.template == (
        "topk > 1 with page_size > 1 is only supported on {_PAGE_TREE}; got attention_backend={cfg.attention_backend}."
    )
    assert site.condition.startswith("cfg.speculative_eagle_topk > 1 and cfg.page_size > 1")
    assert site.fields == ("attention_backend", "page_size", "speculative_eagle_topk")
    backend = next(c for c in site.constraints if c.field == "attention_backend")
    assert backend == Constraint(
        field="attention_backend", op="not in", values=("flashinfer", "fa3", "triton")
    )
    assert backend.allowed().op == "in"
    assert site.text == "raise ValueError("


def test_assert_is_what_must_hold_and_else_branches_are_negated_guards() -> None:
    first, second = sites_of(
        """
        class ServerArgs:
            def check(self):
                if self.device == "cuda":
                    pass
                else:
                    assert self.tp_size in (1, 2), "tp must be 1 or 2"
                    assert self.dp_size is not None
        """,
        rel="srt/server_args.py",
    )
    assert first.kind == "assert" and first.exception == "AssertionError"
    assert first.function == "ServerArgs.check"
    assert first.condition == "self.tp_size in (1, 2)"
    assert first.guards == ("not (self.device == 'cuda')",)
    assert first.fields == ("tp_size",) and first.guard_fields == ("device",)
    tp = next(c for c in first.constraints if c.field == "tp_size")
    assert (tp.op, tp.values, tp.guard) == ("not in", (1, 2), False)
    device = next(c for c in first.constraints if c.field == "device")
    assert (device.op, device.values, device.guard) == ("!=", ("cuda",), True)
    assert second.template == "" and second.constraints[0].op == "is None"


def test_an_early_return_guards_the_rest_of_the_function_like_an_if_around_it() -> None:
    # SGLang's hooks return early unless their feature is on (`if kv_cache_dtype not in (...): return`):
    # the checks after it run only with the user's value, which puts that value on the failing path.
    guarded, after_loop = sites_of(
        """
        def handle_kv4(server_args):
            cfg = resolving_view(server_args)
            if cfg.attention_backend not in ("nvfp4", "fp4"):
                return
            for step in range(2):
                if step:
                    continue
            if not get_platform().is_cuda:
                raise RuntimeError("KV4 is not tested on non-CUDA platforms.")
            if cfg.page_size > 1:
                return
            else:
                assert cfg.tp_size == 1
        """
    )
    assert guarded.fields == () and guarded.guard_fields == ("attention_backend",)
    assert guarded.guards == ("not (cfg.attention_backend not in ('nvfp4', 'fp4'))",)
    backend = next(c for c in guarded.constraints if c.field == "attention_backend")
    assert (backend.op, backend.values, backend.guard) == ("in", ("nvfp4", "fp4"), True)
    # An `if` with an else branch returns only on one side: the else is its own guard, not the rest.
    assert after_loop.guards == (
        "not (cfg.attention_backend not in ('nvfp4', 'fp4'))",
        "not (cfg.page_size > 1)",
    )


def test_a_field_the_function_sets_for_another_before_the_check_is_recorded_with_its_cause() -> None:
    (site,) = sites_of(
        """
        def handle_layout(server_args):
            cfg = resolving_view(server_args)
            if cfg.device == "cpu":
                declare_resolution(server_args, "x", page_size=1)
            if cfg.tp_size > 1:
                server_args.dp_size = 2
            assert cfg.page_size > 0 and cfg.attention_backend, "no backend"
            if cfg.page_size > 1:
                cfg.tp_size = 4
        """
    )
    # Only fields the check reads, set before it: dp_size is not read, tp_size is set after.
    assert site.brought_in == ("page_size=device",)


def test_the_fields_sglang_resolves_from_others_anywhere_in_its_argument_code() -> None:
    from specdoctor.tools.engine_source.resolutions import resolved_from

    source = """
        def _handle_deprecated(server_args):
            cfg = resolving_view(server_args)
            if cfg.device == "cpu":
                declare_resolution(server_args, "x", dp_size=cfg.tp_size, page_size=1)
            server_args.attention_backend = cfg.attention_backend or "triton"
        """
    found = resolved_from(FileContext.parse(textwrap.dedent(source), "srt/arg_groups/x_hook.py", FIELDS))
    # The value's source, not the condition around it; a constant or the field itself is no source.
    assert found == {"dp_size": {"tp_size"}}


def test_message_built_in_a_variable_format_and_percent_logs() -> None:
    sites = sites_of(
        """
        import logging
        logger = logging.getLogger(__name__)

        def handle(server_args):
            msg = f"page_size {server_args.page_size} is too large. "
            msg += "Use a smaller --page-size."
            if server_args.page_size > 64:
                raise ValueError(msg)
            if server_args.tp_size > 8:
                raise RuntimeError("tp_size {} above {}".format(server_args.tp_size, 8))
            logger.warning("attention backend %s is not supported, falling back", server_args.attention_backend)
            logger.warning("loading weights took %.1f s", 3.0)
        """
    )
    templates = [s.template for s in sites]
    assert templates == [
        "page_size {server_args.page_size} is too large. Use a smaller --page-size.",
        "tp_size {server_args.tp_size} above {8}",
        "attention backend {server_args.attention_backend} is not supported, falling back",
    ], "a warning that tells the user nothing (loading took 3 s) is not a site"
    assert sites[2].kind == "warning" and sites[2].exception is None


def test_reads_through_every_spelling_of_the_server_arguments_and_environment() -> None:
    (site,) = sites_of(
        """
        class ModelRunner:
            def init(self, model_runner):
                if (
                    self.server_args.page_size > 1
                    and get_global_server_args().attention_backend == "trtllm_mha"
                    and global_server_args_dict["device"] == "cuda"
                    and model_runner.server_args.dp_size != 1
                    and envs.SGLANG_ENABLE_SPEC_V2.get()
                    and os.environ.get("SGLANG_OTHER") == "1"
                    and self.tp_size > 1
                    and self.not_a_field
                ):
                    raise RuntimeError("no")
        """,
        rel="srt/model_executor/model_runner.py",
    )
    assert site.fields == ("attention_backend", "device", "dp_size", "page_size", "tp_size")
    assert site.envs == ("SGLANG_ENABLE_SPEC_V2", "SGLANG_OTHER")
    assert Constraint(field="SGLANG_OTHER", op="==", values=("1",), env=True) in site.constraints


def test_statements_in_handlers_match_and_nested_functions_are_walked() -> None:
    sites = sites_of(
        """
        def load(server_args):
            try:
                import flashinfer
            except ImportError:
                raise ImportError("flashinfer is required for --attention-backend flashinfer")
            def inner():
                assert server_args.page_size == 1, f"got {server_args.page_size}"
            match server_args.device:
                case "npu":
                    raise NotImplementedError("npu is not supported")
        """
    )
    assert [(s.function, s.condition) for s in sites] == [
        ("load", "except ImportError"),
        ("load.inner", "server_args.page_size == 1"),
        ("load", "case 'npu'"),
    ]


def test_template_segments_keep_literal_braces_and_mark_placeholders() -> None:
    assert segments("a {x} b {{c}} {y}") == [("a ", False), (" b {c} ", True), ("", True)]


# ---- the build, on a fake release written here -----------------------------------------------------

SERVER_ARGS = """
import dataclasses

@dataclasses.dataclass
class ServerArgs:
    page_size: int = 1
    mem_fraction_static: Optional[float] = None
    fp8_gemm_runner_backend: str = "auto"

    def check(self):
        if self.page_size > 64:
            raise ValueError(f"page_size {self.page_size} must be <= 64")

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--fp8-gemm-backend", dest="fp8_gemm_runner_backend")
"""
# Module-level code that would stop the build (or leave a trace) if anything imported or ran it.
BOOBY_TRAP = """
raise SystemExit("the engine source was executed")
open("{trace}", "w").write("ran")

def f(server_args):
    if server_args.page_size == 3:
        raise ValueError("page_size 3 is not supported")
"""


def _fake_release(root: Path, trace: Path) -> Path:
    package = root / "sglang"
    (package / "srt" / "model_executor").mkdir(parents=True)
    (package / "__init__.py").write_text("raise SystemExit('imported')\n")
    (package / "srt" / "server_args.py").write_text(SERVER_ARGS)
    (package / "srt" / "model_executor" / "model_runner.py").write_text(BOOBY_TRAP.format(trace=trace))
    (package / "srt" / "model_executor" / "broken.py").write_text("def f(:\n")
    (package / "srt" / "not_covered.py").write_text("raise ValueError('not in the covered set')\n")
    return package


def test_build_reads_a_tree_without_importing_or_running_it(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    package = _fake_release(tmp_path / "src", trace)
    modules_before = set(sys.modules)
    out = tmp_path / "index.json.gz"
    assert main(["--tree", f"9.9.9={package}", "--out", str(out)]) == 0
    assert not trace.exists()
    assert not {m for m in set(sys.modules) - modules_before if m.split(".")[0] == "sglang"}
    index = SourceIndex.load(out)
    assert index.releases == ["9.9.9"]
    assert index.files("9.9.9") == [
        "srt/model_executor/model_runner.py",
        "srt/server_args.py",
    ], "broken.py is skipped, not_covered.py is outside the covered set"
    assert "srt/model_executor/broken.py" in index.skipped("9.9.9")
    assert index.dests("9.9.9") == {"fp8_gemm_runner_backend": "--fp8-gemm-backend"}
    assert index.types("9.9.9") == {"mem_fraction_static": "float", "page_size": "int"}
    by_template = {s.template: s for s in index.sites("9.9.9")}
    assert sorted(by_template) == [
        "page_size 3 is not supported",
        "page_size {self.page_size} must be <= 64",
        "the engine source was executed",
    ], "the trap is read as one more check, never run"
    assert by_template["the engine source was executed"].function == "<module>"
    assert by_template["page_size 3 is not supported"].fields == ("page_size",)


def test_build_is_byte_identical_for_the_same_sources_and_reads_wheels(tmp_path: Path) -> None:
    package = _fake_release(tmp_path / "src", tmp_path / "trace")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = wheels / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path in sorted(package.rglob("*.py")):
            zf.write(path, "sglang/" + path.relative_to(package).as_posix())
    assert wheel_for("9.9.9", wheels) == wheel, "a cached wheel is used without pip"
    assert from_wheel(wheel) == from_tree(package)
    one, two = tmp_path / "one.json.gz", tmp_path / "two.json.gz"
    main(["--versions", "9.9.9", "--wheels", str(wheels), "--out", str(one)])
    main(["--tree", f"9.9.9={package}", "--out", str(two)])
    assert one.read_bytes() == two.read_bytes()
    raw = json.loads(gzip.decompress(one.read_bytes()))
    lines = sorted(site[1:] for site in raw["releases"]["9.9.9"]["sites"])
    assert lines == [[2, 0], [7, 0], [12, 0]], "each site is [check, line, end_line - line]"


def test_the_same_check_in_two_releases_is_stored_once(tmp_path: Path) -> None:
    from specdoctor.tools.engine_source.build import build_index

    release = {"srt/server_args.py": SERVER_ARGS}
    moved = {"srt/server_args.py": "\n\n\n" + SERVER_ARGS}
    index = SourceIndex(build_index({"1.0": release, "1.1": moved}))
    assert len(index.checks) == 1
    assert index.occurrences(0) == [("1.0", 12, 12), ("1.1", 15, 15)]
    assert build_release(release).fields >= {"page_size", "fp8_gemm_runner_backend"}


@pytest.mark.parametrize(
    ("rel", "covered"),
    [
        ("srt/server_args.py", True),
        ("srt/arg_groups/fields/spec.py", True),
        ("srt/layers/attention/flashinfer_backend.py", True),
        ("srt/layers/attention/dsa/dsa_backend.py", True),
        ("srt/entrypoints/engine.py", True),
        ("srt/entrypoints/openai/serving_chat.py", False),
        ("srt/models/llama.py", False),
    ],
)
def test_covered_files(rel: str, covered: bool) -> None:
    from specdoctor.tools.engine_source.sources import COVERED

    assert matches(rel, COVERED) is covered


def test_a_helper_of_the_argument_code_reads_the_fields_it_takes_by_name() -> None:
    # speculative_hook's `_resolve_speculative_algorithm_alias(speculative_algorithm, ...)`: the caller
    # passes the field; in the loader a `load_format` parameter is the loader's own.
    source = """
    def _resolve(speculative_algorithm, draft_is_gemma):
        if speculative_algorithm == "EAGLE3" and draft_is_gemma:
            raise ValueError("this draft requires --speculative-algorithm NEXTN or EAGLE")
    """
    fields = FIELDS | {"speculative_algorithm"}
    (site,) = sites_of(source, fields=fields)
    assert site.fields == ("speculative_algorithm",)
    (elsewhere,) = sites_of(source, rel="srt/model_loader/loader.py", fields=fields)
    assert elsewhere.fields == ()


def test_the_index_reads_the_architectures_each_release_registers() -> None:
    built = build_release(
        {
            "srt/models/llama.py": "class LlamaForCausalLM: ...\nEntryClass = LlamaForCausalLM\n",
            "srt/models/qwen.py": "EntryClass = [Qwen2ForCausalLM, Qwen2MoeForCausalLM]\n",
            "srt/models/utils.py": "x = 1\n",
        }
    )
    assert built.architectures == ["LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM"]
