# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Configuration of Higgs Audio v3 TTS: a Qwen3 backbone plus the audio constants of the delay-pattern codes."""

from __future__ import annotations

from transformers import Qwen3Config

from .delay_higgs_v3 import HiggsAudioV3AudioSpec


# The real codec configuration (Higgs Audio v2 tokenizer, 8 quantizers, hop 960). The original checkpoint does not
# ship it, so the converter and `HiggsAudioV3Config.default_codec_config()` carry it.
REAL_CODEC_CONFIG: dict = {
    "acoustic_model_config": {
        "codebook_dim": 8,
        "codebook_loss_weight": 1.0,
        "codebook_size": 1024,
        "commitment_loss_weight": 0.25,
        "decoder_hidden_size": 1024,
        "downsampling_ratios": [8, 5, 4, 2, 3],
        "encoder_hidden_size": 64,
        "hidden_size": 256,
        "hop_length": 960,
        "model_type": "dac",
        "n_codebooks": 9,
        "quantizer_dropout": 0,
        "sampling_rate": 16000,
        "upsampling_ratios": [8, 5, 4, 2, 3],
    },
    "block_dilations": [1, 1],
    "channel_ratios": [1, 1],
    "codebook_dim": 64,
    "codebook_size": 1024,
    "downsample_factor": 320,
    "initializer_range": 0.02,
    "kernel_size": 3,
    "model_type": "higgs_audio_v2_tokenizer",
    "sample_rate": 24000,
    "semantic_model_config": {
        "activation_dropout": 0.1,
        "apply_spec_augment": True,
        "attention_dropout": 0.1,
        "bos_token_id": 1,
        "classifier_proj_size": 256,
        "conv_bias": False,
        "conv_dim": [512, 512, 512, 512, 512, 512, 512],
        "conv_kernel": [10, 3, 3, 3, 3, 2, 2],
        "conv_pos_batch_norm": False,
        "conv_stride": [5, 2, 2, 2, 2, 2, 2],
        "ctc_loss_reduction": "sum",
        "ctc_zero_infinity": False,
        "do_stable_layer_norm": False,
        "eos_token_id": 2,
        "feat_extract_activation": "gelu",
        "feat_extract_norm": "group",
        "feat_proj_dropout": 0.0,
        "feat_proj_layer_norm": True,
        "final_dropout": 0.1,
        "hidden_act": "gelu",
        "hidden_dropout": 0.1,
        "hidden_size": 768,
        "initializer_range": 0.02,
        "intermediate_size": 3072,
        "layer_norm_eps": 1e-05,
        "layerdrop": 0.1,
        "mask_feature_length": 10,
        "mask_feature_min_masks": 0,
        "mask_feature_prob": 0.0,
        "mask_time_length": 10,
        "mask_time_min_masks": 2,
        "mask_time_prob": 0.0,
        "model_type": "hubert",
        "num_attention_heads": 12,
        "num_conv_pos_embedding_groups": 16,
        "num_conv_pos_embeddings": 128,
        "num_feat_extract_layers": 7,
        "num_hidden_layers": 12,
        "pad_token_id": 0,
        "use_weighted_layer_sum": False,
        "vocab_size": 32,
    },
    "semantic_sample_rate": 16000,
    "strides": [1, 1],
    "target_bandwidths": [0.5, 1, 1.5, 2],
    "unit_kernel_size": 3,
}


# `register_for_auto_class` keeps one class per object, so the whole map is written explicitly: `pipeline(
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
        codec_config (`dict`, *optional*): configuration of the bundled codec (a `HiggsAudioV2TokenizerConfig` as a
            dict). `None` builds the model without a codec (codes only, no waveforms).

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
        """`PreTrainedConfig.get_config_dict` (what `from_pretrained` reads), refusing a config of another `model_type`:
        transformers only logs a warning and builds a Higgs Audio v3 config from the other model's fields. A
        `ValueError` naming the source and its `model_type`; a config without `model_type` is read as before."""
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

    @staticmethod
    def default_codec_config() -> dict:
        """The real codec configuration (8 quantizers, hop 960); a fresh copy."""
        import copy

        return copy.deepcopy(REAL_CODEC_CONFIG)

    # ------------------------------------------------------------------ validation
    def validate_audio_fields(self) -> None:
        """Raise a `ValueError` naming the values when audio fields do not agree with each other."""
        spec = self.audio_spec  # validates codebooks, BOC / EOC and the rates
        if self.codebook_size < 3:
            raise ValueError(f"codebook_size must be at least 3 (codes, BOC, EOC), got {self.codebook_size}.")
        for name in ("audio_boc_token_id", "audio_eoc_token_id"):
            value = getattr(self, name)
            if not 0 <= value < self.codebook_size:
                raise ValueError(f"{name}={value} must lie in 0..{self.codebook_size - 1} (codebook_size={self.codebook_size}).")
        if min(self.audio_boc_token_id, self.audio_eoc_token_id) != self.codebook_size - 2:
            raise ValueError(
                f"BOC and EOC must be the last two entries of each codebook: audio_boc_token_id={self.audio_boc_token_id}, "
                f"audio_eoc_token_id={self.audio_eoc_token_id}, codebook_size={self.codebook_size} "
                f"(expected {self.codebook_size - 2} and {self.codebook_size - 1})."
            )
        for name in (
            "tts_token_id",
            "audio_start_token_id",
            "audio_end_token_id",
            "text_token_id",
            "ref_audio_token_id",
            "ref_text_token_id",
        ):
            value = getattr(self, name)
            if not 0 <= value < self.vocab_size:
                raise ValueError(f"{name}={value} must be a token id in 0..{self.vocab_size - 1} (vocab_size={self.vocab_size}).")
        if 0 <= self.audio_placeholder_id < self.vocab_size and self.audio_placeholder_id in (
            self.tts_token_id,
            self.audio_start_token_id,
            self.text_token_id,
            self.ref_audio_token_id,
            self.ref_text_token_id,
        ):
            raise ValueError(f"audio_placeholder_id={self.audio_placeholder_id} collides with a prompt special token id.")
        if self.codec_config is not None:
            self._validate_codec_config(self.codec_config, spec)

    def _validate_codec_config(self, codec: dict, spec: HiggsAudioV3AudioSpec) -> None:
        sample_rate = codec.get("sample_rate", self.sampling_rate)
        if sample_rate != self.sampling_rate:
            raise ValueError(f"codec_config sample_rate={sample_rate} differs from sampling_rate={self.sampling_rate}.")
        codes = codec.get("codebook_size", self.audio_boc_token_id)
        if codes != self.audio_boc_token_id:
            raise ValueError(
                f"codec_config codebook_size={codes} must equal audio_boc_token_id={self.audio_boc_token_id} "
                "(the codec's codes are 0..audio_boc_token_id - 1)."
            )
        acoustic = codec.get("acoustic_model_config") or {}
        ratios = acoustic.get("downsampling_ratios")
        if ratios:
            hop = 1
            for r in ratios:
                hop *= r
            if hop != spec.samples_per_frame:
                raise ValueError(
                    f"codec_config hop length {hop} (product of downsampling_ratios {list(ratios)}) differs from "
                    f"sampling_rate / frame_rate = {spec.samples_per_frame}."
                )
            bandwidths = codec.get("target_bandwidths")
            codebook_bits = max(1, (codes - 1).bit_length())
            if bandwidths:
                frame_rate = -(-sample_rate // hop)
                quantizers = int(1000 * bandwidths[-1] // (frame_rate * codebook_bits))
                if quantizers != self.num_codebooks:
                    raise ValueError(
                        f"codec_config gives {quantizers} quantizers (target_bandwidths {list(bandwidths)} at "
                        f"{frame_rate} frames/s) but num_codebooks={self.num_codebooks}."
                    )


__all__ = ["AUTO_MAP", "HiggsAudioV3Config", "REAL_CODEC_CONFIG"]
