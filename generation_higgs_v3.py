# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Delay-pattern generation for Higgs Audio v3 inside transformers' `GenerationMixin` (work in progress)."""

from __future__ import annotations

from transformers import GenerationMixin


class HiggsAudioV3GenerationMixin(GenerationMixin):
    pass


__all__ = ["HiggsAudioV3GenerationMixin"]
