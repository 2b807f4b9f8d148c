"""An engine that writes given text instead of sampling: golden trajectories, baselines, tests.

The script is a list of turns (the same for every trajectory) or a function
`(prompt_text, turn_index) -> text`. Its ids are the tokenizer's encoding of that text plus the stop
id, so everything downstream (parsing, masks, observation segments, accounting) runs exactly as with
a real model. Log-probs are a constant placeholder: these ids were not sampled.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

from orchlib.chat import IM_END, IM_START
from orchlib.engines.base import GenerateResult, Generation, SamplingParams

__all__ = ["ScriptedEngine"]


class ScriptedEngine:
    def __init__(self, tokenizer, turns: Sequence[str] | Callable[[str, int], str], logprob: float = -1.0):
        self.tokenizer = tokenizer
        self.turns = turns
        self.logprob = logprob
        self.calls: list[int] = []  # batch size of each generate call, for tests

    def text_for(self, prompt_text: str) -> str:
        turn = prompt_text.count(f"{IM_START}assistant") - 1
        if callable(self.turns):
            return self.turns(prompt_text, turn)
        return self.turns[min(turn, len(self.turns) - 1)]

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 stop_ids: Sequence[int] = ()) -> GenerateResult:
        t0 = time.perf_counter()
        self.calls.append(len(prompts))
        eos = self.tokenizer.convert_tokens_to_ids(IM_END)
        outs = []
        for p in prompts:
            text = self.text_for(self.tokenizer.decode(list(p), skip_special_tokens=False))
            ids = list(self.tokenizer.encode(text, add_special_tokens=False)) + [eos]
            finish = "stop"
            if len(ids) > params.max_new_tokens:
                ids, finish = ids[:params.max_new_tokens], "length"
            outs.append(Generation(ids, [self.logprob] * len(ids), finish))  # type: ignore[arg-type]
        return GenerateResult(outs, time.perf_counter() - t0, prompt_tokens=sum(map(len, prompts)))
