"""Requests that send input_embeds: the radix cache off and the model in bfloat16 (SGLang's model runner
casts the embeddings to bfloat16), on three blind cases and a second real launch (a float32 model)."""

from __future__ import annotations

from tests.recorded import PY, blind, decided, recorded_lines

RULE = "sglang.request.input-embeds"
BF16 = {"op": "set", "flag": "--dtype", "values": ["bfloat16"]}


def test_the_radix_cache_and_the_dtype_the_embeddings_need() -> None:
    # The 400 asks for --disable-radix-cache; the log shows a float16 model, which would fail next.
    assert blind("corpus-real-engine-25", "input-embeds-request-with-radix-cache-on")["edits"] == [
        {"op": "set", "flag": "--disable-radix-cache", "values": []},
        BF16,
    ]
    assert blind("corpus-real-engine-25", "input-embeds-disable-radix-cache-fp16-model-crash")["edits"] == [
        BF16
    ]
    assert blind("corpus-real-engine-17", "input-embeds-fp16-model-on-cpu-crashes-scheduler")["edits"] == [
        BF16
    ]


def test_a_float32_model_gets_bfloat16_and_without_embeddings_the_rule_stays_out() -> None:
    lines = recorded_lines("input-embeds-float32-model-disable-radix-cache.rc137.txt")
    command = f"{PY} --dtype float32 --disable-radix-cache"
    first = decided(command, lines, "runtime-crash")
    assert (first["playbook"], first["edits"]) == (RULE, [BF16])
    # The same dtype clash with no embeddings sent is another fault's.
    without = [x for x in lines if "input_embeds" not in x]
    assert decided(command, without, "runtime-crash")["playbook"] != RULE
