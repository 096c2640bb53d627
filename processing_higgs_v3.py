# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Prompt building for Higgs Audio v3 TTS: `HiggsAudioV3Processor`, the one place where text and references are
checked.

The three layouts of the original (no bos, no ChatML), which the chat template renders too:

```
plain TTS:              <|tts|> <|text|> TEXT <|audio|>
clone, no transcript:   <|tts|> <|ref_audio|> [P]*L <|text|> TEXT <|audio|>
clone with transcript:  <|tts|> <|ref_text|> REF_TEXT <|ref_audio|> [P]*L <|text|> TEXT <|audio|>
```

`[P]` is the placeholder id (-100), `L = T_ref + num_codebooks - 1` the reference's delayed rows, which go to
`audio_input_ids`. Audio <-> codes is the model's (CSM's split): a clip's frames are counted with a pure function of
the codec's frame-count parameters (`_get_encoded_length`, saved in `processor_config.json`), its rows hold the
placeholder id, and `generate` encodes its waveform (`reference_audio`).
"""

import difflib
import math
import os
import re
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TypedDict

import numpy as np
import torch
from transformers import BatchEncoding, ProcessorMixin
from transformers.processing_utils import ProcessingKwargs, Unpack
from transformers.utils import logging

from .audio_io_higgs_v3 import (REFERENCE_ADVICE, TARGET_ADVICE, VOICE_FILE_SUFFIXES, HiggsAudioV3Voice, ReferenceClip,
                                 check_length, load_reference, save_audio)
from .chunking_higgs_v3 import CONTROL_TAG_FAMILIES  # noqa: F401 - its home is chunking; still importable here
from .chunking_higgs_v3 import TAG_PATTERN, control_tags, normalize_text, nothing_to_speak
from .codec_higgs_v3 import resampled_length
from .delay_higgs_v3 import HiggsAudioV3AudioSpec, check_codes
from .longform_higgs_v3 import SpeechResult, synthesize_dialogue, synthesize_long, synthesize_stream

# transformers 5.5 copies only the *direct* relative imports of the entry module when it loads remote code from a local
# folder (5.24 and the Hub path follow them recursively), so the rest of this module's closure is imported here too.
from .compat_higgs_v3 import CACHE_KWARG  # noqa: F401
from .generation_higgs_v3 import MAX_POSITIONS  # noqa: F401
from .sampling_higgs_v3 import check_seed  # noqa: F401
from .streaming_higgs_v3 import HiggsAudioV3RowTracker  # noqa: F401


logger = logging.get_logger(__name__)

PROMPT_TOKENS: dict[str, tuple[str, str]] = {  # role -> (token, the config field its id must agree with)
    "pad": ("<|endoftext|>", "pad_token_id"), "tts": ("<|tts|>", "tts_token_id"), "text": ("<|text|>", "text_token_id"),
    "audio_start": ("<|audio|>", "audio_start_token_id"), "ref_audio": ("<|ref_audio|>", "ref_audio_token_id"),
    "ref_text": ("<|ref_text|>", "ref_text_token_id"),
}


REAL_ENCODED_LENGTH_KWARGS: dict = {  # the real codec's frame-count parameters (`_get_encoded_length`), the default
    "sample_rate": 24000, "semantic_sample_rate": 16000, "downsample_factor": 320, "hop_length": 960,
    "conv_kernel": [10, 3, 3, 3, 3, 2, 2], "conv_stride": [5, 2, 2, 2, 2, 2, 2],
}

LONG_PROMPT_TEXT_TOKENS: int = 1024  # a longer text is spoken as one generation, with a warning

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
"""The chat template of a converted repo (`chat_template.jinja`): `<|ref_audio|>` stands for the reference rows."""

def is_original_chat_template(chat_template: str | None) -> bool:
    """Whether `chat_template` is the original repo's: its `chat_template.jinja` is Qwen's stock ChatML (spec §1: turns
    `<|im_start|>ROLE ... <|im_end|>`, never a TTS prompt), which conversions made before the TTS template kept as the
    repo's template. The processor replaces that one alone: any other template, a user's own included, is kept."""
    return isinstance(chat_template, str) and "<|im_start|>" in chat_template and "<|tts|>" not in chat_template


CHAT_LAYOUT = (
    'A TTS conversation is [{"role": "user", "content": [{"type": "audio", "audio": voice}, {"type": "text", "text": '
    'its transcript}]} (optional reference turn; the audio may also be a clip: "path": file, "url": address, or '
    '"audio": samples with "sampling_rate"), {"role": "user", "content": [{"type": "text", "text": what to say}]}].'
)

_SURROGATE = re.compile("[\ud800-\udfff]")  # half of a UTF-16 pair, alone: not encodable as UTF-8
_TAG_START = re.compile(r"<\|[^\s<>|]*")  # an opening `<|` and what follows it up to a space or bracket
_RENDERED = re.compile("{tts}(?:{ref_text}(.*?))?({ref_audio})?{text}(.*){audio_start}".format(  # a rendered prompt
    **{role: re.escape(token) for role, (token, _) in PROMPT_TOKENS.items()}), re.DOTALL)


class HiggsAudioV3TextKwargs(TypedDict, total=False):
    padding_side: str  # training examples: "left" or "right" (prompts are always left padded)
    return_tensors: str | None
    normalize: str | None  # "en": numbers, dates and currency spelled out (`normalize_text`); None: the text as given


class HiggsAudioV3AudioKwargs(TypedDict, total=False):
    sampling_rate: int | Sequence[int | None] | None  # the rate of references given as samples (one, or one per text)
    return_tensors: str | None


class HiggsAudioV3ProcessorKwargs(ProcessingKwargs, total=False):
    """The call options of `HiggsAudioV3Processor` with their defaults, merged by `ProcessorMixin._merge_kwargs`."""
    text_kwargs: HiggsAudioV3TextKwargs
    audio_kwargs: HiggsAudioV3AudioKwargs
    # Not in `common_kwargs`: transformers 5.5's `_merge_kwargs` updates that dict of `_defaults` in place.
    _defaults = {"text_kwargs": {"padding_side": "left", "return_tensors": "pt"},
                 "audio_kwargs": {"return_tensors": "pt"}}


_OPTIONS = {*HiggsAudioV3TextKwargs.__annotations__, *HiggsAudioV3AudioKwargs.__annotations__, "text_kwargs",
            "audio_kwargs", "common_kwargs"}


def _not_the_base_config_warning(record) -> bool:
    """False for the one warning a processor loaded without remote code gets: AutoTokenizer, not knowing the
    `higgs_audio_v3` type, reads config.json as the base `PreTrainedConfig` (model type ``) and warns of a mismatch
    that does not matter (the tokenizer needs none of the config)."""
    return "to instantiate a model of type ``." not in record.getMessage()


class HiggsAudioV3Processor(ProcessorMixin):
    r"""
    Builds Higgs Audio v3 TTS prompts (left-padded batches, a reference or none per row) and checks every text,
    transcript and reference, so that nothing invalid reaches the model. Args: the Higgs Audio v3 tokenizer (padded on
    the left), the chat template (`TTS_CHAT_TEMPLATE` by default, also in place of the original's ChatML), and the
    saved settings that describe the model: `audio_spec` (the `HiggsAudioV3AudioSpec` fields) and
    `encoded_length_kwargs` (the codec's frame-count parameters), the real model's by default (`from_model_config`).

    ```python
    >>> inputs = processor(["Hello there.", "<|emotion:anger|>Get out!"], reference=[voice, None])  # doctest: +SKIP
    >>> out = model.generate(**inputs, return_dict_in_generate=True)  # doctest: +SKIP
    >>> speech = processor.synthesize_long(model, open("chapter.txt").read(), seed=0)  # long text  # doctest: +SKIP
    ```
    """

    _auto_class = "AutoProcessor"
    valid_processor_kwargs = HiggsAudioV3ProcessorKwargs

    def __init__(self, tokenizer, chat_template: str | None = None, audio_spec: dict | None = None,
                 encoded_length_kwargs: dict | None = None):
        if is_original_chat_template(chat_template):  # *** Higgs v3 specific: older conversions kept it ***
            logger.warning_once("The chat template given to HiggsAudioV3Processor is the original repo's ChatML, which "
                                "renders chat turns, not Higgs Audio v3 TTS prompts; TTS_CHAT_TEMPLATE is used.")
            chat_template = None
        super().__init__(tokenizer, chat_template=chat_template or TTS_CHAT_TEMPLATE)
        # Prompts are left padded; saying so on the tokenizer also makes `pipeline(..., batch_size=n)` pad correctly.
        self.tokenizer.padding_side = "left"
        self.audio_spec = HiggsAudioV3AudioSpec(**(audio_spec or {}))  # validated where the model's config builds it
        self.encoded_length_kwargs = {**REAL_ENCODED_LENGTH_KWARGS, **(encoded_length_kwargs or {})}
        added = self.tokenizer.get_added_vocab()  # {token: id}
        missing = [token for token, _ in PROMPT_TOKENS.values() if token not in added]
        if missing:
            raise ValueError(f"The tokenizer has no {missing[0]!r} token; a Higgs Audio v3 tokenizer has the 84 added "
                             "tokens of the original (ids 151643..151726).")
        self._token_ids = {role: added[token] for role, (token, _) in PROMPT_TOKENS.items()}
        self._control_tags = control_tags(added)
        self._structural_tokens = {t for t in added if TAG_PATTERN.fullmatch(t) and t not in self._control_tags}
        # Added tokens of no `<|...|>` form (e.g. `<tool_call>`): the tokenizer would make them special tokens.
        reserved = sorted((t for t in added if not TAG_PATTERN.fullmatch(t)), key=len, reverse=True)
        self._reserved_pattern = re.compile("|".join(map(re.escape, reserved))) if reserved else None

    def to_dict(self) -> dict:
        """`ProcessorMixin.to_dict`, with `audio_spec` as the plain dict that `processor_config.json` holds."""
        return {**super().to_dict(), "audio_spec": self.audio_spec.to_dict()}

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs) -> "HiggsAudioV3Processor":
        """`ProcessorMixin.from_pretrained`; called on this class, the folder's remote code is not needed (this class is
        that code), so transformers does not ask whether to run it (a 15 s `[y/N]` prompt on every rank)."""
        kwargs.setdefault("trust_remote_code", False)
        config_log = logging.get_logger("transformers.configuration_utils")
        config_log.addFilter(_not_the_base_config_warning)
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        finally:
            config_log.removeFilter(_not_the_base_config_warning)

    @classmethod
    def from_model_config(cls, tokenizer, config, **kwargs) -> "HiggsAudioV3Processor":
        """A processor with the audio settings of `config` (a `HiggsAudioV3Config`) and its codec's frame-count
        parameters, checked against it (`check_model_config`); `kwargs` are the constructor's."""
        codec = config.codec_config  # a dict (the config stores it so)
        if codec is not None:
            semantic = codec["semantic_model_config"]
            kwargs.setdefault("encoded_length_kwargs", {
                **{key: codec[key] for key in ("sample_rate", "semantic_sample_rate", "downsample_factor")},
                **{key: semantic[key] for key in ("conv_kernel", "conv_stride")},
                "hop_length": math.prod(codec["acoustic_model_config"]["downsampling_ratios"]),
            })
        processor = cls(tokenizer, **{"audio_spec": config.audio_spec.to_dict(), **kwargs})
        processor.check_model_config(config)
        return processor

    def check_model_config(self, config) -> None:
        """Raise a `ValueError` listing every prompt token id or audio setting that differs from `config`."""
        problems = [
            f"{token} is id {self._token_ids[role]} in the tokenizer but config.{field}={getattr(config, field)}"
            for role, (token, field) in PROMPT_TOKENS.items()
            if getattr(config, field, None) not in (None, self._token_ids[role])
        ]
        ours, theirs = self.audio_spec.to_dict(), config.audio_spec.to_dict()
        problems += [f"processor {key}={value} but config.{key}={theirs[key]}"
                     for key, value in ours.items() if value != theirs[key]]
        if problems:
            raise ValueError("The processor does not match the model config: " + "; ".join(problems) + ".")

    @staticmethod
    def _get_encoded_length(num_samples: int, sample_rate: int, semantic_sample_rate: int, downsample_factor: int,
                            hop_length: int, conv_kernel: Sequence[int], conv_stride: Sequence[int]) -> int:
        """Frames the codec's `encode` returns for `num_samples` samples, without the codec (CSM's
        `_get_encoded_length`): the semantic branch's count, the clip resampled to `semantic_sample_rate`, padded by
        `downsample_factor // 2` on each side, through HuBERT's convolutions, every `hop_length / (sample_rate /
        semantic_sample_rate) / downsample_factor`-th frame kept. Real codec: `floor((ceil(2 * N / 3) + 560) / 640)`."""
        keep_every = max(1, int(hop_length / (sample_rate / semantic_sample_rate) / downsample_factor))
        length = resampled_length(int(num_samples), sample_rate, semantic_sample_rate) + 2 * (downsample_factor // 2)
        for kernel, stride in zip(conv_kernel, conv_stride):
            length = (length - kernel) // stride + 1  # HuBERT frames after each convolution
        return max(0, math.ceil(length / keep_every))

    @property
    def model_input_names(self) -> list[str]:
        return ["input_ids", "attention_mask", "audio_input_ids", "reference_audio", "reference_audio_lengths"]

    @property
    def sampling_rate(self) -> int:
        return self.audio_spec.sampling_rate

    @property
    def prompt_token_ids(self) -> dict[str, int]:
        """Ids of the prompt specials (`PROMPT_TOKENS` roles), looked up in the tokenizer."""
        return dict(self._token_ids)

    def valid_tags(self) -> list[str]:
        """The inline control tags (`CONTROL_TAG_FAMILIES`), in id order; each one is a single token."""
        return list(self._control_tags)

    def check_text(self, text, where: str = "the text") -> str:
        """`text` if it can be spoken, else a `ValueError` naming `where`: a non-blank string (`nothing_to_speak`) whose
        every `<|...|>` is a control tag (not a misspelled one, read aloud, nor a structural one), with no other special
        token (e.g. `<tool_call>`) and no unclosed `<|`. Every text and transcript of `__call__` passes through it."""
        if problem := self._text_problem(text, where):
            raise ValueError(problem)
        return text

    def _text_problem(self, text, where: str) -> str | None:
        tags, valid = self._control_tags, "processor.valid_tags() (or `higgs-v3 tags`) lists"
        if problem := nothing_to_speak(text, where):
            return problem
        if surrogate := _SURROGATE.search(text):  # e.g. from a JSON "\ud800" escape: no tokenizer can encode it
            return (f"{where[:1].upper() + where[1:]} holds a lone surrogate ({surrogate.group(0)!r} at character "
                    f"{surrogate.start()}), which is not valid Unicode text; remove it or fix how the text was decoded.")
        for tag in (match.group(0) for match in TAG_PATTERN.finditer(text)):
            if tag in self._structural_tokens:
                return (f"{tag!r} in {where} is a structural prompt token, which the processor places itself; remove "
                        f"it. {valid} the control tags.")
            if tag not in tags:
                close = difflib.get_close_matches(tag, tags, n=3, cutoff=0.6)
                hint = "Closest valid tags: " + ", ".join(map(repr, close)) if close else "No valid tag is close to it"
                return (f"Unknown control tag {tag!r} in {where}; it would be read aloud. {hint}. {valid} all "
                        f"{len(tags)}.")
        if self._reserved_pattern is not None and (match := self._reserved_pattern.search(text)):
            return (f"{match.group(0)!r} in {where} is a special token of the tokenizer, not speech or a control tag; "
                    "it would reach the prompt as a special token. Remove it (processor.valid_tags() lists the control "
                    "tags).")
        tag_starts = {match.start() for match in TAG_PATTERN.finditer(text)}
        for fragment in (m.group(0) for m in _TAG_START.finditer(text) if m.start() not in tag_starts):
            close = difflib.get_close_matches(fragment + "|>", tags, n=1, cutoff=0.5) if len(fragment) > 2 else []
            hint = f"did you mean {close[0]!r}?" if close else "control tags look like '<|emotion:anger|>'."
            return (f"{fragment!r} in {where} opens a tag that is never closed with '|>', so it would be read aloud; "
                    f"{hint} {valid} the control tags.")
        return None

    def _codes(self, codes, where: str, advice: str = REFERENCE_ADVICE, min_frames: int = 1) -> torch.LongTensor:
        """The raw codes `[frames, num_codebooks]` of `where` (`check_codes`, below BOC; `check_length`), on the CPU; a
        voice's, encoded at this model's codec rates."""
        spec, Where = self.audio_spec, where[:1].upper() + where[1:]
        if isinstance(codes, HiggsAudioV3Voice):
            if (codes.sampling_rate, codes.frame_rate) != (spec.sampling_rate, spec.frame_rate):
                raise ValueError(f"{Where} was encoded at {codes.sampling_rate} Hz / {codes.frame_rate} frames per "
                                 f"second; this model's codec runs at {spec.sampling_rate} Hz / {spec.frame_rate}.")
            codes = codes.codes
        codes = check_codes(codes, spec.num_codebooks, spec.audio_boc_token_id, f"the codes of {where}", min_frames)
        if codes.dim() != 2:
            raise ValueError(f"The codes of {where} must be raw codec codes [frames, {spec.num_codebooks}] of one "
                             f"clip, got shape {tuple(codes.shape)}.")
        check_length(Where, codes.shape[0], spec.frame_rate, "frames", advice=advice)
        return codes.cpu()

    def _reference(self, where: str, reference, codes, ref_text, sampling_rate, read: bool = True) -> tuple:
        """One row's (raw codes `[T, C]`, `ReferenceClip` or None; transcript or None), every part checked
        (`load_reference` decides what the reference is; `read=False`: a clip's form only, nothing read)."""
        ref_text = None if ref_text == "" else ref_text  # the official server's `reference_text or None`
        if reference is not None and codes is not None:
            raise ValueError(f"{where[:1].upper() + where[1:]} is given twice (reference and reference_codes); pass "
                             "one of them.")
        if reference is not None:  # a voice (its transcript, or ref_text) or a clip (with ref_text)
            codes = load_reference(reference, ref_text, sampling_rate, where, self.audio_spec.sampling_rate, read)
            ref_text = codes.text or None
        if codes is not None and not isinstance(codes, ReferenceClip):
            codes = self._codes(codes, where)
        if codes is None and ref_text is not None:
            logger.warning_once("A reference_text without a reference voice is dropped: the transcript only helps "
                                "together with the clip it describes.")
            ref_text = None
        if ref_text is not None and not (isinstance(ref_text, str) and ref_text.isspace()):
            self.check_text(ref_text, f"the transcript of {where}")
        return codes, ref_text

    @staticmethod
    def _per_row(value, name: str, size: int) -> list:
        """One value per text: a list/tuple must have one entry per text; anything else applies to every text."""
        if isinstance(value, (list, tuple)) and len(value) != size:
            raise ValueError(f"{name} has {len(value)} entries for {size} texts; pass one entry per text (None for no "
                             "reference) or a single value for all texts.")
        return list(value) if isinstance(value, (list, tuple)) else [value] * size

    def _requests(self, text, reference=None, reference_text=None, reference_codes=None, sampling_rate=None,
                  read: bool = True) -> tuple[list[str], list[tuple]]:
        """The checked texts of a call (a prompt as the chat template renders it split into its text and transcript) and
        one `_reference` per text."""
        texts = [text] if isinstance(text, str) else text
        if not isinstance(texts, (list, tuple)) or not texts:
            raise ValueError(f"text must be a string or a non-empty list of strings, got {text!r}.")
        size, columns = len(texts), (("reference", reference), ("reference_codes", reference_codes),
                                     ("reference_text", reference_text), ("sampling_rate", sampling_rate))
        spoken, references = [], []
        for i, (text, (voice, codes, ref_text, rate)) in enumerate(
                zip(texts, zip(*(self._per_row(value, name, size) for name, value in columns)))):
            text, ref_text = _rendered(i, text, voice, codes, ref_text)
            spoken.append(self.check_text(text, f"text {i}" if size > 1 else "the text"))
            where = f"the reference for text {i}" if size > 1 else "the reference"
            references.append((where, voice, codes, ref_text, rate))
        return spoken, [self._reference(*reference, read) for reference in references]

    def __call__(
        self, text: str | list[str],
        reference: HiggsAudioV3Voice | str | os.PathLike | np.ndarray | torch.Tensor | dict | Sequence | None = None,
        reference_text: str | Sequence[str | None] | None = None,
        reference_codes: torch.Tensor | Sequence[torch.Tensor | None] | None = None,
        audio_target: torch.Tensor | np.ndarray | HiggsAudioV3Voice | str | os.PathLike | Sequence | None = None,
        **kwargs: Unpack[HiggsAudioV3ProcessorKwargs],
    ) -> BatchEncoding:
        r"""
        The prompts of one text or a batch, left padded (with `audio_target`: a training batch). Each text takes at most
        one reference with an optional transcript, each argument one value for all texts or one per text (None for
        none).

        Args:
            text: the text(s) to speak, with inline control tags (`valid_tags()`), or rendered chat prompts.
            reference: voices (`model.encode_reference`, of any import, or voice files) or clips (an audio file, an
                `http(s)://` URL, samples with `sampling_rate`, `{"array": samples, "sampling_rate": rate}`).
            reference_text / reference_codes / audio_target: transcripts, raw codes `[T, num_codebooks]`, and training
                targets (raw codes from `model.encode_target(clip)`, or voices).
            kwargs (`HiggsAudioV3ProcessorKwargs`): `return_tensors` ("pt"; "np"; None: lists, a clip's waveform as a
                numpy array), `sampling_rate` of samples (one, or one per text), `padding_side` of training examples,
                `normalize` ("en": numbers, dates and currency of the texts spelled out, `normalize_text`; off: None).

        Returns:
            `BatchEncoding` with `input_ids`, `attention_mask` `[B, L]`, with references `audio_input_ids`
            `[N, num_codebooks]` (clips' rows marked with `audio_placeholder_id`), with clips `reference_audio`
            `[S_0 + ... + S_{K-1}]` (float32, packed in placeholder order) and `reference_audio_lengths` `[K]`. Not a
            `BatchFeature`, whose floats the text-to-speech pipeline would cast to the model's dtype.
        """
        if unknown := sorted(set(kwargs) - _OPTIONS):
            raise TypeError(f"HiggsAudioV3Processor got unexpected keyword arguments {unknown}; the options are "
                            "return_tensors, sampling_rate, padding_side and normalize.")
        options = self._merge_kwargs(HiggsAudioV3ProcessorKwargs, **kwargs)
        return_tensors = options["text_kwargs"]["return_tensors"]
        texts, references = self._requests(text, reference, reference_text, reference_codes,
                                           options["audio_kwargs"].get("sampling_rate"))
        texts = [normalize_text(text, options["text_kwargs"].get("normalize")) for text in texts]
        if audio_target is None:
            return BatchEncoding(self._prompts(texts, references), tensor_type=return_tensors)
        # *** training examples (issue 16): the prompt followed by the target's rows, with labels ***
        if clips := [i for i, (codes, _) in enumerate(references) if isinstance(codes, ReferenceClip)]:
            raise ValueError(
                f"The reference of text {clips[0]} is an audio clip; training examples take encoded references, whose "
                "codes stay fixed over the epochs: encode it once, voice = model.encode_reference(clip, text=...), and "
                "pass the voice."
            )
        if isinstance(audio_target, tuple) and len(audio_target) == 2 and isinstance(audio_target[1], int):
            audio_target = [audio_target] * len(texts)  # one (samples, rate) pair, refused as a waveform
        targets = [self._target(target, f"the audio_target of text {i}" if len(texts) > 1 else "the audio_target")
                   for i, target in enumerate(self._per_row(audio_target, "audio_target", len(texts)))]
        batch = self.pad_training_examples(self._training_examples(texts, references, targets),
                                           options["text_kwargs"]["padding_side"])
        return BatchEncoding({key: value.tolist() for key, value in batch.items()}, tensor_type=return_tensors)
        # *** end training examples ***

    def _prompts(self, texts: list[str], references: list[tuple]) -> dict:
        """Token ids of the prompts (one tokenizer call for every text and transcript; tags stay single tokens), left
        padded, the delayed reference rows, and the clips' waveforms with their lengths."""
        transcripts = [ref_text for _, ref_text in references if ref_text is not None]
        encoded = self.tokenizer(texts + transcripts, add_special_tokens=False, split_special_tokens=False)["input_ids"]
        text_ids, transcript_ids = encoded[: len(texts)], iter(encoded[len(texts) :])
        if max(len(ids) for ids in text_ids) > LONG_PROMPT_TEXT_TOKENS:
            logger.warning_once(
                f"A text of more than {LONG_PROMPT_TEXT_TOKENS} tokens is spoken as one generation; the model was "
                "trained on sentence-sized chunks and tends to run away or skip words on long ones. Use "
                "processor.synthesize_long(model, text), which splits it into chunks and keeps the voice."
            )
        ids, spec = self._token_ids, self.audio_spec
        prompts, delayed_rows, clips = [], [], []
        for (codes, ref_text), spoken in zip(references, text_ids):
            prompt = [ids["tts"]]
            if isinstance(codes, ReferenceClip):  # the clip's rows hold the placeholder id until `generate` fills them
                frames = self._get_encoded_length(codes.waveform.shape[0], **self.encoded_length_kwargs)
                delayed_rows.append(torch.full((spec.rows(frames), spec.num_codebooks), spec.audio_placeholder_id))
                clips.append(codes.waveform)
            elif codes is not None:
                delayed_rows.append(spec.delay(codes))  # [T + C - 1, C]
            if codes is not None:
                if ref_text is not None:
                    prompt += [ids["ref_text"], *next(transcript_ids)]
                prompt += [ids["ref_audio"]] + [spec.audio_placeholder_id] * delayed_rows[-1].shape[0]
            prompts.append(prompt + [ids["text"], *spoken, ids["audio_start"]])
        length = max(len(p) for p in prompts)
        data = {
            "input_ids": [[ids["pad"]] * (length - len(p)) + p for p in prompts],
            "attention_mask": [[0] * (length - len(p)) + [1] * len(p) for p in prompts],
        }
        if delayed_rows:
            data["audio_input_ids"] = torch.cat(delayed_rows).tolist()  # [N, C]
        if clips:
            data["reference_audio"] = torch.cat(clips).numpy()  # [S_0 + ... + S_{K-1}] float32, packed
            data["reference_audio_lengths"] = [clip.shape[0] for clip in clips]  # [K]
        return data

    def _target(self, target, where: str) -> torch.LongTensor:
        """A training target as raw codes `[T, num_codebooks]`, `T >= num_codebooks` (generation reads the end of speech
        only after its delay window); audio files and waveforms are refused (the codec is the model's)."""
        floating = isinstance(target, torch.Tensor) and target.is_floating_point() or (
            isinstance(target, np.ndarray) and target.dtype.kind == "f")
        audio_file = isinstance(target, (str, os.PathLike)) and not str(target).endswith(VOICE_FILE_SUFFIXES)
        if audio_file or floating or isinstance(target, tuple):
            what = f"{str(target)!r}, an audio file" if audio_file else "a waveform"
            raise ValueError(
                f"{where[:1].upper() + where[1:]} is {what}: the processor does not run the codec (the model owns "
                "it). Encode it first, `codes = model.encode_target(clip)`, and pass the codes; "
                "higgs_v3.training.finetune.prepare_examples does this for a whole dataset with an on-disk cache."
            )
        if not isinstance(target, (np.ndarray, torch.Tensor)):
            target = HiggsAudioV3Voice.from_any(target, where)
        return self._codes(target, where, TARGET_ADVICE, min_frames=self.audio_spec.num_codebooks)

    def _training_examples(self, texts: list[str], references: list[tuple], targets: list) -> list[dict]:
        r"""One unpadded example per text (`input_ids` `[L]`, `audio_input_ids` `[N, C]`, `audio_labels` `[L, C]`):
        exactly the sequence `generate` sees, the prompt then the target's delayed rows, which are the only labels.

        ```
        position   ... <|audio|>   P_0      P_1     ...  P_{R-1}       (P: placeholder, fed the target's row)
        input      prompt          row 0    row 1   ...  row R-1       (row R-1: the terminal row)
        label      -100 ... -100   row 0    row 1   ...  row R-1       (the loss scores logits at p against p + 1)
        ```
        """
        prompts, spec = self._prompts(texts, references), self.audio_spec
        examples = []
        for ids, mask, (ref_codes, _), target in zip(prompts["input_ids"], prompts["attention_mask"], references,
                                                     targets):
            prompt = torch.tensor(ids, dtype=torch.long)[torch.tensor(mask, dtype=torch.bool)]  # [P], unpadded
            rows = spec.delay(target)  # [R, C]
            refs = spec.delay(ref_codes) if ref_codes is not None else rows.new_zeros(0, spec.num_codebooks)
            examples.append({
                "input_ids": torch.cat([prompt, torch.full((rows.shape[0],), spec.audio_placeholder_id)]),  # [P + R]
                "audio_input_ids": torch.cat([refs, rows]),  # [N_ref + R, C]
                "audio_labels": torch.cat([torch.full((len(prompt), spec.num_codebooks), -100), rows]),  # [P + R, C]
            })
        return examples

    def pad_training_examples(self, examples: Sequence[dict], padding_side: str = "right") -> dict[str, torch.Tensor]:
        """Pad training examples (`_training_examples`, tensors or lists) into a batch on `padding_side` ("right" or
        "left"): `input_ids`, `attention_mask`, `position_ids` (counted from each example's first token, as in
        generation) `[B, L]`, `audio_input_ids` `[B, N, C]` with `audio_input_ids_mask` `[B, N]`, `audio_labels`
        `[B, L, C]` (-100 on padding)."""
        if padding_side not in ("left", "right") or not examples:
            raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}." if examples else
                             "There are no training examples to pad (an empty batch).")
        keys, num_codebooks = ("input_ids", "audio_input_ids", "audio_labels"), self.audio_spec.num_codebooks
        examples = [{key: torch.as_tensor(example[key], dtype=torch.long) for key in keys} for example in examples]
        length = max(e["input_ids"].shape[0] for e in examples)
        num_rows = max(e["audio_input_ids"].shape[0] for e in examples)

        def pad(tensor: torch.Tensor, size: int, value: int, side: str = padding_side) -> torch.Tensor:
            filler = tensor.new_full((size - tensor.shape[0], *tensor.shape[1:]), value)
            return torch.cat([filler, tensor] if side == "left" else [tensor, filler])

        batch = {
            "input_ids": torch.stack([pad(e["input_ids"], length, self._token_ids["pad"]) for e in examples]),
            "attention_mask": torch.stack([pad(torch.ones_like(e["input_ids"]), length, 0) for e in examples]),
            "audio_labels": torch.stack([pad(e["audio_labels"].view(-1, num_codebooks), length, -100)
                                         for e in examples]),
        }
        batch["position_ids"] = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        rows = [e["audio_input_ids"].view(-1, num_codebooks) for e in examples]
        # Reference and target rows are right padded whatever the side: the mask says which are real, in order.
        batch["audio_input_ids"] = torch.stack([pad(r, num_rows, 0, side="right") for r in rows])
        batch["audio_input_ids_mask"] = torch.stack([(torch.arange(num_rows) < r.shape[0]).long() for r in rows])
        return batch

    def apply_chat_template(self, conversation: list[dict] | list[list[dict]], chat_template: str | None = None,
                            tokenize: bool = False, return_dict: bool = False, return_tensors: str | None = "pt",
                            processor_kwargs: dict | None = None, **kwargs):
        r"""
        The TTS prompt of a conversation (or a batch) rendered by transformers' method with the chat template, or with
        `tokenize=True` exactly `processor(text, reference=..., reference_text=...)` (the `BatchEncoding` with
        `return_dict=True`, else `input_ids`). A conversation (`CHAT_LAYOUT`) is an optional reference turn, whose audio
        item's `"path"`, `"url"` or `"audio"` (with `"sampling_rate"` for samples) is any `reference` and whose text is
        its transcript (a voice's own is shown when there is none), then the text to speak. Messages may be dicts or, as
        transformers 5.24 takes them, message objects (dataclasses, pydantic models such as the OpenAI SDK's, a
        conversation object with `.messages`). Rendering reads no audio but checks everything. `processor_kwargs` go to
        `__call__` (as do the options of `__call__` given directly, as `ProcessorMixin` moves them); every other keyword
        (`add_generation_prompt`, `tools`, a custom template's variables) goes to the template, as in `ProcessorMixin`.
        """
        # *** Higgs v3 specific: the references never reach the stock method. Its tokenize=True path loads every audio
        # item with transformers.audio_utils.load_audio (soxr / torchcodec resampling, not torchaudio's algorithm, so a
        # clip would get other codes than model.encode_reference gives it; no voices or voice files; no URL bounds).
        # The audio items are taken out here (the layout checked, voices loaded, clips unread), the stock method renders
        # the rest with the template, and `__call__` tokenizes the rendered prompts with the references. ***
        processor_kwargs = {**{k: kwargs.pop(k) for k in list(kwargs) if k in _OPTIONS}, **(processor_kwargs or {})}
        if unknown := sorted(set(processor_kwargs) - _OPTIONS):
            raise ValueError(f"apply_chat_template of a TTS processor does not take the processor options {unknown}; "
                             f"processor_kwargs takes {sorted(_OPTIONS)}.")
        if stock_only := sorted(k for k in _STOCK_TOKENIZE_OPTIONS if kwargs.get(k)):
            raise ValueError(f"apply_chat_template of a TTS processor does not take {stock_only}: they need "
                             "transformers' own tokenization of chat turns, and a TTS prompt is tokenized by the "
                             "processor (its text, its reference rows).")
        batched, conversations, references = _chat_references(_message_dicts(conversation),
                                                              self.audio_spec.sampling_rate)
        conversations, references = (conversations, references) if batched else (conversations[0], references[0])
        prompt = super().apply_chat_template(conversations, chat_template=chat_template, **kwargs)
        if not tokenize:
            self._requests(prompt, references, read=False)  # every check, no audio read
            return prompt
        inputs = self(prompt, reference=references, **{"return_tensors": return_tensors, **processor_kwargs})
        return inputs if return_dict else inputs["input_ids"]
        # *** end Higgs v3 specific ***

    def synthesize_long(self, model, text: str, **options) -> SpeechResult:
        """Speak a text of any length with a stable voice: `longform_higgs_v3.synthesize_long(model, self, text,
        **options)`, reachable from a Hub repo alone (the processor's remote code carries long-form speech)."""
        return synthesize_long(model, self, text, **options)

    def synthesize_stream(self, model, pieces, **options) -> Iterator[torch.FloatTensor]:
        """Speak a text as it arrives, sentence by sentence: `longform_higgs_v3.synthesize_stream(model, self, pieces,
        **options)` yields waveforms."""
        return synthesize_stream(model, self, pieces, **options)

    def synthesize_dialogue(self, model, script, voices: dict | None = None, **options) -> SpeechResult:
        """Speak a dialogue script, each speaker with their voice: `longform_higgs_v3.synthesize_dialogue(model, self,
        script, voices, **options)`."""
        return synthesize_dialogue(model, self, script, voices, **options)

    def save_audio(self, waveform, path: str | os.PathLike, sampling_rate: int | None = None):
        """Write a mono waveform to `path` (or a list of them to a list of paths) at `sampling_rate` (the codec's)."""
        return save_audio(waveform, path, sampling_rate=sampling_rate or self.audio_spec.sampling_rate)

    @staticmethod
    def load_voice(path: str | os.PathLike) -> HiggsAudioV3Voice:
        """Read a voice saved with `HiggsAudioV3Voice.save` (`.safetensors` or `.json`; never pickle)."""
        return HiggsAudioV3Voice.load(path)

    def batch_decode(self, *args, **kwargs):
        """Text ids -> strings with the tokenizer, as `ProcessorMixin` (audio rows refused: `_refuse_audio_rows`)."""
        _refuse_audio_rows(args[0] if args else kwargs.get("sequences"), text_dims=2)
        return super().batch_decode(*args, **kwargs)

    def decode(self, *args, **kwargs):
        """Text ids -> a string with the tokenizer, as `ProcessorMixin` (audio rows refused: `_refuse_audio_rows`)."""
        _refuse_audio_rows(args[0] if args else kwargs.get("token_ids"), text_dims=1)
        return super().decode(*args, **kwargs)


def _refuse_audio_rows(ids, text_dims: int) -> None:
    """Ids of more than `text_dims` dimensions are `generate`'s audio rows (`[batch, rows, num_codebooks]`, or one
    sequence's `[rows, num_codebooks]`), codes the tokenizer would turn into arbitrary text: a `ValueError` saying how
    audio is decoded."""
    if getattr(ids, "ndim", 0) > text_dims:
        raise ValueError(
            f"decode / batch_decode take text token ids; got a {tuple(ids.shape)} array, generated audio rows "
            "([batch,] rows, num_codebooks). generate(..., return_dict_in_generate=True) returns the waveforms in "
            "`.audio`, and model.decode_audio(out.sequences, out.lengths) decodes rows."
        )


def _rendered(index: int, text, reference, codes, transcript) -> tuple:
    """`(text, transcript)` of a prompt as the chat template renders it (`apply_chat_template` gives such prompts to
    `__call__`), checked against its row's reference arguments; any other text as it is."""
    match = _RENDERED.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        return text, transcript
    referenced = reference is not None or codes is not None
    if (match.group(2) is not None) != referenced or None not in (match.group(1), transcript):
        raise ValueError(f"Text {index} is a rendered TTS prompt whose reference turn does not match the arguments: "
                         "give a reference exactly when it holds <|ref_audio|>, and its transcript in <|ref_text|> or "
                         "in reference_text, not both (processor.apply_chat_template does this from a conversation).")
    return match.group(3), transcript if match.group(1) is None else match.group(1)


_STOCK_TOKENIZE_OPTIONS = ("return_assistant_tokens_mask", "sanitize_control_tokens", "load_audio_from_video")
"""`ProcessorMixin.apply_chat_template` options that act in its own tokenization, which a TTS prompt does not use."""


def _message_dicts(conversation):
    """A conversation (or a batch) with message objects as transformers 5.24's `apply_chat_template` takes them (a
    conversation object's `.messages`, dataclass or pydantic messages and content items) as plain dicts, the keys
    whose value is None dropped from messages (as transformers does); the values inside a content item (a voice, a
    waveform) stay as they are. Anything else is returned unchanged, for the layout check to name."""

    def plain(value):
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
        return value.model_dump() if callable(getattr(value, "model_dump", None)) else value

    def message_dict(message):
        message = {key: value for key, value in message.items() if value is not None}
        content = message.get("content")
        return {**message, "content": [plain(item) for item in content]} if isinstance(content, (list, tuple)) else (
            message)

    def messages(one):
        one = getattr(one, "messages", one)
        return [message_dict(m) if isinstance(m, Mapping) else m for m in map(plain, one)] if isinstance(
            one, (list, tuple)) else one

    batched = isinstance(conversation, (list, tuple)) and bool(conversation) and (
        isinstance(conversation[0], (list, tuple)) or hasattr(conversation[0], "messages"))
    return [messages(one) for one in conversation] if batched else messages(conversation)


def _chat_references(conversation, sampling_rate: int) -> tuple[bool, list, list]:
    """(batched, the conversations to render, one reference per conversation): the layout rule checked (one
    `ValueError` naming the message), each reference turn's audio item emptied and its reference taken out (a voice
    loaded, its transcript moved into the turn when the turn has none; a clip left unread)."""
    batched = isinstance(conversation, (list, tuple)) and bool(conversation) and isinstance(conversation[0],
                                                                                          (list, tuple))
    rendered, references = [], []
    for i, messages in enumerate(conversation if batched else [conversation]):
        problem, turns = _conversation_problem(messages, f"conversation {i}" if batched else "the conversation")
        if problem:
            raise ValueError(f"{problem} {CHAT_LAYOUT}")
        reference, (message, content, audio, transcript) = None, turns[0]
        if audio:
            reference = audio[0][next(key for key in ("audio", "path", "url") if audio[0].get(key) is not None)]
            if audio[0].get("sampling_rate") is not None:  # samples with their rate (or a file's, which must agree)
                reference = {"array" if isinstance(reference, (np.ndarray, torch.Tensor)) else "path": reference,
                             "sampling_rate": audio[0]["sampling_rate"]}
            where = f"the reference for text {i}" if batched else "the reference"
            loaded = load_reference(reference, None, None, where, sampling_rate, read=False)
            content = [{"type": "audio"} if item["type"] == "audio" else item for item in content]
            if isinstance(loaded, HiggsAudioV3Voice):  # loaded once; its transcript goes into the prompt
                moved = bool(loaded.text and loaded.text.strip() and not transcript.strip())
                reference = replace(loaded, text=None) if moved else loaded
                content += [{"type": "text", "text": loaded.text}] if moved else []
            turns[0] = ({**message, "content": content}, content, audio, transcript)
        rendered.append([turn[0] for turn in turns])
        references.append(reference)
    return batched, rendered, references


def _conversation_problem(messages, where: str) -> tuple[str | None, list]:
    """The layout rule of a TTS conversation: (the first problem or None, the turns as `(message, content items,
    audio items, text)`, the reference turn first when there is one)."""
    Where = where[:1].upper() + where[1:]
    if not isinstance(messages, (list, tuple)) or not messages:
        return f"{Where} must be a non-empty list of messages, got {messages!r}.", []
    if len(messages) > 2:
        return f"{Where} has {len(messages)} messages; at most two.", []
    turns = []
    for number in reversed(range(len(messages))):  # the last first: audio there is the mistake, not none before it
        message = messages[number]
        here = f"message {number} of {where}"
        Here = here[:1].upper() + here[1:]
        content = message.get("content") if isinstance(message, dict) else None
        content = [{"type": "text", "text": content}] if isinstance(content, str) else content
        last = number == len(messages) - 1
        if isinstance(message, dict) and message.get("role") == "system":
            return f"{Here} is a system message; TTS prompts have none.", []
        if not isinstance(content, (list, tuple)) or not all(isinstance(item, dict) for item in content):
            return f"{Here} has no list of content items.", []
        if kinds := {item.get("type") for item in content} - {"text", "audio"}:
            return f"{Here} has content of type {sorted(map(str, kinds))}; only 'text' and 'audio' are accepted.", []
        audio = [item for item in content if item["type"] == "audio"]
        sources = [key for key in ("audio", "path", "url") if audio and audio[0].get(key) is not None]
        problem = (
            f"{Here} (the last) holds audio; the last message is the text to speak." if audio and last else
            f"{Here} holds no audio; only a reference turn may come before the text to speak." if not (audio or last)
            else f"{Here} holds {len(audio)} audio items; one reference per prompt." if len(audio) > 1 else
            f"The audio item of {here} must have exactly one of 'audio', 'path' or 'url', got "
            f"{sorted(k for k in audio[0] if k != 'type')}." if audio and len(sources) != 1 else None
        )
        if problem:
            return problem, []
        texts = [item.get("text", "") for item in content if item["type"] == "text"]
        if not all(isinstance(text, str) for text in texts):
            bad = next(text for text in texts if not isinstance(text, str))
            return f"A text item of {here} holds {type(bad).__name__} {bad!r:.40}; 'text' must be a string.", []
        turns.insert(0, (message, list(content), audio, "".join(texts)))
    return None, turns


__all__ = [
    "CHAT_LAYOUT",
    "LONG_PROMPT_TEXT_TOKENS",
    "PROMPT_TOKENS",
    "REAL_ENCODED_LENGTH_KWARGS",
    "TTS_CHAT_TEMPLATE",
    "HiggsAudioV3Processor",
    "HiggsAudioV3ProcessorKwargs",
    "is_original_chat_template",
]
