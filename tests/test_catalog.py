from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specdoctor.tools.catalog_load import (
    CatalogError,
    bundled,
    bundled_versions,
    export_json,
    find_interpreter,
    for_command,
    from_file,
)
from specdoctor.tools.help_parser import parse_help

VERSIONS = bundled_versions()


def test_seventeen_releases_are_bundled():
    assert len(VERSIONS) == 17 and VERSIONS[0] == "0.3.6" and VERSIONS[-1] == "0.5.23"


@pytest.mark.parametrize("version", VERSIONS)
def test_every_bundled_help_parses_into_every_listed_option(version):
    text = (
        Path(__file__).parent.parent / "tools" / "data" / "sglang-help" / f"sglang-{version}.txt"
    ).read_text()
    cat = bundled(version)
    listed = sum(
        1 for line in text.splitlines() if line.startswith("  --") and not line.startswith("  --help")
    )
    assert len(cat) == listed
    assert cat.get("--model-path") is not None and cat.get("--model-path").required
    assert cat.resolve("--tp-size").status == "exact"


def test_flag_details_of_0523():
    cat = bundled("0.5.23")
    model = cat.get("--model")
    assert model.name == "--model-path" and "--model" in model.aliases
    tf32 = cat.get("--no-enable-tf32-matmul")
    assert (
        tf32.name == "--enable-tf32-matmul" and tf32.negation == "--no-enable-tf32-matmul" and tf32.nargs == 0
    )
    assert cat.get("--dtype").choices == ("auto", "half", "float16", "bfloat16", "float", "float32")
    assert cat.get("--numa-node").nargs == "+"
    assert cat.get("--mem-fraction-static").value_type == "float"
    assert cat.get("--tp-size").value_type == "int" and cat.get("--tp-size").aliases == (
        "--tensor-parallel-size",
    )
    assert cat.get("--disable-cuda-graph").deprecated
    assert "--cuda-graph-backend-{decode,prefill}=disabled" in cat.get("--disable-cuda-graph").help
    # argparse accepts flags hidden from --help; prefix matching must know them
    assert cat.resolve("--forward-pass-metrics-ipc-name").status == "exact"


@pytest.mark.parametrize(
    ("written", "status", "meant"),
    [
        ("--tp-size", "exact", "--tp-size"),
        ("--tensor-parallel-size", "exact", "--tp-size"),
        ("--tp", "prefix", "--tp-size"),
        ("--mem-frac", "prefix", "--mem-fraction-static"),
        ("--reasoning_parser", "underscore", "--reasoning-parser"),
        ("--Trust-Remote-Code", "underscore", "--trust-remote-code"),
        ("--num-speculative-tokens", "synonym", "--speculative-num-draft-tokens"),
        ("--max-model-len", "synonym", "--context-length"),
        ("--cuda-graph-max-bs", "synonym", "--cuda-graph-max-bs-decode"),
    ],
)
def test_resolution(written, status, meant):
    r = bundled("0.5.23").resolve(written)
    assert r.status == status
    assert (r.flag.name if r.flag else r.synonym.target) == meant


def test_ambiguous_prefix_lists_candidates_like_argparse():
    r = bundled("0.5.23").resolve("--speculative-draft")
    assert r.status == "ambiguous"
    assert "--speculative-draft-model-path" in r.candidates and "--speculative-draft-model" in r.candidates


def test_renamed_flag_is_only_a_synonym_where_it_is_gone():
    assert bundled("0.5.4").resolve("--cuda-graph-max-bs").status == "exact"
    assert bundled("0.5.23").resolve("--cuda-graph-max-bs").status == "synonym"


def test_model_alias_depends_on_version():
    assert bundled("0.5.23").resolve("--model").status == "exact"
    old = bundled("0.4.6").resolve("--model")
    assert old.status in ("ambiguous", "prefix") and old.status != "exact"


def test_similarity_survives_reordered_words_and_typos():
    cat = bundled("0.5.23")
    assert cat.suggest("--num-speculative-tokens")[0].flag == "--speculative-num-draft-tokens"
    r = cat.resolve("--attention-backnd")
    assert r.status == "similar" and r.confident.flag == "--attention-backend"
    assert cat.resolve("--speculative-num-step").status == "prefix"  # argparse would take it


@pytest.mark.parametrize("nonsense", ["--foo", "--xyzzy-plugh", "--enable-magic-speedup", "--a"])
def test_no_confident_guess_when_nothing_is_close(nonsense):
    r = bundled("0.5.23").resolve(nonsense)
    assert r.flag is None and r.confident is None


def test_grep_searches_names_and_help():
    names = [f.name for f in bundled("0.5.23").grep("draft tokens|num-draft")]
    assert "--speculative-num-draft-tokens" in names


def test_build_parser_reproduces_sglang_errors(capsys):
    parser = bundled("0.5.23").build_parser()
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--model-path", "m", "--num-speculative-tokens", "16"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "sglang serve: error: unrecognized arguments: --num-speculative-tokens 16"
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["--model-path", "m", "--cuda-graph-max-bs", "16"])
    assert "ambiguous option: --cuda-graph-max-bs could match" in capsys.readouterr().err


def test_help_parser_rejects_non_help_text():
    with pytest.raises(ValueError, match="argparse --help"):
        parse_help("hello world\n")


def test_catalog_file_help_text_and_export(tmp_path):
    help_file = tmp_path / "help.txt"
    help_file.write_text(
        (Path(__file__).parent.parent / "tools/data/sglang-help/sglang-0.5.4.txt").read_text()
    )
    cat = from_file(help_file)
    assert cat.get("--cuda-graph-max-bs") is not None
    exported = tmp_path / "cat.json"
    exported.write_text(export_json(cat))
    again = from_file(exported)
    assert [f.name for f in again.flags] == [f.name for f in cat.flags]
    with pytest.raises(CatalogError, match="cannot read"):
        from_file(tmp_path / "missing.txt")
    (tmp_path / "junk.txt").write_text("not help\n")
    with pytest.raises(CatalogError, match="argparse"):
        from_file(tmp_path / "junk.txt")
    (tmp_path / "bad.json").write_text(json.dumps({"flags": 3}))
    with pytest.raises(CatalogError, match="not a specdoctor catalog"):
        from_file(tmp_path / "bad.json")


def test_uninstalled_engine_falls_back_to_bundled_and_says_so():
    choice = for_command(("python3", "-m", "sglang.launch_server"), {})
    assert choice.catalog.version == "0.5.23"
    assert "not installed" in choice.note and "bundled" in choice.note
    missing = for_command(("no-such-python-xyz", "-m", "sglang.launch_server"), {})
    assert "not on PATH" in missing.note


def test_unknown_bundled_version_is_a_clear_error():
    with pytest.raises(CatalogError, match=r"bundled: 0\.3\.6"):
        for_command(("python",), {}, version="9.9")


def test_find_interpreter_keeps_venv_symlinks(tmp_path):
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    link = venv_bin / "python"
    os.symlink(os.path.realpath(os.sys.executable), link)
    assert find_interpreter((str(link), "-m", "sglang.launch_server"), {}) == str(link)
    script = venv_bin / "sglang"
    script.write_text(f"#!{link}\n")
    script.chmod(0o755)
    assert find_interpreter(("sglang", "serve"), {"PATH": str(venv_bin)}) == str(link)


@pytest.mark.real_sglang
def test_installed_engine_catalog_is_probed_once_then_cached(sglang_env):
    entry = tuple(sglang_env.launch_server())
    cold = for_command(entry, {})
    assert cold.note == "flags of the installed SGLang 0.5.23 (read from its --help)" and not cold.cached
    warm = for_command(entry, {})
    assert warm.cached and len(warm.catalog) == len(cold.catalog) == 529
    assert warm.catalog.get("--speculative-eagle-topk").value_type == "int"


def test_a_free_form_flags_builtin_names_are_its_listed_values() -> None:
    # --speculative-algorithm is free-form since 0.5.12; its help lists the algorithms SGLang has built in.
    listed = bundled("0.5.23").get("--speculative-algorithm").listed_values
    assert {"EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE"} <= set(listed)
    assert bundled("0.5.23").get("--device").listed_values[:2] == ("cuda", "xpu")
