r"""`higgs-v3 eval`: speak an evaluation list and score it.

```
higgs-v3 eval seedtts_testset/en/meta.lst --out-dir eval-en --model bosonai/higgs-audio-v3 \
    --asr openai/whisper-large-v3 --speaker-model microsoft/wavlm-base-plus-sv --language en
```

1. The list (`evaluation.items.read_items`) becomes a `higgs-v3 batch` manifest (`<out-dir>/manifest.jsonl`), spoken by
   `cli.batch.batch_from_args` into `<out-dir>/audio/`: batched, every item's seed recorded, bad takes redone
   (`--retries`), resumable (a rerun speaks only what is missing), data-parallel under `accelerate launch`.
2. The scorers (built and checked before any synthesis, `load_scorers`: a model missing offline, of the wrong kind, or
   a `--language` the ASR model does not take is refused at once) score every item, with a progress bar: the ASR
   pipeline's transcript against the text (`word_error_rate`, CJK as characters), the speaker similarity of the take to
   its prompt clip (`SpeakerEncoder`).
3. `<out-dir>/items.csv` (one row per item), `<out-dir>/summary.json` and `<out-dir>/plots/*.png` (with matplotlib),
   each written atomically. See docs/EVALUATION.md for what each number means.
"""

from __future__ import annotations

import csv
import json
import sys
from argparse import Namespace
from pathlib import Path


CSV_COLUMNS = ("utt", "text", "transcript", "wer", "sim", "duration", "characters", "chunks", "takes", "finished",
               "failed_chunks", "seed", "output")
"""The columns of `items.csv`."""


def _device(name: str) -> str:
    import torch

    return ("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name


def _scoring_error(item, error: BaseException, what: str, seconds: float | None = None) -> RuntimeError:
    """The one-line error of `item` failing in a scorer (`what`): the item named, its line, its take's length."""
    reason = " ".join(str(error).split()) or "no message"
    take = f", a {seconds:.1f} s take" if seconds is not None else ""
    return RuntimeError(f"Scoring item {item.utt!r} (line {item.line}{take}) failed in the {what}: "
                        f"{type(error).__name__}: {reason}")


def score_items(items, audio_dir: Path, asr, encoder, language: str | None, batch_size: int = 8,
                progress: bool = True) -> list[dict]:
    """One row per item (`CSV_COLUMNS`) from its record and audio in `audio_dir`: the transcript (the ASR pipeline
    `asr`, `batch_size` items at a time) and its WER, the speaker similarity to the prompt clip (`encoder`, a
    `SpeakerEncoder`), and the record's duration, chunks, takes and ends. A progress bar on stderr with `progress`; an
    item a scorer fails on is named (`RuntimeError`)."""
    import soundfile
    import torch

    from ..audio_io_higgs_v3 import prepare_reference_waveform
    from ..cli.batch import RECORDS_DIR
    from ..longform_higgs_v3 import spoken_characters, word_error_rate
    from .scoring import transcribe

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(items), desc="Scoring", file=sys.stderr, dynamic_ncols=True)
    rows = []
    try:
        for start in range(0, len(items), batch_size):
            batch = items[start:start + batch_size]
            records = [json.loads((audio_dir / RECORDS_DIR / f"{item.utt}.wav.json").read_text(encoding="utf-8"))
                       for item in batch]
            takes, rate = [], None
            for item in batch:
                samples, rate = soundfile.read(str(audio_dir / f"{item.utt}.wav"), dtype="float32")
                takes.append(torch.from_numpy(samples))
            try:
                transcripts = transcribe(asr, takes, rate, language, batch_size)
            except Exception:  # find the item it fails on, one at a time
                transcripts = []
                for item, take in zip(batch, takes):
                    try:
                        transcripts += transcribe(asr, [take], rate, language, 1)
                    except Exception as error:
                        raise _scoring_error(item, error, "ASR model", take.shape[0] / rate) from error
            for item, record, take, transcript in zip(batch, records, takes, transcripts):
                try:
                    prompt = prepare_reference_waveform(item.prompt_wav)  # 24 kHz, as the model heard it
                    similarity = encoder.similarity(prompt, 24000, take, rate)
                except Exception as error:
                    raise _scoring_error(item, error, "speaker model", take.shape[0] / rate) from error
                rows.append({
                    "utt": item.utt, "text": item.text, "transcript": transcript,
                    "wer": word_error_rate(item.text, transcript), "sim": similarity,
                    "duration": record["duration"], "characters": spoken_characters(item.text),
                    "chunks": record["chunks"], "takes": sum(record.get("chunk_attempts", [1] * record["chunks"])),
                    "finished": record["finished"], "failed_chunks": len(record.get("failed_chunks", [])),
                    "seed": record["seed"], "output": record["output"],
                })
            if bar is not None:
                bar.update(len(batch))
    finally:
        if bar is not None:
            bar.close()
    return rows


def load_scorers(args):
    """The ASR pipeline and the `SpeakerEncoder` of `args` (`--asr`, `--speaker-model`, `--language`, `--device`),
    built and checked before any synthesis: a scorer missing offline, of the wrong kind, or a language the ASR model
    does not take is refused at once, not after the items are spoken."""
    from .scoring import SpeakerEncoder, check_language, load_asr

    device = _device(args.device)
    asr = load_asr(args.asr, device)
    check_language(asr, args.asr, args.language)
    return asr, SpeakerEncoder(args.speaker_model, device)


def write_report(rows: list[dict], summary: dict, out_dir: Path) -> None:
    """`items.csv` and `summary.json` in `out_dir`, each written atomically."""
    from ..audio_io_higgs_v3 import atomic_output

    with atomic_output(out_dir / "items.csv") as temporary:
        with open(temporary, "w", newline="", encoding="utf-8") as file:
            writer = csv.DictWriter(file, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    with atomic_output(out_dir / "summary.json") as temporary:
        temporary.write_text(json.dumps(summary, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def cmd_eval(args) -> int:
    """`higgs-v3 eval` (its options: `cli/main`): the list checked, the scorers found, the items spoken (`higgs-v3
    batch`'s machinery), scored and reported."""
    from ..cli.batch import batch_from_args
    from .items import batch_manifest, read_items
    from .scoring import summarize, write_plots

    items = read_items(args.list)
    out_dir = Path(args.out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out-dir {args.out_dir!r} is a file; give a folder.")
    asr, encoder = load_scorers(args)
    manifest = batch_manifest(items, out_dir / "manifest.jsonl")
    batch = Namespace(manifest=str(manifest), out_dir=str(out_dir / "audio"), model=args.model, device=args.device,
                      dtype=args.dtype, batch_size=args.batch_size, max_seconds=args.max_seconds, seed=args.seed,
                      no_progress=args.no_progress, retries=args.retries, normalize=args.normalize)
    spoken, main_process = batch_from_args(batch)
    if not main_process:
        return 0
    print(spoken.line())
    rows = score_items(items, out_dir / "audio", asr, encoder, args.language, args.batch_size,
                       progress=not args.no_progress)
    rtf = spoken.wall_seconds / spoken.audio_seconds if spoken.audio_seconds > 0 else None
    summary = summarize(rows, rtf, {"model": args.model, "asr": args.asr, "speaker_model": args.speaker_model,
                                    "language": args.language, "list": str(args.list)})
    summary["plots"] = write_plots(rows, out_dir / "plots")
    write_report(rows, summary, out_dir)
    plots = (f"{len(summary['plots'])} plots in {out_dir / 'plots'}" if summary["plots"] else
             "no plots (matplotlib is not installed: pip install 'higgs-v3[bench]')")
    wer, sim = summary["wer"], summary["sim"]
    print(f"Eval: {summary['items']} items, WER {wer * 100:.2f} %, SIM {sim * 100:.2f}, runaway "
          f"{summary['runaway_rate'] * 100:.1f} %, {summary['retried_items']} retried, RTF "
          f"{'-' if rtf is None else f'{rtf:.2f}'}; items.csv, summary.json, {plots}.", file=sys.stdout)
    return 0


__all__ = ["CSV_COLUMNS", "cmd_eval", "load_scorers", "score_items", "write_report"]
