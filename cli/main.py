# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""The `higgs-v3` command line: speech from the terminal, long texts and dialogues included.

```
higgs-v3 speak --model tiny-random "Hello world" -o hello.wav        # offline demo (a random model: noise)
higgs-v3 speak --model bosonai/higgs-audio-v3-tts-4b --text-file chapter.txt --ref-audio me.wav --ref-text "..." -o ch.wav
higgs-v3 speak --dialogue --text-file play.txt --voice Ann=ann.wav:"Hi, I am Ann." --voice Bob=bob.safetensors -o play.wav
higgs-v3 convert --input bosonai/higgs-audio-v3-tts-4b --output ./higgs-v3-hf     # the converter (cli/convert)
higgs-v3 make-tiny ./tiny                                            # the tiny random demo model, in the converted layout
higgs-v3 batch manifest.jsonl --out-dir out/                         # many texts to many files, resumable (cli/batch)
higgs-v3 finetune --data my_voice --output tuned --lora              # fine-tuning (training/finetune)
higgs-v3 tags                                                        # the inline control tags the model knows
```

One parser owns every command (`build_parser`: each command's options, and the function that runs it) and one error
path turns what a command raises into its exit code (`main`, `_exit_code`): errors (missing or unreadable files, empty
text, unknown tags, an unknown model, bad options) are one line on stderr and exit code 2, never a traceback
(`HIGGS_V3_DEBUG=1` shows it); a failed upload of a complete folder, or a bug, exits 1; Ctrl-C 130.
`python convert_checkpoint.py` is the `convert` command under that name.

`--model` takes what `cli/models` resolves: `tiny-random` (a tiny random model built once, offline), a
converted or original folder, or a Hub repo id.

`speak` parses its arguments into one `SpeakRequest`, whose `validate()` runs every check that needs no model (files,
outputs, option combinations, the seed, the script's speakers and voices) by calling the library's own loaders and
checks; the processor's checks of the text and transcripts (`processor.check_text`) then run before the model is
loaded. torch and transformers are imported only once the arguments have been parsed (the parser and the commands'
modules import the standard library only).
"""

from __future__ import annotations

import _thread
import argparse
import logging
import math
import os
import re
import secrets
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path


from ..conversion.original_format import ORIGINAL_CODEC_CONFIG_FILE, ORIGINAL_REPO_ID, PushError
from ..evaluation.run import cmd_eval
from ..evaluation.scoring import DEFAULT_ASR, DEFAULT_SPEAKER_MODEL
from .batch import cmd_batch
from .convert import cmd_convert
from .models import (  # standard library only at import, as the modules above
    DEFAULT_MODEL,
    TINY_RANDOM,
    TINY_RANDOM_MAX_SECONDS,
    TINY_RANDOM_RETRIES,
    load_model,
    load_processor,
    resolve_model,
    write_tiny_random,
)


EXIT_ERROR = 2
"""A fault of the input, output or options (as argparse's usage errors)."""
EXIT_FAILURE = 1
"""A failed upload of a complete folder, or an unexpected failure (a bug, the environment)."""
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A user error: printed as one line, exit code 2."""


# ================================================================================================= argument parsing
class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2, as argparse's own)."""

    def error(self, message: str):
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _number(name: str, kind: type, accepted: str = "", valid: Callable[[float], bool] = lambda number: True):
    """An argparse type: `kind(value)`, finite and `valid`, else an error saying it must be `accepted`."""

    def parse(value: str):
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a {'whole ' if kind is int else ''}number, got {value!r}") from None
        if not (math.isfinite(number) and valid(number)):
            raise argparse.ArgumentTypeError(f"{name} must be {accepted}, got {value!r}")
        return number

    return parse


def _positive(name: str, kind: type = float):
    return _number(name, kind, "more than zero" if kind is float else "at least 1", lambda number: number > 0)


def _probability(name: str):
    return _number(name, float, "in (0, 1]", lambda number: 0 < number <= 1)


def _shard_size(text: str) -> int | str:
    """A number of bytes as an `int`; anything else is left for `huggingface_hub` to parse (`5GB`, `500MB`)."""
    return int(text) if text.isdigit() else text


DTYPES: tuple[str, ...] = ("bfloat16", "float16", "float32")
"""The weight dtypes: what a model is loaded in (`--dtype` of speak and batch, besides `auto`) and what a conversion
writes (`--dtype` of convert). `conversion.repo.WEIGHT_DTYPES`' names, spelled out so that the parser imports no
torch (a test keeps the two equal)."""


def build_parser(convert_prog: str | None = None) -> argparse.ArgumentParser:
    """The one parser of every command. `convert_prog`: the program name of `convert` (its usage and its errors), when
    it runs as another script (`convert_checkpoint.py`); by default `higgs-v3 convert`. Each command's parser sets
    `run` (the function that runs it), and `quiet_libraries` when the libraries' bars and warnings are silenced before
    it runs (`speak` silences them itself, after its checks, unless `--verbose`; `convert` shows them)."""
    parser = _Parser(
        prog="higgs-v3",
        description="Higgs Audio v3 text-to-speech from the command line (see `higgs-v3 COMMAND --help`).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_speak_parser(commands)
    _add_convert_parser(commands, convert_prog)
    _add_batch_parser(commands)
    _add_eval_parser(commands)
    tiny = commands.add_parser(
        "make-tiny",
        help="write the tiny random demo model",
        description="Write the tiny random demo model (what --model tiny-random uses) in the converted layout, or with "
        "--original a tiny checkpoint in the original layout (input for `higgs-v3 convert`).",
    )
    tiny.add_argument("output", help="folder to write (created)")
    tiny.add_argument("--seed", type=_number("--seed", int), default=0)
    tiny.add_argument("--original", action="store_true", help="the original checkpoint layout instead")
    tiny.add_argument("--no-codec", action="store_true", help="leave the codec out")
    tiny.set_defaults(run=cmd_make_tiny, quiet_libraries=True)
    _add_finetune_parser(commands)
    _add_serve_parser(commands)
    tags = commands.add_parser("tags", help="list the inline control tags",
                               description="List the inline control tags of the model's tokenizer.")
    tags.add_argument("--model", default=os.environ.get("HIGGS_V3_MODEL", TINY_RANDOM),
                      help=f"whose tokenizer to read (default: $HIGGS_V3_MODEL or {TINY_RANDOM})")
    tags.set_defaults(run=cmd_tags, quiet_libraries=True)
    return parser


def _add_convert_parser(commands, prog: str | None) -> None:
    convert = commands.add_parser(
        "convert",
        help="convert the original checkpoint (or, with --to-original, a converted repo back)",
        description="Convert the original Higgs Audio v3 checkpoint into a verified Transformers repo.",
        **({"prog": prog} if prog else {}),
    )
    convert.add_argument("--input", required=True, help=f"original folder or Hub repo id (e.g. {ORIGINAL_REPO_ID})")
    convert.add_argument("--revision", default=None, help="Hub revision (branch, tag or commit) of --input")
    convert.add_argument("--output", required=True, help="folder to write (must be empty unless --overwrite)")
    convert.add_argument("--dtype", default="bfloat16", choices=DTYPES,
                         help="language model dtype (the codec stays float32)")
    convert.add_argument("--max-shard-size", default=None, type=_shard_size,
                         help="largest safetensors shard (default 2GB; the converter's peak memory is about one "
                         "shard): 2GB, 500MB (KB, MB, GB, TB) or a number of bytes")
    convert.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    convert.add_argument("--push-to-hub", default=None, metavar="REPO_ID", help="upload the result in one commit")
    convert.add_argument("--private", action="store_true", help="create the Hub repo as private")
    convert.add_argument("--codec-config", default=None, metavar="FILE",
                         help=f"the codec's config as JSON (default: {ORIGINAL_CODEC_CONFIG_FILE} in the input folder, "
                         "else the real codec's)")
    convert.add_argument("--without-codec", action="store_true", help="convert the language model only")
    convert.add_argument("--no-verify", action="store_true", help="skip the verification (not recommended)")
    convert.add_argument("--to-original", action="store_true",
                         help="the other direction: write the converted (or fine-tuned) repo --input in the original "
                         "layout (for vllm-omni / sglang-omni); takes --output, --dtype, --max-shard-size, --overwrite")
    convert.add_argument("--original", default=None, metavar="DIR",
                         help="with --to-original: the original checkpoint the repo was converted from (the codec's "
                         "training-only tensor is copied from it, else zeros; and its chat_template.jinja when the "
                         "repo no longer keeps the original's)")
    convert.set_defaults(run=cmd_convert, error_prefix=convert.prog)  # errors under the converter's own name


def _add_batch_parser(commands) -> None:
    batch = commands.add_parser(
        "batch",
        help="a JSONL manifest to one audio file per line, resumable, data-parallel",
        description="Speak every line of a JSONL manifest into its own audio file (resumable; data-parallel under "
        "accelerate launch / torchrun).",
    )
    batch.add_argument("manifest", help="JSONL file, one item per line: text, output, and optionally seed, voice, "
                       "reference, reference_text")
    batch.add_argument("--out-dir", required=True, help="folder for the audio files, the records and results.jsonl")
    batch.add_argument("--model", default=os.environ.get("HIGGS_V3_MODEL", DEFAULT_MODEL),
                       help="tiny-random, a converted or original folder, or a Hub repo id")
    batch.add_argument("--device", default="auto", help="auto, cpu, cuda, mps (under a launcher: each process's own)")
    batch.add_argument("--dtype", default="auto", choices=["auto", *DTYPES])
    batch.add_argument("--batch-size", type=_positive("--batch-size", int), default=8,
                       help="chunks decoded at once; one joins as another ends (default 8)")
    batch.add_argument("--max-seconds", type=_positive("--max-seconds"), default=None, help="audio limit per chunk")
    batch.add_argument("--seed", type=_number("--seed", int), default=0,
                       help="base seed of the items without one (their index added, then moved past the seeds other "
                       "items' chunks use)")
    batch.add_argument("--keep-going", action="store_true",
                       help="skip an item whose voice or reference cannot be used (a damaged file, a dead URL) and "
                       "report it at the end (exit code 1), instead of stopping there")
    batch.add_argument("--batch-invariant", action="store_true",
                       help="an item's audio bit-identical at any --batch-size (slower; docs/RELIABILITY.md)")
    _add_take_options(batch)
    _add_verify_options(batch)
    batch.add_argument("--no-progress", action="store_true", help="no progress bars")
    batch.set_defaults(run=cmd_batch, quiet_libraries=True)


def _add_eval_parser(commands) -> None:
    evaluate = commands.add_parser(
        "eval", help="speak a Seed-TTS-eval list and score it (WER, speaker similarity, runaways, RTF)",
        description="Speak every item of a Seed-TTS-eval list (utt|prompt_text|prompt_wav|text) or a JSONL manifest "
        "as `higgs-v3 batch` does (resumable), then score it: WER / CER with an ASR model, speaker similarity with a "
        "speaker-verification model. Writes items.csv, summary.json and plots into --out-dir (docs/EVALUATION.md).",
    )
    evaluate.add_argument("list", help="a Seed-TTS-eval list (meta.lst) or a .jsonl manifest (utt, text, prompt_wav, "
                          "prompt_text, seed)")
    evaluate.add_argument("--out-dir", required=True, help="folder for the audio, items.csv, summary.json, plots")
    evaluate.add_argument("--model", default=os.environ.get("HIGGS_V3_MODEL", DEFAULT_MODEL),
                          help=f"the model to evaluate (as for speak; default: $HIGGS_V3_MODEL or {DEFAULT_MODEL})")
    evaluate.add_argument("--asr", default=DEFAULT_ASR, help=f"ASR model: a folder or a Hub id (default {DEFAULT_ASR})")
    evaluate.add_argument("--speaker-model", default=DEFAULT_SPEAKER_MODEL,
                          help=f"x-vector speaker-verification model (default {DEFAULT_SPEAKER_MODEL})")
    evaluate.add_argument("--language", default=None, help="passed to a Whisper ASR model (en, zh; default: detected)")
    evaluate.add_argument("--device", default="auto", help="auto, cpu, cuda, mps (the model and the scorers)")
    evaluate.add_argument("--dtype", default="auto", choices=["auto", *DTYPES])
    evaluate.add_argument("--batch-size", type=_positive("--batch-size", int), default=8,
                          help="items per generate call")
    evaluate.add_argument("--max-seconds", type=_positive("--max-seconds"), default=None, help="audio limit per chunk")
    evaluate.add_argument("--seed", type=_number("--seed", int), default=0, help="item i's seed is --seed plus i")
    _add_take_options(evaluate)
    evaluate.add_argument("--no-progress", action="store_true", help="no progress bars")
    evaluate.set_defaults(run=cmd_eval, quiet_libraries=True)


def _add_serve_parser(commands) -> None:
    serve = commands.add_parser(
        "serve", help="serve OpenAI's speech API (POST /v1/audio/speech) over HTTP, with step-level batching",
        description="Serve the model over HTTP: OpenAI's speech API (/v1/audio/speech, streaming included), saved "
        "voices, and a WebSocket that speaks text as it arrives. Needs the serve extra: pip install 'higgs-v3[serve]'.")
    serve.add_argument("--model", default=os.environ.get("HIGGS_V3_MODEL", DEFAULT_MODEL),
                       help="tiny-random, a converted or original folder, or a Hub repo id")
    serve.add_argument("--served-model-name", nargs="+", default=None, metavar="NAME",
                       help="the id(s) clients may send as `model`, the first listed by /v1/models (default: --model)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=_positive("--port", int), default=8000)
    serve.add_argument("--api-key", default=None, help="required as 'Authorization: Bearer KEY' on every route "
                       "(default: $HIGGS_V3_API_KEY; none: no check)")
    serve.add_argument("--voices-dir", default=None, help="folder of saved voices (default: $HF_HOME/higgs_v3/voices)")
    serve.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    serve.add_argument("--dtype", default="auto", choices=["auto", *DTYPES])
    serve.add_argument("--max-batch-size", type=_positive("--max-batch-size", int), default=8,
                       help="most chunks decoded at once; a new one joins at the next step (default 8)")
    serve.add_argument("--batch-wait-ms", type=_number("--batch-wait-ms", float, "0 or more", lambda x: x >= 0),
                       default=10.0, help="how long an idle worker waits for more requests to prefill with the first "
                       "(default 10 ms)")
    serve.add_argument("--batch-invariant", action="store_true",
                       help="a chunk's codes do not depend on the chunks decoded beside it: the same seed gives the "
                       "same audio alone or under any load (slower; docs/SERVING.md)")
    serve.add_argument("--max-prefill-tokens", type=_positive("--max-prefill-tokens", int),
                       default=2048,
                       help="prompt tokens prefilled at one step at most, padding included (more requests wait for "
                       "the next steps; one longer prompt is prefilled alone), so the chunks being spoken never stall "
                       "for many prompts at once (default 2048)")
    serve.add_argument("--max-queue", type=_positive("--max-queue", int), default=64,
                       help="chunks waiting at most; beyond it requests get 503 with Retry-After (default 64)")
    serve.add_argument("--max-input-chars", type=_positive("--max-input-chars", int), default=4096,
                       help="longest input per request (413 beyond; default 4096, as OpenAI's)")
    serve.add_argument("--max-body-bytes", type=_positive("--max-body-bytes", int), default=16 * 1024 * 1024,
                       help="largest request body or upload (413 beyond; default 16 MiB)")
    serve.add_argument("--max-seconds", type=_positive("--max-seconds"), default=None,
                       help="default audio limit per chunk (a request's max_seconds overrides it)")
    serve.add_argument("--allow-url-references", action="store_true",
                       help="let reference_audio be an http(s) URL that the server fetches (off: base64 only)")
    serve.add_argument("--drain-seconds", type=_number("--drain-seconds", float, "0 or more", lambda x: x >= 0),
                       default=30.0, help="on SIGTERM: how long the requests in flight may take to finish before they "
                       "are cut (default 30); the process then exits 0")
    serve.add_argument("--max-connections", type=_positive("--max-connections", int), default=128,
                       help="open connections and requests at most (uvicorn's limit_concurrency; beyond it new "
                            "requests get 503; default 128)")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    serve.set_defaults(run=_cmd_serve, quiet_libraries=True)


def _cmd_serve(args) -> int:
    from ..serving.server import cmd_serve

    return cmd_serve(args)


def _add_finetune_parser(commands) -> None:
    tune = commands.add_parser(
        "finetune",
        help="fine-tune on your recordings (a voice, a language), fully or with LoRA",
        description="Fine-tune a model on a folder of name.wav + name.txt pairs or a JSONL manifest (audio, text, "
        "optional ref_audio, ref_text) with transformers' Trainer. OUTPUT receives checkpoint-N folders (--resume), "
        "model/ (the tuned model, LoRA merged, loadable with trust_remote_code=True), adapter/ (--lora), sample.wav "
        "and codes_cache/ (the encoded clips, reused by later runs). Needs the train extra: pip install 'higgs-v3[train]'.",
    )
    tune.add_argument("--data", required=True, help="a folder of name.wav + name.txt pairs, or a .jsonl manifest")
    tune.add_argument("--model", default=os.environ.get("HIGGS_V3_MODEL", DEFAULT_MODEL),
                      help=f"the model to start from, as for speak (default: $HIGGS_V3_MODEL or {DEFAULT_MODEL})")
    tune.add_argument("--output", required=True, help="folder for checkpoints, the tuned model and the sample")
    tune.add_argument("--lora", action="store_true", help="train a LoRA adapter on the backbone's projections only")
    tune.add_argument("--lora-rank", type=_positive("--lora-rank", int), default=16)
    tune.add_argument("--epochs", type=_positive("--epochs"), default=3.0)
    tune.add_argument("--max-steps", type=_positive("--max-steps", int), default=-1,
                      help="stop after this many optimizer steps (overrides --epochs)")
    tune.add_argument("--learning-rate", type=_positive("--learning-rate"), default=None,
                      help="default 1e-4 with --lora, 1e-5 without")
    tune.add_argument("--batch-size", type=_positive("--batch-size", int), default=1)
    tune.add_argument("--gradient-accumulation", type=_positive("--gradient-accumulation", int), default=1)
    tune.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations (less memory)")
    tune.add_argument("--bf16", action="store_true", help="bfloat16 mixed precision (the codec stays float32)")
    tune.add_argument("--held-out", type=_number("--held-out", float), default=0.1,  # its range: FinetuneRun's
                      help="fraction of the items kept out of training for the held-out loss, in [0, 1)")
    tune.add_argument("--max-seconds", type=_positive("--max-seconds"), default=30.0,
                      help="longest accepted target clip (default 30; reference clips: up to 100 s)")
    tune.add_argument("--skip-invalid", action="store_true",
                      help="skip bad items (counted and named in the log) instead of stopping at the first")
    tune.add_argument("--save-steps", type=_positive("--save-steps", int), default=200)
    tune.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output")
    tune.add_argument("--seed", type=_number("--seed", int), default=0)
    tune.add_argument("--sample-text", help="text of the sample spoken at the end (default: the first transcript)")
    tune.add_argument("--sample-seconds", type=_number("--sample-seconds", float, "0 or more", lambda x: x >= 0),
                      default=10.0, help="longest sample (default 10; 0: no sample)")
    tune.add_argument("--push-to-hub", metavar="REPO_ID", help="upload model/ (or adapter/ with --push-adapter)")
    tune.add_argument("--push-adapter", action="store_true", help="with --lora: push the adapter, not the merged model")
    tune.add_argument("--device", default="auto",  # what it accepts: FinetuneRun.validate
                      help="auto: the Trainer's device (a visible GPU, else the CPU); cpu: the CPU")
    tune.add_argument("--quiet", action="store_true", help="no progress, only the summary")
    tune.set_defaults(run=cmd_finetune, quiet_libraries=True)


def cmd_finetune(args) -> int:
    """Train (`training.finetune.FinetuneRun`, which checks its options and the data before any model work), then one
    summary line."""

    def log(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    from ..training.finetune import FinetuneRun
    from .batch import check_launch

    check_launch()
    run = FinetuneRun(
        data=args.data, model=args.model, output=args.output, lora=args.lora, lora_rank=args.lora_rank,
        epochs=args.epochs, max_steps=args.max_steps, learning_rate=args.learning_rate, batch_size=args.batch_size,
        gradient_accumulation_steps=args.gradient_accumulation, gradient_checkpointing=args.gradient_checkpointing,
        bf16=args.bf16, held_out=args.held_out, max_seconds=args.max_seconds, skip_invalid=args.skip_invalid,
        save_steps=args.save_steps, resume=args.resume, seed=args.seed, sample_text=args.sample_text,
        sample_seconds=args.sample_seconds,
        push_to_hub=args.push_to_hub, push_adapter=args.push_adapter, device=args.device, log=log,
        progress=not args.quiet,
    )
    summary = run.run()
    held = f", held-out loss {summary['eval_loss']:.4f}" if "eval_loss" in summary else ""
    loss = "n/a" if summary["train_loss"] is None else f"{summary['train_loss']:.4f}"
    if summary["resumed_step"] and not summary["steps_now"]:  # a finished run resumed: nothing trained now
        done = f"Nothing to train: the run had finished at step {summary['steps']} (last training loss {loss}{held})"
    else:
        resumed = f", resumed at step {summary['resumed_step']}," if summary["resumed_step"] else ""
        done = f"Fine-tuned {summary['steps']} steps{resumed} in {summary['seconds']:.1f} s: training loss {loss}{held}"
    print(f"{done}; model in {summary['model']}"
          + (f", adapter in {summary['adapter']}" if "adapter" in summary else "")
          + (f", sample {summary['sample']}" if summary.get("sample") else "")
          + (f"; pushed {summary['pushed']}" if summary.get("pushed") else "")
          + _skipped_note(summary["skipped"]) + ".", flush=True)
    return 0


def _skipped_note(skipped: list[str]) -> str:
    """`; skipped 2 bad items (a, b)`: the items `--skip-invalid` left out, by name (the reasons are in the log)."""
    if not skipped:
        return ""
    names = [reason.split(": ", 1)[0] for reason in skipped]
    shown = ", ".join(names[:5]) + (f", and {len(names) - 5} more" if len(names) > 5 else "")
    return f"; skipped {len(names)} bad item{'s' if len(names) > 1 else ''} ({shown})"


def _add_long_text_options(long_form) -> None:
    """`speak`'s long-text group."""
    # Unset long-text options take the library's defaults (`longform_higgs_v3`); the help states them.
    long_form.add_argument("--max-seconds", type=_positive("--max-seconds"),
                           help="limit of audio per chunk (default: the model's generation config; about 82 s for the "
                           f"real model, {TINY_RANDOM_MAX_SECONDS} s for tiny-random)")
    long_form.add_argument("--max-chars", type=_positive("--max-chars", int),
                           help="largest chunk in characters, tags not counted (default 300)")
    long_form.add_argument("--pause", type=_number("--pause", float, "zero or more", lambda number: number >= 0),
                           help="seconds of silence between chunks (default 0.3; 0.4 between dialogue lines)")
    _add_take_options(long_form)
    _add_verify_options(long_form)
    long_form.add_argument("--batch-size", type=_positive("--batch-size", int),
                           help="chunks generated together (default 8)")


def _add_take_options(group) -> None:
    """What `speak`, `batch` and `eval` share: `--retries` (unset: the library's default), `--normalize`."""
    group.add_argument("--retries", type=_number("--retries", int, "0 or more", lambda n: n >= 0),
                       help="redo a bad take (ran away, or its duration per character off) at most N times (default 2; "
                       f"0: never; {TINY_RANDOM_RETRIES} for {TINY_RANDOM})")
    group.add_argument("--normalize", choices=["en"], default=None,
                       help="spell out numbers, dates, times, currency and percentages (needs num2words; default: off)")


def _add_verify_options(group) -> None:
    """`speak` and `batch`: every take checked by ear (`verify=`)."""
    group.add_argument("--verify", metavar="ASR", default=None,
                       help="transcribe each take with this ASR model (a folder or a Hub id, e.g. "
                       "openai/whisper-large-v3) and redo it when its WER is above --max-wer (needs jiwer)")
    group.add_argument("--max-wer", type=_number("--max-wer", float, "0 or more", lambda n: n >= 0), default=0.5,
                       help="with --verify: the highest WER a take may have (default 0.5)")


def _add_speak_parser(commands) -> None:
    speak = commands.add_parser(
        "speak",
        help="text (or a dialogue script) to a 24 kHz wav",
        description="Speak a text of any length, or a dialogue script, into one audio file. Long text is split at "
        "sentence boundaries into chunks generated in batches; without a reference voice, the first chunk's voice is "
        "kept for the rest.",
    )
    source = speak.add_argument_group("text")
    source.add_argument("text", nargs="?", help="the text to speak; '-' reads stdin")
    source.add_argument("--text-file", metavar="FILE", help="read the text from FILE (UTF-8); '-' reads stdin")
    source.add_argument("--dialogue", action="store_true",
                        help="the text is a dialogue script, one '[Name] text' line per turn (a script file: "
                        "--dialogue --text-file FILE)")

    model = speak.add_argument_group("model")
    model.add_argument("--model", default=os.environ.get("HIGGS_V3_MODEL", DEFAULT_MODEL),
                       help=f"'{TINY_RANDOM}' (offline demo, random weights: noise), a folder with a converted or "
                       f"original checkpoint, or a Hub repo id (default: $HIGGS_V3_MODEL or {DEFAULT_MODEL})")
    model.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:1, mps")
    model.add_argument("--dtype", default="auto", choices=["auto", *DTYPES],
                       help="language model dtype (auto: bfloat16 on CUDA, float32 on CPU and MPS; the codec always runs "
                       "in float32)")

    voice = speak.add_argument_group("voice")
    voice.add_argument("--ref-audio", metavar="CLIP", help="reference clip to clone (wav/flac/ogg, up to 100 s): a file or an http(s) URL")
    voice.add_argument("--ref-text", metavar="TEXT", help="transcript of the reference clip (clones more closely)")
    voice.add_argument("--voice", action="append", default=[], metavar="SPEC",
                       help="a saved voice file (.safetensors/.json); with --dialogue, one per speaker: "
                       "Name=clip.wav[:transcript] or Name=voice.safetensors")
    voice.add_argument("--auto-voices", action="store_true",
                       help="with --dialogue: a speaker without --voice gets the voice of their first generated line")
    voice.add_argument("--save-voice", metavar="FILE",
                       help="save the voice used (.safetensors or .json) to reuse it with --voice")

    sampling = speak.add_argument_group("sampling")
    sampling.add_argument("--seed", type=_number("--seed", int),
                          help="base seed in [0, 2**62); chunk i uses seed + i (default: random, printed)")
    sampling.add_argument("--temperature", type=_positive("--temperature"), help="default: the model's (1.0)")
    sampling.add_argument("--top-k", type=_positive("--top-k", int), help="keep the k most likely codes per codebook")
    sampling.add_argument("--top-p", type=_probability("--top-p"), help="nucleus sampling per codebook")
    sampling.add_argument("--min-p", type=_probability("--min-p"), help="drop codes below min-p times the most likely one")
    sampling.add_argument("--greedy", action="store_true", help="greedy decoding instead of sampling")

    _add_long_text_options(speak.add_argument_group("long text"))

    output = speak.add_argument_group("output")
    output.add_argument("-o", "--output", default="speech.wav", help="audio file to write (default speech.wav)")
    output.add_argument("--save-codes", metavar="FILE",
                        help="also save the generated codes (.safetensors: 'codes' [frames, 8], 'chunk_frames')")
    output.add_argument("--split-dir", metavar="DIR",
                        help="also write one file per dialogue line (per chunk for plain text) into DIR")
    output.add_argument("--no-progress", action="store_true", help="no progress bar")
    output.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")
    output.add_argument("--verbose", action="store_true", help="show library warnings")
    speak.set_defaults(run=cmd_speak)


# ================================================================================================= speak
def _check_input_file(path: str, what: str) -> None:
    if os.path.isdir(path):
        raise CliError(f"{what} {path!r} is a folder, not a file.")
    if not os.path.isfile(path):
        raise CliError(f"{what} {path!r} does not exist.")
    if not os.access(path, os.R_OK):
        raise CliError(f"{what} {path!r} is not readable.")


def _load_reference(path: str) -> None:
    """A reference given on the command line, loaded as the library loads it, so that a bad one is refused before any
    model work: a voice file with `HiggsAudioV3Voice.load` (its header, format, version and length; it is small), a
    clip with `prepare_reference_waveform` (its header first: an over-long clip is refused unread). A clip's URL is
    fetched (and refused in one line) when it is encoded, not twice."""
    from ..audio_io_higgs_v3 import VOICE_FILE_SUFFIXES, HiggsAudioV3Voice, is_audio_url, prepare_reference_waveform

    if Path(path).suffix.lower() in VOICE_FILE_SUFFIXES:
        HiggsAudioV3Voice.load(path)
    elif not is_audio_url(path):
        prepare_reference_waveform(path)


def _voice_source(spec: str, speaker: str | None) -> tuple[str, str | None]:
    """`clip.wav`, `clip.wav:transcript` or `voice.safetensors` -> (existing path, transcript or None). The whole spec
    when it is an existing file, else the shortest prefix before a ':' that is one (so a transcript may hold ':')."""
    who = f" for speaker {speaker!r}" if speaker else ""
    if os.path.isfile(spec):  # os.path: False (not an error) for a name too long to be a file
        return spec, None
    for match in re.finditer(":", spec):
        head = spec[: match.start()]
        if head and os.path.isfile(head):
            return head, spec[match.end():]
    path = spec.split(":", 1)[0]
    raise CliError(f"Voice file or reference clip {path!r}{who} does not exist.")


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one file: the same resolved path (symbolic links followed) or, for existing files, the
    same inode (hard links)."""
    if Path(a).expanduser().resolve() == Path(b).expanduser().resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet
        return False


def _parse_dialogue_voices(specs: list[str]) -> dict[str, tuple[str, str | None]]:
    voices = {}
    for spec in specs:
        name, equals, rest = spec.partition("=")
        name = name.strip()
        if not equals or not name or not rest:
            raise CliError(f"--voice {spec!r}: with --dialogue each voice is Name=clip.wav[:transcript] or "
                           "Name=voice.safetensors.")
        if name in voices:
            raise CliError(f"--voice gives speaker {name!r} twice.")
        voices[name] = _voice_source(rest, name)
    return voices


def _check_output(path: str, what: str, suffixes: tuple[str, ...] | None = None) -> None:
    parent = Path(path).expanduser().resolve().parent
    if not parent.is_dir():
        raise CliError(f"Cannot write {what} {path!r}: the folder {str(parent)!r} does not exist.")
    if not os.access(parent, os.W_OK):
        raise CliError(f"Cannot write {what} {path!r}: the folder {str(parent)!r} is not writable.")
    if Path(path).is_dir():
        raise CliError(f"Cannot write {what} {path!r}: it is a folder.")
    if suffixes is not None and Path(path).suffix.lower() not in suffixes:
        raise CliError(f"{what.capitalize()} {path!r} must end with {' or '.join(suffixes)}.")


def _probe_writable(path: str, what: str) -> None:
    """Create and remove a file in `path`'s folder: the permission bits do not tell (root ignores them, a read-only
    mount or a full quota does not show in them)."""
    import tempfile

    folder = Path(path).expanduser().resolve().parent
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{Path(path).name}.probe-"):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise CliError(f"Cannot write {what} {path!r}: creating a file in {str(folder)!r} fails ({reason}).") from error


def _check_audio_output(path: str) -> None:
    """The audio output's folder, its extension (`AUDIO_OUTPUT_SUFFIXES`), and a probe: a short silence written
    beside it in its format and removed, so that no format or permission problem shows only after generation."""
    _check_output(path, "the audio file")
    import numpy as np

    from ..audio_io_higgs_v3 import check_audio_output, save_audio

    try:
        check_audio_output(path)
    except ValueError as error:
        raise CliError(str(error)) from None
    _probe_writable(path, "the audio file")
    target = Path(path).expanduser().resolve()
    probe = target.with_name(f".{target.stem}.probe-{secrets.token_hex(4)}{target.suffix}")
    try:
        save_audio(np.zeros(2400, dtype=np.float32), probe)
    except Exception as error:  # libsndfile's errors for a format it cannot write here
        reason = " ".join(str(error).split()) or type(error).__name__
        raise CliError(f"Cannot write audio file {path!r}: a test write in its format fails ({reason}).") from error
    finally:
        probe.unlink(missing_ok=True)


@dataclass
class SpeakRequest:
    r"""
    What `higgs-v3 speak` was asked to do (the fields are its options). `validate()` runs every check that needs no
    model, in one place; `check_texts(processor)` the processor's checks, before the model is loaded; `synthesize` and
    `write` do the work. `text` is the text or dialogue script once `validate()` has read it.
    """

    text: str | None
    text_file: str | None
    dialogue: bool
    model: str
    device: str
    dtype: str
    ref_audio: str | None
    ref_text: str | None
    voice: list[str]  # the --voice specs
    auto_voices: bool
    seed: int | None
    output: str
    save_codes: str | None
    save_voice: str | None
    split_dir: str | None
    quiet: bool
    verbose: bool
    progress: bool = True
    generate_kwargs: dict = field(default_factory=dict)  # the sampling options given
    longform_options: dict = field(default_factory=dict)  # max_chars, pause_seconds, batch_size, max_seconds given
    voices: dict = field(default_factory=dict)  # dialogue: speaker -> (clip or voice file, transcript), by validate()
    verify: str | None = None  # --verify: the ASR model that checks every take
    max_wer: float = 0.5

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SpeakRequest:
        request = cls(**{item.name: getattr(args, item.name) for item in fields(cls) if hasattr(args, item.name)})
        if request.seed is None:
            request.seed = secrets.randbelow(2**31)  # a short random seed, printed in the summary to reuse
        request.progress = not (args.quiet or args.no_progress)
        sampling = {name: getattr(args, name) for name in ("temperature", "top_k", "top_p", "min_p")}
        request.generate_kwargs = {name: value for name, value in sampling.items() if value is not None}
        if args.greedy:
            request.generate_kwargs["do_sample"] = False
        options = {"max_chars": args.max_chars, "pause_seconds": args.pause, "batch_size": args.batch_size,
                   "max_seconds": args.max_seconds, "retries": args.retries, "normalize": args.normalize}
        request.longform_options = {name: value for name, value in options.items() if value is not None}
        return request

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Every check that needs no model, cheapest first: the text (read; blank: nothing to speak), option
        combinations, the references (loaded by the library), the outputs, the seed, --max-seconds, the dialogue
        script's speakers and voices. The text's other checks are the processor's (`check_texts`)."""
        from ..chunking_higgs_v3 import nothing_to_speak

        self.text = self._read_text()
        if not self.dialogue and (problem := nothing_to_speak(self.text)):  # a blank script: `parse_dialogue` below
            raise CliError(problem)
        self._check_options()
        self._check_inputs()
        self._check_outputs()
        from ..audio_io_higgs_v3 import VOICE_FILE_SUFFIXES
        from ..sampling_higgs_v3 import check_seed

        check_seed(self.seed, "--seed")
        if self.save_voice:
            _check_output(self.save_voice, "the voice file", VOICE_FILE_SUFFIXES)
        self._check_max_seconds()
        if self.verify:  # found (or named as missing) before the model loads
            from ..evaluation.scoring import resolve_scorer

            resolve_scorer(self.verify, "ASR model", "--verify")
        if self.dialogue:
            from ..chunking_higgs_v3 import check_dialogue_voices, parse_dialogue

            check_dialogue_voices(parse_dialogue(self.text), self.voices, self.auto_voices)

    def _check_max_seconds(self) -> None:
        """--max-seconds within what one request's positions hold (`longform_higgs_v3.rows_for_max_seconds`, the
        bound's one home, with the rates of every Higgs Audio v3 codec and the default positions), before the model
        is loaded."""
        if "max_seconds" in self.longform_options:
            from ..delay_higgs_v3 import HiggsAudioV3AudioSpec
            from ..generation_higgs_v3 import MAX_POSITIONS
            from ..longform_higgs_v3 import rows_for_max_seconds

            rows_for_max_seconds(self.longform_options["max_seconds"], HiggsAudioV3AudioSpec(), MAX_POSITIONS,
                                 name="--max-seconds")

    def _read_text(self) -> str:
        if self.text is not None and self.text_file is not None:
            raise CliError("Give the text either as an argument or with --text-file, not both.")
        if self.text is None and self.text_file is None:
            raise CliError("No text: give TEXT, --text-file FILE, or '-' to read stdin.")
        if "-" in (self.text, self.text_file):
            data, where = sys.stdin.buffer.read(), "stdin"
        elif self.text_file is not None:
            _check_input_file(self.text_file, "Text file")
            data, where = Path(self.text_file).read_bytes(), f"text file {self.text_file!r}"
        elif self.dialogue and os.path.isfile(self.text):
            raise CliError(f"--dialogue reads the script from TEXT, and {self.text!r} is a file name; read the script "
                           f"from it with --dialogue --text-file {self.text}.")
        else:
            return self.text
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise CliError(f"Could not read {where} as UTF-8 text ({error.reason} at byte {error.start}).") from error

    def _check_options(self) -> None:
        if self.dialogue:
            if self.ref_audio or self.ref_text:
                raise CliError("--ref-audio/--ref-text set one voice for plain text; with --dialogue give each speaker "
                               "--voice Name=clip.wav[:transcript].")
            if self.save_voice:
                raise CliError("--save-voice saves the single voice of plain text; it does not apply to --dialogue.")
            return
        if self.auto_voices:
            raise CliError("--auto-voices applies to --dialogue only.")
        if len(self.voice) > 1:
            raise CliError("Give one --voice for plain text (several voices need --dialogue and Name=... voices).")
        if self.voice and self.ref_audio:
            raise CliError("Give either --ref-audio or --voice, not both.")
        if self.ref_text is not None and not self.reference:
            raise CliError("--ref-text is the transcript of a reference clip; give --ref-audio (or --voice) as well.")
        if self.voice and "=" in self.voice[0] and not os.path.isfile(self.voice[0]):
            raise CliError(f"--voice {self.voice[0]!r}: Name=... voices are for --dialogue; for plain text give "
                           "a voice file (or --ref-audio).")

    @property
    def reference(self) -> str | None:
        """The plain-text reference: --ref-audio or the one --voice."""
        return self.ref_audio or (self.voice[0] if self.voice else None)

    def _check_inputs(self) -> None:
        """Every reference (--ref-audio, --voice, a dialogue's voices) loaded by the library (`_load_reference`)."""
        if self.dialogue:
            self.voices = _parse_dialogue_voices(self.voice)
            references = [path for path, _ in self.voices.values()]
        else:
            references = [self.reference] if self.reference else []
        for path in references:
            _load_reference(path)

    def _check_outputs(self) -> None:
        _check_audio_output(self.output)
        if self.save_codes:
            _check_output(self.save_codes, "the codes file", (".safetensors",))
        if self.split_dir and Path(self.split_dir).exists() and not Path(self.split_dir).is_dir():
            raise CliError(f"--split-dir {self.split_dir!r} is a file, not a folder.")
        if self.save_codes:
            _probe_writable(self.save_codes, "the codes file")
        if self.save_voice:
            _probe_writable(self.save_voice, "the voice file")
        inputs = [self.text_file, self.reference, *(path for path, _ in self.voices.values())]
        inputs = [path for path in inputs if path not in (None, "-")]
        outputs = [(option, path) for option, path in
                   (("-o", self.output), ("--save-codes", self.save_codes), ("--save-voice", self.save_voice)) if path]
        for number, (option, path) in enumerate(outputs):
            if any(_same_file(path, given) for given in inputs):
                raise CliError(f"{option} {path!r} is also an input of this command; writing it would destroy it. "
                               "Choose another file name.")
            for other_option, other in outputs[:number]:
                if _same_file(path, other):
                    raise CliError(f"{option} {path!r} is also the file of {other_option}; each output needs its own "
                                   "file name.")
        if self.split_dir:
            self._check_split_dir(inputs)

    def _check_split_dir(self, inputs: list[str]) -> None:
        """No input may have the name of a file --split-dir writes (`NNN.ext` or `NNN_speaker.ext`)."""
        split_dir = Path(self.split_dir).expanduser().resolve()
        suffix = re.escape(Path(self.output).suffix or ".wav")
        for path in inputs:
            resolved = Path(path).resolve()
            if resolved.parent == split_dir and re.fullmatch(rf"\d{{3}}(_[\w.-]+)?{suffix}", resolved.name):
                raise CliError(f"--split-dir {self.split_dir!r} would write {resolved.name!r}, which is an input of this "
                               "command; choose another folder.")

    def check_texts(self, processor) -> None:
        """The processor's checks of the text (every script line) and of the transcripts, before the model loads."""
        from ..longform_higgs_v3 import dialogue_jobs, speech_jobs

        chunking = {name: self.longform_options[name] for name in ("max_chars", "normalize")
                    if name in self.longform_options}
        (dialogue_jobs if self.dialogue else speech_jobs)(processor, self.text, **chunking)
        transcripts = {"the reference text": self.ref_text}
        transcripts |= {f"the transcript of the voice of {name!r}": text for name, (_, text) in self.voices.items()}
        for where, transcript in transcripts.items():
            if transcript and transcript.strip():
                processor.check_text(transcript, where)

    # ------------------------------------------------------------------ work
    def synthesize(self, model, processor):
        """The `SpeechResult` of `longform_higgs_v3.synthesize_dialogue` or `synthesize_long`."""
        from .. import longform_higgs_v3 as longform

        options = {**self.longform_options, **self.generate_kwargs, "seed": self.seed, "progress": self.progress}
        if self.verify:
            from ..evaluation.scoring import load_asr

            options |= {"verify": load_asr(self.verify, str(model.device), "--verify"), "max_wer": self.max_wer}
        if self.dialogue:
            return longform.synthesize_dialogue(model, processor, self.text, self.voices, auto_voices=self.auto_voices,
                                                **options)
        return longform.synthesize_long(model, processor, self.text, reference=self.reference,
                                        reference_text=self.ref_text, **options)

    def write(self, result) -> list[str]:
        """Write the audio and the extra outputs; returns what the extras were, for the summary."""
        result.save(self.output)
        extras = []
        if self.save_codes:
            save_codes(result, self.save_codes)
            extras.append(f"codes in {self.save_codes}")
        if self.save_voice:
            if result.voice is None:
                raise CliError("No voice to save: the first chunk produced no audio frame.")
            result.voice.save(self.save_voice)
            extras.append(f"voice in {self.save_voice}")
        if self.split_dir:
            extras.append(self._write_lines(result))
        return extras

    def _write_lines(self, result) -> str:
        from ..audio_io_higgs_v3 import save_audio

        split_dir = Path(self.split_dir)
        split_dir.mkdir(parents=True, exist_ok=True)
        suffix = Path(self.output).suffix or ".wav"
        waveforms = result.line_waveforms()
        for i, (speaker, waveform) in enumerate(waveforms, start=1):
            name = f"{i:03d}_{_safe_name(speaker)}{suffix}" if speaker else f"{i:03d}{suffix}"
            save_audio(waveform, split_dir / name, sampling_rate=result.sampling_rate)
        return f"{len(waveforms)} files in {self.split_dir}"

    def log(self, message: str) -> None:
        if not self.quiet:
            print(message, file=sys.stderr, flush=True)


_PACKAGE = __package__.rpartition(".")[0] if __package__ else "higgs_v3"  # our loggers' root
_SAVED_LIBRARY_STATE: list = []  # what `_quiet_libraries` changed, for `_restore_libraries`


def _quiet_libraries(verbose: bool) -> None:
    """Silence the libraries' progress bars and, unless `verbose`, their warnings; `main` restores it all when the
    command returns (it also runs in-process: tests, notebooks)."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars
    from transformers.utils import logging as transformers_logging

    ours = logging.getLogger(_PACKAGE)
    if not _SAVED_LIBRARY_STATE:
        _SAVED_LIBRARY_STATE.append((
            transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled(),
            are_progress_bars_disabled(), ours.level, list(warnings.filters),
        ))
    transformers_logging.disable_progress_bar()
    disable_progress_bars()
    if not verbose:
        transformers_logging.set_verbosity_error()
        # Our modules log through transformers' logging under their own names; the summary line reports what their
        # warnings say (chunks that ran into the length limit).
        ours.setLevel(logging.ERROR)
        warnings.filterwarnings("ignore")


def _restore_libraries() -> None:
    if not _SAVED_LIBRARY_STATE:
        return
    from huggingface_hub.utils import enable_progress_bars
    from transformers.utils import logging as transformers_logging

    verbosity, transformers_bars, hub_bars_disabled, level, filters = _SAVED_LIBRARY_STATE.pop()
    transformers_logging.set_verbosity(verbosity)
    if transformers_bars:
        transformers_logging.enable_progress_bar()
    if not hub_bars_disabled:
        enable_progress_bars()
    logging.getLogger(_PACKAGE).setLevel(level)
    warnings.filters[:] = filters


def _safe_name(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("._") or "speaker"


def save_codes(result, path: str | os.PathLike) -> None:
    """`--save-codes`: a `SpeechResult`'s codes as safetensors (`atomic_output`): `codes` `[sum of frames,
    num_codebooks]`, `chunk_frames` `[chunks]`, the rates and the pause, and per chunk (JSON lists) its text, speaker,
    whether it finished and its seed. The name's `.safetensors` is checked with the request (`_check_outputs`)."""
    import json

    import torch
    from safetensors.torch import save_file

    from ..audio_io_higgs_v3 import atomic_output

    chunks = result.chunks
    tensors = {"codes": torch.cat([chunk.codes for chunk in chunks]).contiguous(),
               "chunk_frames": torch.tensor([chunk.num_frames for chunk in chunks], dtype=torch.long)}
    lists = {"texts": "text", "speakers": "speaker", "finished": "finished", "seeds": "seed"}  # JSON per chunk
    metadata = {"format": "higgs_audio_v3_codes", "sampling_rate": str(result.sampling_rate),
                "frame_rate": str(chunks[0].frame_rate), "pause_seconds": repr(result.pause_seconds)}
    metadata.update({key: json.dumps([getattr(chunk, name) for chunk in chunks], ensure_ascii=False)
                     for key, name in lists.items()})
    with atomic_output(path) as temporary:
        save_file(tensors, str(temporary), metadata=metadata)


def cmd_speak(args) -> int:
    """Validate, load (the processor first: its checks run before the model loads), synthesize, write, summarize."""
    request = SpeakRequest.from_args(args)
    request.validate()
    _quiet_libraries(request.verbose)
    path = resolve_model(request.model, request.log)
    processor = load_processor(path)
    request.check_texts(processor)
    model = load_model(path, request.device, request.dtype)
    result = request.synthesize(model, processor)
    extras = request.write(result)
    if not request.quiet:
        print(summary_line(request.output, result, request.seed, model.config), flush=True)
        if extras:
            print("Also wrote " + ", ".join(extras) + ".", flush=True)
    return 0


def summary_line(output: str, result, seed: int, config) -> str:
    """`Wrote OUT: D s of audio (N chunks, seed S) in G s, RTF R; <which chunks hit the limit>[; <which were
    redone>].`"""
    chunks = len(result.chunks)
    spec = config.audio_spec
    limit_seconds = spec.seconds(spec.frames(result.max_new_tokens))
    hit = [i + 1 for i in result.unfinished_chunks]
    if hit:
        limit = f"{len(hit)} of {chunks} chunk{'s' if chunks > 1 else ''} hit the {limit_seconds:g} s limit: " + ", ".join(map(str, hit))
    else:
        limit = f"no chunk hit the {limit_seconds:g} s limit"
    if redone := [i + 1 for i, chunk in enumerate(result.chunks) if len(chunk.attempts) > 1]:
        limit += f"; {len(redone)} redone with another seed: " + ", ".join(map(str, redone))
    return (
        f"Wrote {output}: {result.duration:.2f} s of audio ({chunks} chunk{'s' if chunks != 1 else ''}, seed {seed}) "
        f"in {result.generation_seconds:.2f} s, RTF {result.real_time_factor:.2f}; {limit}."
    )


# ================================================================================================= other commands
def cmd_make_tiny(args) -> int:
    from ..sampling_higgs_v3 import check_seed

    check_seed(args.seed, "--seed")
    output = Path(args.output)
    if output.exists() and not output.is_dir():
        raise CliError(f"{args.output!r} is a file; give a folder to write the model into.")
    if args.original:
        from ..audio_io_higgs_v3 import follow_umask
        from ..testing.tiny import write_tiny_original_checkpoint

        path = write_tiny_original_checkpoint(output, seed=args.seed, with_codec=not args.no_codec)
        follow_umask(path)  # safetensors' writer leaves 0600
        print(f"Wrote a tiny original-layout Higgs Audio v3 checkpoint to {path} (convert it with higgs-v3 convert).")
    else:
        path = write_tiny_random(output, seed=args.seed, with_codec=not args.no_codec)
        print(f"Wrote the tiny random Higgs Audio v3 model to {path} (random weights: its audio is noise).")
    return 0


def cmd_tags(args) -> int:
    """The control tags of the model's tokenizer (`chunking_higgs_v3.control_tags`), read from its `tokenizer.json`
    without loading a tokenizer or torch (the processor's `valid_tags` when the folder has no such file)."""
    from ..chunking_higgs_v3 import control_tags
    from .models import added_tokens

    folder = resolve_model(args.model, lambda m: print(m, file=sys.stderr))
    added = added_tokens(folder)
    for tag in control_tags(added) if added is not None else load_processor(folder).valid_tags():
        print(tag)
    return 0


# ================================================================================================= entry point
def _one_line(error: BaseException) -> str:
    message = " ".join(str(error).split())
    if isinstance(error, FileNotFoundError) and error.filename and "No such file" in message:
        return f"{error.filename!s} does not exist."
    return message or type(error).__name__


def _out_of_memory_hint(command: str) -> str:
    """What to try after running out of memory, in the options of the command that ran."""
    if command == "finetune":
        return "try --batch-size 1, a smaller --max-seconds, --bf16, --gradient-checkpointing or --lora."
    return "try --batch-size 1, a smaller --max-seconds or --dtype bfloat16."


def main(argv: list[str] | None = None, *, convert_prog: str | None = None) -> int:
    """Console script `higgs-v3` (and, with `convert_prog`, the converter's script): parse with the one parser, run
    the command, and turn what it raises into the exit code (`_exit_code`): 0 success, 2 a fault of the input, output
    or options (one line on stderr, as argparse's usage errors), 1 a failed upload or an unexpected failure, 130
    interrupted."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(convert_prog)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error argparse has printed
        return _exit_code(exit_, parser.prog, "")
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    previous_hook, sys.unraisablehook = sys.unraisablehook, _keep_interrupts(sys.unraisablehook)
    try:
        if getattr(args, "quiet_libraries", False):  # the commands report through their own lines
            _quiet_libraries(verbose=False)
        return args.run(args)
    except BaseException as error:  # noqa: BLE001 - every outcome becomes an exit code, in one place
        return _exit_code(error, getattr(args, "error_prefix", parser.prog), args.command)
    finally:
        sys.unraisablehook = previous_hook
        _restore_libraries()


def _keep_interrupts(previous: Callable) -> Callable:
    """A `sys.unraisablehook` that keeps Ctrl-C: a KeyboardInterrupt raised while a finalizer (`__del__`, a weakref
    callback) runs is dropped by Python with an "Exception ignored" message, and the command went on speaking (seen
    once in a loaded CI run: 120 s after SIGINT it still ran). It is delivered again instead, at the main thread's next
    instruction; anything else goes to `previous`."""

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and signal.getsignal(signal.SIGINT) is (
                signal.default_int_handler):
            # From another thread: it needs the GIL, so the interrupt is raised after this hook returned (raised in the
            # hook, it would be dropped again); in another finalizer, it comes back here and is sent once more.
            _thread.start_new_thread(signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
            return
        previous(unraisable)

    return hook


def _exit_code(error: BaseException, prefix: str, command: str) -> int:
    """The one error path of every command: the line it prints on stderr and its exit code. `HIGGS_V3_DEBUG=1`
    re-raises instead (the traceback)."""
    if isinstance(error, SystemExit):  # argparse's (--help, a usage error it printed)
        return error.code if isinstance(error.code, int) else (0 if error.code is None else EXIT_ERROR)
    if isinstance(error, KeyboardInterrupt):
        print(f"{prefix}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if os.environ.get("HIGGS_V3_DEBUG"):
        raise error
    if isinstance(error, PushError):  # the folder is complete; the upload failed: not a fault of the input
        print(f"{prefix}: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_FAILURE
    if isinstance(error, (CliError, ValueError, OSError, ImportError)):
        print(f"{prefix}: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_ERROR
    if type(error).__name__ == "OutOfMemoryError":  # torch's, matched by name: torch may not be imported
        print(f"{prefix}: error: out of memory ({_one_line(error)[:200]}); {_out_of_memory_hint(command)}",
              file=sys.stderr)
        return EXIT_ERROR
    print(f"{prefix}: internal error: {type(error).__name__}: {_one_line(error)} (set HIGGS_V3_DEBUG=1 for the "
          "traceback)", file=sys.stderr)
    return EXIT_FAILURE


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["CliError", "SpeakRequest", "build_parser", "main", "summary_line"]
