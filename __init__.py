# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""higgs-v3: Higgs Audio v3 TTS as a native transformers model.

The modules beside this file are also the remote code of a converted Hub repo (loaded with `trust_remote_code=True`);
this package is how they are installed and imported locally. Names are imported lazily, so `higgs-v3 --help` and the
command line's input checks do not pay for importing torch and transformers.
"""

from __future__ import annotations

import importlib


__version__ = "0.1.0"

_EXPORTS = {
    "HiggsAudioV3Config": "configuration_higgs_v3",
    "HiggsAudioV3ForConditionalGeneration": "modeling_higgs_v3",
    "HiggsAudioV3PreTrainedModel": "modeling_higgs_v3",
    "HiggsAudioV3GenerationOutput": "generation_higgs_v3",
    "HiggsAudioV3Processor": "processing_higgs_v3",
    "HiggsAudioV3AudioStreamer": "streaming_higgs_v3",
    "HiggsAudioV3AudioSpec": "delay_higgs_v3",
    "HiggsAudioV3Voice": "audio_io_higgs_v3",
    "HiggsAudioV3Codec": "codec_higgs_v3",
    "convert": "convert_checkpoint",
    "from_original": "conversion.cache",
    "converted_path": "conversion.cache",
    "tiny_random": "cli.models",
    "synthesize_long": "longform_higgs_v3",
    "synthesize_dialogue": "longform_higgs_v3",
    "synthesize_stream": "longform_higgs_v3",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = sorted(_EXPORTS)
