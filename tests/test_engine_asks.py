"""The bundled table of the messages each release writes that name a flag: what it reads from source, that
it agrees with the real SGLang 0.5.23 installed here, and what it grounds."""

from __future__ import annotations

import pytest

from specdoctor.tools.engine_source import asks

SOURCE = '''
"""Module docstring naming --not-a-message."""

def check(args, obj):
    if obj.embedding and not args.is_embedding:
        raise ValueError(
            "This model is not an embedding model. "
            "Please add `--is-embedding` when launching the server."
        )
    if args.tp > 1:
        msg = f"tp={args.tp} needs --enable-p2p-check on {args.host}"
        return msg
    parser.add_argument("--is-embedding", help="Whether to use --is-embedding as an embedding model.")
'''


def test_messages_are_the_statements_whose_strings_name_a_flag_not_help_texts_or_docstrings() -> None:
    found = asks.messages({"srt/x.py": SOURCE})
    assert [(rel, text) for rel, _, text in found] == [
        (
            "srt/x.py",
            "This model is not an embedding model. Please add `--is-embedding` when launching the server.",
        ),
        ("srt/x.py", "tp={} needs --enable-p2p-check on {}"),
    ]
    assert {line for _, line, _ in found} == {6, 11}


def test_a_message_is_the_releases_own_only_by_its_words_beside_the_flag() -> None:
    said = (
        "This model does not appear to be an embedding model by default. Please add `--is-embedding` when "
        "launching the server or try another model."
    )
    release, rel, _ = asks.written_by("0.5.23", "--is-embedding", said)
    assert (release, rel) == ("0.5.23", "srt/managers/tokenizer_manager.py")
    assert asks.written_by("0.5.23", "--trust-remote-code", said) is None  # another flag
    phrase = "Please add `--is-embedding` when launching the server."  # the flag's phrase, not the message
    assert asks.written_by("0.5.23", "--is-embedding", phrase) is None
    assert asks.written_by("0.2.0", "--is-embedding", said) is None  # older than every release
    filled = "LoRA adapter 'sql' was requested, but LoRA is not enabled. Please launch the server with "
    filled += "--enable-lora flag and preload adapters using --lora-paths or /load_lora_adapter endpoint."
    assert asks.written_by("0.5.23", "--enable-lora", filled)[1] == "srt/managers/tokenizer_manager.py"


@pytest.mark.real_sglang
def test_the_bundled_table_is_what_the_installed_release_writes(sglang_env) -> None:
    """Rebuilt from the real 0.5.23 package here, two request-handling files give exactly the bundled rows."""
    package = next(sglang_env.venv.glob("lib/python*/site-packages/sglang"))
    files = asks.tree_sources(package)
    wanted = ("srt/managers/tokenizer_manager.py", "srt/entrypoints/openai/serving_chat.py")
    derived = [row for row in asks.messages({f: files[f] for f in wanted})]
    table = asks._table()
    bundled = [
        (rel, line, table["texts"][i]) for i, rel, line in table["releases"]["0.5.23"] if rel in wanted
    ]
    assert derived and sorted(derived) == sorted(bundled)
