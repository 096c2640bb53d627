# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Make the golden files of tests/test_resample.py with the real torchaudio (issue 12).

    python tests/golden/make_golden.py                 # downloads torchaudio's wheel (no install) into /tmp/torchaudio-wheel
    python tests/golden/make_golden.py --wheel PATH    # or use a wheel already here

There is no torchaudio build for the project's torch, so `torchaudio_resample.load_resample` reads torchaudio's own
`functional.resample` out of the wheel and runs it under the installed torch. Two files come out:

- `resample_torchaudio.safetensors`: inputs and torchaudio's outputs for every rate pair the project meets (8, 16,
  22.05, 44.1, 48, 96 kHz -> 24 kHz and 24 -> 16 kHz, plus 11.025 and 32 kHz), at lengths that are and are not
  multiples of the reduced ratio, with channel and batch axes; float32 (and one float64 case).
- `codes_torchaudio.safetensors`: the codes of the speech clips in this folder (espeak-ng, resampled with sox: a
  22.05 kHz clip, a 44.1 kHz clip, and the first 0.6 s of the 22.05 kHz one, shorter than the 1 s pad) through the
  official front end (soundfile read, mono, torchaudio resample to 24 kHz, zeros to 1 s) and transformers'
  `HiggsAudioV2TokenizerModel.encode` with torchaudio's resample in front of HuBERT, for two tiny codecs with
  seeded weights (`oracles.seeded_codec_state`): one plain, one whose acoustic branch is amplified.

The clips were made with:
    espeak-ng -v en-us -s 165 -w sp.wav "Hello there, this clip tests voice cloning."
    sox sp.wav -b 16 speech_22050.wav trim 0 1.7 ; sox sp.wav -b 16 -r 44100 speech_44100.wav trim 0 1.3
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import types
from pathlib import Path

import numpy as np
import soundfile
import torch
from safetensors.torch import save_file


HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from oracles import seeded_codec_state  # noqa: E402
from torchaudio_resample import fetch_wheel, load_resample  # noqa: E402


RATE_PAIRS = [(8000, 24000), (16000, 24000), (22050, 24000), (44100, 24000), (48000, 24000), (96000, 24000),
              (24000, 16000), (11025, 24000), (32000, 24000)]
CLIPS = {"speech_22050": ("speech_22050.wav", None), "speech_44100": ("speech_44100.wav", None),
         "speech_22050_short": ("speech_22050.wav", 0.6)}
CODECS = {"plain": 1.0, "acoustic": 30.0}  # name -> acoustic_gain
CODEC_SEED = 0
TOKENIZER_MODULE = "transformers.models.higgs_audio_v2_tokenizer.modeling_higgs_audio_v2_tokenizer"


def resample_cases(resample) -> tuple[dict[str, torch.Tensor], list[dict]]:
    generator = torch.Generator().manual_seed(12)
    tensors, cases = {}, []
    for orig, new in RATE_PAIRS:
        from math import gcd

        step = orig // gcd(orig, new)  # input samples per period of the reduced ratio
        for length, lead in ((step * 5, ()), (step * 5 + 3, (2,)), (301, (2, 3)), (1, ())):
            name = f"{orig}_{new}_{length}_{'x'.join(map(str, lead)) or 'mono'}"
            x = torch.randn(*lead, length, generator=generator) * 0.5
            tensors[f"{name}.input"] = x
            tensors[f"{name}.output"] = resample(x, orig, new).contiguous()
            cases.append({"name": name, "orig": orig, "new": new, "dtype": "float32"})
    x = torch.randn(2, 777, generator=generator, dtype=torch.float64)
    tensors["float64.input"], tensors["float64.output"] = x, resample(x, 44100, 24000).contiguous()
    cases.append({"name": "float64", "orig": 44100, "new": 24000, "dtype": "float64"})
    return tensors, cases


def official_waveform(path: Path, seconds: float | None, resample) -> torch.Tensor:
    """The official front end: read, mono, torchaudio to 24 kHz, zeros at the end to 1 s. `[1, 1, N]`."""
    samples, rate = soundfile.read(path, dtype="float32", always_2d=True)  # [N, channels]
    if seconds is not None:
        samples = samples[: int(seconds * rate)]
    mono = torch.from_numpy(np.ascontiguousarray(samples.mean(axis=1)))  # [N]
    wav = resample(mono, rate, 24000) if rate != 24000 else mono
    wav = torch.nn.functional.pad(wav, (0, max(0, 24000 - wav.shape[-1])))
    return wav.view(1, 1, -1).float()


def transformers_codec(resample, acoustic_gain: float):
    """transformers' `HiggsAudioV2TokenizerModel` with the real torchaudio resample, tiny config, seeded weights."""
    from higgs_v3.codec_higgs_v3 import build_codec_config  # transformers first: it probes for torchaudio on import
    from higgs_v3.testing.tiny import tiny_codec_config

    stub = types.ModuleType("torchaudio")
    stub.functional = types.SimpleNamespace(resample=resample)
    sys.modules["torchaudio"] = stub
    module = importlib.import_module(TOKENIZER_MODULE)

    model = module.HiggsAudioV2TokenizerModel(build_codec_config(tiny_codec_config())).eval()
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items() if name != "semantic_model.masked_spec_embed"}
    model.load_state_dict(seeded_codec_state(shapes, CODEC_SEED, acoustic_gain), strict=False)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, help="a torchaudio wheel (default: download it)")
    args = parser.parse_args()
    wheel = args.wheel or fetch_wheel("/tmp/torchaudio-wheel")
    resample = load_resample(wheel)
    torch.set_num_threads(1)

    tensors, cases = resample_cases(resample)
    meta = {"torchaudio": wheel.name, "torch": torch.__version__, "cases": json.dumps(cases)}
    save_file(tensors, HERE / "resample_torchaudio.safetensors", metadata=meta)
    print(f"resample_torchaudio.safetensors: {len(cases)} cases from {wheel.name} under torch {torch.__version__}")

    codes = {}
    with torch.no_grad():
        for codec_name, gain in CODECS.items():
            model = transformers_codec(resample, gain)
            for clip, (file, seconds) in CLIPS.items():
                wav = official_waveform(HERE / file, seconds, resample)
                codes[f"{clip}.{codec_name}"] = model.encode(wav, return_dict=False)[0].T.contiguous()  # [T, 8]
                print(f"{clip} / {codec_name}: {wav.shape[-1]} samples at 24 kHz -> codes {tuple(codes[f'{clip}.{codec_name}'].shape)}")
    meta = {"torchaudio": wheel.name, "torch": torch.__version__, "codec_seed": str(CODEC_SEED),
            "codecs": json.dumps(CODECS), "clips": json.dumps(CLIPS)}
    save_file(codes, HERE / "codes_torchaudio.safetensors", metadata=meta)


if __name__ == "__main__":
    main()
