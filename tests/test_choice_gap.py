"""evaluate.choice_gap: the exact probability gap P makes at the tool choice, against a closed form."""

import math
from types import SimpleNamespace

import pytest
import torch

from orchlib.demo import DEMO_PROFILES, DEMO_ROLLOUT, demo_suite
from orchlib.experiments.probes import choice_gap

PAIR = ("generalist", DEMO_PROFILES)


class _PReader(torch.nn.Module):
    """Logits 0 everywhere but on the ids of `tool`'s name, which get `a` when the prompt shows the
    thrifty profile and `b` otherwise: p(name) has a closed form to check against."""

    def __init__(self, tokenizer, tool, a, b):
        super().__init__()
        self.tok, self.a, self.b = tokenizer, a, b
        self.name_ids = sorted(set(tokenizer.encode(tool, add_special_tokens=False)))

    def forward(self, input_ids):
        text = self.tok.decode(input_ids[0].tolist())
        logits = torch.zeros(1, input_ids.shape[1], len(self.tok))
        logits[..., self.name_ids] = self.a if "(thrifty)" in text else self.b
        return SimpleNamespace(logits=logits)


def test_choice_gap_matches_the_closed_form_and_is_zero_when_p_is_hidden(tiny_policy):
    model, tok = tiny_policy
    train, test, box = demo_suite(0, n_train=8, n_test=8)
    reader = _PReader(tok, "generalist", a=-1.0, b=2.0)
    head = '<tool_call>\n{"name": "'
    # the name's ids as they follow the call's opening (what choice_gap scores)
    ids = tok.encode(head + "generalist", add_special_tokens=False)[len(tok.encode(head, add_special_tokens=False)):]
    assert set(ids) <= set(reader.name_ids)
    k, V = len(reader.name_ids), len(tok)

    def p(w):
        return math.prod(math.exp(w) / (k * math.exp(w) + V - k) for _ in ids)

    assert choice_gap(reader, tok, test, box, DEMO_ROLLOUT, *PAIR) == pytest.approx(100 * (p(2.0) - p(-1.0)), rel=1e-5)
    hidden = DEMO_ROLLOUT.model_copy(update={"show_preference": False})
    assert choice_gap(model, tok, test, box, hidden, *PAIR) == 0.0  # same prompt under both profiles
    shown = choice_gap(model, tok, test, box, DEMO_ROLLOUT, *PAIR)
    assert math.isfinite(shown) and -100 <= shown <= 100

