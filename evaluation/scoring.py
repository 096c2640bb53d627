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


def load_asr(name: str, device: str = "cpu"):
    """`pipeline("automatic-speech-recognition")` of the model `name` (`resolve_scorer`), on `device`."""
    from transformers import pipeline

    return pipeline("automatic-speech-recognition", model=resolve_scorer(name, "ASR model", "--asr"), device=device)


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


def write_plots(rows: list[dict], folder: Path) -> list[str]:
    """WER and SIM histograms and duration against text length (`spoken_characters`), as PNG files in `folder`;
    without matplotlib, none (returns the files written)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return []
    from ..audio_io_higgs_v3 import atomic_output

    folder.mkdir(parents=True, exist_ok=True)
    plots = {
        "wer_hist.png": ("WER per item", lambda axes: axes.hist([r["wer"] for r in rows], bins=20)),
        "sim_hist.png": ("speaker similarity per item", lambda axes: axes.hist([r["sim"] for r in rows], bins=20)),
        "duration_vs_length.png": ("seconds of audio against spoken characters", lambda axes: axes.scatter(
            [r["characters"] for r in rows], [r["duration"] for r in rows], s=8)),
    }
    written = []
    for name, (title, draw) in plots.items():
        figure, axes = pyplot.subplots(figsize=(5, 3.5))
        draw(axes)
        axes.set_title(title)
        with atomic_output(folder / name) as temporary:
            figure.savefig(temporary, format="png", dpi=100)
        pyplot.close(figure)
        written.append(str(folder / name))
    return written


__all__ = [
    "DEFAULT_ASR", "DEFAULT_SPEAKER_MODEL", "SpeakerEncoder", "load_asr", "resolve_scorer", "summarize", "transcribe",
    "write_plots",
]
