"""Scoring spoken items: the scorers loaded from a folder or the local Hugging Face cache (`resolve_scorer`), WER / CER
with a transformers ASR pipeline (`transcribe`, then `longform_higgs_v3.word_error_rate`: jiwer over `wer_words`, the
one normaliser), speaker similarity with a transformers x-vector model (`SpeakerEncoder`), the per-item rows and the
summary (`summarize`), and the plots (`write_plots`, with matplotlib when it is installed)."""

from __future__ import annotations

import math
from pathlib import Path


DEFAULT_ASR = "openai/whisper-large-v3"
"""Seed-TTS-eval's English ASR model (its Chinese one, Paraformer-zh, is not a transformers model)."""

DEFAULT_SPEAKER_MODEL = "microsoft/wavlm-base-plus-sv"
"""transformers' WavLM x-vector speaker-verification model (`WavLMForXVector`)."""


def resolve_scorer(name: str, what: str, option: str) -> str:
    """A local folder for the scorer `name`: the folder itself, else the Hub repo from the local cache (downloaded when
    the Hub is reachable). Offline and not cached: a `ValueError` naming the model, the option and how to get it."""
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path)
    if path.exists():
        raise ValueError(f"The {what} {name!r} ({option}) is a file; give a model folder or a Hub repo id.")
    from huggingface_hub import snapshot_download

    from ..conversion.repo import hub_offline_reason

    offline = hub_offline_reason()
    try:
        return snapshot_download(name, local_files_only=offline is not None)
    except Exception as error:  # unknown repo, no access, not cached: one line each
        reason = offline or (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"Cannot load the {what} {name!r} ({option}): {reason}, and it is not in the local Hugging "
                         f"Face cache. Download it once (`hf download {name}`) or give a local folder with {option}."
                         ) from error


def check_scorer_kind(folder: str, name: str, kind: str, option: str) -> None:
    """The model in `folder` (named `name` by `option`) must be of `kind`: "asr" (a CTC or sequence-to-sequence speech
    recognition model, what `pipeline("automatic-speech-recognition")` runs) or "speaker" (an x-vector model,
    `AutoModelForAudioXVector`); a `ValueError` naming what it is otherwise."""
    from transformers import AutoConfig
    from transformers.models.auto import modeling_auto

    try:
        config = AutoConfig.from_pretrained(folder)
    except (OSError, ValueError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"Cannot read the config of {name!r} ({option}): {reason}") from error
    if kind == "asr":
        mappings = (modeling_auto.MODEL_FOR_CTC_MAPPING_NAMES, modeling_auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES)
        what, example = "a speech recognition model (Whisper, Wav2Vec2 CTC, ...)", "openai/whisper-large-v3"
    else:
        mappings = (modeling_auto.MODEL_FOR_AUDIO_XVECTOR_MAPPING_NAMES,)
        what, example = "a speaker-verification x-vector model (WavLMForXVector, ...)", DEFAULT_SPEAKER_MODEL
    classes = {name for mapping in mappings for names in mapping.values()
               for name in ((names,) if isinstance(names, str) else names)}
    architectures = getattr(config, "architectures", None) or []
    # A checkpoint names its head (WavLM's x-vector and CTC heads share one config type); else the config type decides.
    accepted = (any(a in classes for a in architectures) if architectures else
                any(config.model_type in mapping for mapping in mappings))
    if not accepted:
        found = f"{config.model_type} model" + (f" ({', '.join(architectures)})" if architectures else "")
        raise ValueError(f"{option} {name!r} is a {found}, not {what}; give one such as {example}.")


def load_asr(name: str, device: str = "cpu", option: str = "--asr"):
    """`pipeline("automatic-speech-recognition")` of the model `name` (`resolve_scorer`, `check_scorer_kind`), on
    `device`."""
    from transformers import pipeline

    folder = resolve_scorer(name, "ASR model", option)
    check_scorer_kind(folder, name, "asr", option)
    return pipeline("automatic-speech-recognition", model=folder, device=device)


def check_language(asr, name: str, language: str | None) -> None:
    """`--language` must be one the ASR pipeline `asr` (the model `name`) takes: a Whisper model's (tried on a second of
    silence, so its own check speaks); another kind of model transcribes its own language and takes none."""
    if language is None:
        return
    if asr.model.config.model_type != "whisper":
        raise ValueError(f"--language is passed to Whisper ASR models only; {name!r} is a "
                         f"{asr.model.config.model_type} model, which transcribes the language it was trained on: "
                         "drop --language.")
    import torch

    try:
        transcribe(asr, [torch.zeros(asr.feature_extractor.sampling_rate)], asr.feature_extractor.sampling_rate,
                   language)
    except ValueError as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise ValueError(f"--language {language!r} cannot be used with the ASR model {name!r}: {reason}") from error


def transcribe(asr, waveforms: list, sampling_rate: int, language: str | None = None, batch_size: int = 8) -> list[str]:
    """What `asr` hears in each waveform (1-D float tensors at `sampling_rate`, resampled to the pipeline's rate);
    `language` is passed to Whisper models (None: detected)."""
    from ..codec_higgs_v3 import resample_audio

    rate = asr.feature_extractor.sampling_rate
    inputs = [{"raw": resample_audio(w.float(), sampling_rate, rate).numpy(), "sampling_rate": rate} for w in waveforms]
    options = {}
    if language is not None and asr.model.config.model_type == "whisper":
        options["generate_kwargs"] = {"language": language, "task": "transcribe"}
    return [out["text"].strip() for out in asr(inputs, batch_size=batch_size, **options)]


class SpeakerEncoder:
    """Speaker embeddings with a transformers x-vector model (`AutoModelForAudioXVector`, e.g. `WavLMForXVector`) and
    its feature extractor; `similarity(a, b)` is the cosine of two clips' embeddings."""

    def __init__(self, name: str, device: str = "cpu"):
        from transformers import AutoFeatureExtractor, AutoModelForAudioXVector

        folder = resolve_scorer(name, "speaker-verification model", "--speaker-model")
        check_scorer_kind(folder, name, "speaker", "--speaker-model")
        self.features = AutoFeatureExtractor.from_pretrained(folder)
        self.model = AutoModelForAudioXVector.from_pretrained(folder).to(device).eval()
        self.device = device

    def embed(self, waveform, sampling_rate: int):
        """The unit embedding `[D]` of a 1-D float waveform at `sampling_rate` (resampled to the model's rate)."""
        import torch

        from ..codec_higgs_v3 import resample_audio

        rate = self.features.sampling_rate
        samples = resample_audio(waveform.float(), sampling_rate, rate).numpy()
        inputs = self.features([samples], sampling_rate=rate, return_tensors="pt").to(self.device)
        with torch.no_grad():
            embedding = self.model(**inputs).embeddings[0].float().cpu()
        return torch.nn.functional.normalize(embedding, dim=-1)

    def similarity(self, a, a_rate: int, b, b_rate: int) -> float:
        return float(self.embed(a, a_rate) @ self.embed(b, b_rate))


def summarize(rows: list[dict], rtf: float | None, models: dict) -> dict:
    """The summary of the per-item rows: means of WER and SIM over the scored items (the published figures' form: WER
    as a fraction, SIM a cosine; Seed-TTS-eval prints them x100), the runaway rate (items with a chunk that never
    ended), the items whose every take of a chunk was bad, the takes per chunk, the real-time factor of this run."""
    def mean(values: list) -> float | None:
        values = [v for v in values if v is not None and not math.isnan(v)]
        return sum(values) / len(values) if values else None

    count = len(rows)
    return {
        "items": count,
        "wer": mean([row["wer"] for row in rows]),
        "sim": mean([row["sim"] for row in rows]),
        "runaway_rate": sum(not row["finished"] for row in rows) / count if count else None,
        "failed_rate": sum(row["failed_chunks"] > 0 for row in rows) / count if count else None,
        "retried_items": sum(row["takes"] > row["chunks"] for row in rows),
        "takes_per_chunk": sum(row["takes"] for row in rows) / max(sum(row["chunks"] for row in rows), 1),
        "audio_seconds": sum(row["duration"] for row in rows),
        "real_time_factor": rtf,
        **models,
    }


def draw_plots(rows: list[dict]) -> dict:
    """The evaluation's figures by file name (matplotlib `Figure`s; None without matplotlib): WER and SIM histograms
    (finished items and runaway items, those with a chunk that never ended, stacked in two colours; the mean of all as
    a dashed line) and duration against text length (`spoken_characters`; runaway items as red crosses)."""
    try:
        import matplotlib  # noqa: F401 - first: it alone says whether matplotlib is there
        from matplotlib.figure import Figure
    except ImportError:
        return None

    runaway = [not row["finished"] for row in rows]
    groups = {"finished": [r for r, bad in zip(rows, runaway) if not bad],
              "runaway": [r for r, bad in zip(rows, runaway) if bad]}
    colours = {"finished": "tab:blue", "runaway": "tab:red"}

    def histogram(axes, key: str, label: str):
        values = {name: [r[key] for r in group if r[key] is not None and not math.isnan(r[key])]
                  for name, group in groups.items()}
        shown = {name: v for name, v in values.items() if v}
        if shown:
            axes.hist(list(shown.values()), bins=20, stacked=True, color=[colours[n] for n in shown],
                      label=[f"{name} ({len(v)})" for name, v in shown.items()])
        everything = [v for vs in values.values() for v in vs]
        if everything:
            mean = sum(everything) / len(everything)
            axes.axvline(mean, color="black", linestyle="--", label=f"mean {mean:.3f}")
        axes.set_xlabel(label)
        axes.set_ylabel("items")
        axes.legend(fontsize="small")

    def scatter(axes):
        for name, group in groups.items():
            if group:
                axes.scatter([r["characters"] for r in group], [r["duration"] for r in group], s=12 if
                             name == "finished" else 30, marker="o" if name == "finished" else "x",
                             color=colours[name], label=f"{name} ({len(group)})")
        axes.set_xlabel("spoken characters of the text")
        axes.set_ylabel("seconds of audio")
        axes.legend(fontsize="small")

    plots = {
        "wer_hist.png": ("WER per item", lambda axes: histogram(axes, "wer", "word error rate (0 = every word right)")),
        "sim_hist.png": ("speaker similarity per item", lambda axes: histogram(
            axes, "sim", "speaker similarity to the prompt (cosine)")),
        "duration_vs_length.png": ("seconds of audio against spoken characters", scatter),
    }
    figures = {}
    for name, (title, draw) in plots.items():
        figure = Figure(figsize=(5.5, 3.8), layout="constrained")
        axes = figure.subplots()
        draw(axes)
        axes.set_title(title)
        figures[name] = figure
    return figures


def write_plots(rows: list[dict], folder: Path) -> list[str]:
    """`draw_plots` as PNG files in `folder`, each written atomically; without matplotlib, none (returns the files
    written)."""
    figures = draw_plots(rows)
    if figures is None:
        return []
    from ..audio_io_higgs_v3 import atomic_output

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, figure in figures.items():
        with atomic_output(folder / name) as temporary:
            figure.savefig(temporary, format="png", dpi=100)
        written.append(str(folder / name))
    return written


__all__ = [
    "DEFAULT_ASR", "DEFAULT_SPEAKER_MODEL", "SpeakerEncoder", "check_language", "check_scorer_kind", "draw_plots",
    "load_asr", "resolve_scorer", "summarize", "transcribe", "write_plots",
]
