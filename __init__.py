# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""higgs-v3: Higgs Audio v3 TTS as a native transformers model.

The modules beside this file are also the remote code of a converted Hub repo (loaded with `trust_remote_code=True`);
this package is how they are installed and imported locally.
"""

from .configuration_higgs_v3 import HiggsAudioV3Config
from .modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration, HiggsAudioV3PreTrainedModel


__version__ = "0.1.0"

__all__ = ["HiggsAudioV3Config", "HiggsAudioV3ForConditionalGeneration", "HiggsAudioV3PreTrainedModel"]
