# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Prompt building for Higgs Audio v3 TTS: `HiggsAudioV3Processor`, the one place where text and references are checked.

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

**The processor prepares inputs and nothing else.** Audio <-> codes is the model's (its codec's weights live in the
model, as CSM's do): `model.encode_reference(clip, text=...)` makes a reusable voice, `generate` returns waveforms,
`model.decode_audio(...)` and `model.audio_streamer()` decode rows. A reference given as a clip (a file, an http(s)
URL, samples) is handled as CSM's processor handles audio: the processor prepares its waveform with the model's own
front end (`prepare_reference_waveform`), counts its frames with a pure function of the codec config
(`codec_num_frames`, no codec needed), lays out `[P]*L` for them and returns the waveform (`reference_audio`); the
clip's rows in `audio_input_ids` hold the placeholder id (-100) until `generate` encodes the clip with the model's
codec and fills them (`model.merge_reference_clips`).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import BatchFeature, ProcessorMixin
from transformers.utils import logging

from .audio_io_higgs_v3 import (
    MAX_REFERENCE_SECONDS,
    TARGET_ADVICE,
    VOICE_FILE_SUFFIXES,
    HiggsAudioV3Voice,
    clip_source,
    is_audio_url,
    prepare_reference_waveform,
    save_audio,
)
from .chunking_higgs_v3 import TAG_PATTERN

# transformers 5.5 loads remote code from a local directory by copying only the entry module's *direct* relative
# imports (5.24 and the Hub path follow them recursively), so the modules `audio_io_higgs_v3` needs are imported here.
from .codec_higgs_v3 import codec_num_frames, resample_audio  # noqa: F401
from .configuration_higgs_v3 import REAL_CODEC_CONFIG
from .delay_higgs_v3 import HiggsAudioV3AudioSpec


logger = logging.get_logger(__name__)

_TAG_START = re.compile(r"<\|[^\s<>|]*")  # an opening `<|` and what follows it up to a space or bracket

LONG_PROMPT_TEXT_TOKENS: int = 1024
"""A text of more tokens than this in one processor call is spoken as one generation with a warning: the model was
trained on sentence-sized chunks and tends to run away or skip words on long ones; `synthesize_long` splits a long
text into chunks (300 characters, about 100 tokens, by default)."""

TTS_CHAT_TEMPLATE: str = (
    "{#- Higgs Audio v3 TTS prompt (no ChatML, no system prompt): an optional reference turn (an audio item plus its "
    "transcript as text), then the text to speak. The reference rows follow <|ref_audio|> as placeholders, which "
    "the processor inserts when it tokenizes. -#}\n"
    "{%- for message in messages -%}\n"
    "{%- set content = [{'type': 'text', 'text': message['content']}] if message['content'] is string "
    "else message['content'] -%}\n"
    "{%- set text = content | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('') -%}\n"
    "{%- if loop.first %}{{- '<|tts|>' -}}{% endif -%}\n"
    "{%- if content | selectattr('type', 'equalto', 'audio') | list -%}\n"
    "{%- if text | trim %}{{- '<|ref_text|>' + text -}}{% endif -%}\n"
    "{{- '<|ref_audio|>' -}}\n"
    "{%- else -%}\n"
    "{{- '<|text|>' + text + '<|audio|>' -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
)
"""The chat template of a converted repo (`chat_template.jinja`): it renders the TTS prompt of a conversation as text
(`apply_chat_template(..., tokenize=False)`), `<|ref_audio|>` standing for the reference rows. Tokenizing goes
through the processor itself (`apply_chat_template(..., tokenize=True)` equals `processor(...)`)."""


REFERENCE_CLIP_KEYS: tuple[str, ...] = ("reference_audio", "reference_audio_lengths")
"""The processor's outputs for reference clips, which `generate` encodes with the model's codec (see `__call__`)."""


@dataclass(frozen=True)
class _Clip:
    """A reference clip as the processor prepared it: the 24 kHz mono float32 waveform `[N]` the codec will encode
    (`prepare_reference_waveform`, exactly as `model.encode_reference` prepares it) and its codec frame count."""

    waveform: torch.FloatTensor
    num_frames: int


class HiggsAudioV3BatchFeature(BatchFeature):
    r"""The processor's `BatchFeature`. Its `to(...)` casts and moves like `BatchFeature.to`, except that the reference
    clips' waveforms (`reference_audio`) only move: they stay float32, as the codec encodes them (transformers'
    text-to-speech pipeline casts the processor's output to the model's dtype; a bfloat16 waveform would change the
    clip's codes)."""

    def to(self, *args, **kwargs) -> HiggsAudioV3BatchFeature:
        audio = self.data.get("reference_audio")
        if not isinstance(audio, torch.Tensor):
            return super().to(*args, **kwargs)
        device = kwargs.get("device")
        if device is None and args and not isinstance(args[0], torch.dtype):
            device = args[0]
        order = list(self.data)
        del self.data["reference_audio"]
        super().to(*args, **kwargs)
        self.data["reference_audio"] = audio if device is None else audio.to(device=device)
        self.data = {key: self.data[key] for key in order}
        return self


class HiggsAudioV3Processor(ProcessorMixin):
    r"""
    Builds Higgs Audio v3 TTS prompts: left-padded batches, each row with its own reference voice or none. Holds the
    tokenizer and the audio settings (`audio_spec`); it checks every text, transcript and reference it is given, so
    that nothing invalid reaches the model.

    Args:
        tokenizer: the Higgs Audio v3 tokenizer (Qwen2 byte-level BPE plus the 84 added tokens). Prompt specials are
            looked up in it by string; its `padding_side` is set to "left".
        chat_template: the template `apply_chat_template` renders with (defaults to `TTS_CHAT_TEMPLATE`; a template
            that does not render TTS prompts, such as the original's ChatML, is replaced by it with a warning).
        num_codebooks (`int`, defaults to 8): codes per frame (`config.num_codebooks`).
        audio_boc_token_id (`int`, defaults to 1024): BOC code of the delay pattern; raw codec codes are below it.
        audio_eoc_token_id (`int`, defaults to 1025): EOC code of the delay pattern.
        audio_placeholder_id (`int`, defaults to -100): id of the reference-row positions in `input_ids`.
        sampling_rate (`int`, defaults to 24000): the codec's sample rate in Hz.
        frame_rate (`int`, defaults to 25): codec frames per second.

    With `pipeline("text-to-speech", model=repo, trust_remote_code=True)` the pipeline loads this processor and calls it
    with the text: `pipe("Hello.")` or `pipe(["Hello.", "Bye."])` give `{"audio", "sampling_rate": 24000}` each.
    Generation options go in `forward_params` (e.g. `{"seed": 0}`), processor options in `preprocess_params`; to clone a
    voice, pass the clip or a voice there: `pipe("Hello.", preprocess_params={"reference": "ref.wav", "reference_text":
    "Its transcript."})`, or `{"reference": pipe.model.encode_reference("ref.wav", text="Its transcript.")}` to encode
    it once for many calls. A chat (`pipe([{"role": "user", "content": "Hello."}])`, with an optional reference turn
    before it, e.g. `{"type": "audio", "path": "ref.wav"}`) goes through `apply_chat_template`. The output's `to(dtype)`
    (which the pipeline applies) keeps the clips' waveforms float32. With a model and a processor already loaded, pass
    `pipeline("text-to-speech", model=model, processor=processor, tokenizer=processor.tokenizer)`: transformers' factory
    cannot infer a tokenizer from a model object.

    Example:

    ```python
    >>> processor = HiggsAudioV3Processor(tokenizer)  # doctest: +SKIP
    >>> voice = model.encode_reference("me.wav", text="What I say in it.")  # doctest: +SKIP
    >>> inputs = processor(["Hello there.", "<|emotion:anger|>Get out!"], reference=[voice, None])  # doctest: +SKIP
    >>> out = model.generate(**inputs, return_dict_in_generate=True)  # doctest: +SKIP
    >>> processor.save_audio(out.audio[0], "hello.wav")  # doctest: +SKIP
    >>> inputs = processor("Hi.", reference="me.wav", reference_text="What I say in it.")  # doctest: +SKIP
    >>> model.generate(**inputs, return_dict_in_generate=True).audio  # the clip encoded by the model  # doctest: +SKIP
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
    # Config fields the prompt token ids must agree with (see `check_model_config`).
    _config_token_fields: dict[str, str] = {
        "pad": "pad_token_id",
        "tts": "tts_token_id",
        "text": "text_token_id",
        "audio_start": "audio_start_token_id",
        "ref_audio": "ref_audio_token_id",
        "ref_text": "ref_text_token_id",
    }

    def __init__(
        self,
        tokenizer,
        chat_template: str | None = None,
        num_codebooks: int = HiggsAudioV3AudioSpec.num_codebooks,
        audio_boc_token_id: int = HiggsAudioV3AudioSpec.audio_boc_token_id,
        audio_eoc_token_id: int = HiggsAudioV3AudioSpec.audio_eoc_token_id,
        audio_placeholder_id: int = HiggsAudioV3AudioSpec.audio_placeholder_id,
        sampling_rate: int = HiggsAudioV3AudioSpec.sampling_rate,
        frame_rate: int = HiggsAudioV3AudioSpec.frame_rate,
    ):
        if chat_template is not None and "<|tts|>" not in chat_template:
            # *** The original repo's ChatML template (an older conversion ships it) does not render TTS prompts. ***
            logger.warning_once(
                "The chat template given to HiggsAudioV3Processor does not render Higgs Audio v3 TTS prompts (no "
                "<|tts|>; the original repo's ChatML template?); TTS_CHAT_TEMPLATE is used instead."
            )
            chat_template = None
        super().__init__(tokenizer, chat_template=chat_template or TTS_CHAT_TEMPLATE)
        # Prompts are left padded; saying so on the tokenizer also makes `pipeline(..., batch_size=n)` pad correctly.
        self.tokenizer.padding_side = "left"
        # The settings are kept as attributes of their own names (`save_pretrained` writes them from there) and
        # validated once, by the spec the model's config builds too.
        self.num_codebooks = num_codebooks
        self.audio_boc_token_id = audio_boc_token_id
        self.audio_eoc_token_id = audio_eoc_token_id
        self.audio_placeholder_id = audio_placeholder_id
        self.sampling_rate = sampling_rate
        self.frame_rate = frame_rate
        self.audio_spec = HiggsAudioV3AudioSpec.from_config(self)
        # The codec whose frames a reference clip's placeholders count (`codec_num_frames`): the real one, or the model
        # config's with `from_model_config` / `from_pretrained` (the `config.json` beside the processor). Not saved;
        # `generate` checks the counts against the model's codec.
        self._codec_config = REAL_CODEC_CONFIG
        self._token_ids = self._lookup_prompt_token_ids()
        self._control_tags, self._structural_tokens = self._classify_added_tokens()
        self._reserved_pattern = self._reserved_token_pattern()

    # ------------------------------------------------------------------ setup
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
        structural = {t for t in added if TAG_PATTERN.fullmatch(t) and t not in control}
        return control, structural

    def _reserved_token_pattern(self) -> re.Pattern | None:
        """One pattern for every added token of the tokenizer that is neither a control tag nor of the `<|...|>` form
        (those are checked by `TAG_PATTERN`), e.g. `<tool_call>`: the tokenizer would turn them into special tokens."""
        reserved = [t for t in self.tokenizer.get_added_vocab() if t not in self._control_tags and not TAG_PATTERN.fullmatch(t)]
        if not reserved:
            return None
        return re.compile("|".join(map(re.escape, sorted(reserved, key=len, reverse=True))))

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args, **kwargs) -> HiggsAudioV3Processor:
        """`ProcessorMixin.from_pretrained`; reference clips' frames are then counted with the codec config of the
        model saved beside the processor (its `config.json`, as `from_model_config` takes it), else the real codec's:
        the count is not saved with the processor, and a converted folder may hold another codec."""
        processor = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        codec_config = cls._saved_codec_config(pretrained_model_name_or_path, kwargs)
        if codec_config is not None:
            processor._codec_config = codec_config
        return processor

    @staticmethod
    def _saved_codec_config(pretrained_model_name_or_path: str | os.PathLike, kwargs: dict) -> dict | None:
        """`codec_config` of the `config.json` beside a saved processor (a folder or a Hub repo), or None without one."""
        import json

        from transformers.utils import cached_file

        options = {key: kwargs[key] for key in ("cache_dir", "revision", "token", "local_files_only", "subfolder")
                   if kwargs.get(key) is not None}
        try:
            path = cached_file(pretrained_model_name_or_path, "config.json", _raise_exceptions_for_missing_entries=False,
                               _raise_exceptions_for_connection_errors=False, **options)
            if path is None:
                return None
            with open(path, encoding="utf-8") as file:
                codec_config = json.load(file).get("codec_config")
        except (OSError, ValueError, AttributeError):  # no readable model config there: the real codec's count
            return None
        return codec_config if isinstance(codec_config, dict) else None

    @classmethod
    def from_model_config(cls, tokenizer, config, **kwargs) -> HiggsAudioV3Processor:
        """A processor whose audio settings are those of `config` (a `HiggsAudioV3Config`), checked against it."""
        processor = cls(tokenizer, **{**config.audio_spec.to_dict(), **kwargs})
        processor.check_model_config(config)
        if getattr(config, "codec_config", None) is not None:
            processor._codec_config = config.codec_config
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
        ours, theirs = self.audio_spec.to_dict(), config.audio_spec.to_dict()
        problems += [f"processor {name}={ours[name]} but config.{name}={theirs[name]}" for name in ours if ours[name] != theirs[name]]
        if problems:
            raise ValueError("The processor does not match the model config: " + "; ".join(problems) + ".")

    # ------------------------------------------------------------------ properties
    @property
    def model_input_names(self) -> list[str]:
        return ["input_ids", "attention_mask", "audio_input_ids", *REFERENCE_CLIP_KEYS]

    @property
    def prompt_token_ids(self) -> dict[str, int]:
        """Ids of the prompt specials, looked up in the tokenizer: pad, tts, text, audio_start, ref_audio, ref_text."""
        return dict(self._token_ids)

    def valid_tags(self) -> list[str]:
        """The inline control tags the model knows (`<|emotion:*|>`, `<|style:*|>`, `<|sfx:*|>`, `<|prosody:*|>`,
        `<|env:*|>`), in id order. Each one is a single token."""
        return list(self._control_tags)

    # ------------------------------------------------------------------ checks (the one boundary)
    def check_text(self, text, where: str = "the text") -> str:
        """Return `text` if it can be spoken, else raise a `ValueError` naming `where`: it must be a non-empty string
        whose every `<|...|>` is a control tag (a misspelled tag would be read aloud, and structural tokens such as
        `<|tts|>` are placed by the processor only), that holds no other special token of the tokenizer (e.g.
        `<tool_call>`, which would reach the prompt as a special token) and no unclosed `<|` (the tag the writer meant
        would be read aloud). Callers that want to fail early (the command line, long-form speech) call this before any
        model work; `__call__` calls it on every text and transcript (voice files' transcripts included)."""
        if not isinstance(text, str):
            raise ValueError(f"{where[:1].upper() + where[1:]} must be a string, got {type(text).__name__}.")
        if not text.strip():
            raise ValueError(f"{where[:1].upper() + where[1:]} is empty; there is nothing to speak.")
        for match in TAG_PATTERN.finditer(text):
            tag = match.group(0)
            if tag in self._control_tags:
                continue
            if tag in self._structural_tokens:
                raise ValueError(
                    f"{tag!r} in {where} is a structural prompt token, which the processor places itself; remove it. "
                    "processor.valid_tags() (or `higgs-v3 tags`) lists the control tags."
                )
            close = difflib.get_close_matches(tag, self._control_tags, n=3, cutoff=0.6)
            hint = ("Closest valid tags: " + ", ".join(map(repr, close))) if close else "No valid tag is close to it"
            raise ValueError(
                f"Unknown control tag {tag!r} in {where}; it would be read aloud. {hint}. processor.valid_tags() (or "
                f"`higgs-v3 tags`) lists all {len(self._control_tags)}."
            )
        self._check_reserved_and_unclosed(text, where)
        return text

    def _check_reserved_and_unclosed(self, text: str, where: str) -> None:
        """Refuse the tokenizer's other special tokens (`<tool_call>`, ...) and a `<|` that no `|>` closes."""
        if self._reserved_pattern is not None and (match := self._reserved_pattern.search(text)):
            raise ValueError(
                f"{match.group(0)!r} in {where} is a special token of the tokenizer, not speech or a control tag; it "
                "would reach the prompt as a special token. Remove it (processor.valid_tags() lists the control tags)."
            )
        tag_starts = {match.start() for match in TAG_PATTERN.finditer(text)}
        for match in _TAG_START.finditer(text):
            if match.start() in tag_starts:
                continue
            fragment = match.group(0)
            close = difflib.get_close_matches(fragment + "|>", self._control_tags, n=1, cutoff=0.5) if len(fragment) > 2 else []
            hint = f"did you mean {close[0]!r}?" if close else "control tags look like '<|emotion:anger|>'."
            raise ValueError(
                f"{fragment!r} in {where} opens a tag that is never closed with '|>', so it would be read aloud; "
                f"{hint} processor.valid_tags() (or `higgs-v3 tags`) lists the control tags."
            )

    def _check_raw_codes(self, codes, where: str, kind: str = "reference") -> torch.LongTensor:
        """Raw codec codes `[T, num_codebooks]` with values in `0 .. audio_boc_token_id - 1` (a `kind` "reference" or
        "training target" of at most `MAX_REFERENCE_SECONDS`)."""
        num_codebooks, boc = self.num_codebooks, self.audio_boc_token_id
        if isinstance(codes, np.ndarray):
            codes = torch.from_numpy(codes)
        if not isinstance(codes, torch.Tensor) or codes.is_floating_point() or codes.is_complex():
            raise ValueError(f"{where} must be an integer tensor of raw codec codes [frames, {num_codebooks}].")
        if codes.dim() != 2 or codes.shape[1] != num_codebooks or codes.shape[0] == 0:
            raise ValueError(
                f"{where} must be raw codec codes of shape [frames, {num_codebooks}] with at least one frame, got "
                f"shape {tuple(codes.shape)}. The codec's encode gives [1, {num_codebooks}, frames]: use codes[0].T."
            )
        longest = round(MAX_REFERENCE_SECONDS * self.frame_rate)
        if codes.shape[0] > longest:
            raise ValueError(
                f"{where} have {codes.shape[0]} frames ({codes.shape[0] / self.frame_rate:.1f} s); the longest {kind} "
                f"accepted is {MAX_REFERENCE_SECONDS:g} s ({longest} frames). " + ("5 to 30 s of clean speech is enough."
                if kind == "reference" else TARGET_ADVICE)
            )
        low, high = int(codes.min()), int(codes.max())
        if low < 0 or high >= boc:
            raise ValueError(
                f"{where} range from {low} to {high}; raw codec codes lie in 0..{boc - 1} (the processor adds "
                "the delay pattern with its BOC/EOC codes)."
            )
        return codes.detach().to(device="cpu", dtype=torch.long)

    def _check_voice(self, voice, where: str) -> HiggsAudioV3Voice:
        voice = HiggsAudioV3Voice.from_any(voice, where)
        if (voice.sampling_rate, voice.frame_rate) != (self.sampling_rate, self.frame_rate):
            raise ValueError(
                f"{where[:1].upper() + where[1:]} was encoded at {voice.sampling_rate} Hz / {voice.frame_rate} frames per "
                f"second; this model's codec runs at {self.sampling_rate} Hz / {self.frame_rate}."
            )
        return voice

    # ------------------------------------------------------------------ reference clips (encoded by the model)
    @staticmethod
    def is_clip(reference) -> bool:
        """Whether a reference is an audio clip (the model's codec encodes it in `generate`) rather than a voice: an
        audio file path (any path but a saved voice's `.safetensors` / `.json`), an `http(s)://` URL, samples (numpy
        array or torch tensor) or an audio dict (`{"array": samples, "sampling_rate": rate}`, as `datasets`' Audio
        feature gives it, or `{"path": ...}`)."""
        if isinstance(reference, (str, os.PathLike)):
            return is_audio_url(reference) or os.path.splitext(str(reference))[1].lower() not in VOICE_FILE_SUFFIXES
        if isinstance(reference, dict):
            return "array" in reference or "path" in reference
        return isinstance(reference, (np.ndarray, torch.Tensor))

    def _prepare_clip(self, clip, sampling_rate: int | None, where: str) -> _Clip:
        """Load a reference clip as `model.encode_reference` does (`prepare_reference_waveform`: mono, resampled to the
        codec's rate, padded to at least 1 s, length bounds) and count its codec frames (`codec_num_frames`)."""
        audio, rate = clip_source(clip, sampling_rate, where)
        waveform = prepare_reference_waveform(audio, rate, target_sampling_rate=self.sampling_rate)  # [N] float32
        return _Clip(waveform=waveform, num_frames=codec_num_frames(waveform.shape[0], self._codec_config))

    def _reference(
        self, index: int, batch_size: int, voice, codes, ref_text, sampling_rate: int | None = None, load: bool = True
    ) -> tuple[torch.LongTensor | _Clip | None, str | None]:
        """One row's reference as (raw codes `[T, C]`, a prepared clip, or None; transcript or None), every part
        checked. `load=False` checks a clip's form only (rendering a chat template reads no audio)."""
        where = f"the reference for text {index}" if batch_size > 1 else "the reference"
        if voice is not None and codes is not None:
            raise ValueError(f"Text {index} has two references (reference and reference_codes); pass one of them.")
        if ref_text == "":  # the official server: `reference_text or None`; a blank transcript is kept as given
            ref_text = None
        if voice is not None and self.is_clip(voice):
            # *** reference clips: the waveform goes to the model, whose codec encodes it in `generate` ***
            if load:
                codes = self._prepare_clip(voice, sampling_rate, where)
            else:
                clip_source(voice, sampling_rate, where)
                codes = _Clip(waveform=torch.zeros(0), num_frames=0)
            voice = None
            # *** end reference clips ***
        if voice is not None and not isinstance(voice, (str, os.PathLike)) and not hasattr(voice, "voice_format"):
            raise ValueError(
                f"{where[:1].upper() + where[1:]} must be a voice (model.encode_reference(clip, text=...), "
                "HiggsAudioV3Voice.load, or a saved voice file's path) or an audio clip (a file path, an http(s) URL, "
                f"samples with sampling_rate, or {{'array': samples, 'sampling_rate': rate}}), got {type(voice).__name__}."
            )
        if voice is not None:
            voice = self._check_voice(voice, where)
            if voice.text is not None and ref_text is not None:
                raise ValueError(f"{where[:1].upper() + where[1:]} already carries its transcript; do not pass reference_text as well.")
            codes, ref_text = voice.codes, (voice.text or None) if ref_text is None else ref_text
        if codes is not None and not isinstance(codes, _Clip):
            codes = self._check_raw_codes(codes, f"The codes of {where}")
        elif codes is None and ref_text is not None:
            logger.warning_once(
                "A reference_text without a reference voice is dropped: the transcript only helps together with the "
                "clip it describes."
            )
            ref_text = None
        if ref_text is not None and not (isinstance(ref_text, str) and ref_text.isspace()):
            ref_text = self.check_text(ref_text, f"the transcript of {where}")
        return codes, ref_text

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

    # ------------------------------------------------------------------ prompts
    def __call__(
        self,
        text: str | list[str],
        reference: HiggsAudioV3Voice | str | os.PathLike | np.ndarray | torch.Tensor | dict | Sequence | None = None,
        reference_text: str | Sequence[str | None] | None = None,
        reference_codes: torch.Tensor | Sequence[torch.Tensor | None] | None = None,
        return_tensors: str | None = "pt",
        audio_target: torch.Tensor | np.ndarray | HiggsAudioV3Voice | str | os.PathLike | Sequence | None = None,
        padding_side: str = "left",
        sampling_rate: int | Sequence[int | None] | None = None,
    ) -> BatchFeature:
        r"""
        Build the prompts of one text or a batch (left padded with `<|endoftext|>`).

        Each text takes at most one reference, given as `reference` (a voice or an audio clip, see below) or
        `reference_codes` (raw codes `[T, num_codebooks]`), and optionally its transcript `reference_text` (kept only
        with a reference). Every reference argument is either one value for all texts or a list with one entry per
        text (None for none).

        A clip is given to the model as CSM's processor does it: the processor loads and prepares the waveform exactly
        as `model.encode_reference` does (mono, resampled to 24 kHz with torchaudio's algorithm, padded to at least 1 s,
        at most 100 s), lays out as many placeholders as a voice of that clip would take (`codec_num_frames` frames plus
        `num_codebooks - 1`), and returns the waveform; `generate` encodes it once with the model's codec, so the speech
        is exactly that of `reference=model.encode_reference(clip)`. A clip used for many calls is better encoded once
        into a voice.

        Args:
            text: the text(s) to speak. Inline control tags (`processor.valid_tags()`) are allowed; any other `<|...|>`
                raises a `ValueError`.
            reference: voices (`HiggsAudioV3Voice` from `model.encode_reference`, from any import of this package, or
                the path of a saved voice file, `.safetensors` / `.json`) or clips: an audio file path (wav, flac,
                ogg, ... as libsndfile reads them), an `http(s)://` URL of one (fetched into memory with a timeout and
                a size limit), samples as a numpy array or torch tensor (with `sampling_rate`), or an audio dict
                `{"array": samples, "sampling_rate": rate}` (as `datasets`' Audio feature gives it).
            reference_text: transcript(s) of the references.
            reference_codes: raw codec codes `[T, num_codebooks]` of the references.
            return_tensors: "pt" (default), "np" or None (Python lists).
            audio_target: training targets, one per text: the speech the model should say, as raw codec codes
                `[T, num_codebooks]` (`model.encode_target(clip)`), a `HiggsAudioV3Voice` or the path of a saved codes
                / voice file (`.safetensors`, `.json`). Waveforms are refused: the codec is the model's. With a target
                the call builds training examples instead of prompts (see `_training_examples`).
            padding_side: "left" (default) or "right", for training examples only (prompts are always left padded).
            sampling_rate: the sample rate in Hz of references given as samples (one for all, or one per text); files
                and URLs carry their own.

        Returns:
            `HiggsAudioV3BatchFeature` with `input_ids` `[B, L]` (placeholders at reference positions),
            `attention_mask` `[B, L]` (0 on left padding) and, when any text has a reference, `audio_input_ids`
            `[N, num_codebooks]`: the delayed reference rows of all placeholders, batch-major in placeholder order.
            With reference clips also `reference_audio` `[S_0 + ... + S_{K-1}]` (float32: the K clips' 24 kHz
            waveforms one after another, in placeholder order, packed without padding, so that batches of outputs
            concatenate, as the pipeline collates them) and `reference_audio_lengths` `[K]` (`S_k`, the samples of
            each); the clips' rows in `audio_input_ids` hold `audio_placeholder_id` (-100) until `generate` fills
            them with the clips' delayed codes. Its `to(...)` keeps `reference_audio` float32.

            With `audio_target`, the training batch of `pad_training_examples` instead: `input_ids`, `attention_mask`,
            `position_ids` `[B, L]`, `audio_input_ids` `[B, N, num_codebooks]` with `audio_input_ids_mask` `[B, N]`,
            and `audio_labels` `[B, L, num_codebooks]`, all accepted by the model's `forward`.
        """
        if return_tensors not in ("pt", "np", None):
            raise ValueError(f"return_tensors must be 'pt', 'np' or None, got {return_tensors!r}.")
        texts = [text] if isinstance(text, str) else text
        if not isinstance(texts, (list, tuple)) or not texts:
            raise ValueError(f"text must be a string or a non-empty list of strings, got {text!r}.")
        batch_size = len(texts)
        texts = [self.check_text(t, f"text {i}" if batch_size > 1 else "the text") for i, t in enumerate(texts)]
        rows = zip(
            self._per_row(reference, "reference", batch_size),
            self._per_row(reference_codes, "reference_codes", batch_size),
            self._per_row(reference_text, "reference_text", batch_size),
            self._per_row(sampling_rate, "sampling_rate", batch_size),
        )
        references = [self._reference(i, batch_size, *row) for i, row in enumerate(rows)]
        # *** training examples (issue 16): the prompt followed by the target's rows, with labels ***
        if audio_target is not None:
            clips = [i for i, (codes, _) in enumerate(references) if isinstance(codes, _Clip)]
            if clips:
                raise ValueError(
                    f"The reference of text {clips[0]} is an audio clip; training examples take encoded references, "
                    "whose codes stay fixed over the epochs: encode it once, voice = model.encode_reference(clip, "
                    "text=...), and pass the voice."
                )
            if isinstance(audio_target, tuple) and len(audio_target) == 2 and isinstance(audio_target[1], int):
                audio_target = [audio_target] * batch_size  # one (samples, rate) pair, refused by _check_target
            targets = [
                self._check_target(target, f"the audio_target of text {i}" if batch_size > 1 else "the audio_target")
                for i, target in enumerate(self._per_row(audio_target, "audio_target", batch_size))
            ]
            batch = self.pad_training_examples(self._training_examples(texts, references, targets), padding_side)
            if return_tensors != "pt":
                batch = {key: value.numpy() if return_tensors == "np" else value.tolist() for key, value in batch.items()}
            return BatchFeature(batch, tensor_type=return_tensors)
        # *** end training examples ***
        data = self._prompts(texts, references)
        if "reference_audio" in data and return_tensors != "pt":
            data["reference_audio"] = data["reference_audio"].numpy()
            if return_tensors is None:
                data["reference_audio"] = data["reference_audio"].tolist()
        return HiggsAudioV3BatchFeature(data, tensor_type=return_tensors)

    @staticmethod
    def _warn_if_long(text_ids: list[list[int]]) -> None:
        if max(len(ids) for ids in text_ids) > LONG_PROMPT_TEXT_TOKENS:
            logger.warning_once(
                f"A text of more than {LONG_PROMPT_TEXT_TOKENS} tokens is spoken as one generation; the model was "
                "trained on sentence-sized chunks and tends to run away or skip words on long ones. Use "
                "model.synthesize_long(processor, text), which splits it into chunks and keeps the voice."
            )

    def _prompts(self, texts: list[str], references: list[tuple[torch.LongTensor | None, str | None]]) -> dict:
        """Token ids of the prompts (one tokenizer call for every text and transcript; tags stay single tokens),
        left padded, and the delayed reference rows."""
        transcripts = [ref_text for _, ref_text in references if ref_text is not None]
        encoded = self.tokenizer(texts + transcripts, add_special_tokens=False, split_special_tokens=False)["input_ids"]
        text_ids, transcript_ids = encoded[: len(texts)], iter(encoded[len(texts) :])
        self._warn_if_long(text_ids)
        ids = self._token_ids
        prompts, delayed_rows, clips = [], [], []
        for (codes, ref_text), spoken in zip(references, text_ids):
            prompt = [ids["tts"]]
            if isinstance(codes, _Clip):  # the clip's rows, marked with the placeholder id: `generate` fills them
                shape = (self.audio_spec.rows(codes.num_frames), self.num_codebooks)  # [T + C - 1, C]
                delayed = torch.full(shape, self.audio_placeholder_id)
                clips.append(codes.waveform)
            elif codes is not None:
                delayed = self.audio_spec.delay(codes)  # [T + C - 1, C]
            if codes is not None:
                if ref_text is not None:
                    prompt += [ids["ref_text"], *next(transcript_ids)]
                prompt += [ids["ref_audio"]] + [self.audio_placeholder_id] * delayed.shape[0]
                delayed_rows.append(delayed)
            prompts.append(prompt + [ids["text"], *spoken, ids["audio_start"]])
        length = max(len(p) for p in prompts)
        data = {
            "input_ids": [[ids["pad"]] * (length - len(p)) + p for p in prompts],
            "attention_mask": [[0] * (length - len(p)) + [1] * len(p) for p in prompts],
        }
        if delayed_rows:
            data["audio_input_ids"] = torch.cat(delayed_rows).tolist()  # [N, C]
        if clips:
            data["reference_audio"] = torch.cat(clips)  # [S_0 + ... + S_{K-1}] float32, packed
            data["reference_audio_lengths"] = [clip.shape[0] for clip in clips]  # [K]
        return data

    # ------------------------------------------------------------------ training examples (teacher forcing)
    def _check_target(self, target, where: str) -> torch.LongTensor:
        """A training target as raw codes `[T, num_codebooks]`, `T >= num_codebooks`."""
        if isinstance(target, (str, os.PathLike)):
            if not str(target).endswith((".safetensors", ".json")):
                raise ValueError(
                    f"{where[:1].upper() + where[1:]} is {str(target)!r}, an audio file: the processor does not run the "
                    "codec (the model owns it). Encode it first, `codes = model.encode_target(path)`, and pass the codes; "
                    "higgs_v3.training.finetune.prepare_examples does this for a whole dataset with an on-disk cache."
                )
            target = HiggsAudioV3Voice.load(target)
        floating = isinstance(target, torch.Tensor) and target.is_floating_point()
        floating |= isinstance(target, np.ndarray) and np.issubdtype(target.dtype, np.floating)
        if isinstance(target, tuple) or floating:
            raise ValueError(
                f"{where[:1].upper() + where[1:]} is a waveform: the processor does not run the codec (the model owns it). "
                "Encode it first, `codes = model.encode_target(samples, sampling_rate=rate)`, and pass the codes."
            )
        if not isinstance(target, (np.ndarray, torch.Tensor)):
            target = self._check_voice(target, where).codes
        codes = self._check_raw_codes(target, f"The codes of {where}", "training target")
        minimum = self.num_codebooks
        if codes.shape[0] < minimum:
            raise ValueError(
                f"{where[:1].upper() + where[1:]} has {codes.shape[0]} frames; a training target needs at least "
                f"{minimum} ({minimum / self.frame_rate:g} s): generation reads the end of speech only after the "
                f"delay window of {minimum} rows, so a shorter target could never end where it does."
            )
        return codes

    def _training_examples(
        self, texts: list[str], references: list[tuple[torch.LongTensor | None, str | None]], targets: list[torch.LongTensor]
    ) -> list[dict[str, torch.Tensor]]:
        r"""One unpadded example per text: exactly the sequence `generate` sees, prompt then generated rows.

        ```
        position   ... <|audio|>   P_0      P_1     ...  P_{R-1}       (P: placeholder, fed the target's row)
        input      prompt          row 0    row 1   ...  row R-1       (row R-1: the terminal row)
        label      -100 ... -100   row 0    row 1   ...  row R-1       (the loss scores logits at p against p + 1)
        ```

        The rows are the target's delayed rows (`audio_spec.delay`: BOC in the delay window, EOC after each codebook's
        last frame, `T + num_codebooks - 1` rows, the terminal row last), which is what greedy generation emits for
        them; every one is a label, nothing of the prompt or the reference is. Returns dicts with `input_ids` `[L]`,
        `audio_input_ids` `[N, C]` (reference rows, then target rows, in placeholder order) and `audio_labels`
        `[L, C]`."""
        prompts = self._prompts(texts, references)
        examples = []
        for ids, mask, (ref_codes, _), target in zip(prompts["input_ids"], prompts["attention_mask"], references, targets):
            prompt = torch.tensor(ids, dtype=torch.long)[torch.tensor(mask, dtype=torch.bool)]  # [P], unpadded
            rows = self.audio_spec.delay(target)  # [R, C]
            placeholders = torch.full((rows.shape[0],), self.audio_placeholder_id, dtype=torch.long)
            refs = self.audio_spec.delay(ref_codes) if ref_codes is not None else rows.new_zeros(0, self.num_codebooks)
            labels = torch.cat([torch.full((prompt.shape[0], self.num_codebooks), -100, dtype=torch.long), rows])
            examples.append({
                "input_ids": torch.cat([prompt, placeholders]),  # [P + R]
                "audio_input_ids": torch.cat([refs, rows]),  # [N_ref + R, C]
                "audio_labels": labels,  # [P + R, C]
            })
        return examples

    def pad_training_examples(self, examples: Sequence[dict], padding_side: str = "right") -> dict[str, torch.Tensor]:
        """Pad unpadded training examples (`input_ids` `[L_i]`, `audio_input_ids` `[N_i, C]`, `audio_labels`
        `[L_i, C]`, tensors or lists) into a batch: `input_ids` `[B, L]` (pad id on padding), `attention_mask` `[B, L]`,
        `position_ids` `[B, L]` (counted from each example's first token, as generation counts them),
        `audio_input_ids` `[B, N, C]` with `audio_input_ids_mask` `[B, N]`, and `audio_labels` `[B, L, C]` (-100 on
        padding). `padding_side` is "right" (usual for training) or "left" (as prompts are padded)."""
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}.")
        if not examples:
            raise ValueError("There are no training examples to pad (an empty batch).")
        num_codebooks = self.num_codebooks
        examples = [
            {key: torch.as_tensor(example[key], dtype=torch.long) for key in ("input_ids", "audio_input_ids", "audio_labels")}
            for example in examples
        ]
        length = max(e["input_ids"].shape[0] for e in examples)
        num_rows = max(e["audio_input_ids"].shape[0] for e in examples)

        def pad(tensor: torch.Tensor, size: int, value: int, side: str = padding_side) -> torch.Tensor:
            filler = tensor.new_full((size - tensor.shape[0], *tensor.shape[1:]), value)
            return torch.cat([filler, tensor] if side == "left" else [tensor, filler])

        batch = {
            "input_ids": torch.stack([pad(e["input_ids"], length, self._token_ids["pad"]) for e in examples]),
            "attention_mask": torch.stack([pad(torch.ones_like(e["input_ids"]), length, 0) for e in examples]),
            "audio_labels": torch.stack([pad(e["audio_labels"].view(-1, num_codebooks), length, -100) for e in examples]),
        }
        batch["position_ids"] = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        rows = [e["audio_input_ids"].view(-1, num_codebooks) for e in examples]
        # Reference and target rows are right padded whatever the side: the mask says which are real, in order.
        batch["audio_input_ids"] = torch.stack([pad(r, num_rows, 0, side="right") for r in rows])
        batch["audio_input_ids_mask"] = torch.stack([(torch.arange(num_rows) < r.shape[0]).long() for r in rows])
        return batch

    # ------------------------------------------------------------------ chat template
    def _conversation_request(self, messages, where: str) -> tuple[str, object, str | None]:
        """`(text, reference, reference_text)` of one conversation: an optional reference turn (one message with one
        `{"type": "audio", ...}` item, its text items the transcript), then the text to speak (the last message, text
        only). Anything else raises a `ValueError` naming the message."""
        if not isinstance(messages, (list, tuple)) or not messages:
            raise ValueError(f"{where[:1].upper() + where[1:]} must be a non-empty list of messages, got {messages!r}.")
        layout = (
            'A TTS conversation is [{"role": "user", "content": [{"type": "audio", "audio": voice}, {"type": "text", '
            '"text": its transcript}]} (optional reference turn; the audio may also be a clip: "path": file, "url": '
            'address, or "audio": samples with "sampling_rate"), {"role": "user", "content": [{"type": "text", '
            '"text": what to say}]}].'
        )
        if len(messages) > 2:
            raise ValueError(f"{where[:1].upper() + where[1:]} has {len(messages)} messages; at most two. {layout}")
        turns = []
        for number, message in enumerate(messages):
            here = f"message {number} of {where}"
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(message, dict) and message.get("role") == "system":
                raise ValueError(f"{here[:1].upper() + here[1:]} is a system message; TTS prompts have none. {layout}")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            if not isinstance(content, (list, tuple)) or not all(isinstance(item, dict) for item in content):
                raise ValueError(f"{here[:1].upper() + here[1:]} has no list of content items. {layout}")
            kinds = {item.get("type") for item in content} - {"text", "audio"}
            if kinds:
                raise ValueError(f"{here[:1].upper() + here[1:]} has content of type {sorted(map(str, kinds))}; "
                                 f"only 'text' and 'audio' are accepted. {layout}")
            audio = [item for item in content if item["type"] == "audio"]
            text = "".join(str(item.get("text", "")) for item in content if item["type"] == "text")
            turns.append((here, audio, text))
        *context, (here, audio, text) = turns
        if audio:
            raise ValueError(f"{here[:1].upper() + here[1:]} (the last) holds audio; the last message is the text "
                             f"to speak. {layout}")
        if context and not context[0][1]:
            raise ValueError(f"{context[0][0][:1].upper() + context[0][0][1:]} holds no audio; only a reference turn "
                             f"may come before the text to speak. {layout}")
        if not context:
            return text, None, None
        ref_where, (item, *more), transcript = context[0]
        if more:
            raise ValueError(f"{ref_where[:1].upper() + ref_where[1:]} holds {len(more) + 1} audio items; one "
                             "reference per prompt.")
        sources = [key for key in ("audio", "path", "url") if item.get(key) is not None]
        if len(sources) != 1:
            raise ValueError(f"The audio item of {ref_where} must have exactly one of 'audio', 'path' or 'url', got "
                             f"{sorted(k for k in item if k != 'type')}.")
        reference = item[sources[0]]
        if item.get("sampling_rate") is not None:  # samples with their rate (or a file's rate, which must agree)
            reference = {"array" if isinstance(reference, (np.ndarray, torch.Tensor)) else "path": reference,
                         "sampling_rate": item["sampling_rate"]}
        return text, reference, transcript if transcript.strip() else None

    def apply_chat_template(
        self,
        conversation: list[dict] | list[list[dict]],
        chat_template: str | None = None,
        tokenize: bool = False,
        return_dict: bool = False,
        return_tensors: str | None = "pt",
        add_generation_prompt: bool = True,
        processor_kwargs: dict | None = None,
        **kwargs,
    ) -> str | list[str] | torch.Tensor | BatchFeature:
        r"""
        The TTS prompt of a conversation (or a batch of conversations), as text or as the inputs of `generate`.

        A conversation is an optional reference turn, then the text to speak:

        ```python
        >>> conversation = [
        ...     {"role": "user", "content": [{"type": "audio", "path": "me.wav"},  # or "url": ..., "audio": voice
        ...                                  {"type": "text", "text": "What I say in the clip."}]},
        ...     {"role": "user", "content": [{"type": "text", "text": "<|emotion:elation|>Hello there!"}]},
        ... ]  # doctest: +SKIP
        >>> inputs = processor.apply_chat_template(conversation, tokenize=True, return_dict=True)  # doctest: +SKIP
        >>> out = model.generate(**inputs, return_dict_in_generate=True)  # doctest: +SKIP
        ```

        The reference is what `processor(reference=...)` takes, in the item's `"path"`, `"url"` or `"audio"`: an audio
        file, an `http(s)://` URL, samples (with the item's `"sampling_rate"`, e.g. `{"type": "audio", "audio": samples,
        "sampling_rate": 44100}`) or an audio dict (`{"array": ..., "sampling_rate": ...}`); or a voice
        (`model.encode_reference(clip, text=...)`) or the path of a saved voice file. A clip's waveform is returned for
        the model, whose codec encodes it in `generate` (the processor never runs the codec). The turn's text is the
        transcript (optional). `tokenize=True` gives exactly `processor(text, reference=..., reference_text=...)`: with
        `return_dict=True` the `BatchFeature` that `generate` takes (`input_ids`, `attention_mask`, and with a reference
        `audio_input_ids`, with a clip `reference_audio` and `reference_audio_lengths`), else `input_ids` only.
        `tokenize=False` renders the prompt with the chat template (`TTS_CHAT_TEMPLATE` unless another is given),
        `<|ref_audio|>` standing for the reference rows, a clip as a voice (its audio is not read). The prompt always
        ends with `<|audio|>`, where generation starts, so `add_generation_prompt` changes nothing; `processor_kwargs`
        (which the text-to-speech pipeline passes for chat inputs) must be empty: the conversation says everything.
        """
        if processor_kwargs:
            kwargs["processor_kwargs"] = processor_kwargs
        if kwargs:
            raise ValueError(
                f"apply_chat_template of a TTS processor does not take {sorted(kwargs)}; it takes conversation, "
                "chat_template, tokenize, return_dict and return_tensors."
            )
        batched = isinstance(conversation, (list, tuple)) and bool(conversation) and isinstance(
            conversation[0], (list, tuple)
        )
        conversations = list(conversation) if batched else [conversation]
        requests = [
            self._conversation_request(messages, f"conversation {i}" if batched else "the conversation")
            for i, messages in enumerate(conversations)
        ]
        if tokenize:
            texts, references, transcripts = (list(column) for column in zip(*requests))
            inputs = self(
                texts if batched else texts[0], reference=references if batched else references[0],
                reference_text=transcripts if batched else transcripts[0], return_tensors=return_tensors,
            )
            return inputs if return_dict else inputs["input_ids"]
        plain = []  # only the checked request reaches the template: no voice objects or arrays in the renderer
        for i, (text, reference, transcript) in enumerate(requests):  # the same checks as when tokenizing
            text = self.check_text(text, f"text {i}" if batched else "the text")
            codes, transcript = self._reference(i, len(requests), reference, None, transcript, load=False)
            turns = [{"role": "user", "content": [{"type": "text", "text": text}]}]
            if codes is not None:  # a voice's own transcript is shown as it will be tokenized
                content = [{"type": "audio"}] + ([{"type": "text", "text": transcript}] if transcript else [])
                turns.insert(0, {"role": "user", "content": content})
            plain.append(turns)
        template = chat_template or self.chat_template or TTS_CHAT_TEMPLATE
        prompts = [self.tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False) for messages in plain]
        return prompts if batched else prompts[0]

    # ------------------------------------------------------------------ thin delegates users reach for
    def save_audio(self, waveform: np.ndarray | torch.Tensor, path: str | os.PathLike, sampling_rate: int | None = None):
        """Write a mono waveform to `path` (format from the extension) at `sampling_rate` (default: the codec's)."""
        return save_audio(waveform, path, sampling_rate=sampling_rate or self.sampling_rate)

    @staticmethod
    def load_voice(path: str | os.PathLike) -> HiggsAudioV3Voice:
        """Read a voice saved with `HiggsAudioV3Voice.save` (`.safetensors` or `.json`; never pickle)."""
        return HiggsAudioV3Voice.load(path)

    def batch_decode(self, *args, **kwargs):
        """Not the processor's job: `ProcessorMixin` would decode audio codes as text tokens. Raises a `ValueError`
        that says where audio comes from."""
        raise ValueError(
            "HiggsAudioV3Processor builds prompts and does not decode: generate(..., return_dict_in_generate=True) "
            "returns the waveforms in `.audio`, and model.decode_audio(out.sequences, out.lengths) decodes rows."
        )

    decode = batch_decode


HiggsAudioV3Processor.register_for_auto_class("AutoProcessor")


__all__ = [
    "LONG_PROMPT_TEXT_TOKENS",
    "REFERENCE_CLIP_KEYS",
    "TTS_CHAT_TEMPLATE",
    "HiggsAudioV3BatchFeature",
    "HiggsAudioV3Processor",
]
