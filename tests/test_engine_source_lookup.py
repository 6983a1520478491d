"""Finding the engine check behind a traceback frame or a pasted message, from the committed index (and
from an installed engine folder written here)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from specdoctor.tools.catalog_load import bundled_versions
from specdoctor.tools.engine_source.frames import parse_frames, raising_frame
from specdoctor.tools.engine_source.index import DATA, bundled_index
from specdoctor.tools.engine_source.locate import locate
from specdoctor.tools.engine_source.lookup import site_for_frame
from specdoctor.tools.engine_source.match import match_message, rank_messages
from specdoctor.tools.engine_source.model import Frame

OUTPUTS = Path(__file__).parent / "data" / "sglang-outputs"
SITE_PACKAGES = "/opt/venv/lib/python3.11/site-packages/sglang/"
CHECKOUT = "/home/me/src/sglang/python/sglang/"


def test_the_index_covers_every_bundled_release_and_stays_small() -> None:
    index = bundled_index()
    assert index.releases == bundled_versions()
    assert len(index.releases) == 17
    assert DATA.stat().st_size <= 5_000_000
    for release in index.releases:
        assert "srt/server_args.py" in index.files(release)
        assert len(index.sites(release)) >= 80
    assert len(index.sites("0.5.23")) > 3000


@pytest.mark.parametrize(
    ("version", "frame", "template_start", "fields"),
    [
        (
            "0.4.10",
            Frame(
                path=SITE_PACKAGES + "srt/model_executor/model_runner.py",
                line=1149,
                function="init_memory_pool",
                quoted="raise RuntimeError(",
            ),
            "Not enough memory. Please try to increase --mem-fraction-static.",
            (),
        ),
        (
            "0.5.15",
            Frame(
                path=CHECKOUT + "srt/server_args.py",
                line=4901,
                function="_handle_data_parallelism",
                quoted="assert self.tp_size % self.dp_size == 0",
            ),
            "",
            ("dp_size", "tp_size"),
        ),
        (
            "0.5.23",
            Frame(
                path=SITE_PACKAGES + "srt/arg_groups/speculative_hook.py",
                line=1278,
                function="_handle_eagle_family",
                quoted="raise ValueError(",
            ),
            "speculative_eagle_topk > 1 with page_size > 1 is only supported on",
            ("attention_backend", "page_size", "speculative_eagle_topk"),
        ),
    ],
)
def test_frame_lookup_in_real_releases(
    version: str, frame: Frame, template_start: str, fields: tuple
) -> None:
    for known in (version, None):
        found = site_for_frame(frame, version=known)
        assert found is not None and found.exact
        site = found.site
        assert (site.file, site.line, site.function_name) == (frame.engine_file, frame.line, frame.function)
        assert site.template.startswith(template_start)
        assert site.fields == fields
        assert site.release == version and site.source == "index"
        assert version in found.releases


def test_with_the_version_unknown_the_quoted_line_picks_the_release() -> None:
    """srt/server_args.py:577 in __post_init__ is a different check in 0.4.10 and in 0.5.1."""
    path = SITE_PACKAGES + "srt/server_args.py"
    quoted = 'logger.warning("Cuda graph is disabled for prefill server")'
    old = site_for_frame(Frame(path=path, line=577, function="__post_init__", quoted=quoted))
    new = site_for_frame(Frame(path=path, line=577, function="__post_init__", quoted="logger.warning("))
    assert old is not None and old.site.release == "0.4.10"
    assert old.site.template == "Cuda graph is disabled for prefill server"
    assert new is not None and new.site.release == "0.5.1"


def test_a_release_between_indexed_ones_finds_the_check_a_few_lines_away() -> None:
    # 0.4.10 has the check at 1149; a build a few lines off (a patch release, a local edit) still finds it.
    frame = Frame(
        path=SITE_PACKAGES + "srt/model_executor/model_runner.py",
        line=1156,
        function="init_memory_pool",
        quoted="raise RuntimeError(",
    )
    found = site_for_frame(frame, version="0.4.11")
    assert found is not None and not found.exact
    assert found.site.template.startswith("Not enough memory") and found.site.line == 1149
    assert site_for_frame(frame.model_copy(update={"function": "load_model"}), version="0.4.11") is None


def test_the_quoted_line_is_parsed_when_the_index_lacks_the_file() -> None:
    frame = Frame(
        path=SITE_PACKAGES + "srt/some_new_module.py",
        line=12,
        function="check",
        quoted='assert server_args.page_size in (1, 16), "page_size must be 1 or 16"',
    )
    found = site_for_frame(frame)
    assert found is not None and found.site.source == "traceback"
    assert found.site.fields == ("page_size",)
    assert found.site.template == "page_size must be 1 or 16"
    assert found.site.constraints[0].allowed().values == (1, 16)
    assert site_for_frame(frame.model_copy(update={"quoted": "raise ValueError("})) is None
    assert site_for_frame(frame.model_copy(update={"path": "/usr/lib/python3.11/runpy.py"})) is None


def test_the_installed_engine_is_read_as_text(tmp_path: Path) -> None:
    package = tmp_path / "site-packages" / "sglang"
    (package / "srt").mkdir(parents=True)
    (package / "srt" / "server_args.py").write_text(
        textwrap.dedent(
            """
            raise SystemExit("imported")

            class ServerArgs:
                page_size: int = 1

                def check(self):
                    if self.page_size > 1:
                        if self.attention_backend not in ("fa3", "flashinfer"):
                            raise ValueError(f"page_size > 1 needs fa3 or flashinfer, got {self.attention_backend}")
                    self.page_size = compute(self.page_size)
            """
        )
    )
    frame = Frame(path=str(package / "srt" / "server_args.py"), line=10, function="check")
    found = site_for_frame(frame, installed=package, version="9.9.9")
    assert found is not None and found.site.source == "installed" and found.site.release == "9.9.9"
    assert found.site.condition == "self.attention_backend not in ('fa3', 'flashinfer')"
    assert found.site.guards == ("self.page_size > 1",)
    assert found.site.fields == ("attention_backend",) and found.site.guard_fields == ("page_size",)
    plain = site_for_frame(frame.model_copy(update={"line": 11}), installed=package)
    assert plain is not None and plain.site.kind == "statement" and plain.site.fields == ("page_size",)
    elsewhere = Frame(
        path=SITE_PACKAGES + "srt/model_executor/model_runner.py", line=1149, function="init_memory_pool"
    )
    assert site_for_frame(elsewhere, installed=package, version="0.4.10").site.source == "index"


def test_frames_come_from_the_last_traceback_of_a_real_log() -> None:
    lines = (OUTPUTS / "spec-topk-gt-1-page-size-gt-1.rc1.txt").read_text().splitlines()
    frame = raising_frame(parse_frames(lines))
    assert frame is not None
    assert (frame.engine_file, frame.line, frame.function) == (
        "srt/arg_groups/speculative_hook.py",
        1278,
        "_handle_eagle_family",
    )
    assert frame.quoted == "raise ValueError("
    found = locate(lines, version="0.5.23")
    assert found is not None and found.exact and "page_size" in found.site.fields


def test_a_log_whose_frame_is_no_check_is_located_by_its_message() -> None:
    lines = [
        "[2026-12-03 08:06:50] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/sglang/lib/python3.11/site-packages/sglang/srt/utils/foo.py", line 10, in helper',
        "    do_it()",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ]
    found = locate(lines, version="0.4.6")
    assert found is not None and not found.exact
    assert found.site.release == "0.4.6" and found.site.file == "srt/model_executor/model_runner.py"


# ---- messages --------------------------------------------------------------------------------------

BRIEF = (
    "ValueError: speculative_eagle_topk > 1 with page_size > 1 is only supported on ['flashinfer', 'fa3', "
    "'triton']; got attention_backend='trtllm_mha'. Use page_size == 1 or one of those backends."
)


@pytest.mark.parametrize(
    "text",
    [
        BRIEF,
        "[2026-12-03 08:06:50 TP0] " + BRIEF,
        BRIEF.replace("'", '"'),
        BRIEF[:140],
        BRIEF.replace("ValueError: ", "").upper(),
    ],
)
def test_a_message_finds_its_check(text: str) -> None:
    found = match_message(text)
    assert found is not None and found.score >= 0.75
    assert found.site.file == "srt/arg_groups/speculative_hook.py"
    assert found.site.function_name == "_handle_eagle_family"
    assert "0.5.23" in found.releases


def test_a_message_prefers_the_release_asked_for() -> None:
    text = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    found = match_message(text, version="0.4.6")
    assert found is not None and found.score == 1.0 and not found.truncated
    assert (found.site.release, found.site.line) == ("0.4.6", 789)
    assert match_message(text).site.release == "0.5.1", "unknown version: the newest release with it"


@pytest.mark.parametrize(
    "text",
    [
        "IndexError: list index out of range",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "ValueError: The model is too big for this laptop and the user is sad about it",
        # The check's start, then words of another message: not this check.
        "speculative_eagle_topk > 1 with page_size > 1 is only supported on flashinfer but I wrote something "
        "else here that is long and is not a value of any kind at all really, see",
        "RuntimeError: Not enough memory. Please buy a bigger GPU and try again next year.",
    ],
)
def test_a_message_no_check_wrote_finds_nothing(text: str) -> None:
    assert match_message(text) is None


def test_the_same_message_raised_in_several_places_is_reported_as_alternatives() -> None:
    found = match_message("ValueError: Unsupported kv_cache_dtype: fp8_e5m2.", version="0.4.10")
    assert found is not None and found.alternatives
    assert {found.site.template, *(s.template for s in found.alternatives)} == {
        "Unsupported kv_cache_dtype: {self.server_args.kv_cache_dtype}."
    }
    assert [m.score for m in rank_messages("nothing like any check at all here", limit=3)] == []


@pytest.mark.parametrize(
    ("written", "release"),
    [
        ("0.4.10", "0.4.10"),
        ("0.3.1.post2 (docker lmsysorg/sglang:v0.3.1.post2-cu124)", None),
        ("lmsysorg/sglang:v0.4.6-cu124", "0.4.6"),
        ("0.5.19.dev410+gedff717ef", "0.5.18"),
        ("main @ b79e4b1e6", None),
        (None, None),
    ],
)
def test_versions_as_people_write_them(written: str | None, release: str | None) -> None:
    assert bundled_index().release(written) == release


def test_a_message_joined_across_an_f_string_seam_or_a_wrapped_line_still_matches() -> None:
    # SGLang's template reads "...no_buffer.To use radix cache..." (two f-strings, no space between);
    # the log wraps the line after "no_buffer." and a person pastes it with a space.
    from specdoctor.tools.engine_source.match import match_message

    said = (
        "ValueError: Speculative decoding for Qwen3_5MoeForConditionalGeneration is not compatible\n"
        "with radix cache when using --mamba-scheduler-strategy no_buffer. To use radix cache with\n"
        "speculative decoding, please use --mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1."
    )
    found = match_message(said)
    assert found is not None and found.score == 1.0 and found.site.kind == "raise"
    assert "no_buffer.To use" in found.site.template
