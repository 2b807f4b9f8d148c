"""evaluate.choice_gap: the exact probability gap P makes at the tool choice, against a closed form."""

import math
from types import SimpleNamespace

import pytest
import torch

from orchlib.demo import DEMO_PROFILES, DEMO_ROLLOUT, demo_suite
from orchlib.evaluate.gradients import profile_gradient_cosine
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



class _SharedAndOwn(torch.nn.Module):
    """Logits 0 everywhere but on the ids of `tool`'s name, which get s + a when the prompt shows the
    thrifty profile and s + b otherwise: under thrifty the margin's gradient is (c, c, 0) over (s, a, b),
    under the other profile (c', 0, c'), so the cosine is exactly 1/2 whatever c and c' are (same sign)."""

    def __init__(self, tokenizer, tool):
        super().__init__()
        self.tok = tokenizer
        self.name_ids = sorted(set(tokenizer.encode(tool, add_special_tokens=False)))
        self.s, self.a, self.b = (torch.nn.Parameter(torch.tensor(v)) for v in (0.5, -1.0, 2.0))
        self.frozen = torch.nn.Parameter(torch.tensor(3.0), requires_grad=False)  # not a trainable weight

    def forward(self, input_ids):
        text = self.tok.decode(input_ids[0].tolist())
        logits = torch.zeros(1, input_ids.shape[1], len(self.tok))
        logits[..., self.name_ids] = self.s + (self.a if "(thrifty)" in text else self.b) + 0 * self.frozen
        return SimpleNamespace(logits=logits)


def test_profile_gradient_cosine_has_its_closed_form_and_is_1_when_p_is_hidden(tiny_policy):
    model, tok = tiny_policy
    train, test, box = demo_suite(0, n_train=8, n_test=8)
    offered = [t for t in test if {"generalist", "mixtral"} <= set(t.tools or ())]
    assert offered
    shared = _SharedAndOwn(tok, "generalist")
    assert not set(shared.name_ids) & set(tok.encode("mixtral", add_special_tokens=False))
    cos = profile_gradient_cosine(shared, tok, test, box, DEMO_ROLLOUT, ("generalist", "mixtral"), DEMO_PROFILES)
    assert len(cos) == len(offered) and cos == pytest.approx([0.5] * len(offered), abs=1e-9)
    # the same prompt under both profiles: the same gradient
    hidden = DEMO_ROLLOUT.model_copy(update={"show_preference": False})
    before = [p.detach().clone() for p in model.parameters()]
    same = profile_gradient_cosine(model, tok, offered[:2], box, hidden, ("generalist", "mixtral"), DEMO_PROFILES)
    assert same == pytest.approx([1.0, 1.0], abs=1e-9)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    assert all(p.grad is None for p in model.parameters())


def test_profile_gradient_cosine_equals_an_independent_backward_pass(tiny_policy):
    from orchlib.chat import CALL_OPENING
    from orchlib.prompting import render_prompt, tool_schemas
    from orchlib.tasks import under_profiles

    model, tok = tiny_policy
    train, test, box = demo_suite(0, n_train=8, n_test=8)
    task = next(t for t in test if {"generalist", "mixtral"} <= set(t.tools or ()))
    flat = []
    for shown in under_profiles([task], DEMO_PROFILES):
        schemas = tool_schemas(box, shown, DEMO_ROLLOUT.tool_schema)
        head = render_prompt(shown, schemas, tok, DEMO_ROLLOUT) + CALL_OPENING
        n = len(tok.encode(head, add_special_tokens=False))
        margin = 0
        for sign, name in ((1, "generalist"), (-1, "mixtral")):
            ids = tok.encode(head + name, add_special_tokens=False)
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
            margin = margin + sign * sum(logp[i - 1, ids[i]] for i in range(n, len(ids)))
        model.zero_grad()
        margin.backward()
        flat.append(torch.cat([p.grad.flatten().double() for p in model.parameters() if p.grad is not None]))
        model.zero_grad(set_to_none=True)
    expected = float(torch.nn.functional.cosine_similarity(flat[0], flat[1], dim=0))
    got = profile_gradient_cosine(model, tok, [task], box, DEMO_ROLLOUT, ("generalist", "mixtral"), DEMO_PROFILES)
    assert got == pytest.approx([expected], abs=1e-6)
