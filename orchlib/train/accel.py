"""One Accelerator per training loop, with the precision both loops resolve the same way.

Accelerate keeps a single state per process: once a loop has made an Accelerator with one mixed
precision, asking for another raises deep inside Accelerate. SFT then GRPO in one notebook kernel (or
the demo) must therefore agree, which "auto" (the default of both configs) does.
"""

from __future__ import annotations

import torch

__all__ = ["resolve_mixed_precision", "make_accelerator", "cpu_has_amx", "cpu_description", "check_one_precision"]


def cpu_description() -> str:
    """The CPU's model name and its widest matrix path (AMX, AVX-512 or AVX2): results that turn on float
    rounding (what a sampled run learns) differ between these kinds, so reports say which one ran."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            info = f.read()
    except OSError:
        return platform.processor() or platform.machine()
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
                platform.machine())
    kind = "AMX" if " amx_bf16" in info else "AVX-512" if " avx512f" in info else "AVX2" if " avx2" in info else "?"
    return f"{name} ({kind})"


def cpu_has_amx() -> bool:
    """Whether this CPU has AMX's bf16 tiles (Intel Xeon from Sapphire Rapids on): there bf16 matrix
    products run about twice as fast as fp32 (SmolLM2-135M's update: 3.2 against 6.3 ms per trained id);
    elsewhere (AVX2, AVX-512 without AMX) bf16 is emulated and slower than fp32. Linux only."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return any(line.startswith("flags") and " amx_bf16" in line for line in f)
    except OSError:
        return False


def resolve_mixed_precision(choice: str) -> str:
    """'auto' → 'bf16' on a GPU that has it, else 'no'; 'amx' → as 'auto', and also 'bf16' on a CPU with
    AMX (`cpu_has_amx`); any other value as given."""
    cuda = torch.cuda.is_available()
    return _precision_on(choice, gpu_bf16=cuda and torch.cuda.is_bf16_supported(),
                         cpu_amx=choice == "amx" and not cuda and cpu_has_amx())  # reads /proc/cpuinfo only for amx


def _precision_on(choice: str, gpu_bf16: bool, cpu_amx: bool) -> str:
    """`resolve_mixed_precision` on a machine described by its two flags (`cpu_amx`: no GPU, AMX)."""
    if choice == "auto":
        return "bf16" if gpu_bf16 else "no"
    if choice == "amx":
        return "bf16" if gpu_bf16 or cpu_amx else "no"
    return choice


# The machines a run's settings must agree on: Accelerate keeps one precision per process, so the phases of
# one run must resolve alike everywhere, not only on the machine a recipe was written on.
_MACHINES = {"a GPU": dict(gpu_bf16=True, cpu_amx=False), "a CPU with AMX": dict(gpu_bf16=False, cpu_amx=True),
             "a CPU without AMX": dict(gpu_bf16=False, cpu_amx=False)}


def check_one_precision(phases: dict[str, str]) -> None:
    """A ValueError naming the machine and every phase's setting if the `mixed_precision` settings of one
    run's phases ({field: setting}) would train in two precisions on a GPU, on a CPU with AMX or on another
    CPU; a config validator calls it, so such a config is refused when it is read, not between phases."""
    for machine, flags in _MACHINES.items():
        resolved = {k: _precision_on(v, **flags) for k, v in phases.items()}
        if len(set(resolved.values())) > 1:
            said = ", ".join(f"{k}: {v!r} ({resolved[k]})" for k, v in phases.items())
            raise ValueError(f"mixed_precision: a run trains in one precision (Accelerate keeps one per process), "
                             f"but on {machine} its phases would differ ({said}); give every phase the same setting")


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
