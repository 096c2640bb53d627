# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""The `higgs-v3` command line: speech from the terminal, long texts and dialogues included.

```
higgs-v3 speak --model tiny-random "Hello world" -o hello.wav        # offline demo (a random model: noise)
higgs-v3 speak --model bosonai/higgs-audio-v3-tts-4b --text-file chapter.txt --ref-audio me.wav --ref-text "..." -o ch.wav
higgs-v3 speak --dialogue --text-file play.txt --voice Ann=ann.wav:"Hi, I am Ann." --voice Bob=bob.safetensors -o play.wav
higgs-v3 convert --input bosonai/higgs-audio-v3-tts-4b --output ./higgs-v3-hf     # the converter (convert_checkpoint)
higgs-v3 make-tiny ./tiny                                            # the tiny random demo model, in the converted layout
higgs-v3 tags                                                        # the inline control tags the model knows
```

`--model tiny-random` is a tiny randomly initialised model built once (from `tiny_higgs_v3`) into
`$HIGGS_V3_CACHE/tiny-random` (default `$HF_HOME/higgs_v3/tiny-random`), so the commands run with no download.

Errors (missing or unreadable files, empty text, unknown tags, an unknown model, bad options) are one line on stderr
and exit code 2, never a traceback (`HIGGS_V3_DEBUG=1` shows it). Heavy imports (torch, transformers) happen only once
the arguments and files have been checked.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import os
import re
import secrets
import shutil
import sys
import time
from pathlib import Path


DEFAULT_MODEL = "bosonai/higgs-audio-v3-tts-4b"
TINY_RANDOM = "tiny-random"
# The random demo model never ends its speech by itself, so its generation config caps a chunk at 3 s of audio.
TINY_RANDOM_MAX_SECONDS = 3
EXIT_ERROR = 2
_VOICE_FILE_SUFFIXES = (".safetensors", ".json")
# Sources whose change makes a cached tiny random model stale.
_TINY_SOURCES = (
    "tiny_higgs_v3.py",
    "configuration_higgs_v3.py",
    "modeling_higgs_v3.py",
    "codec_higgs_v3.py",
    "processing_higgs_v3.py",
    "audio_io_higgs_v3.py",
    "convert_checkpoint.py",
)


class CliError(Exception):
    """A user error: printed as one line, exit code 2."""


# ================================================================================================= argument parsing
class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2, as argparse's own)."""

    def error(self, message: str):
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive_float(name: str, allow_zero: bool = False):
    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {value!r}") from None
        if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
            accepted = "zero or more" if allow_zero else "more than zero"
            raise argparse.ArgumentTypeError(f"{name} must be {accepted}, got {value!r}")
        return number

    return parse


def _positive_int(name: str):
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, got {value!r}") from None
        if number < 1:
            raise argparse.ArgumentTypeError(f"{name} must be at least 1, got {value!r}")
        return number

    return parse


def _probability(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--top-p must be a number, got {value!r}") from None
    if not 0 < number <= 1:
        raise argparse.ArgumentTypeError(f"--top-p must be in (0, 1], got {value!r}")
    return number


def _seed(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seed must be a whole number, got {value!r}") from None
    if not 0 <= number < 2**62:
        raise argparse.ArgumentTypeError(f"--seed must be in [0, 2**62), got {value!r}")
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="higgs-v3",
        description="Higgs Audio v3 text-to-speech from the command line (see `higgs-v3 COMMAND --help`).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

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
                        help="the text is a dialogue script: one '[Name] text' line per turn")

    model = speak.add_argument_group("model")
    model.add_argument("--model", default=os.environ.get("HIGGS_V3_MODEL", DEFAULT_MODEL),
                       help=f"'{TINY_RANDOM}' (offline demo, random weights: noise), a folder with a converted or "
                       f"original checkpoint, or a Hub repo id (default: $HIGGS_V3_MODEL or {DEFAULT_MODEL})")
    model.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:1, mps")
    model.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                       help="language model dtype (auto: the checkpoint's; the codec always runs in float32)")

    voice = speak.add_argument_group("voice")
    voice.add_argument("--ref-audio", metavar="CLIP", help="reference clip to clone (wav/flac/ogg, up to 100 s)")
    voice.add_argument("--ref-text", metavar="TEXT", help="transcript of the reference clip (clones more closely)")
    voice.add_argument("--voice", action="append", default=[], metavar="SPEC",
                       help="a saved voice file (.safetensors/.json); with --dialogue, one per speaker: "
                       "Name=clip.wav[:transcript] or Name=voice.safetensors")
    voice.add_argument("--auto-voices", action="store_true",
                       help="with --dialogue: a speaker without --voice gets the voice of their first generated line")
    voice.add_argument("--save-voice", metavar="FILE",
                       help="save the voice used (.safetensors or .json) to reuse it with --voice")

    sampling = speak.add_argument_group("sampling")
    sampling.add_argument("--seed", type=_seed, help="base seed; chunk i uses seed + i (default: random, printed)")
    sampling.add_argument("--temperature", type=_positive_float("--temperature"), help="default: the model's (1.0)")
    sampling.add_argument("--top-k", type=_positive_int("--top-k"), help="keep the k most likely codes per codebook")
    sampling.add_argument("--top-p", type=_probability, help="nucleus sampling per codebook")
    sampling.add_argument("--min-p", type=_probability, help="drop codes below min-p times the most likely one")
    sampling.add_argument("--greedy", action="store_true", help="greedy decoding instead of sampling")

    long_form = speak.add_argument_group("long text")
    long_form.add_argument("--max-seconds", type=_positive_float("--max-seconds"),
                           help="limit of audio per chunk (default: the model's generation config; 81.9 s for the "
                           f"real model, {TINY_RANDOM_MAX_SECONDS} s for tiny-random)")
    long_form.add_argument("--max-chars", type=_positive_int("--max-chars"), default=300,
                           help="largest chunk in characters, tags not counted (default 300)")
    long_form.add_argument("--pause", type=_positive_float("--pause", allow_zero=True),
                           help="seconds of silence between chunks (default 0.3; 0.4 between dialogue lines)")
    long_form.add_argument("--batch-size", type=_positive_int("--batch-size"), default=8,
                           help="chunks generated together (default 8)")

    output = speak.add_argument_group("output")
    output.add_argument("-o", "--output", default="speech.wav", help="audio file to write (default speech.wav)")
    output.add_argument("--save-codes", metavar="FILE",
                        help="also save the generated codes (.safetensors: 'codes' [frames, 8], 'chunk_frames')")
    output.add_argument("--split-dir", metavar="DIR",
                        help="also write one file per dialogue line (per chunk for plain text) into DIR")
    output.add_argument("--no-progress", action="store_true", help="no progress bar")
    output.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")
    output.add_argument("--verbose", action="store_true", help="show library warnings")

    commands.add_parser(
        "convert",
        help="convert the original checkpoint (options: higgs-v3 convert --help)",
        add_help=False,
    )

    tiny = commands.add_parser(
        "make-tiny",
        help="write the tiny random demo model",
        description="Write the tiny random demo model (what --model tiny-random uses) in the converted layout, or with "
        "--original a tiny checkpoint in the original layout (input for `higgs-v3 convert`).",
    )
    tiny.add_argument("output", help="folder to write (created)")
    tiny.add_argument("--seed", type=_seed, default=0)
    tiny.add_argument("--original", action="store_true", help="the original checkpoint layout instead")
    tiny.add_argument("--no-codec", action="store_true", help="leave the codec out")

    tags = commands.add_parser("tags", help="list the inline control tags",
                               description="List the inline control tags of the model's tokenizer.")
    tags.add_argument("--model", default=os.environ.get("HIGGS_V3_MODEL", TINY_RANDOM),
                      help=f"whose tokenizer to read (default: $HIGGS_V3_MODEL or {TINY_RANDOM})")
    return parser


# ================================================================================================= the tiny random model
def cache_dir() -> Path:
    """`$HIGGS_V3_CACHE`, else `$HF_HOME/higgs_v3` (next to the converter's cache)."""
    if os.environ.get("HIGGS_V3_CACHE"):
        return Path(os.environ["HIGGS_V3_CACHE"]).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HOME) / "higgs_v3"


def tiny_random_dir() -> Path:
    """Where `--model tiny-random` lives: `$HIGGS_V3_TINY_RANDOM`, else `cache_dir() / "tiny-random"`."""
    if os.environ.get("HIGGS_V3_TINY_RANDOM"):
        return Path(os.environ["HIGGS_V3_TINY_RANDOM"]).expanduser()
    return cache_dir() / TINY_RANDOM


def _tiny_fingerprint(seed: int) -> str:
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256(f"seed={seed}|max_seconds={TINY_RANDOM_MAX_SECONDS}".encode())
    for name in _TINY_SOURCES:
        path = here / name
        digest.update(name.encode() + (path.read_bytes() if path.is_file() else b"-"))
    return digest.hexdigest()


def write_tiny_random(directory: str | os.PathLike, seed: int = 0, with_codec: bool = True) -> Path:
    """`tiny_higgs_v3.make_tiny_random_model` plus a demo generation config: at most `TINY_RANDOM_MAX_SECONDS` of
    audio per generation (random weights never emit the end of speech)."""
    from transformers import GenerationConfig

    from .tiny_higgs_v3 import make_tiny_random_model

    directory = make_tiny_random_model(directory, seed=seed, with_codec=with_codec)
    generation_config = GenerationConfig.from_pretrained(directory)
    config = _read_json(Path(directory) / "config.json")
    generation_config.max_new_tokens = TINY_RANDOM_MAX_SECONDS * config.get("frame_rate", 25) + config.get("num_codebooks", 8) - 1
    generation_config.save_pretrained(directory)
    return Path(directory)


def ensure_tiny_random(log=None) -> Path:
    """The tiny random demo model, built once into `tiny_random_dir()` (rebuilt when this package's code changed).
    Built in a temporary sibling folder and renamed into place, so concurrent runs never see half a model."""
    target = tiny_random_dir()
    stamp_name = ".higgs_v3_tiny_random"
    fingerprint = _tiny_fingerprint(seed=0)
    stamp = target / stamp_name
    if stamp.is_file() and stamp.read_text().strip() == fingerprint:
        return target
    if log is not None:
        log(f"Building the tiny random demo model in {target} (once; a few seconds)...")
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.parent / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        write_tiny_random(scratch, seed=0)
        (scratch / stamp_name).write_text(fingerprint + "\n")
        if target.exists():
            old = target.parent / f".{target.name}.old-{os.getpid()}"
            try:
                target.rename(old)
            except OSError:
                old = None
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        try:
            scratch.rename(target)
        except OSError:  # another process put its model in place first
            if not (stamp.is_file() and stamp.read_text().strip() == fingerprint):
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


# ================================================================================================= model resolution
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_ORIGINAL_MODEL_TYPE = "higgs_multimodal_qwen3"


def _read_json(path: Path) -> dict:
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CliError(f"Could not read {str(path)!r} ({error}).") from error


def resolve_model(name: str, log=None) -> Path:
    """A folder with a converted checkpoint for `name`: 'tiny-random', a converted or original folder (an original
    one is converted once into the converter's cache), or a Hub repo id (downloaded, converted when original)."""
    if name == TINY_RANDOM:
        return ensure_tiny_random(log)
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise CliError(f"Model {name!r} is a file; give a folder with a checkpoint (config.json), a Hub repo id or "
                           f"{TINY_RANDOM!r}.")
        if not (path / "config.json").is_file():
            raise CliError(f"Model folder {name!r} has no config.json; give a folder with a converted or original Higgs "
                           "Audio v3 checkpoint.")
        if _read_json(path / "config.json").get("model_type") == _ORIGINAL_MODEL_TYPE:
            return _convert_original(str(path), log)
        return path
    if not _HUB_ID.match(name):
        raise CliError(f"Unknown model {name!r}: it is not {TINY_RANDOM!r}, an existing folder, or a Hub repo id "
                       "(owner/name).")
    try:
        from huggingface_hub import hf_hub_download

        config_path = Path(hf_hub_download(name, "config.json"))
    except Exception as error:  # offline, unknown repo, no access: all mean the same to the user
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CliError(f"Unknown model {name!r}: not {TINY_RANDOM!r} nor a local folder, and the Hub repo could not be "
                       f"reached ({reason}).") from error
    if _read_json(config_path).get("model_type") == _ORIGINAL_MODEL_TYPE:
        return _convert_original(name, log)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(name))


def _convert_original(name: str, log) -> Path:
    from .convert_checkpoint import converted_path

    if log is not None:
        log(f"{name} is an original checkpoint: converting it once into the local cache (this takes a while)...")
    return converted_path(name)


def _device(name: str):
    import torch

    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as error:
        raise CliError(f"Unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps.") from error
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CliError(f"Device {name!r} was asked for but CUDA is not available; use --device cpu.")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise CliError(f"Device {name!r} was asked for but MPS is not available; use --device cpu.")
    return device


def load_processor(path: Path):
    from .processing_higgs_v3 import HiggsAudioV3Processor

    if (path / "processor_config.json").is_file():
        return HiggsAudioV3Processor.from_pretrained(str(path), trust_remote_code=False)
    from transformers import AutoTokenizer

    from .configuration_higgs_v3 import HiggsAudioV3Config

    tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    return HiggsAudioV3Processor.from_model_config(tokenizer, HiggsAudioV3Config.from_pretrained(str(path)))


def load_model(path: Path, device: str, dtype: str):
    """The installed package's model class (no remote code is run) on `device`."""
    from .modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    target = _device(device)
    model = HiggsAudioV3ForConditionalGeneration.from_pretrained(str(path), dtype=dtype)
    return model.to(target).eval()


# ================================================================================================= speak
def _read_text(args) -> str:
    if args.text is not None and args.text_file is not None:
        raise CliError("Give the text either as an argument or with --text-file, not both.")
    if args.text is None and args.text_file is None:
        raise CliError("No text: give TEXT, --text-file FILE, or '-' to read stdin.")
    if args.text == "-" or args.text_file == "-":
        data = sys.stdin.buffer.read()
        where = "stdin"
    elif args.text_file is not None:
        path = Path(args.text_file)
        if not path.is_file():
            raise CliError(f"Text file {args.text_file!r} does not exist.")
        try:
            data = path.read_bytes()
        except OSError as error:
            raise CliError(f"Could not read text file {args.text_file!r} ({error.strerror or error}).") from error
        where = f"text file {args.text_file!r}"
    else:
        return args.text
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise CliError(f"Could not read {where} as UTF-8 text ({error.reason} at byte {error.start}).") from error


def _check_input_file(path: str, what: str) -> None:
    if not Path(path).is_file():
        raise CliError(f"{what} {path!r} does not exist.")
    if not os.access(path, os.R_OK):
        raise CliError(f"{what} {path!r} is not readable.")


def _check_audio_file(path: str, what: str, who: str = "") -> None:
    """A reference clip must be a file libsndfile can read (checked before any model is loaded)."""
    if not Path(path).is_file():
        raise CliError(f"{what} {path!r}{who} does not exist.")
    import soundfile

    try:
        soundfile.info(path)
    except Exception as error:  # soundfile raises LibsndfileError (a RuntimeError) or TypeError for non-audio files
        reason = " ".join(str(error).split()) or type(error).__name__
        raise CliError(f"{what} {path!r}{who} is not readable audio ({reason}); use wav, flac or ogg.") from error


def _voice_source(spec: str, speaker: str | None) -> tuple[str, str | None]:
    """`clip.wav`, `clip.wav:transcript` or `voice.safetensors` -> (existing path, transcript or None). The whole spec
    when it is an existing file, else the shortest prefix before a ':' that is one (so a transcript may hold ':')."""
    who = f" for speaker {speaker!r}" if speaker else ""
    if Path(spec).is_file():
        return spec, None
    for match in re.finditer(":", spec):
        head = spec[: match.start()]
        if head and Path(head).is_file():
            return head, spec[match.end():]
    path = spec.split(":", 1)[0]
    raise CliError(f"Voice file or reference clip {path!r}{who} does not exist.")


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


def _check_audio_output(path: str) -> None:
    _check_output(path, "the audio file")
    import soundfile

    suffix = Path(path).suffix.lower().lstrip(".")
    formats = {name.lower() for name in soundfile.available_formats()}
    if suffix not in formats:
        raise CliError(f"Cannot write audio file {path!r}: unknown extension {('.' + suffix) if suffix else '(none)'}; "
                       "use .wav, .flac or .ogg.")


def _check_speak_arguments(args) -> None:
    """Every check that needs no model, before the heavy imports."""
    if args.dialogue:
        if args.ref_audio or args.ref_text:
            raise CliError("--ref-audio/--ref-text set one voice for plain text; with --dialogue give each speaker "
                           "--voice Name=clip.wav[:transcript].")
        if args.save_voice:
            raise CliError("--save-voice saves the single voice of plain text; it does not apply to --dialogue.")
    else:
        if args.auto_voices:
            raise CliError("--auto-voices applies to --dialogue only.")
        if len(args.voice) > 1:
            raise CliError("Give one --voice for plain text (several voices need --dialogue and Name=... voices).")
        if args.voice and args.ref_audio:
            raise CliError("Give either --ref-audio or --voice, not both.")
        if args.ref_text is not None and not (args.ref_audio or args.voice):
            raise CliError("--ref-text is the transcript of a reference clip; give --ref-audio (or --voice) as well.")
        if args.voice and "=" in args.voice[0] and not Path(args.voice[0]).is_file():
            raise CliError(f"--voice {args.voice[0]!r}: Name=... voices are for --dialogue; for plain text give a voice "
                           "file (or --ref-audio).")
        if args.ref_audio:
            _check_input_file(args.ref_audio, "Reference audio file")
        if args.voice:
            _check_input_file(args.voice[0], "Voice file")
    _check_audio_output(args.output)
    if args.save_codes:
        _check_output(args.save_codes, "the codes file", (".safetensors",))
    if args.save_voice:
        _check_output(args.save_voice, "the voice file", _VOICE_FILE_SUFFIXES)
    if args.split_dir and Path(args.split_dir).exists() and not Path(args.split_dir).is_dir():
        raise CliError(f"--split-dir {args.split_dir!r} is a file, not a folder.")


def _quiet_libraries(verbose: bool) -> None:
    import warnings

    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    if not verbose:
        transformers_logging.set_verbosity_error()
        # Our modules log through transformers' logging under their own names; the summary line reports what their
        # warnings say (chunks that ran into the length limit).
        logging.getLogger(__package__ or "higgs_v3").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore")
    try:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    except ImportError:  # pragma: no cover - huggingface_hub always has it in the supported range
        pass


def _safe_name(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("._") or "speaker"


def cmd_speak(args) -> int:
    text = _read_text(args)
    if not text.strip():
        raise CliError("The text is empty; there is nothing to speak.")
    _check_speak_arguments(args)
    dialogue_voices = _parse_dialogue_voices(args.voice) if args.dialogue else {}
    if args.dialogue:  # script and speaker errors before loading anything
        from .longform_higgs_v3 import check_dialogue_voices, parse_dialogue

        check_dialogue_voices(parse_dialogue(text), dialogue_voices, args.auto_voices)
        for name, (path, _) in dialogue_voices.items():
            if Path(path).suffix.lower() not in _VOICE_FILE_SUFFIXES:
                _check_audio_file(path, "Reference clip", f" for speaker {name!r}")
    elif args.ref_audio:
        _check_audio_file(args.ref_audio, "Reference audio file")

    def log(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    _quiet_libraries(args.verbose)
    from . import longform_higgs_v3 as longform

    path = resolve_model(args.model, log)
    processor = load_processor(path)
    if args.dialogue:
        for line in longform.parse_dialogue(text):
            processor.check_control_tags(line.text, f"dialogue line {line.line_number}")
    else:
        processor.check_control_tags(text, "the text")
    if args.ref_text is not None:
        processor.check_control_tags(args.ref_text, "the reference text")
    model = load_model(path, args.device, args.dtype)

    generate_kwargs = {}
    for name in ("temperature", "top_k", "top_p", "min_p"):
        if getattr(args, name) is not None:
            generate_kwargs[name] = getattr(args, name)
    if args.greedy:
        generate_kwargs["do_sample"] = False
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    common = dict(
        max_chars=args.max_chars,
        batch_size=args.batch_size,
        seed=seed,
        max_seconds=args.max_seconds,
        progress=not (args.quiet or args.no_progress),
        **generate_kwargs,
    )
    if args.dialogue:
        result = longform.synthesize_dialogue(
            model, processor, text, {name: (clip, transcript) for name, (clip, transcript) in dialogue_voices.items()},
            auto_voices=args.auto_voices,
            pause_seconds=args.pause if args.pause is not None else longform.DEFAULT_DIALOGUE_PAUSE_SECONDS,
            **common,
        )
    else:
        reference = None
        if args.ref_audio:
            reference = args.ref_audio
        elif args.voice:
            reference = args.voice[0]
        result = longform.synthesize_long(
            model, processor, text, reference=reference, reference_text=args.ref_text,
            pause_seconds=args.pause if args.pause is not None else longform.DEFAULT_PAUSE_SECONDS,
            **common,
        )

    result.save(args.output)
    extras = []
    if args.save_codes:
        result.save_codes(args.save_codes)
        extras.append(f"codes in {args.save_codes}")
    if args.save_voice:
        if result.voice is None:
            raise CliError("No voice to save: the first chunk produced no audio frame.")
        result.voice.save(args.save_voice)
        extras.append(f"voice in {args.save_voice}")
    if args.split_dir:
        split_dir = Path(args.split_dir)
        split_dir.mkdir(parents=True, exist_ok=True)
        suffix = Path(args.output).suffix or ".wav"
        waveforms = result.line_waveforms()
        from .audio_io_higgs_v3 import save_audio

        for i, (speaker, waveform) in enumerate(waveforms, start=1):
            name = f"{i:03d}_{_safe_name(speaker)}{suffix}" if speaker else f"{i:03d}{suffix}"
            save_audio(waveform, split_dir / name, sampling_rate=result.sampling_rate)
        extras.append(f"{len(waveforms)} files in {args.split_dir}")
    if not args.quiet:
        print(summary_line(args.output, result, seed, model.config), flush=True)
        if extras:
            print("Also wrote " + ", ".join(extras) + ".", flush=True)
    return 0


def summary_line(output: str, result, seed: int, config) -> str:
    """`Wrote OUT: D s of audio (N chunks, seed S) in G s, RTF R; <which chunks hit the limit>.`"""
    chunks = len(result.chunks)
    limit_seconds = (result.max_new_tokens - (config.num_codebooks - 1)) / config.frame_rate
    hit = [i + 1 for i in result.unfinished_chunks]
    if hit:
        limit = f"{len(hit)} of {chunks} chunk{'s' if chunks > 1 else ''} hit the {limit_seconds:g} s limit: " + ", ".join(map(str, hit))
    else:
        limit = f"no chunk hit the {limit_seconds:g} s limit"
    return (
        f"Wrote {output}: {result.duration:.2f} s of audio ({chunks} chunk{'s' if chunks != 1 else ''}, seed {seed}) "
        f"in {result.generation_seconds:.2f} s, RTF {result.real_time_factor:.2f}; {limit}."
    )


# ================================================================================================= other commands
def cmd_convert(argv: list[str]) -> int:
    from .convert_checkpoint import main as convert_main

    code = convert_main(argv, prog="higgs-v3 convert")
    return EXIT_ERROR if code not in (0, None) else 0


def cmd_make_tiny(args) -> int:
    _quiet_libraries(verbose=False)
    output = Path(args.output)
    if output.exists() and not output.is_dir():
        raise CliError(f"{args.output!r} is a file; give a folder to write the model into.")
    if args.original:
        from .tiny_higgs_v3 import write_tiny_original_checkpoint

        path = write_tiny_original_checkpoint(output, seed=args.seed, with_codec=not args.no_codec)
        print(f"Wrote a tiny original-layout Higgs Audio v3 checkpoint to {path} (convert it with higgs-v3 convert).")
    else:
        path = write_tiny_random(output, seed=args.seed, with_codec=not args.no_codec)
        print(f"Wrote the tiny random Higgs Audio v3 model to {path} (random weights: its audio is noise).")
    return 0


def cmd_tags(args) -> int:
    _quiet_libraries(verbose=False)
    processor = load_processor(resolve_model(args.model, lambda m: print(m, file=sys.stderr)))
    for tag in processor.valid_tags():
        print(tag)
    return 0


# ================================================================================================= entry point
def _one_line(error: BaseException) -> str:
    message = " ".join(str(error).split())
    if isinstance(error, FileNotFoundError) and error.filename and "No such file" in message:
        return f"{error.filename!s} does not exist."
    return message or type(error).__name__


def main(argv: list[str] | None = None) -> int:
    """Console script `higgs-v3`; returns the exit code (0 success, 2 user error, 1 unexpected failure)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = bool(os.environ.get("HIGGS_V3_DEBUG"))
    try:
        if argv and argv[0] == "convert":
            return cmd_convert(argv[1:])
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_ERROR
        return {"speak": cmd_speak, "make-tiny": cmd_make_tiny, "tags": cmd_tags}[args.command](args)
    except KeyboardInterrupt:
        print("higgs-v3: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exit_:  # argparse (help, usage errors) and a delegated CLI
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else EXIT_ERROR)
    except (CliError, ValueError, OSError, ImportError) as error:
        if debug:
            raise
        print(f"higgs-v3: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as error:  # a bug or an environment problem: still one line, with the way to see more
        if debug:
            raise
        out_of_memory = type(error).__name__ == "OutOfMemoryError"
        if out_of_memory:
            print(f"higgs-v3: error: out of memory ({_one_line(error)[:200]}); try --batch-size 1, a smaller "
                  "--max-seconds or --dtype bfloat16.", file=sys.stderr)
            return EXIT_ERROR
        print(f"higgs-v3: internal error: {type(error).__name__}: {_one_line(error)} (set HIGGS_V3_DEBUG=1 for the "
              "traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "CliError",
    "build_parser",
    "cache_dir",
    "ensure_tiny_random",
    "main",
    "resolve_model",
    "summary_line",
    "tiny_random_dir",
    "write_tiny_random",
]
