"""The objectives, samplers and probes the demo measured on its tiny policy; none is in the paper.

`variants` (VariantConfig: samplers, advantage transforms, token losses) and `replay` (SFT replay) plug into
training through `orchlib.train.hooks.Hooks`; `probes` reads a policy without training it.
"""

__all__: list[str] = []
