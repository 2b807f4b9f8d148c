"""sft_train on plain examples: step budgets, the early-stop check, the loss mask."""

from __future__ import annotations

import pytest
import torch

from orchlib.train import SFTConfig, SFTExample, sft_train
from orchlib.train.accel import resolve_mixed_precision


def _examples() -> list[SFTExample]:
    return [SFTExample([5, 6, 7, 8, 9, 10], [0, 0, 0, 1, 1, 1]), SFTExample([11, 12, 13, 14], [0, 0, 1, 1]),
            SFTExample([15, 16, 17, 18, 19], [0, 1, 1, 1, 1])]


def test_mask_and_ids_must_have_the_same_length():
    with pytest.raises(ValueError, match="3 ids but 2 mask"):
        SFTExample([1, 2, 3], [0, 1])


def test_a_step_budget_runs_exactly_that_many_steps_and_changes_the_weights(tiny_policy):
    model, tok = tiny_policy
    model = type(model)(model.config)
    model.load_state_dict(tiny_policy[0].state_dict())
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    report = sft_train(model, tok, _examples(), SFTConfig(max_steps=7, batch_size=2, learning_rate=1e-2),
                       progress=False)
    assert len(report.losses) == 7 and not report.stopped_early  # 2 batches per pass: passes reshuffle
    assert report.n_tokens == 3 + 2 + 4
    assert all(not torch.equal(before[n], p.cpu()) for n, p in model.named_parameters())  # on a GPU, p moved there


def _labelled_nll(model, examples: list[SFTExample]) -> float:
    """Mean -log p over the labelled ids of `examples` (each predicted from the position before it)."""
    total, n = 0.0, 0
    with torch.no_grad():
        for ex in examples:
            ids = torch.tensor([ex.ids], device=model.device)
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            for pos, (t, m) in enumerate(zip(ex.ids[1:], ex.mask[1:])):
                if m:
                    total, n = total - float(logp[pos, t]), n + 1
    return total / n


def test_one_update_lowers_the_loss_of_the_ids_it_trained_on(tiny_policy):
    """One step over the three examples in one batch: on those fixed ids, the cross-entropy of the
    labelled ids, computed independently before and after, falls (a step down the gradient of this very
    loss, at a small lr)."""
    model, tok = tiny_policy
    model = type(model)(model.config)
    model.load_state_dict(tiny_policy[0].state_dict())
    was = _labelled_nll(model, _examples())
    report = sft_train(model, tok, _examples(), SFTConfig(max_steps=1, batch_size=3, learning_rate=1e-3),
                       progress=False)
    assert len(report.losses) == 1
    tol = 1e-4 if resolve_mixed_precision("auto") == "no" else 5e-2  # bf16 on a GPU that has it
    assert report.losses[0] == pytest.approx(was, abs=tol)  # the step's own loss is this one
    assert _labelled_nll(model, _examples()) < was - 10 * tol


def test_until_ends_training_at_the_first_check_that_says_so(tiny_policy):
    model, tok = tiny_policy
    model = type(model)(model.config)
    model.load_state_dict(tiny_policy[0].state_dict())
    calls = []

    def until() -> bool:
        calls.append(model.training)
        return len(calls) == 2

    report = sft_train(model, tok, _examples(), SFTConfig(max_steps=50, batch_size=2, schedule="constant"),
                       progress=False, until=until, check_every=3)
    assert report.stopped_early and len(report.losses) == 6
    assert calls == [False, False]  # checked in eval mode


def _applied_lrs(model, tok, config: SFTConfig, **kw) -> tuple[list[float], object]:
    """The lr of every optimiser step `sft_train` takes, read as each step runs (a global step hook)."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    lrs: list[float] = []
    hook = register_optimizer_step_pre_hook(
        lambda opt, args, kwargs: lrs.append(opt.param_groups[0]["lr"]))
    try:
        report = sft_train(model, tok, _examples(), config, progress=False, **kw)
    finally:
        hook.remove()
    return lrs, report


def test_the_cooldown_takes_the_lr_to_zero_after_until_stops(tiny_policy):
    """With `cooldown_steps`, `until` saying stop at step 6 starts a linear fall of the lr over 4 more steps
    (no further check); at the budget's end the same fall closes the run."""
    model, tok = tiny_policy
    model = type(model)(model.config)
    model.load_state_dict(tiny_policy[0].state_dict())
    calls = []

    def until() -> bool:
        calls.append(len(calls))
        return len(calls) == 2

    config = SFTConfig(max_steps=50, batch_size=2, schedule="constant", learning_rate=1e-3, warmup_fraction=0.02,
                       cooldown_steps=4)
    lrs, report = _applied_lrs(model, tok, config, until=until, check_every=3)
    assert report.stopped_early and len(report.losses) == 10 and calls == [0, 1]
    assert lrs == pytest.approx([1e-3] * 7 + [7.5e-4, 5e-4, 2.5e-4])
    lrs, report = _applied_lrs(model, tok, config.model_copy(update={"max_steps": 8}))
    assert lrs == pytest.approx([1e-3] * 5 + [7.5e-4, 5e-4, 2.5e-4]) and not report.stopped_early
    with pytest.raises(ValueError, match="cooldown_steps=4 needs schedule='constant'"):
        SFTConfig(cooldown_steps=4)


def test_the_loss_is_cross_entropy_on_the_masked_ids_only(tiny_policy):
    """The first reported loss (before any update) against an independent computation."""
    model, tok = tiny_policy
    ex = SFTExample([5, 6, 7, 8, 9, 10, 11], [0, 0, 0, 1, 1, 0, 1])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ex.ids], device=model.device)).logits[0].float(), -1)
    targets = [(i - 1, t) for i, (t, m) in enumerate(zip(ex.ids, ex.mask)) if m]  # predicted from position i-1
    expected = -sum(float(logp[pos, t]) for pos, t in targets) / len(targets)
    m = type(model)(model.config)
    m.load_state_dict(model.state_dict())
    report = sft_train(m, tok, [ex], SFTConfig(max_steps=1, batch_size=1), progress=False)
    # "auto" trains in bf16 on a GPU that has it (measured on an H200: 8.6130 against 8.6120 in fp32)
    tol = 1e-5 if resolve_mixed_precision("auto") == "no" else 1e-2
    assert report.losses[0] == pytest.approx(expected, abs=tol)


def test_the_batch_loss_with_shared_heads_is_the_mean_over_every_labelled_id(tiny_policy):
    """Rows that share a 20-id head, rows of their own, replies that begin at different positions: with
    and without the shared-head forward, the loss is the mean of -log p over every labelled id, computed
    here row by row."""
    from orchlib.train.sft import batch_tensors, sft_loss

    model, _ = tiny_policy
    head = list(range(30, 50))
    examples = [SFTExample(head + [7] * k + [8, 9, 10][:r], [0] * (20 + k) + [1] * r)
                for k, r in ((2, 3), (5, 2), (1, 3))]
    examples += [SFTExample(list(range(60, 60 + n)), [0] * (n - 2) + [1, 1]) for n in (9, 26)]
    expected, count = 0.0, 0
    with torch.no_grad():
        for ex in examples:
            logp = torch.log_softmax(model(input_ids=torch.tensor([ex.ids])).logits[0].float(), -1)
            for i, (t, m) in enumerate(zip(ex.ids, ex.mask)):
                if m:
                    expected, count = expected - float(logp[i - 1, t]), count + 1
        for share in (False, True):
            loss = sft_loss(model, *batch_tensors(examples, 0, "cpu"), share=share)
            assert float(loss) == pytest.approx(expected / count, abs=1e-5)


def test_sft_then_grpo_with_another_precision_is_a_clear_error():
    """Accelerate fixes one precision per process. SFT then GRPO in one kernel on their defaults agree
    ("auto" on both); a second loop asking for another precision names both settings. In a fresh
    process, since this one's Accelerate state is shared by the other tests."""
    import subprocess
    import sys

    code = """
from orchlib.train.accel import make_accelerator, resolve_mixed_precision
import torch
gpu_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
assert resolve_mixed_precision("auto") == ("bf16" if gpu_bf16 else "no")
make_accelerator("auto"); make_accelerator("auto")  # the same precision twice is fine
other = "fp16" if resolve_mixed_precision("auto") == "bf16" else "bf16"
try:
    make_accelerator(other)
except ValueError as e:
    print("ERR", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    line = out.stdout.strip()
    assert line.startswith("ERR mixed_precision=") and "already trains with" in line and "restart the kernel" in line
