"""What the Trainer asks of its engine and of its token loss, and nothing more.

The engine says how it stands to the trainer's model (`shares_weights`, `exact_logprobs`): the trainer
syncs it and trusts its log-probs by those alone, never by the config's engine name. The token loss says
whether it reads the full log-softmax (`needs_full_logprobs`): only then is the [B, T, V] tensor built;
otherwise the sampled ids' log-probs come from `logprobs.sampled_logprobs`, which must agree with
log_softmax + gather."""

from __future__ import annotations

import copy
import inspect
import re

import pytest
import torch
from conftest import TOY_ROLLOUT

from orchlib.chat import render_call
from orchlib.engines.base import TrainableEngine, exact_logprobs, shares_weights
from orchlib.engines.scripted import ScriptedEngine
from orchlib.env import Environment
from orchlib.envs.toy import toy_tasks, toy_toolbox
from orchlib.reward import Reward
from orchlib.rollout import RolloutConfig
from orchlib.train import GRPOConfig, Hooks, Trainer
from orchlib.train.setup import make_engine
from orchlib.train.hooks import PaperLoss, needs_full_logprobs
from orchlib.train.logprobs import sampled_logprobs
from orchlib.trajectory import ToolCall

PLACEHOLDER = -1.0  # the scripted engine's log-prob of every id it writes: far from the policy's own


class CountingEngine(ScriptedEngine):
    """An engine the trainer knows nothing of: it writes one call to `right`, says how it stands to the
    trainer's model, and counts the syncs it is asked for."""

    def __init__(self, tokenizer, *, shares: bool, exact: bool):
        super().__init__(tokenizer, [render_call(ToolCall(name="right", arguments={}))], logprob=PLACEHOLDER,
                         on_end="repeat")
        self.shares_weights, self.exact_logprobs = shares, exact
        self.syncs, self.last_sync = 0, {}

    def clear_prefix_cache(self) -> None:
        pass

    def sync_weights(self, model) -> dict[str, float]:
        self.syncs += 1
        self.last_sync = {"seconds": 0.25, "tensors": 1.0}
        return self.last_sync


class Recording(PaperLoss):
    """The paper's loss, keeping each micro-batch it was given; `needs` is what it declares."""

    def __init__(self, needs: bool | None):
        self.batches = []
        if needs is not None:
            self.needs_full_logprobs = needs

    def __call__(self, batch, config):
        self.batches.append(batch)
        return super().__call__(batch, config)


class Undeclared:
    """A token loss written without `needs_full_logprobs`: it may read the full log-softmax."""

    def __init__(self):
        self.inner = Recording(None)
        self.batches = self.inner.batches

    def prepare(self, groups, advantages, tokenizer):
        return self.inner.prepare(groups, advantages, tokenizer)

    def __call__(self, batch, config):
        return self.inner(batch, config)


@pytest.fixture(scope="module")
def shared_trainer(tiny_policy):
    """A trainer of a copy of the tiny policy: one task, two rollouts a step, every group kept. Made once:
    what these tests read does not depend on its weights."""
    model, tok = tiny_policy
    env = Environment(train=toy_tasks(2), tools=toy_toolbox(), reward=Reward.from_string("name: a\nreward: outcome"))
    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), kl_coef=0.0, tasks_per_step=1, group_size=2,
                     min_reward_spread=None, seed=0)
    return Trainer((copy.deepcopy(model), tok), env, config=cfg)


@pytest.fixture
def trainer(shared_trainer):
    """The shared trainer with the paper's hooks and the engine it was made with, as each test begins."""
    engine, hooks = shared_trainer.engine, shared_trainer.hooks
    yield shared_trainer
    shared_trainer.engine, shared_trainer.hooks = engine, hooks


# ------------------------------------------------------------------------------------------- the engine
def test_step_and_update_never_ask_which_engine_they_have():
    for name in ("step", "_update", "_micro_loss", "_policy_logprobs", "_ref_logprobs"):
        src = inspect.getsource(getattr(Trainer, name))
        assert not re.search(r"\b(cfg|config)\.engine\b|Transformers|VLLM|isinstance", src), name


@pytest.mark.parametrize("shares", [False, True])
def test_an_engine_with_weights_of_its_own_is_synced_after_each_update(trainer, shares):
    engine = CountingEngine(trainer.tokenizer, shares=shares, exact=shares)
    trainer.engine = engine  # the config still names the transformers engine: it is not asked
    assert isinstance(engine, TrainableEngine)
    metrics = [trainer.step().metrics for _ in range(1 if shares else 2)]
    assert engine.syncs == (0 if shares else 2)
    assert all(("time/sync" in m) == (not shares) for m in metrics)
    if not shares:
        assert metrics[-1]["time/sync"] == 0.25


@pytest.mark.parametrize("exact", [False, True])
def test_the_ratio_denominator_is_the_engines_only_where_its_logprobs_are_exact(trainer, exact):
    trainer.engine = CountingEngine(trainer.tokenizer, shares=False, exact=exact)
    loss = Recording(False)
    trainer.hooks = Hooks(token_loss=loss)
    trainer.step()
    b = loss.batches[0]
    on = b.mask.bool()
    if exact:  # the engine's own numbers, however far from the policy's
        assert torch.all(b.old_logp[on] == PLACEHOLDER)
    else:  # the trainer's: the weights that sampled are the ones it holds
        assert torch.equal(b.old_logp, b.logp.detach())


def test_engines_declare_how_they_stand_to_the_trainers_model(trainer):
    from orchlib.engines.transformers import TransformersEngine
    from orchlib.engines.vllm import VLLMEngine

    assert shares_weights(TransformersEngine) and exact_logprobs(TransformersEngine)
    assert not shares_weights(VLLMEngine) and not exact_logprobs(VLLMEngine)
    built = make_engine(trainer.config, trainer.accelerator.unwrap_model(trainer.model), trainer.tokenizer, seed=0)
    assert isinstance(built, TransformersEngine) and built.sync_weights(None)["seconds"] == 0.0

    class Silent:  # no declaration: an engine that can take weights has weights of its own
        def sync_weights(self, model): ...

    assert not shares_weights(Silent()) and not exact_logprobs(Silent())
    assert shares_weights(object()) and exact_logprobs(object())


# ------------------------------------------------------------------------------------------- the loss
@pytest.mark.parametrize("needs", [False, True, None])
def test_the_full_logsoftmax_goes_only_to_a_loss_that_may_read_it(trainer, needs):
    loss = Recording(needs) if needs is not None else Undeclared()
    trainer.engine = CountingEngine(trainer.tokenizer, shares=True, exact=True)
    trainer.hooks = Hooks(token_loss=loss)
    assert needs_full_logprobs(loss) == (needs is not False)
    trajs = trainer.step().trajectories  # one kept group: the micro-batch's rows, in order
    b = loss.batches[0]
    assert b.logp.requires_grad and b.logp.shape == b.mask.shape
    if needs is False:
        assert b.logp_all is None
        return
    V = trainer.accelerator.unwrap_model(trainer.model).config.vocab_size
    assert b.logp_all.shape == (*b.logp.shape, V) and b.logp_all.requires_grad
    width = max(len(t.ids) for t in trajs)
    ids = torch.tensor([t.ids + [0] * (width - len(t.ids)) for t in trajs])[:, b.start + 1:]
    picked = b.logp_all.detach().gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    on = b.mask.bool()
    assert torch.allclose(b.logp.detach()[on], picked[on], rtol=0, atol=1e-6)


def test_the_papers_loss_declares_it_reads_sampled_ids_only():
    assert PaperLoss.needs_full_logprobs is False and not needs_full_logprobs(PaperLoss())


# ------------------------------------------------------------------------------------------- the numbers
def _reference(logits: torch.Tensor, ids: torch.Tensor, temperature: float):
    """log_softmax + gather and the entropy, over the whole [B, T, V] tensor at once."""
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp_all.gather(-1, ids.unsqueeze(-1)).squeeze(-1), -(logp_all.exp() * logp_all).sum(-1)


@pytest.mark.parametrize("chunk", [1 << 22, 2 * 7 * 300, 3 * 300, 100])  # whole batch; two rows a block;
# three positions a block (the last one short of the row, beside the extra position); one position
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sampled_logprobs_equal_log_softmax_and_gather_with_their_gradients(chunk, dtype):
    g = torch.Generator().manual_seed(0)
    B, T, V, temperature = 5, 7, 300, 0.7
    base = (torch.randn(B, T + 1, V, generator=g) * 3).to(dtype)  # one position more, as a model gives
    ids = torch.randint(0, V, (B, T), generator=g)
    weights = torch.randn(B, T, generator=g)

    full = base.clone().requires_grad_()
    want, want_ent = _reference(full[:, :-1], ids, temperature)
    (want * weights).sum().backward()
    mine = base.clone().requires_grad_()
    got, ent = sampled_logprobs(mine, ids, temperature, entropy=True, chunk_elements=chunk)
    (got * weights).sum().backward()

    tol = 1e-6  # float32 arithmetic, value by value
    assert got.dtype == torch.float32 and not ent.requires_grad
    assert torch.allclose(got, want, rtol=0, atol=tol) and torch.allclose(ent, want_ent, rtol=0, atol=tol)
    rtol = 0.0 if dtype == torch.float32 else 2 ** -7  # a bf16 gradient keeps 8 bits: one step of rounding
    assert mine.grad.dtype == dtype
    assert torch.allclose(mine.grad.float(), full.grad.float(), rtol=rtol, atol=tol)
    assert torch.all(mine.grad[:, -1] == 0)  # the extra position predicts nothing
    # and an independent computation, in float64 from the softmax's definition
    x = base[:, :-1].double() / temperature
    exact = x.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - x.exp().sum(-1).log()
    assert torch.allclose(got.double(), exact, rtol=0, atol=1e-5)


def test_sampled_logprobs_without_grad_and_with_too_few_positions():
    logits = torch.randn(2, 4, 10)
    with torch.no_grad():
        got, ent = sampled_logprobs(logits, torch.zeros(2, 4, dtype=torch.long))
    assert ent is None and torch.allclose(got, torch.log_softmax(logits, -1)[..., 0], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="logits cover 4 positions, ids 5"):
        sampled_logprobs(logits, torch.zeros(2, 5, dtype=torch.long))
