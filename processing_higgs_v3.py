# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Prompt building and audio decoding for Higgs Audio v3 TTS: `HiggsAudioV3Processor` and an audio streamer.

The processor turns text (plus an optional reference voice per row) into the model inputs, in the three layouts of
the original (no bos, no chat template):

```
plain TTS:              <|tts|> <|text|> TEXT <|audio|>
clone, no transcript:   <|tts|> <|ref_audio|> [P]*L <|text|> TEXT <|audio|>
clone with transcript:  <|tts|> <|ref_text|> REF_TEXT <|ref_audio|> [P]*L <|text|> TEXT <|audio|>
```

`[P]` is the placeholder id (`audio_placeholder_id`, -100) and `L = T_ref + num_codebooks - 1` the number of rows of
the reference codes after the delay pattern (`delay_higgs_v3`); the delayed rows themselves go to `audio_input_ids`
(`[N, num_codebooks]`, all placeholders of the batch in order), which the model embeds at the placeholder positions.

**The codec is not part of the processor.** A processor saves its sub-processors as files or path pointers, and a
codec pointer would write a local path into a pushed repo; the codec's weights live inside the model instead. Every
method that needs audio <-> codes takes it explicitly: `codec=model.codec` (passing the model itself also works).
"""

from __future__ import annotations

import difflib
import os
import queue
import re
from collections.abc import Sequence

import numpy as np
import torch
from transformers import BatchFeature, ProcessorMixin
from transformers.generation import BaseStreamer
from transformers.utils import logging

from .audio_io_higgs_v3 import AudioLike, HiggsAudioV3Voice, prepare_reference_waveform, save_audio

# transformers 5.5 loads remote code from a local directory by copying only the entry module's *direct* relative
# imports (5.24 and the Hub path follow them recursively), so the module `audio_io_higgs_v3` needs is imported here too.
from .codec_higgs_v3 import resample_audio  # noqa: F401
from .delay_higgs_v3 import NO_END, apply_delay_pattern, revert_delay_pattern, speech_end_row, speech_rows


logger = logging.get_logger(__name__)

# Anything that looks like a special token (`<|...|>`, one line, no nested brackets) is checked against the tokenizer.
_TAG_PATTERN = re.compile(r"<\|[^<>|\n]*\|>")


def _resolve_codec(codec, purpose: str):
    """The codec module from `codec` (a codec, or a model holding one as `.codec`); a clear error when missing."""
    if codec is not None and not hasattr(codec, "decode") and hasattr(codec, "codec"):
        codec = codec.codec
    if codec is None:
        raise ValueError(
            f"{purpose} needs the codec: pass codec=model.codec. The processor does not hold the codec (saving it "
            "would write a path to the codec's weights into the processor files)."
        )
    return codec


def _codec_device(codec) -> torch.device:
    parameter = next(codec.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _as_tensor(output, field: str) -> torch.Tensor:
    """Codec outputs may be tensors, tuples or `ModelOutput`s, depending on `return_dict`."""
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, field):
        return getattr(output, field)
    return output[0]


def decode_codes(codec, codes: torch.LongTensor) -> torch.FloatTensor:
    """Codec decode of raw codes `[B, T, C]` (every value a real code) -> waveforms `[B, T * samples_per_frame]` (fp32,
    on the CPU)."""
    with torch.no_grad():
        audio = codec.decode(codes.transpose(1, 2).to(_codec_device(codec)))  # [B, C, T] -> [B, 1, N]
    return _as_tensor(audio, "audio_values")[:, 0].to(device="cpu", dtype=torch.float32)


class HiggsAudioV3Processor(ProcessorMixin):
    r"""
    Builds Higgs Audio v3 TTS prompts (left-padded batches, each row with its own reference voice or none) and turns
    generated codes back into 24 kHz waveforms. Holds the tokenizer only; the codec is passed per call
    (`codec=model.codec`, see the module docstring).

    Args:
        tokenizer: the Higgs Audio v3 tokenizer (Qwen2 byte-level BPE plus the 84 added tokens). Prompt specials are
            looked up in it by string; its `padding_side` is set to "left".
        chat_template: kept for `ProcessorMixin` compatibility (TTS prompts never use it).
        num_codebooks (`int`, defaults to 8): codes per frame (`config.num_codebooks`).
        audio_boc_token_id (`int`, defaults to 1024): BOC code of the delay pattern; raw codec codes are below it.
        audio_eoc_token_id (`int`, defaults to 1025): EOC code of the delay pattern.
        audio_placeholder_id (`int`, defaults to -100): id of the reference-row positions in `input_ids`.
        sampling_rate (`int`, defaults to 24000): the codec's sample rate in Hz.
        frame_rate (`int`, defaults to 25): codec frames per second.
        max_reference_seconds (`float`, defaults to 100.0): longer reference clips are refused (the official server's
            limit; 5 to 30 s of clean speech is plenty).
        min_reference_seconds (`float`, defaults to 1.0): shorter reference clips are padded with zeros at the end.

    With `pipeline("text-to-speech", model=repo, trust_remote_code=True)` the pipeline loads this processor and calls
    it with the text: `pipe("Hello.")` or `pipe(["Hello.", "Bye."])` give `{"audio", "sampling_rate": 24000}` each.
    Generation options go in `forward_params` (e.g. `{"seed": 0, "max_new_tokens": 2048}`), processor options in
    `preprocess_params`; to clone a voice, encode it once and pass it there:
    `voice = pipe.processor.encode_reference("ref.wav", text="Its transcript.", codec=pipe.model.codec)`, then
    `pipe("Hello.", preprocess_params={"reference": voice})`.

    Example:

    ```python
    >>> processor = HiggsAudioV3Processor(tokenizer)  # doctest: +SKIP
    >>> inputs = processor(["Hello there.", "<|emotion:anger|>Get out!"], reference=[voice, None])  # doctest: +SKIP
    >>> out = model.generate(**inputs, return_dict_in_generate=True)  # doctest: +SKIP
    >>> waveforms = processor.batch_decode(out.sequences, codec=model.codec)  # doctest: +SKIP
    >>> processor.save_audio(waveforms[0], "hello.wav")  # doctest: +SKIP
    ```
    """

    # Token strings of the prompt specials; their ids always come from the tokenizer.
    prompt_token_strings: dict[str, str] = {
        "pad": "<|endoftext|>",
        "tts": "<|tts|>",
        "text": "<|text|>",
        "audio_start": "<|audio|>",
        "ref_audio": "<|ref_audio|>",
        "ref_text": "<|ref_text|>",
    }
    # Added tokens `<|family:name|>` of these families are inline control tags users may write in the text; every
    # other added `<|...|>` token is structural and refused in user text.
    control_tag_families: tuple[str, ...] = ("emotion", "style", "sfx", "prosody", "env")
    # Config fields the processor's settings and token ids must agree with (see `check_model_config`).
    _config_token_fields: dict[str, str] = {
        "pad": "pad_token_id",
        "tts": "tts_token_id",
        "text": "text_token_id",
        "audio_start": "audio_start_token_id",
        "ref_audio": "ref_audio_token_id",
        "ref_text": "ref_text_token_id",
    }
    _config_value_fields: tuple[str, ...] = (
        "num_codebooks",
        "audio_boc_token_id",
        "audio_eoc_token_id",
        "audio_placeholder_id",
        "sampling_rate",
        "frame_rate",
    )

    def __init__(
        self,
        tokenizer,
        chat_template: str | None = None,
        num_codebooks: int = 8,
        audio_boc_token_id: int = 1024,
        audio_eoc_token_id: int = 1025,
        audio_placeholder_id: int = -100,
        sampling_rate: int = 24000,
        frame_rate: int = 25,
        max_reference_seconds: float = 100.0,
        min_reference_seconds: float = 1.0,
    ):
        super().__init__(tokenizer, chat_template=chat_template)
        # Prompts are left padded; saying so on the tokenizer also makes `pipeline(..., batch_size=n)` pad correctly.
        self.tokenizer.padding_side = "left"
        self.num_codebooks = num_codebooks
        self.audio_boc_token_id = audio_boc_token_id
        self.audio_eoc_token_id = audio_eoc_token_id
        self.audio_placeholder_id = audio_placeholder_id
        self.sampling_rate = sampling_rate
        self.frame_rate = frame_rate
        self.max_reference_seconds = max_reference_seconds
        self.min_reference_seconds = min_reference_seconds
        self._validate_settings()
        self._token_ids = self._lookup_prompt_token_ids()
        self._control_tags, self._structural_tokens = self._classify_added_tokens()

    # ------------------------------------------------------------------ setup
    def _validate_settings(self) -> None:
        if self.num_codebooks < 1:
            raise ValueError(f"num_codebooks must be at least 1, got {self.num_codebooks}.")
        boc, eoc = self.audio_boc_token_id, self.audio_eoc_token_id
        if boc <= 0 or eoc <= 0 or boc == eoc:
            raise ValueError(
                f"audio_boc_token_id={boc} and audio_eoc_token_id={eoc} must be two different positive codes."
            )
        if self.sampling_rate <= 0 or self.frame_rate <= 0 or self.sampling_rate % self.frame_rate:
            raise ValueError(
                f"sampling_rate={self.sampling_rate} must be a positive multiple of frame_rate={self.frame_rate}."
            )
        if not 0 <= self.min_reference_seconds <= self.max_reference_seconds:
            raise ValueError(
                f"Reference limits must satisfy 0 <= min_reference_seconds <= max_reference_seconds, got "
                f"{self.min_reference_seconds} and {self.max_reference_seconds}."
            )

    def _lookup_prompt_token_ids(self) -> dict[str, int]:
        added = self.tokenizer.get_added_vocab()  # {token: id}
        ids = {}
        for role, token in self.prompt_token_strings.items():
            if token not in added:
                raise ValueError(
                    f"The tokenizer has no {token!r} token; a Higgs Audio v3 tokenizer has the 84 added tokens of the "
                    "original (ids 151643..151726)."
                )
            ids[role] = added[token]
        return ids

    def _classify_added_tokens(self) -> tuple[list[str], set[str]]:
        added = self.tokenizer.get_added_vocab()
        families = tuple(f"<|{family}:" for family in self.control_tag_families)
        control = sorted((t for t in added if t.startswith(families) and t.endswith("|>")), key=added.__getitem__)
        structural = {t for t in added if _TAG_PATTERN.fullmatch(t) and t not in control}
        return control, structural

    @classmethod
    def from_model_config(cls, tokenizer, config, **kwargs) -> HiggsAudioV3Processor:
        """A processor whose audio settings are those of `config` (a `HiggsAudioV3Config`), checked against it."""
        settings = {name: getattr(config, name) for name in cls._config_value_fields}
        processor = cls(tokenizer, **{**settings, **kwargs})
        processor.check_model_config(config)
        return processor

    def check_model_config(self, config) -> None:
        """Raise a `ValueError` listing every prompt token id or audio setting that differs from `config`."""
        problems = []
        for role, field in self._config_token_fields.items():
            expected = getattr(config, field, None)
            if expected is not None and expected != self._token_ids[role]:
                problems.append(
                    f"{self.prompt_token_strings[role]} is id {self._token_ids[role]} in the tokenizer but "
                    f"config.{field}={expected}"
                )
        for field in self._config_value_fields:
            if getattr(config, field) != getattr(self, field):
                problems.append(f"processor {field}={getattr(self, field)} but config.{field}={getattr(config, field)}")
        if problems:
            raise ValueError("The processor does not match the model config: " + "; ".join(problems) + ".")

    # ------------------------------------------------------------------ properties
    @property
    def model_input_names(self) -> list[str]:
        return ["input_ids", "attention_mask", "audio_input_ids"]

    @property
    def samples_per_frame(self) -> int:
        """Waveform samples per codec frame (960)."""
        return self.sampling_rate // self.frame_rate

    @property
    def prompt_token_ids(self) -> dict[str, int]:
        """Ids of the prompt specials, looked up in the tokenizer: pad, tts, text, audio_start, ref_audio, ref_text."""
        return dict(self._token_ids)

    def valid_tags(self) -> list[str]:
        """The inline control tags the model knows (`<|emotion:*|>`, `<|style:*|>`, `<|sfx:*|>`, `<|prosody:*|>`,
        `<|env:*|>`), in id order. Each one is a single token."""
        return list(self._control_tags)

    # ------------------------------------------------------------------ text checks
    def check_control_tags(self, text: str, where: str = "the text") -> None:
        """Raise a `ValueError` for the first `<|...|>` in `text` that is not a control tag: a misspelled tag would be
        read aloud, and structural tokens (`<|tts|>`, `<|audio|>`, ...) are placed by the processor only."""
        for match in _TAG_PATTERN.finditer(text):
            tag = match.group(0)
            if tag in self._control_tags:
                continue
            if tag in self._structural_tokens:
                raise ValueError(
                    f"{tag!r} in {where} is a structural prompt token, which the processor places itself; remove it. "
                    "processor.valid_tags() lists the control tags."
                )
            close = difflib.get_close_matches(tag, self._control_tags, n=3, cutoff=0.6)
            hint = ("Closest valid tags: " + ", ".join(map(repr, close))) if close else "No valid tag is close to it"
            raise ValueError(
                f"Unknown control tag {tag!r} in {where}; it would be read aloud. {hint}. processor.valid_tags() lists "
                f"all {len(self._control_tags)}."
            )

    def _check_text(self, text, where: str) -> str:
        if not isinstance(text, str):
            raise ValueError(f"{where.capitalize()} must be a string, got {type(text).__name__}.")
        if not text.strip():
            raise ValueError(f"{where.capitalize()} is empty; there is nothing to speak.")
        self.check_control_tags(text, where)
        return text

    # ------------------------------------------------------------------ references
    def _check_raw_codes(self, codes, where: str) -> torch.LongTensor:
        """Raw codec codes `[T, num_codebooks]` with values in `0 .. audio_boc_token_id - 1`."""
        if isinstance(codes, np.ndarray):
            codes = torch.from_numpy(codes)
        if not isinstance(codes, torch.Tensor) or codes.is_floating_point() or codes.is_complex():
            raise ValueError(f"{where} must be an integer tensor of raw codec codes [frames, {self.num_codebooks}].")
        if codes.dim() != 2 or codes.shape[1] != self.num_codebooks or codes.shape[0] == 0:
            raise ValueError(
                f"{where} must be raw codec codes of shape [frames, {self.num_codebooks}] with at least one frame, got "
                f"shape {tuple(codes.shape)}. The codec's encode gives [1, {self.num_codebooks}, frames]: use "
                "codes[0].T."
            )
        low, high = int(codes.min()), int(codes.max())
        if low < 0 or high >= self.audio_boc_token_id:
            raise ValueError(
                f"{where} holds codes from {low} to {high}; raw codec codes lie in 0..{self.audio_boc_token_id - 1} "
                "(the processor adds the delay pattern with its BOC/EOC codes)."
            )
        return codes.detach().to(device="cpu", dtype=torch.long)

    def encode_reference(
        self,
        audio: AudioLike,
        text: str | None = None,
        sampling_rate: int | None = None,
        codec=None,
    ) -> HiggsAudioV3Voice:
        """Encode a reference clip once into a reusable `HiggsAudioV3Voice` (raw codes `[T, num_codebooks]` + text).

        `audio` is a path or an array (see `audio_io_higgs_v3.prepare_reference_waveform` for the accepted forms and
        the refusals); `sampling_rate` is required for arrays. `codec` is the model's codec (`model.codec`).
        """
        codec = _resolve_codec(codec, "Encoding reference audio")
        if text is not None:
            text = self._check_text(text, "the reference text")
        waveform = prepare_reference_waveform(
            audio,
            sampling_rate,
            target_sampling_rate=self.sampling_rate,
            min_seconds=self.min_reference_seconds,
            max_seconds=self.max_reference_seconds,
        )  # [N] at 24 kHz
        parameter = next(codec.parameters(), None)
        dtype = parameter.dtype if parameter is not None else torch.float32
        with torch.no_grad():
            codes = codec.encode(waveform.to(device=_codec_device(codec), dtype=dtype)[None, None])  # [1, C, T]
        codes = _as_tensor(codes, "audio_codes")
        if codes.dim() != 3 or codes.shape[:2] != (1, self.num_codebooks):
            raise ValueError(
                f"The codec returned codes of shape {tuple(codes.shape)}; expected [1, {self.num_codebooks}, frames] "
                f"(num_codebooks={self.num_codebooks})."
            )
        return HiggsAudioV3Voice(
            codes=codes[0].T, text=text, sampling_rate=self.sampling_rate, frame_rate=self.frame_rate
        )

    def voice_from_codes(self, codes: torch.LongTensor, text: str | None = None) -> HiggsAudioV3Voice:
        """A voice from one generated sequence (delayed rows `[rows, C]`, e.g. `out.sequences[i, : out.lengths[i]]`)
        or raw codes `[T, C]`, with its transcript: the way to keep a generated voice for later chunks or calls."""
        (raw,) = self.sequences_to_codes([codes])
        if text is not None:
            text = self._check_text(text, "the reference text")
        return HiggsAudioV3Voice(
            codes=self._check_raw_codes(raw, "The voice codes"), text=text, sampling_rate=self.sampling_rate,
            frame_rate=self.frame_rate,
        )

    @staticmethod
    def load_voice(path: str | os.PathLike) -> HiggsAudioV3Voice:
        """Read a voice saved with `HiggsAudioV3Voice.save` (`.safetensors` or `.json`; never pickle)."""
        return HiggsAudioV3Voice.load(path)

    @staticmethod
    def _per_row(value, name: str, batch_size: int) -> list:
        """One value per text: a list/tuple must have one entry per text; anything else applies to every text."""
        if isinstance(value, (list, tuple)):
            if len(value) != batch_size:
                raise ValueError(
                    f"{name} has {len(value)} entries for {batch_size} texts; pass one entry per text (None for no "
                    "reference) or a single value for all texts."
                )
            return list(value)
        return [value] * batch_size

    def _reference_codes(
        self, index: int, batch_size: int, voice, audio, ref_text, codes, sampling_rate, codec, encoded: dict
    ):
        """Resolve one row's reference to (raw codes `[T, C]` or None, transcript or None). `encoded` memoizes the
        codes of clips already encoded in this call (a clip given once for all texts is encoded once)."""
        sources = (("reference", voice), ("reference_audio", audio), ("reference_codes", codes))
        given = [name for name, value in sources if value is not None]
        if len(given) > 1:
            raise ValueError(
                f"Text {index} has more than one reference ({', '.join(given)}); pass exactly one of reference, "
                "reference_audio and reference_codes per text."
            )
        if isinstance(ref_text, str) and not ref_text.strip():
            ref_text = None
        if voice is not None:
            if not isinstance(voice, HiggsAudioV3Voice):
                raise ValueError(
                    f"reference for text {index} must be a HiggsAudioV3Voice (from processor.encode_reference or "
                    f"processor.load_voice), got {type(voice).__name__}."
                )
            if (voice.sampling_rate, voice.frame_rate) != (self.sampling_rate, self.frame_rate):
                raise ValueError(
                    f"The voice for text {index} was encoded at {voice.sampling_rate} Hz / {voice.frame_rate} frames "
                    f"per second; this model's codec runs at {self.sampling_rate} Hz / {self.frame_rate}."
                )
            if voice.text is not None and ref_text is not None:
                raise ValueError(
                    f"The voice for text {index} already carries its transcript; do not pass reference_text as well."
                )
            codes = self._check_raw_codes(voice.codes, f"The voice for text {index}")
            ref_text = voice.text if ref_text is None else ref_text
        elif audio is not None:
            key = (id(audio), sampling_rate)
            if key not in encoded:
                encoded[key] = self.encode_reference(audio, sampling_rate=sampling_rate, codec=codec).codes
            codes = encoded[key]
        elif codes is not None:
            codes = self._check_raw_codes(codes, f"reference_codes for text {index}")
        if codes is None and ref_text is not None:
            logger.warning_once(
                "A reference_text without reference audio is dropped: the transcript only helps together with the "
                "clip it describes."
            )
            ref_text = None
        if ref_text is not None:
            ref_text = self._check_text(ref_text, f"reference text {index}" if batch_size > 1 else "the reference text")
        return codes, ref_text

    # ------------------------------------------------------------------ prompts
    def __call__(
        self,
        text: str | list[str],
        reference_audio: AudioLike | Sequence[AudioLike | None] | None = None,
        reference_text: str | Sequence[str | None] | None = None,
        reference_codes: torch.Tensor | Sequence[torch.Tensor | None] | None = None,
        sampling_rate: int | Sequence[int | None] | None = None,
        reference: HiggsAudioV3Voice | Sequence[HiggsAudioV3Voice | None] | None = None,
        codec=None,
        return_tensors: str | None = "pt",
    ) -> BatchFeature:
        r"""
        Build the prompts of one text or a batch (left padded with `<|endoftext|>`).

        Each text takes at most one reference, given as `reference` (a `HiggsAudioV3Voice`), `reference_audio` (a
        path or array, encoded with `codec`) or `reference_codes` (raw codes `[T, num_codebooks]`), and optionally
        its transcript `reference_text` (kept only with a reference). Every reference argument is either one value
        for all texts or a list with one entry per text (None for none).

        Args:
            text: the text(s) to speak. Inline control tags (`processor.valid_tags()`) are allowed; any other `<|...|>`
                raises a `ValueError`.
            reference_audio: reference clip(s): paths, numpy arrays or torch tensors (see `encode_reference`).
            reference_text: transcript(s) of the references.
            reference_codes: raw codec codes `[T, num_codebooks]` of the references.
            sampling_rate: sample rate of array `reference_audio` in Hz (one for all, or one per text).
            reference: `HiggsAudioV3Voice` objects (from `encode_reference`, `voice_from_codes` or `load_voice`).
            codec: the model's codec (`model.codec`), needed only with `reference_audio`.
            return_tensors: "pt" (default), "np" or None (Python lists).

        Returns:
            `BatchFeature` with `input_ids` `[B, L]` (placeholders at reference positions), `attention_mask` `[B, L]`
            (0 on left padding) and, when any text has a reference, `audio_input_ids` `[N, num_codebooks]`: the
            delayed reference rows of all placeholders, batch-major in placeholder order.
        """
        if return_tensors not in ("pt", "np", None):
            raise ValueError(f"return_tensors must be 'pt', 'np' or None, got {return_tensors!r}.")
        texts = [text] if isinstance(text, str) else text
        if not isinstance(texts, (list, tuple)) or not texts:
            raise ValueError(f"text must be a string or a non-empty list of strings, got {text!r}.")
        batch_size = len(texts)
        texts = [self._check_text(t, f"text {i}" if batch_size > 1 else "the text") for i, t in enumerate(texts)]
        rows = zip(
            self._per_row(reference, "reference", batch_size),
            self._per_row(reference_audio, "reference_audio", batch_size),
            self._per_row(reference_text, "reference_text", batch_size),
            self._per_row(reference_codes, "reference_codes", batch_size),
            self._per_row(sampling_rate, "sampling_rate", batch_size),
        )
        encoded: dict = {}
        references = [self._reference_codes(i, batch_size, *row, codec, encoded) for i, row in enumerate(rows)]

        # One tokenizer call for every text and transcript; specials written as tags stay single tokens.
        transcripts = [ref_text for _, ref_text in references if ref_text is not None]
        encoded = self.tokenizer(texts + transcripts, add_special_tokens=False, split_special_tokens=False)["input_ids"]
        text_ids, transcript_ids = encoded[:batch_size], iter(encoded[batch_size:])

        ids = self._token_ids
        prompts, delayed_rows = [], []
        for (codes, ref_text), spoken in zip(references, text_ids):
            prompt = [ids["tts"]]
            if codes is not None:
                delayed = apply_delay_pattern(codes, self.audio_boc_token_id, self.audio_eoc_token_id)  # [T + C - 1, C]
                if ref_text is not None:
                    prompt += [ids["ref_text"], *next(transcript_ids)]
                prompt += [ids["ref_audio"]] + [self.audio_placeholder_id] * delayed.shape[0]
                delayed_rows.append(delayed)
            prompt += [ids["text"], *spoken, ids["audio_start"]]
            prompts.append(prompt)

        length = max(len(p) for p in prompts)
        data = {
            "input_ids": [[ids["pad"]] * (length - len(p)) + p for p in prompts],
            "attention_mask": [[0] * (length - len(p)) + [1] * len(p) for p in prompts],
        }
        if delayed_rows:
            data["audio_input_ids"] = torch.cat(delayed_rows).tolist()  # [N, C]
        return BatchFeature(data, tensor_type=return_tensors)

    # ------------------------------------------------------------------ codes -> audio
    def _sequence_end(self, delayed: torch.LongTensor) -> int:
        """Rows of one generated delayed sequence `[rows, C]` (`delay_higgs_v3.speech_end_row`): codebook 0's first EOC
        at a row `r >= C` ends speech with `r + C - 1` rows; without one, every row counts."""
        end_row = speech_end_row(delayed[:, 0], self.audio_eoc_token_id, self.num_codebooks)
        return int(speech_rows(end_row, self.num_codebooks, delayed.shape[0]))

    def _is_delayed(self, sequence: torch.LongTensor) -> bool:
        """Delayed rows start with `[code, BOC, ..., BOC]`; raw codes never hold BOC."""
        return sequence.shape[0] > 0 and bool((sequence[0, 1:] == self.audio_boc_token_id).all())

    def sequences_to_codes(
        self,
        sequences: torch.LongTensor | Sequence[torch.LongTensor],
        lengths: Sequence[int] | torch.Tensor | None = None,
        delayed: bool | None = None,
    ) -> list[torch.LongTensor]:
        """Generated sequences -> raw codes `[T_i, num_codebooks]` per sequence, ready for the codec (or a voice).

        Args:
            sequences: delayed rows as generated (`[rows, C]`, `[B, rows, C]` or a list of `[rows_i, C]`), or raw codes
                in the same shapes.
            lengths: valid rows (or frames, for raw codes) of each sequence of a padded `[B, rows, C]` tensor.
                Without it, a delayed sequence ends where its codebook 0 emitted EOC (see `_sequence_end`).
            delayed: whether `sequences` are delayed rows; None detects it per sequence (delayed rows start with
                `[code, BOC, ..., BOC]`, which raw codes never contain).

        Every code `>= audio_boc_token_id` (a BOC or EOC sampled where a real code belongs) becomes 0, as in the
        reference decoder.
        """
        if isinstance(sequences, torch.Tensor):
            if sequences.dim() == 2:
                sequences = sequences[None]
            if sequences.dim() != 3 or sequences.shape[-1] != self.num_codebooks:
                raise ValueError(
                    f"sequences must have shape [rows, {self.num_codebooks}] or [batch, rows, {self.num_codebooks}], "
                    f"got {tuple(sequences.shape)}."
                )
            sequences = list(sequences)
        if lengths is not None:
            lengths = [int(n) for n in lengths]
            if len(lengths) != len(sequences):
                raise ValueError(f"lengths has {len(lengths)} entries for {len(sequences)} sequences.")
            sequences = [s[:n] for s, n in zip(sequences, lengths)]
        codes = []
        for index, sequence in enumerate(sequences):
            sequence = torch.as_tensor(sequence).detach().to(device="cpu", dtype=torch.long)
            if sequence.dim() != 2 or sequence.shape[-1] != self.num_codebooks:
                raise ValueError(
                    f"Sequence {index} must have shape [rows, {self.num_codebooks}], got {tuple(sequence.shape)}."
                )
            if sequence.numel() and int(sequence.min()) < 0:
                raise ValueError(
                    f"Sequence {index} holds the negative code {int(sequence.min())}; codes lie in "
                    f"0..{max(self.audio_boc_token_id, self.audio_eoc_token_id)}."
                )
            if delayed if delayed is not None else self._is_delayed(sequence):
                sequence = sequence[: self._sequence_end(sequence)]
                if sequence.shape[0] < self.num_codebooks:
                    sequence = sequence.new_zeros(0, self.num_codebooks)  # not even one complete frame
                else:
                    sequence = revert_delay_pattern(sequence)  # [rows - C + 1, C]
            codes.append(sequence.masked_fill(sequence >= self.audio_boc_token_id, 0))
        return codes

    def batch_decode(
        self,
        sequences: torch.LongTensor | Sequence[torch.LongTensor],
        codec=None,
        lengths: Sequence[int] | torch.Tensor | None = None,
        delayed: bool | None = None,
    ) -> list[torch.FloatTensor]:
        """Generated sequences (see `sequences_to_codes`) -> one 24 kHz float32 waveform `[T_i * 960]` per sequence.

        Each sequence is decoded on its own (sequences of equal length together), so the result equals decoding it
        alone: the codec's convolutions are not causal and padding would change the last samples.
        """
        codec = _resolve_codec(codec, "Decoding codes to audio")
        codes = self.sequences_to_codes(sequences, lengths=lengths, delayed=delayed)
        waveforms: list[torch.FloatTensor | None] = [None] * len(codes)
        for num_frames in sorted({c.shape[0] for c in codes}):
            group = [i for i, c in enumerate(codes) if c.shape[0] == num_frames]
            if num_frames == 0:
                logger.warning_once(
                    "A sequence has no complete audio frame (fewer rows than codebooks); its waveform is empty."
                )
                audio = torch.zeros(len(group), 0)
            else:
                audio = decode_codes(codec, torch.stack([codes[i] for i in group]))  # [G, T * 960]
            for row, i in enumerate(group):
                waveforms[i] = audio[row]
        return waveforms

    def decode(self, sequence: torch.LongTensor, codec=None, delayed: bool | None = None) -> torch.FloatTensor:
        """One generated sequence (`[rows, C]` or `[1, rows, C]`) -> its 24 kHz float32 waveform `[T * 960]`."""
        if isinstance(sequence, torch.Tensor) and sequence.dim() == 3:
            if sequence.shape[0] != 1:
                raise ValueError(f"decode takes one sequence; got a batch of {sequence.shape[0]}, use batch_decode.")
            sequence = sequence[0]
        return self.batch_decode([sequence], codec=codec, delayed=delayed)[0]

    def save_audio(
        self, waveform: np.ndarray | torch.Tensor, path: str | os.PathLike, sampling_rate: int | None = None
    ):
        """Write a mono waveform to `path` (format from the extension) at `sampling_rate` (default: the codec's)."""
        return save_audio(waveform, path, sampling_rate=sampling_rate or self.sampling_rate)

    def audio_streamer(
        self,
        codec,
        first_chunk_frames: int = 10,
        chunk_frames: int = 25,
        context_frames: int = 12,
        timeout: float | None = None,
    ) -> HiggsAudioV3AudioStreamer:
        """An `HiggsAudioV3AudioStreamer` with this processor's audio settings (see its docstring)."""
        return HiggsAudioV3AudioStreamer(
            _resolve_codec(codec, "Streaming audio"),
            num_codebooks=self.num_codebooks,
            audio_boc_token_id=self.audio_boc_token_id,
            audio_eoc_token_id=self.audio_eoc_token_id,
            first_chunk_frames=first_chunk_frames,
            chunk_frames=chunk_frames,
            context_frames=context_frames,
            timeout=timeout,
        )


class HiggsAudioV3AudioStreamer(BaseStreamer):
    r"""
    Iterator over waveform chunks while `generate` runs (pass it as `streamer=`), for notebooks and live playback.

    `generate` calls `put(rows)` with each new delayed row `[B, C]` (or several, `[B, k, C]`; never the prompt) and
    `end()` when done. A codec frame `t` is complete once row `t + C - 1` arrived. The codec's decoder is not causal
    (about 10 frames of receptive field each side), so each chunk of frames `[s, e)` is decoded from frames
    `[s - context_frames, e + context_frames)` and cut to its own samples: a chunk is emitted once `context_frames`
    complete frames follow it (or the sequence ended). With `context_frames` at least the receptive field, the chunks
    concatenated equal the one-shot `processor.batch_decode` of the same rows up to float rounding.

    Each item is a float32 CPU tensor `[B, (e - s) * samples_per_frame]`; a sequence that already ended (codebook 0
    emitted EOC, as in `processor.sequences_to_codes`) gets zeros beyond its end. The first chunk holds
    `first_chunk_frames` frames (it arrives after about `first_chunk_frames + context_frames + C - 1` rows), the next
    ones `chunk_frames`; the last one whatever is left.

    Decoding runs inside `put`, i.e. in the thread running `generate`. If `generate` fails, iteration blocks; pass
    `timeout` (seconds) to get a `queue.Empty` instead.

    Example:

    ```python
    >>> from threading import Thread
    >>> streamer = processor.audio_streamer(model.codec)  # doctest: +SKIP
    >>> Thread(target=model.generate, kwargs={**inputs, "streamer": streamer}).start()  # doctest: +SKIP
    >>> for chunk in streamer:  # doctest: +SKIP
    ...     play(chunk[0])
    ```
    """

    def __init__(
        self,
        codec,
        num_codebooks: int = 8,
        audio_boc_token_id: int = 1024,
        audio_eoc_token_id: int = 1025,
        first_chunk_frames: int = 10,
        chunk_frames: int = 25,
        context_frames: int = 12,
        timeout: float | None = None,
    ):
        if first_chunk_frames < 1 or chunk_frames < 1 or context_frames < 0:
            raise ValueError(
                f"first_chunk_frames ({first_chunk_frames}) and chunk_frames ({chunk_frames}) must be at least 1 and "
                f"context_frames ({context_frames}) at least 0."
            )
        self.codec = _resolve_codec(codec, "Streaming audio")
        self.num_codebooks = num_codebooks
        self.audio_boc_token_id = audio_boc_token_id
        self.audio_eoc_token_id = audio_eoc_token_id
        self.first_chunk_frames = first_chunk_frames
        self.chunk_frames = chunk_frames
        self.context_frames = context_frames
        self.timeout = timeout
        self._rows: torch.LongTensor | None = None  # [B, n, C], on the CPU
        self._ends: torch.LongTensor | None = None  # [B]: frame count once codebook 0 ended speech, else NO_END
        self._emitted = 0  # frames already emitted (the same for every sequence)
        self._queue: queue.Queue = queue.Queue()

    # ------------------------------------------------------------------ BaseStreamer
    def put(self, value: torch.Tensor) -> None:
        """Receive the newest delayed row(s): `[B, C]` or `[B, k, C]`."""
        if value.dim() not in (2, 3) or value.shape[-1] != self.num_codebooks:
            raise ValueError(
                f"The audio streamer takes delayed rows [batch, {self.num_codebooks}] (or [batch, k, "
                f"{self.num_codebooks}]), got shape {tuple(value.shape)}; do not pass the prompt."
            )
        if value.dim() == 2:
            value = value[:, None, :]  # [B, 1, C]
        value = value.detach().to(device="cpu", dtype=torch.long)
        if self._rows is None:
            self._rows = value
            self._ends = torch.full((value.shape[0],), NO_END)
            first_row = 0
        else:
            if value.shape[0] != self._rows.shape[0]:
                raise ValueError(
                    f"The batch size changed from {self._rows.shape[0]} to {value.shape[0]} while streaming."
                )
            first_row = self._rows.shape[1]
            self._rows = torch.cat([self._rows, value], dim=1)
        # The row that ends speech (first EOC of codebook 0 at a row r >= C) is also its number of frames T = r.
        end_row = speech_end_row(value[:, :, 0], self.audio_eoc_token_id, self.num_codebooks, first_row=first_row)
        self._ends = torch.minimum(self._ends, end_row)
        self._emit(final=False)

    def end(self) -> None:
        """Flush every remaining frame and close the iterator."""
        if self._rows is not None:
            self._emit(final=True)
        self._queue.put(None)

    def __iter__(self):
        return self

    def __next__(self) -> torch.FloatTensor:
        chunk = self._queue.get(timeout=self.timeout)
        if chunk is None:
            raise StopIteration
        return chunk

    # ------------------------------------------------------------------ decoding
    def _emit(self, final: bool) -> None:
        rows = self._rows.shape[1]
        complete = max(rows - self.num_codebooks + 1, 0)  # frames whose C codes all arrived
        available = torch.clamp(self._ends, max=complete)  # [B] decodable frames of each sequence
        finished = self._ends <= complete  # [B] the sequence's last frame is complete
        if final or bool(finished.all()):
            target = int(available.max())
        else:
            target = int(available[~finished].min()) - self.context_frames
            needed = self.first_chunk_frames if self._emitted == 0 else self.chunk_frames
            if target - self._emitted < needed:
                return
        if target <= self._emitted:
            return
        self._queue.put(self._decode_chunk(self._emitted, target, available.tolist()))
        self._emitted = target

    def _decode_chunk(self, start: int, end: int, available: list[int]) -> torch.FloatTensor:
        """Samples of frames `[start, end)` of every sequence: `[B, (end - start) * samples_per_frame]`."""
        raw = revert_delay_pattern(self._rows[:, : max(available) + self.num_codebooks - 1])  # [B, T_max, C]
        raw = raw.masked_fill(raw >= self.audio_boc_token_id, 0)
        windows: dict[tuple[int, int], list[int]] = {}
        for b, edge in enumerate(available):
            if start < edge:
                window = (max(0, start - self.context_frames), min(end + self.context_frames, edge))
                windows.setdefault(window, []).append(b)
        chunk = None
        for (low, high), batch_rows in windows.items():
            audio = decode_codes(self.codec, raw[batch_rows, low:high])  # [G, (high - low) * spf]
            spf = audio.shape[1] // (high - low)
            if chunk is None:
                chunk = torch.zeros(len(available), (end - start) * spf)
            for g, b in enumerate(batch_rows):
                stop = min(end, available[b])
                chunk[b, : (stop - start) * spf] = audio[g, (start - low) * spf : (stop - low) * spf]
        return chunk


HiggsAudioV3Processor.register_for_auto_class("AutoProcessor")


__all__ = ["HiggsAudioV3AudioStreamer", "HiggsAudioV3Processor", "decode_codes"]
