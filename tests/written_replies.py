"""An engine for drill checks: it answers each prompt with the next reply written by hand, greedy only."""

from __future__ import annotations

from orchlib.engines.base import GenerateResult, Generation


class WrittenReplies:
    """Answers the i-th prompt of a batch with `replies[i]`; asserts greedy decoding and one reply a prompt."""

    def __init__(self, tokenizer, replies: list[str]):
        self.tokenizer, self.replies = tokenizer, replies

    def generate(self, prompts, params, stop_ids=None):
        assert params.temperature == 0.0 and len(prompts) == len(self.replies)
        return GenerateResult([Generation(self.tokenizer.encode(r, add_special_tokens=False), [], "stop")
                               for r in self.replies], seconds=0.0)
