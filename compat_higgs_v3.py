# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""The few names that differ across the supported transformers releases (5.5 .. 5.24), detected once at import.

transformers 5.5 calls the KV cache `past_key_values` everywhere (forward kwargs, model outputs, generation kwargs);
later 5.x releases call it `cache` and keep `past_key_values` as a deprecated alias. Our `forward` passes whichever
name the stock loop used on to the backbone and writes its output under the installed release's name, so no
deprecation warning fires and no private helper is imported.

Tensor parallelism moved too: 5.24 loads with `from_pretrained(..., distributed_config=DistributedConfig(tp_size=N))`
(`tp_plan=` is deprecated there) and knows a `"replicate"` plan style; 5.5 loads with `tp_plan="auto"` and has no
such style (a module outside the plan is replicated there, which is the same thing).

Pipelines' length default: transformers 5.5's `pipeline("text-to-speech")` passes its own default generation config
(`max_new_tokens=256`) as if a user had set it, replacing the repo's `max_new_tokens` (later releases rank it below
the model's); `prepare_generation_config` ranks it below the model's generation config on every release.
"""

from __future__ import annotations

import copy
import sys

from transformers import GenerationConfig, GenerationMixin
from transformers.modeling_outputs import CausalLMOutputWithPast


CACHE_KWARG: str = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
"""Name of the KV cache in forward kwargs, model outputs and generation kwargs for the installed transformers."""

try:  # `transformers.distributed.tensor_parallel` (5.24); absent on 5.5
    from transformers.distributed.tensor_parallel import ALL_PARALLEL_STYLES
except ImportError:
    ALL_PARALLEL_STYLES = {}
REPLICATE_STYLE: str | None = "replicate" if "replicate" in ALL_PARALLEL_STYLES else None
"""The tensor-parallel style that keeps a module whole on every rank, or None where there is none (see above)."""


def replicated(*modules: str) -> dict[str, str]:
    """Tensor-parallel plan entries that replicate `modules` (empty where there is no such style, see above)."""
    return dict.fromkeys(modules, REPLICATE_STYLE) if REPLICATE_STYLE else {}


def tensor_parallel_kwargs(tp_size: int | None = None) -> dict:
    """`from_pretrained` keyword arguments that shard the model with its own plan over `tp_size` ranks (default: the
    whole world of `torchrun`): `distributed_config=DistributedConfig(tp_size=...)` where transformers has it (5.24),
    else `tp_plan="auto"` (5.5, where `DistributedConfig` has no `tp_size`)."""
    import inspect

    try:
        from transformers import DistributedConfig
    except ImportError:  # 5.5 does not export it (its DistributedConfig configures expert parallelism only)
        DistributedConfig = None
    if DistributedConfig is not None and "tp_size" in inspect.signature(DistributedConfig).parameters:
        return {"distributed_config": DistributedConfig(tp_plan="auto", tp_size=tp_size)}
    return {"tp_plan": "auto", **({"tp_size": tp_size} if tp_size is not None else {})}


def prepare_generation_config(
    model, generation_config: GenerationConfig | None, **kwargs
) -> tuple[GenerationConfig, dict]:
    """`GenerationMixin._prepare_generation_config`, except that a pipeline's own default config ranks below the
    model's generation config (it fills only what the model's leaves unset); a user's keeps its priority."""
    pipeline = getattr(sys.modules.get("transformers.pipelines.text_to_audio"), "TextToAudioPipeline", None)
    if generation_config is not None and generation_config is getattr(pipeline, "_default_generation_config", None):
        merged = copy.deepcopy(model.generation_config)
        for key, value in generation_config.to_diff_dict().items():
            if key != "transformers_version" and getattr(merged, key, None) is None:
                setattr(merged, key, value)
        generation_config = merged
    return GenerationMixin._prepare_generation_config(model, generation_config, **kwargs)


__all__ = ["CACHE_KWARG", "REPLICATE_STYLE", "prepare_generation_config", "replicated", "tensor_parallel_kwargs"]
