# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""`higgs-v3 convert` (also `python convert_checkpoint.py`): the converter, and with `--to-original` the export back
to the original layout, each followed by its summary.

```
higgs-v3 convert --input bosonai/higgs-audio-v3-tts-4b --output ./higgs-v3-hf [--push-to-hub USER/REPO [--private]]
higgs-v3 convert --to-original --input ./higgs-v3-hf --output ./higgs-v3-original [--original DIR]
```

The options are parsed by the one parser (`cli/main`); this module runs them: `convert_checkpoint.convert` (read,
plan, write, verify) or `conversion.export.export_to_original`. With `--push-to-hub` the Hub and the login are checked
before converting (`conversion.repo.check_hub_push`) and the complete folder is uploaded after the summary
(`conversion.repo.push_folder_to_hub`; a failed upload is a `PushError`, exit code 1, with the way to upload later).
Only the standard library is imported at module level.
"""

from __future__ import annotations

import sys


def cmd_convert(args) -> int:
    """Convert (or export, `--to-original`), print what was written, ignored and verified, push when asked."""
    if args.to_original:
        return _export(args)
    if args.original is not None:
        raise ValueError("--original only applies to --to-original.")
    from ..conversion.original_format import read_codec_config_file
    from ..conversion.repo import check_hub_push, push_folder_to_hub
    from ..convert_checkpoint import DEFAULT_MAX_SHARD_SIZE, convert

    if args.push_to_hub:  # before a conversion that takes long on the real checkpoint
        check_hub_push(args.push_to_hub)
    result = convert(
        args.input,
        args.output,
        revision=args.revision,
        dtype=args.dtype,
        max_shard_size=args.max_shard_size or DEFAULT_MAX_SHARD_SIZE,
        overwrite=args.overwrite,
        verify=not args.no_verify,
        codec_config=read_codec_config_file(args.codec_config) if args.codec_config else None,
        without_codec=args.without_codec,
        repo_id=args.push_to_hub,
        progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    print_summary(result)
    if args.push_to_hub:
        print(f"Pushed to {push_folder_to_hub(result.output_dir, args.push_to_hub, private=args.private)}")
    return 0


def print_summary(result) -> None:
    """What a `ConversionResult` says: the tensors and shards written, the keys ignored and why, the verification."""
    print(f"Converted {result.num_tensors} tensors into {result.output_dir} ({', '.join(result.shards)}).")
    for name, reason in sorted(result.ignored.items()):
        print(f"  ignored {name}: {reason}")
    if result.max_abs_diff is not None:
        print(f"Verified: max |diff| of the audio logits = {result.max_abs_diff:.3e} "
              f"(tolerance {result.tolerance:.3e}).")
    else:
        print("Not verified (--no-verify).")


def _export(args) -> int:
    """`--to-original`: the export, printed as the conversion is. Options of the other direction are refused."""
    given = [flag for flag, value in (("--revision", args.revision), ("--push-to-hub", args.push_to_hub),
                                      ("--codec-config", args.codec_config), ("--without-codec", args.without_codec),
                                      ("--no-verify", args.no_verify), ("--private", args.private)) if value]
    if given:
        raise ValueError(f"{', '.join(given)} do(es) not apply to --to-original (it takes --input, --output, --dtype, "
                         "--max-shard-size, --overwrite and --original).")
    from ..conversion.export import export_to_original
    from ..convert_checkpoint import DEFAULT_MAX_SHARD_SIZE

    result = export_to_original(args.input, args.output, dtype=args.dtype,
                                max_shard_size=args.max_shard_size or DEFAULT_MAX_SHARD_SIZE,
                                overwrite=args.overwrite, original=args.original,
                                progress=lambda message: print(message, file=sys.stderr, flush=True))
    print(f"Exported {result.num_tensors} tensors ({result.dtype}) in the original layout into {result.output_dir} "
          f"({', '.join(result.shards)}).")
    for name, how in sorted(result.filled.items()):
        print(f"  {name}: {how}")
    return 0


__all__ = ["cmd_convert", "print_summary"]
