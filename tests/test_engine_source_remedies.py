"""Fields to flags, a check read against a launch command, and the remedies SGLang's messages name —
the last over every such message in the committed index."""

from __future__ import annotations

import pytest

from specdoctor.tools.catalog_load import bundled
from specdoctor.tools.command import LaunchCommand, RemoveFlag, RenameFlag, SetEnv, SetFlag
from specdoctor.tools.engine_source.coverage import REMEDY_PHRASE, remedy_coverage
from specdoctor.tools.engine_source.index import bundled_index
from specdoctor.tools.engine_source.lookup import site_for_frame
from specdoctor.tools.engine_source.model import Frame
from specdoctor.tools.engine_source.remedies import remedies
from specdoctor.tools.engine_source.remedy_model import NUMBER_TYPES
from specdoctor.tools.engine_source.suspects import flag_for_field, read_site

CAT = bundled("0.5.23")


def test_fields_map_to_their_flags() -> None:
    dests = bundled_index().dests("0.5.23")
    assert flag_for_field("page_size", CAT).name == "--page-size"
    assert flag_for_field("tp_size", CAT).name == "--tp-size"
    assert flag_for_field("fp8_gemm_runner_backend", CAT) is None, "its flag is not --fp8-gemm-runner-backend"
    assert flag_for_field("fp8_gemm_runner_backend", CAT, dests).name == "--fp8-gemm-backend"
    assert flag_for_field("model_config", CAT) is None


def _page_tree_site():
    frame = Frame(
        path="/x/sglang/srt/arg_groups/speculative_hook.py", line=1278, function="_handle_eagle_family"
    )
    return site_for_frame(frame, version="0.5.23").site


def test_a_check_read_against_the_command_names_the_user_s_flags() -> None:
    command = LaunchCommand.parse(
        "python -m sglang.launch_server --model-path m --speculative-algorithm EAGLE3 "
        "--speculative-eagle-topk 4 --page-size 16 --attention-backend trtllm_mha"
    )
    reading = read_site(_page_tree_site(), command, CAT)
    by_field = {r.field: r for r in reading.reads}
    backend = by_field["attention_backend"]
    assert (backend.flag, backend.value, backend.set_by_user, backend.trips) == (
        "--attention-backend",
        "trtllm_mha",
        True,
        True,
    )
    assert backend.allowed[0].op == "in" and backend.allowed[0].values == ("flashinfer", "fa3", "triton")
    assert by_field["page_size"].value == "16" and by_field["page_size"].trips is True
    assert [r.field for r in reading.suspects] == ["attention_backend", "page_size", "speculative_eagle_topk"]
    assert not reading.all_default


def test_a_check_whose_fields_the_user_left_alone_is_not_the_user_s_fault() -> None:
    command = LaunchCommand.parse("python -m sglang.launch_server --model-path m --tp-size 1")
    reading = read_site(_page_tree_site(), command, CAT)
    assert reading.all_default and not reading.suspects
    assert all(not r.set_by_user for r in reading.reads)
    tp_check = next(
        s for s in bundled_index().sites("0.5.15") if s.condition == "self.tp_size % self.dp_size == 0"
    )
    tp = next(r for r in read_site(tp_check, command, CAT).reads if r.field == "tp_size")
    assert tp.set_by_user and tp.at_default, "--tp-size 1 is written but is the default"


def test_a_switch_reads_true_and_an_env_var_the_check_reads_counts() -> None:
    site = next(s for s in bundled_index().sites("0.5.23") if s.envs and s.fields)
    env_name = site.envs[0]
    flag = flag_for_field(site.fields[0], CAT)
    spelled = [flag.name] if flag is not None and flag.nargs == 0 else []
    command = LaunchCommand.parse(
        f"{env_name}=1 python -m sglang.launch_server --model-path m {' '.join(spelled)}"
    )
    reading = read_site(site, command, CAT)
    assert reading.envs[0].set_by_user and reading.envs[0].value == "1"
    assert not reading.all_default
    if spelled:
        assert next(r for r in reading.reads if r.field == site.fields[0]).value == "true"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "speculative_eagle_topk > 1 with page_size > 1 is only supported on ['flashinfer', 'fa3', 'triton']; "
            "got attention_backend='trtllm_mha'. Use page_size == 1 or one of those backends.",
            [
                SetFlag(flag="--page-size", values=("1",)),
                SetFlag(flag="--attention-backend", values=("flashinfer",)),
                SetFlag(flag="--attention-backend", values=("fa3",)),
                SetFlag(flag="--attention-backend", values=("triton",)),
            ],
        ),
        (
            "--disable-fast-image-processor is deprecated; use --image-processor-backend=pil instead.",
            [
                RenameFlag(
                    flag="--disable-fast-image-processor", to="--image-processor-backend", values=("pil",)
                ),
                SetFlag(flag="--image-processor-backend", values=("pil",)),
            ],
        ),
        (
            "--speculative-use-rejection-sampling requires --speculative-eagle-topk=1.",
            [
                SetFlag(flag="--speculative-eagle-topk", values=("1",)),
                RemoveFlag(flag="--speculative-use-rejection-sampling"),
            ],
        ),
        (
            "--disaggregation-decode-enable-radix-cache currently requires --disaggregation-transfer-backend in "
            "('nixl', 'mooncake'), but got fake",
            [
                SetFlag(flag="--disaggregation-transfer-backend", values=("nixl",)),
                SetFlag(flag="--disaggregation-transfer-backend", values=("mooncake",)),
                RemoveFlag(flag="--disaggregation-decode-enable-radix-cache"),
            ],
        ),
        (
            "FlashInfer MoE A2A requires chunked prefill, so --chunked-prefill-size must be > 0.",
            [SetFlag(flag="--chunked-prefill-size", values=("1",))],
        ),
        (
            "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.",
            [SetFlag(flag="--disable-overlap-schedule")],
        ),
        (
            "Please set --dp-size 1 when using --weight-cache-mode daemon.",
            [SetFlag(flag="--dp-size", values=("1",)), RemoveFlag(flag="--weight-cache-mode")],
        ),
        (
            "To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
            [SetEnv(name="SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", value="1")],
        ),
        (
            "Detected Qwen3 reranker chat template, but the server is not in generation mode. Please relaunch "
            "without --is-embedding for Qwen3-Reranker models.",
            [RemoveFlag(flag="--is-embedding")],
        ),
        (
            "fastokens failed to load tokenizer. Re-run without --tokenizer-backend=fastokens to use the default.",
            [RemoveFlag(flag="--tokenizer-backend")],
        ),
        (
            "Cross attention is not supported in the triton attention backend. Please use "
            "`--attention-backend flashinfer`.",
            [SetFlag(flag="--attention-backend", values=("flashinfer",))],
        ),
    ],
)
def test_remedies_named_by_the_engine(message: str, expected: list) -> None:
    assert [r.edit for r in remedies(message, CAT)] == expected


def test_a_direction_takes_the_example_value_the_message_gives() -> None:
    found = remedies(
        "Possible solutions: 1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7) "
        "2. disable torch compile by not using --enable-torch-compile",
        CAT,
    )
    assert [(r.action, r.edit) for r in found] == [
        ("remove", RemoveFlag(flag="--enable-torch-compile")),
        ("lower", SetFlag(flag="--mem-fraction-static", values=("0.8",))),
    ]
    (increase,) = remedies("Not enough memory. Please try to increase --mem-fraction-static.", CAT)
    assert (increase.action, increase.flag, increase.edit) == ("raise", "--mem-fraction-static", None)


@pytest.mark.parametrize(
    "message",
    [
        "TRTLLM MLA backend is only supported on Blackwell GPUs (SM100). Please use a different backend.",
        "Please use --no-such-flag-here instead.",
        "Please set --attention-backend to {backend}.",
        "--enable-watermark requires --device cuda",
        "Please use --model-path /some/free/string instead.",
    ],
)
def test_nothing_unchecked_comes_out_of_a_message(message: str) -> None:
    """No catalog flag: nothing. A placeholder or a free string as a value: the flag without an edit."""
    assert all(r.edit is None or r.action == "remove" for r in remedies(message, CAT))


def _valid(edit, catalog, types) -> bool:
    if isinstance(edit, SetEnv):
        return edit.name.startswith(("SGLANG_", "SGL_")) and edit.value in ("0", "1", "true", "false")
    name = edit.to if isinstance(edit, RenameFlag) else edit.flag
    flag = catalog.get(name)
    if flag is None:
        return False
    values = (edit.values or ()) if isinstance(edit, (SetFlag, RenameFlag)) else ()
    for value in values:
        if flag.choices:
            if value not in flag.choices:
                return False
            continue
        kind = NUMBER_TYPES.get(flag.value_type or types.get(name[2:].replace("-", "_"), ""))
        try:
            kind(value)
        except (TypeError, ValueError):
            return False
    return True


def test_every_remedy_phrase_in_the_index_is_read_and_every_edit_is_valid() -> None:
    index = bundled_index()
    coverage = remedy_coverage(index)
    assert coverage.messages >= 300
    assert coverage.with_edit + coverage.flag_only + len(coverage.misses) == coverage.messages
    assert coverage.with_edit >= 190 and coverage.with_edit / coverage.messages >= 0.55
    parsable = coverage.messages - sum(
        n for r, n in coverage.reasons.items() if not r.startswith("names a flag")
    )
    assert coverage.with_edit + coverage.flag_only >= 0.9 * parsable
    checked = 0
    catalogs = {release: bundled(release) for release in index.releases}
    for check, raw in enumerate(index.checks):
        template = raw.get("template", "")
        if not REMEDY_PHRASE.search(template):
            continue
        release = index.occurrences(check)[-1][0]
        catalog = catalogs[release]
        for remedy in remedies(template, catalog, index.dests(release), index.types(release)):
            assert remedy.edit is None or _valid(remedy.edit, catalog, index.types(release)), (
                template,
                remedy,
            )
            assert remedy.flag is None or catalog.get(remedy.flag) is not None
            checked += remedy.edit is not None
    assert checked >= 300
