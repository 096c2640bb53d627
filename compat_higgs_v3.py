# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""The few names that differ across the supported transformers releases (5.5 .. 5.24), detected once at import.

transformers 5.5 calls the KV cache `past_key_values` everywhere (forward kwargs, model outputs, generation kwargs);
later 5.x releases call it `cache` and keep `past_key_values` as a deprecated alias. We read and write whichever
name the installed release uses, so no deprecation warning fires and no private helper is imported.

Tensor parallelism moved too: 5.24 loads with `from_pretrained(..., distributed_config=DistributedConfig(tp_size=N))`
(`tp_plan=` is deprecated there) and knows a `"replicate"` plan style; 5.5 loads with `tp_plan="auto"` and has no
such style (a module outside the plan is replicated there, which is the same thing).
"""

from __future__ import annotations

from transformers.modeling_outputs import CausalLMOutputWithPast


CACHE_KWARG: str = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
"""Name of the KV cache in forward kwargs, model outputs and generation kwargs for the installed transformers."""

CACHE_KWARGS: tuple[str, ...] = ("cache", "past_key_values")


def pop_cache(kwargs: dict):
    """Remove the cache from `kwargs` under either name and return it (or `None`)."""
    found = None
    for name in CACHE_KWARGS:
        value = kwargs.pop(name, None)
        if value is not None:
            found = value
    return found


def _parallel_styles() -> set[str]:
    try:  # transformers >= 5.x with `transformers.distributed.tensor_parallel` (5.24); absent on 5.5
        from transformers.distributed.tensor_parallel import ALL_PARALLEL_STYLES
    except ImportError:
        return set()
    return set(ALL_PARALLEL_STYLES.keys())


REPLICATE_STYLE: str | None = "replicate" if "replicate" in _parallel_styles() else None
"""The tensor-parallel style that keeps a module whole on every rank, or None where the installed transformers has
none (a module outside the plan is then replicated all the same)."""


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


__all__ = ["CACHE_KWARG", "CACHE_KWARGS", "REPLICATE_STYLE", "pop_cache", "replicated", "tensor_parallel_kwargs"]
