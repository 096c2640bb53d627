# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""The few names that differ across the supported transformers releases (5.5 .. 5.24), detected once at import.

transformers 5.5 calls the KV cache `past_key_values` everywhere (forward kwargs, model outputs, generation kwargs);
later 5.x releases call it `cache` and keep `past_key_values` as a deprecated alias. We read and write whichever
name the installed release uses, so no deprecation warning fires and no private helper is imported.
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


__all__ = ["CACHE_KWARG", "CACHE_KWARGS", "pop_cache"]
