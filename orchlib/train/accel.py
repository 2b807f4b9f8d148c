"""One Accelerator per training loop, with the precision both loops resolve the same way.

Accelerate keeps a single state per process: once a loop has made an Accelerator with one mixed
precision, asking for another raises deep inside Accelerate. SFT then GRPO in one notebook kernel (or
the demo) must therefore agree, which "auto" (the default of both configs) does.
"""

from __future__ import annotations

import torch

__all__ = ["resolve_mixed_precision", "make_accelerator"]


def resolve_mixed_precision(choice: str) -> str:
    """'auto' → 'bf16' on a GPU that has it, else 'no'; any other value as given."""
    if choice == "auto":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    return choice


def make_accelerator(mixed_precision: str = "auto", **kwargs):
    """An Accelerator; a precision that differs from the one this process already trains with is a
    clear error naming both, not Accelerate's traceback."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    mp = resolve_mixed_precision(mixed_precision)
    state = AcceleratorState._shared_state  # empty until the first Accelerator of the process
    if state and str(state.get("_mixed_precision", mp)) != mp:
        raise ValueError(f"mixed_precision={mixed_precision!r} ({mp}): this process already trains with "
                         f"{state['_mixed_precision']!r}, and Accelerate fixes one precision per process; use the "
                         f"same setting in every SFTConfig/GRPOConfig, or restart the kernel")
    return Accelerator(mixed_precision=mp, **kwargs)
