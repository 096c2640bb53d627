# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Configuration of Higgs Audio v3 TTS: a Qwen3 backbone plus the audio constants of the delay-pattern codes."""

from __future__ import annotations

import math

from transformers import Qwen3Config

from .delay_higgs_v3 import HiggsAudioV3AudioSpec


# The model class declares one auto class (`_auto_class`), so the whole map is written explicitly: `pipeline(
# "text-to-speech")` needs `AutoModelForTextToWaveform`, notebooks use `AutoModel`, the processor has its own file.
# Only the classes that fit: the model makes waveforms, not spectrograms (a model loaded as a
# `AutoModelForTextToSpectrogram` makes the text-to-speech pipeline fetch an unrelated vocoder).
AUTO_MAP: dict[str, str] = {
    "AutoConfig": "configuration_higgs_v3.HiggsAudioV3Config",
    "AutoModel": "modeling_higgs_v3.HiggsAudioV3ForConditionalGeneration",
    "AutoModelForTextToWaveform": "modeling_higgs_v3.HiggsAudioV3ForConditionalGeneration",
}
_UNFIT_AUTO_CLASSES: tuple[str, ...] = ("AutoModelForTextToSpectrogram",)
"""Auto classes an earlier conversion wrote into `auto_map`; dropped when such a config is loaded (and so re-saved)."""


class HiggsAudioV3Config(Qwen3Config):
    r"""
    Configuration of [`HiggsAudioV3ForConditionalGeneration`]: every Qwen3 backbone field (see [`Qwen3Config`]) plus
    the audio constants below. The defaults are those of `bosonai/higgs-audio-v3-tts-4b`.

    Audio fields:
        num_codebooks (`int`, defaults to 8): codebooks per audio frame (the codec's residual VQ depth).
        codebook_size (`int`, defaults to 1026): per-codebook vocabulary of the language model: the codec's codes
            plus BOC and EOC. The fused audio embedding and the audio head have `num_codebooks * codebook_size` rows.
        audio_boc_token_id (`int`, defaults to 1024): "before codebook" code, written into the delayed codebooks
            of the first rows; also the number of real codec codes (real codes are `0..audio_boc_token_id - 1`).
        audio_eoc_token_id (`int`, defaults to 1025): "end of codebook" code; codebook 0 emitting it ends speech.
        audio_placeholder_id (`int`, defaults to -100): placeholder id in `input_ids` for the positions of the delayed
            reference rows. It is never looked up in the token embedding; -100 is the original's value.
        tts_token_id (`int`, defaults to 151667): id of `<|tts|>`, the first token of every TTS prompt.
        audio_start_token_id (`int`, defaults to 151670): id of `<|audio|>`, the last prompt token.
        audio_end_token_id (`int`, defaults to 151671): id of `<|audio_end|>` (not produced by generation).
        text_token_id (`int`, defaults to 151672): id of `<|text|>`, which opens the text to speak.
        ref_audio_token_id (`int`, defaults to 151679): id of `<|ref_audio|>`, which opens the reference codes.
        ref_text_token_id (`int`, defaults to 151680): id of `<|ref_text|>`, which opens the reference transcript.
        sampling_rate (`int`, defaults to 24000): sample rate of the audio the codec reads and writes, in Hz.
        frame_rate (`int`, defaults to 25): codec frames per second; `sampling_rate / frame_rate` samples a frame.
        codec_config (`dict`, *optional*): configuration of the bundled codec (a complete `HiggsAudioV2TokenizerConfig`
            as a dict, e.g. the converter's `REAL_CODEC_CONFIG`). `None` builds the model without a codec (codes only,
            no waveforms).

    Example:

    ```python
    >>> from configuration_higgs_v3 import HiggsAudioV3Config
    >>> config = HiggsAudioV3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    ...                             num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    >>> config.num_codebooks, config.codebook_size, config.audio_spec.samples_per_frame
    (8, 1026, 960)
    ```
    """

    model_type = "higgs_audio_v3"
    _auto_class = "AutoConfig"  # `save_pretrained` copies this file and its relative imports beside `config.json`

    # Qwen3-4B backbone defaults.
    vocab_size: int = 151936
    hidden_size: int = 2560
    intermediate_size: int = 9728
    num_hidden_layers: int = 36
    num_attention_heads: int = 32
    num_key_value_heads: int | None = 8
    head_dim: int = 128
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    max_window_layers: int = 36
    bos_token_id: int | None = 151643
    eos_token_id: int | list[int] | None = 151643
    pad_token_id: int | None = 151643

    # Audio codes.
    num_codebooks: int = 8
    codebook_size: int = 1026
    audio_boc_token_id: int = 1024
    audio_eoc_token_id: int = 1025
    # Prompt specials (the processor looks them up by string and checks them against these).
    audio_placeholder_id: int = -100
    tts_token_id: int = 151667
    audio_start_token_id: int = 151670
    audio_end_token_id: int = 151671
    text_token_id: int = 151672
    ref_audio_token_id: int = 151679
    ref_text_token_id: int = 151680
    # Audio signal.
    sampling_rate: int = 24000
    frame_rate: int = 25
    codec_config: dict | None = None

    def __post_init__(self, **kwargs):
        if self.rope_parameters is None and "rope_theta" not in kwargs and "rope_scaling" not in kwargs:
            self.rope_parameters = {"rope_type": "default", "rope_theta": 1000000.0}
        if self.codec_config is not None and not isinstance(self.codec_config, dict):
            # A `HiggsAudioV2TokenizerConfig` (or any config object) is stored as its dict.
            self.codec_config = self.codec_config.to_dict()
        super().__post_init__(**kwargs)
        known = {k: v for k, v in (getattr(self, "auto_map", None) or {}).items() if k not in _UNFIT_AUTO_CLASSES}
        self.auto_map = {**AUTO_MAP, **known}
        self.validate_audio_fields()

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path, **kwargs) -> tuple[dict, dict]:
        """`PreTrainedConfig.get_config_dict`, refusing a config of another `model_type` (transformers only warns and
        builds a Higgs Audio v3 config from the other model's fields); a config without `model_type` is read."""
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        found = config_dict.get("model_type")
        if found is not None and found != cls.model_type:
            raise ValueError(
                f"{str(pretrained_model_name_or_path)!r} holds a config of model_type {found!r}, not a Higgs Audio v3 "
                f"one ({cls.model_type!r}); give a converted Higgs Audio v3 checkpoint (an original one converts with "
                "convert_checkpoint.py or `higgs_v3.from_original`)."
            )
        return config_dict, kwargs

    # ------------------------------------------------------------------ derived values
    @property
    def audio_spec(self) -> HiggsAudioV3AudioSpec:
        """The audio constants (codebooks, BOC/EOC, placeholder, sampling and frame rate) with the rows / frames /
        seconds arithmetic, as the processor and the streamers use them."""
        return HiggsAudioV3AudioSpec.from_config(self)

    @property
    def audio_vocab_size(self) -> int:
        """Rows of the fused audio embedding and of the audio head: `num_codebooks * codebook_size`."""
        return self.num_codebooks * self.codebook_size

    # ------------------------------------------------------------------ validation
    def validate_audio_fields(self) -> None:
        """One `ValueError` naming every audio field, and every key of `codec_config`, that does not fit the others
        (each problem a sentence of its own); nothing when they agree."""
        problems = HiggsAudioV3AudioSpec.problems(self)  # codebooks, BOC / EOC and the rates
        size, boc, eoc = self.codebook_size, self.audio_boc_token_id, self.audio_eoc_token_id
        if size < 3:
            problems.append(f"codebook_size must be at least 3 (codes, BOC, EOC), got {size}.")
        problems += [f"{name}={value} must lie in 0..{size - 1} (codebook_size={size})."
                     for name, value in (("audio_boc_token_id", boc), ("audio_eoc_token_id", eoc))
                     if not 0 <= value < size]
        if min(boc, eoc) != size - 2:
            problems.append(
                f"BOC and EOC must be the last two entries of each codebook: audio_boc_token_id={boc}, "
                f"audio_eoc_token_id={eoc}, codebook_size={size} (expected {size - 2} and {size - 1})."
            )
        specials = {name: getattr(self, name) for name in PROMPT_TOKEN_FIELDS}
        problems += [f"{name}={value} must be a token id in 0..{self.vocab_size - 1} (vocab_size={self.vocab_size})."
                     for name, value in specials.items() if not 0 <= value < self.vocab_size]
        if self.audio_placeholder_id in [value for name, value in specials.items() if name != "audio_end_token_id"]:
            problems.append(f"audio_placeholder_id={self.audio_placeholder_id} collides with a prompt special token "
                            "id.")
        if self.codec_config is not None:
            problems += self._codec_config_problems(self.codec_config)
        if problems:
            raise ValueError(" ".join(problems))

    def _codec_config_problems(self, codec) -> list[str]:
        """`codec_config_problems`, then the values that disagree with the audio fields (rate, codes, hop, VQ)."""
        problems = codec_config_problems(codec)
        if problems:
            return problems
        acoustic = codec["acoustic_model_config"]
        ratios = acoustic["downsampling_ratios"]
        sample_rate, codes, hop = codec["sample_rate"], codec["codebook_size"], math.prod(ratios)
        if sample_rate != self.sampling_rate:
            problems.append(f"codec_config sample_rate={sample_rate} differs from sampling_rate={self.sampling_rate}.")
        if codes != self.audio_boc_token_id:
            problems.append(
                f"codec_config codebook_size={codes} must equal audio_boc_token_id={self.audio_boc_token_id} "
                "(the codec's codes are 0..audio_boc_token_id - 1)."
            )
        if self.frame_rate > 0 and hop != self.sampling_rate // self.frame_rate:
            problems.append(
                f"codec_config hop length {hop} (product of downsampling_ratios {list(ratios)}) "
                f"differs from sampling_rate / frame_rate = {self.sampling_rate // self.frame_rate}."
            )
        frame_rate, bandwidths = -(-sample_rate // hop), codec["target_bandwidths"]
        quantizers = int(1000 * bandwidths[-1] // (frame_rate * max(1, (codes - 1).bit_length()))) if bandwidths else 0
        if quantizers != self.num_codebooks:
            problems.append(
                f"codec_config gives {quantizers} quantizers (target_bandwidths {list(codec['target_bandwidths'])} at "
                f"{frame_rate} frames/s) but num_codebooks={self.num_codebooks}."
            )
        return problems


def codec_config_problems(codec) -> list[str]:
    """What keeps `codec` from being a complete `HiggsAudioV2TokenizerConfig` dict, one sentence each: missing keys
    whose transformers defaults differ from the real codec's (`CODEC_CONFIG_KEYS`, `ACOUSTIC_CONFIG_KEYS`: a missing
    `target_bandwidths` would give 16 quantizers, missing DAC ratios a hop of 320) and sub-configs of another kind."""
    if not isinstance(codec, dict):
        return [f"codec_config must be a dict, got {type(codec).__name__}."]
    missing = [key for key in CODEC_CONFIG_KEYS if key not in codec]
    if missing:
        return [f"codec_config lacks {missing}: the codec is always built from a complete config (the transformers "
                "defaults differ from the real codec), e.g. the converter's `REAL_CODEC_CONFIG`."]
    problems = []
    for key, model_type in (("acoustic_model_config", "dac"), ("semantic_model_config", "hubert")):
        sub = codec[key]
        if not isinstance(sub, dict) or sub.get("model_type", model_type) != model_type:
            found = f"model_type={sub.get('model_type')!r}" if isinstance(sub, dict) else repr(sub)
            problems.append(f"codec_config[{key!r}] must be a {model_type!r} config, got {found}.")
    missing = [key for key in ACOUSTIC_CONFIG_KEYS if not problems and key not in codec["acoustic_model_config"]]
    if missing:
        problems.append(f"codec_config['acoustic_model_config'] lacks {missing} (their DAC defaults differ from the "
                        "codec's).")
    return problems


def check_codec_config(codec) -> dict:
    """`codec` if `codec_config_problems` finds nothing wrong with it, else their `ValueError` (for the converter,
    which takes a codec config before it builds the model's config)."""
    problems = codec_config_problems(codec)
    if problems:
        raise ValueError(" ".join(problems))
    return codec


PROMPT_TOKEN_FIELDS: tuple[str, ...] = (
    "tts_token_id", "audio_start_token_id", "audio_end_token_id", "text_token_id", "ref_audio_token_id",
    "ref_text_token_id",
)
"""The config fields that hold the ids of the prompt's special tokens."""
CODEC_CONFIG_KEYS: tuple[str, ...] = (
    "acoustic_model_config", "semantic_model_config", "target_bandwidths", "sample_rate", "semantic_sample_rate",
    "codebook_size", "codebook_dim", "downsample_factor",
)
ACOUSTIC_CONFIG_KEYS: tuple[str, ...] = ("downsampling_ratios", "upsampling_ratios", "hidden_size")


__all__ = ["AUTO_MAP", "HiggsAudioV3Config", "check_codec_config", "codec_config_problems"]
