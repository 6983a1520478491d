"""The served model: fake tokens, real-looking timing, SGLang's per-request and per-interval spec metrics.

Accept length follows SGLang's definitions: per request `spec_accept_length = completion_tokens /
spec_verify_ct` (tokenizer_manager.py); per log interval `accept len` = accepted tokens / verify forwards,
`accept rate` = correct drafts / (forwards x (num_draft_tokens - 1)) (metrics_reporter.py); the server-wide
`avg_spec_accept_length` only counts intervals already logged (internal_state.py).
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from specdoctor.tools.simnode.logging_fmt import Log

FORWARD_S = 0.007
"""One decode forward on the simulated GPU (about 140 tokens/s for one request without speculation)."""
PREFILL_TOKENS_PER_S = 12000.0
SCHEDULER_RANK = 0
"""Batch lines come from the rank-0 scheduler (prefixed ` TP0` when tp > 1)."""
_WORDS = (
    "the",
    "model",
    "answers",
    "quietly",
    "with",
    "tokens",
    "that",
    "look",
    "plausible",
    "enough",
    "today",
)


class SpecPlan(BaseModel):
    model_config = ConfigDict(frozen=True)
    algorithm: str
    num_steps: int
    topk: int
    num_draft_tokens: int
    accept_length: float = Field(description="Mean tokens per verify forward, bonus token included.")


class Engine:
    def __init__(
        self,
        log: Log,
        *,
        speed: float,
        max_total_tokens: int,
        vocab_size: int,
        spec: SpecPlan | None,
        decode_log_interval: int,
        decode_graph: bool,
        decode_max_bs: int,
        prefill_graph: bool,
        report_accept: bool = True,
    ) -> None:
        self.log = log
        self.report_accept = report_accept
        """Whether requests, /server_info and the log show the accept length (/metrics always does)."""
        self.speed = speed
        self.max_total_tokens = max(1, max_total_tokens)
        self.vocab_size = max(2, vocab_size)
        self.spec = spec
        self.interval = max(1, decode_log_interval)
        self.decode_graph = decode_graph
        self.decode_max_bs = decode_max_bs
        self.prefill_graph = prefill_graph
        self.last_gen_throughput = 0.0
        self._lock = threading.Lock()
        self._running = 0
        self._tokens_in_use = 0
        self._forward_ct = 0
        self._window = {"tokens": 0, "forwards": 0, "correct": 0, "seconds": 0.0}
        self._total_accept = 0
        self._total_forwards = 0

    def average_accept_length(self) -> float | None:
        with self._lock:
            if self.spec is None or self._total_forwards <= 0:
                return None
            return self._total_accept / self._total_forwards

    def health(self) -> None:
        """The one-token generation /health runs."""
        self._prefill(1)

    def generate(self, prompt: str | list[int], max_new_tokens: int) -> dict[str, Any]:
        started = time.time()
        prompt_tokens = len(prompt) if isinstance(prompt, list) else max(1, len(prompt.encode()) // 4)
        completion = max(0, max_new_tokens)
        self._prefill(prompt_tokens)
        with self._lock:
            self._running += 1
            self._tokens_in_use += prompt_tokens
        try:
            verify_ct = self._decode(completion)
        finally:
            with self._lock:
                self._running -= 1
                self._tokens_in_use -= prompt_tokens
        ids = self._output_ids(prompt, completion)
        meta: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "finish_reason": {"type": "length", "length": completion},
            "prompt_tokens": prompt_tokens,
            "weight_version": "default",
            "completion_tokens": completion,
            "cached_tokens": 0,
            "e2e_latency": time.time() - started,
        }
        meta.update(self._spec_meta(completion, verify_ct))
        return {"text": " ".join(_WORDS[i % len(_WORDS)] for i in ids), "output_ids": ids, "meta_info": meta}

    def _prefill(self, tokens: int) -> None:
        time.sleep(tokens / PREFILL_TOKENS_PER_S * self.speed)
        with self._lock:
            usage = (self._tokens_in_use + tokens) / self.max_total_tokens
            running = self._running
        self.log.info(
            f"Prefill batch, #new-seq: 1, #new-token: {tokens}, #cached-token: 0, token usage: {usage:.2f}, "
            f"#running-req: {running}, #queue-req: 0, #pending-token: 0, cuda graph: {self.prefill_graph}, "
            f"input throughput (token/s): {min(tokens, 8192) / (tokens / PREFILL_TOKENS_PER_S + 0.004):.2f}",
            SCHEDULER_RANK,
        )

    def _decode(self, completion: int) -> int:
        """Run the decode forwards of one request; returns how many verify forwards it took."""
        accept = self.spec.accept_length if self.spec else 1.0
        forwards = max(1, round(completion / accept)) if completion else 0
        done = 0
        for i in range(forwards):
            tokens = (i + 1) * completion // forwards - done
            done += tokens
            time.sleep(FORWARD_S * self.speed)
            self._forward(tokens)
        return forwards

    def _forward(self, tokens: int) -> None:
        with self._lock:
            self._tokens_in_use += tokens
            self._forward_ct += 1
            w = self._window
            w["tokens"] += tokens
            w["forwards"] += 1
            w["correct"] += max(0, tokens - 1)
            w["seconds"] += FORWARD_S
            if self._forward_ct % self.interval:
                return
            line = self._decode_line()
        self.log.info(line, SCHEDULER_RANK)

    def _decode_line(self) -> str:
        w = self._window
        self.last_gen_throughput = w["tokens"] / w["seconds"] if w["seconds"] else 0.0
        parts = [
            f"Decode batch, #running-req: {self._running}",
            f"#token: {self._tokens_in_use}",
            f"token usage: {self._tokens_in_use / self.max_total_tokens:.2f}",
        ]
        if self.spec is not None:
            drafts = w["forwards"] * max(1, self.spec.num_draft_tokens - 1)
            if self.report_accept:
                parts.append(f"accept len: {w['tokens'] / w['forwards']:.2f}")
                parts.append(f"accept rate: {w['correct'] / drafts:.2f}")
            self._total_accept += w["tokens"]
            self._total_forwards += w["forwards"]
        graph = self.decode_graph and self._running <= self.decode_max_bs
        parts += [
            f"cuda graph: {graph}",
            f"gen throughput (token/s): {self.last_gen_throughput:.2f}",
            "#queue-req: 0",
        ]
        self._window = {"tokens": 0, "forwards": 0, "correct": 0, "seconds": 0.0}
        return ", ".join(parts)

    def _spec_meta(self, completion: int, verify_ct: int) -> dict[str, Any]:
        if self.spec is None or verify_ct <= 0 or not self.report_accept:
            return {}
        proposed = verify_ct * (self.spec.num_draft_tokens - 1)
        correct = completion - verify_ct
        if proposed <= 0:
            return {}
        return {
            "spec_accept_rate": correct / proposed,
            "spec_accept_length": completion / verify_ct,
            "spec_num_correct_drafts": correct,
            "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": verify_ct,
        }

    def _output_ids(self, prompt: str | list[int], count: int) -> list[int]:
        seed = hashlib.sha256(repr(prompt).encode()).digest()
        return [(seed[i % len(seed)] * 131 + i * 7919) % self.vocab_size for i in range(count)]
