# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Folders written whole, the package's one staged-folder helper: `staged_folder` (stage beside, swap into place,
clean up after a killed run) for the converter, the export back to the original layout, a fine-tuned model and the
tiny-random demo model, with the output's rules (`output_folder`, `check_outside`); `folder_lock` for entries that
concurrent processes build once; the completion marker of a `from_original` cache entry. (Single files are written
whole by `audio_io_higgs_v3.atomic_output`.)

A run writes into a sibling of its output and renames it into place at the end (its staging folder named
`out_<kind>_<hex>`, `STAGING_KINDS`):

```
out_converting_<hex>/     the run's staging folder; OWNER_FILE names its process (pid, host)
out_replaced_<hex>/       with --overwrite: the old output, set aside for the instant between the two renames
out/                      rename(out -> out_replaced_<hex>), rename(out_converting_<hex> -> out), remove the old one
```

A run killed half way leaves such siblings. `clean_stale_siblings(out)`, called by the next run, removes the staging
folders whose process is dead (checked by pid on this host; a live run's folder, or one from another host, is left
alone) and the `_replaced_` folders whose run is over, and when `out` itself is missing (a kill between the two
renames) it renames the old output back: the path holds the old output or the new one, never none.

A cache entry of `from_original` ends with `COMPLETE_FILE`: the size and sha256 of every file written. An entry whose
marker is missing, or whose files are missing or of another size (or, when asked, another checksum), is damaged:
`check_complete` says what is wrong in one line and the caller converts it again.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from transformers.utils import logging

from ..audio_io_higgs_v3 import atomic_output, follow_umask
from .original_format import ConversionError


logger = logging.get_logger(__name__)

OWNER_FILE = ".higgs_v3_owner.json"
"""In a staging folder: `{"pid", "host"}` of the process writing it (removed once the folder is in place)."""

COMPLETE_FILE = ".higgs_v3_complete.json"
"""In a finished cache entry: `{"files": {relative path: {"size", "sha256"}}}` of everything else in it."""

UNOWNED_GRACE_SECONDS: float = 600.0
"""A staging folder without an owner file (a run killed between creating it and naming itself, or an older version
of this code) is removed only once it is this old: a live run names itself within microseconds."""

STAGING_KINDS: dict[str, str] = {"converting": "conversion", "exporting": "export", "saving": "save",
                                 "building": "build"}
"""The staging folders' kinds (`<name>_<kind>_<hex>`), each with the run it belongs to in `clean_stale_siblings`' lines:
the converter's, the export's (`conversion/export`), a fine-tuned model's save (`training/finetune`) and the tiny
random demo model's build (`cli/models`). Every kind is cleaned whichever run cleans, so a dead export's folder is
removed by the next conversion too, and a live run of any kind keeps its `_replaced_` folder."""

_HASH_CHUNK = 16 * 1024 * 1024


# --------------------------------------------------------------------------------------------------- staging folders
def staging_folder(output: Path, kind: str = "converting") -> Path:
    """Create and claim a new staging folder beside `output` (`<name>_<kind>_<hex>`, `kind` one of `STAGING_KINDS`,
    `OWNER_FILE` inside)."""
    if kind not in STAGING_KINDS:
        raise ValueError(f"kind must be one of {', '.join(STAGING_KINDS)}, got {kind!r}.")
    staging = output.parent / f"{output.name}_{kind}_{secrets.token_hex(4)}"
    staging.mkdir()
    (staging / OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}), encoding="utf-8")
    return staging


def _process_is_dead(pid: int) -> bool:
    """Whether no process `pid` runs on this host (a zombie, killed but not yet reaped, counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] == "Z"
    return False


def _owner_is_dead(staging: Path) -> bool:
    """Whether the run that owns `staging` is over: its process is dead on this host, or it never named itself and the
    folder is older than `UNOWNED_GRACE_SECONDS`. A folder of another host is never judged dead."""
    try:
        owner = json.loads((staging / OWNER_FILE).read_text(encoding="utf-8"))
        pid, host = int(owner["pid"]), str(owner["host"])
    except FileNotFoundError:
        try:
            return time.time() - staging.stat().st_mtime > UNOWNED_GRACE_SECONDS
        except FileNotFoundError:  # renamed or removed meanwhile
            return False
    except (OSError, ValueError, KeyError, TypeError):  # a damaged owner file: its run cannot have finished writing it
        return True
    return host == socket.gethostname() and pid != os.getpid() and _process_is_dead(pid)


def _siblings(output: Path, kind: str) -> list[Path]:
    prefix = f"{output.name}_{kind}_"
    if not output.parent.is_dir():
        return []
    return sorted(p for p in output.parent.iterdir() if p.name.startswith(prefix) and p.is_dir())


def clean_stale_siblings(output: Path) -> list[str]:
    """Remove what dead runs left beside `output` (see the module docstring); returns one line per thing done."""
    done, live, runs = [], set(), {}
    for kind, run in STAGING_KINDS.items():
        for staging in _siblings(output, kind):
            runs[staging.name.rsplit("_", 1)[1]] = run
            if _owner_is_dead(staging):
                shutil.rmtree(staging, ignore_errors=True)
                done.append(f"removed {staging.name}, left by {_a(run)} that did not finish")
            else:
                live.add(staging.name.rsplit("_", 1)[1])
    for retired in _siblings(output, "replaced"):
        if retired.name.rsplit("_", 1)[1] in live:  # its run is alive, between its two renames
            continue
        run = runs.get(retired.name.rsplit("_", 1)[1], "conversion or export")  # unpaired: a finished run's
        if not output.exists():
            os.rename(retired, output)
            done.append(f"restored {output.name} from {retired.name} ({_a(run)} was killed while replacing it)")
        else:
            shutil.rmtree(retired, ignore_errors=True)
            done.append(f"removed {retired.name}, the old output of a finished {run}")
    for line in done:
        logger.warning(f"{output.parent}: {line}.")
    return done


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def swap_into_place(staging: Path, output: Path) -> None:
    """Rename the finished `staging` to `output`; an existing `output` is set aside as `<name>_replaced_<hex>` (same hex
    as the staging folder, so `clean_stale_siblings` pairs them) and removed once the new one is in place."""
    retired = output.parent / f"{output.name}_replaced_{staging.name.rsplit('_', 1)[1]}"
    if output.exists():
        os.rename(output, retired)
    os.rename(staging, output)
    (output / OWNER_FILE).unlink(missing_ok=True)
    if retired.exists():
        shutil.rmtree(retired, ignore_errors=True)


def output_folder(output_dir: str | os.PathLike, overwrite: bool) -> Path:
    """The output of a whole-folder write (`staged_folder`) as an absolute path, once what dead runs left beside it is
    cleaned up (an output lost between two renames restored): absent, an empty folder, or one that `overwrite` lets
    the run replace; a `ConversionError` otherwise."""
    output = Path(output_dir).expanduser().absolute()
    clean_stale_siblings(output)
    if output.exists() and not output.is_dir():
        raise ConversionError(f"The output {str(output)!r} exists and is not a folder.")
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        raise ConversionError(
            f"The output folder {str(output)!r} is not empty; pass --overwrite (overwrite=True) to replace it."
        )
    return output


def check_outside(source: Path, output: Path) -> None:
    """The input folder `source` must not be, or lie inside, `output`: replacing the output would delete it."""
    if output.resolve() == source.resolve() or source.resolve().is_relative_to(output.resolve()):
        raise ConversionError(
            f"The output folder {str(output)!r} contains the input {str(source)!r}; choose another output."
        )


# ----------------------------------------------------------------------------------------------------- full disks
_DISK_FULL_WORDS = ("No space left on device", "os error 28", "Disk quota exceeded", "os error 122")
"""How the writers' own errors (safetensors' `SafetensorError`, libsndfile's, torch's) say the disk is full."""


def _free_bytes(path: Path) -> int | None:
    """Free bytes on the file system of `path` (its nearest existing folder), None when it cannot be told."""
    for folder in (path, *path.parents):
        with contextlib.suppress(OSError):
            if folder.is_dir():
                return shutil.disk_usage(folder).free
    return None


def _size(count: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1000
    return ""  # pragma: no cover


def is_disk_full(error: BaseException, path: Path) -> bool:
    """Whether `error`, raised while writing under `path`, is a full disk (or quota): an `OSError` with ENOSPC or
    EDQUOT, a writer's error that says so (`_DISK_FULL_WORDS`), or torch's failed write (its zip writer's "file write
    failed", "unexpected pos") with under 1 MB left on the disk."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(error)
    if any(words in text for words in _DISK_FULL_WORDS):
        return True
    torch_write = "inline_container" in text or "PytorchStreamWriter" in text or "write failed" in text
    return torch_write and (free := _free_bytes(path)) is not None and free < 1_000_000


def disk_full_error(path: Path, what: str, needed: int | None = None, kept: str = "nothing was written",
                    wrote: int = 0) -> OSError:
    """THE message of a full disk: what was being written where, the space it needs (when known; else what it had
    written when the disk filled) and the space free there, what was kept; an `OSError` (errno ENOSPC) whose text is
    that one line."""
    free = _free_bytes(path)
    need = (f"it needs about {_size(needed)}" if needed else
            f"{_size(wrote)} were written when the disk filled" if wrote else "the disk is full")
    free = f", {_size(free)} free there" if free is not None else ""
    error = OSError(f"No space left on device while writing {what} {str(path)!r} ({need}{free}); {kept}. Free some "
                    "space or choose a folder on another disk.")
    error.errno = errno.ENOSPC
    return error


def not_writable_error(output: Path, error: OSError) -> OSError:
    """THE message of an output folder whose parent cannot be written into (permission, a read-only or virtual file
    system such as /sys or /proc): an `OSError` with the cause's errno, one line. A full disk is `disk_full_error`."""
    if is_disk_full(error, output):
        return disk_full_error(output, "the output", None, "nothing was written")
    reason = error.strerror or " ".join(str(error).split()) or type(error).__name__
    failure = OSError(f"Cannot write the output {str(output)!r}: its folder {str(output.parent)!r} is not writable "
                      f"({reason}); nothing was written. Choose an output folder you can write to.")
    failure.errno = error.errno
    return failure


def folder_size(staging: Path) -> int:
    """The bytes of the files in a folder (0 when it is gone)."""
    return sum(path.stat().st_size for path in staging.rglob("*") if path.is_file())


@contextlib.contextmanager
def staged_folder(output: Path, kind: str, *, overwrite: bool = True, needed: int | None = None) -> Iterator[Path]:
    """Write the folder `output` whole: what dead runs left beside it is cleaned up (`clean_stale_siblings`), a new
    staging folder of `kind` is claimed beside it and yielded; when the block ends without an error it is swapped into
    place (`swap_into_place`), else removed and `output` left as it was. Without `overwrite`, an `output` that became
    non-empty while the block ran (another run's) is not replaced: a `ConversionError` that says so.

    `needed`, the bytes the folder will take when known (its weights): less free space than that is refused before
    anything is written. A full disk while writing (`is_disk_full`) is the one-line `disk_full_error`, the staging
    folder removed.

    >>> with staged_folder(Path("out/model"), "saving") as staging:  # doctest: +SKIP
    ...     model.save_pretrained(staging)
    """
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise not_writable_error(output, error) from error
    clean_stale_siblings(output)
    what, kept = f"the {STAGING_KINDS[kind]}'s output", "the previous output, if any, is unchanged"
    try:  # first: a folder that cannot be written into (/sys, a read-only mount) is that, not a full disk
        staging = staging_folder(output, kind)
    except OSError as error:
        raise not_writable_error(output, error) from error
    if needed and (free := _free_bytes(output.parent)) is not None and free < needed:
        shutil.rmtree(staging, ignore_errors=True)
        raise disk_full_error(output, what, needed, f"nothing was written; {kept}")
    try:
        yield staging
        if not overwrite and output.is_dir() and any(output.iterdir()):
            raise ConversionError(f"The output folder {str(output)!r} became non-empty during the "
                                  f"{STAGING_KINDS[kind]}; not replacing it.")
        follow_umask(staging)  # safetensors' writer leaves 0600: another user could not load the output
        swap_into_place(staging, output)
    except BaseException as error:
        full = not isinstance(error, KeyboardInterrupt) and is_disk_full(error, staging)
        written = folder_size(staging) if full else 0
        shutil.rmtree(staging, ignore_errors=True)
        if full:
            raise disk_full_error(output, what, needed, f"the part written was removed; {kept}", written) from error
        raise


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on `folder` (created if needed) while the block runs, so that concurrent processes building
    the same entry in it take turns and the second finds it built (no lock where fcntl is missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX: concurrent builds of one entry may both run
        yield
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


# --------------------------------------------------------------------------------------------- completion markers
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(_HASH_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name not in (COMPLETE_FILE, OWNER_FILE):
            yield path


def write_complete(folder: Path, checksums: bool = True) -> Path:
    """Write `COMPLETE_FILE` into `folder` (sizes and sha256 of its other files; without `checksums`, sizes only, the
    sha256 null: a training checkpoint of tens of GB would take minutes to hash), atomically."""
    files = {path.relative_to(folder).as_posix(): {"size": path.stat().st_size,
                                                    "sha256": _sha256(path) if checksums else None}
             for path in _files(folder)}
    marker = folder / COMPLETE_FILE
    with atomic_output(marker) as temporary:
        temporary.write_text(json.dumps({"files": files}, indent=1) + "\n", encoding="utf-8")
    return marker


def check_complete(folder: Path, checksums: bool = False) -> str | None:
    """None when `folder` holds every file its `COMPLETE_FILE` lists, of the recorded size (and, with `checksums`, the
    recorded sha256); else what is wrong, in a few words."""
    try:
        files = json.loads((folder / COMPLETE_FILE).read_text(encoding="utf-8"))["files"]
        entries = [(name, int(entry["size"]), str(entry["sha256"])) for name, entry in files.items()]
    except FileNotFoundError:
        return "it has no completion marker (it was not written to the end)"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "its completion marker is damaged"
    for name, size, sha256 in entries:
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, {size} were written"
        if checksums and _sha256(path) != sha256:
            return f"{name} differs from what was written (sha256)"
    return None


__all__ = [
    "COMPLETE_FILE",
    "OWNER_FILE",
    "STAGING_KINDS",
    "UNOWNED_GRACE_SECONDS",
    "check_complete",
    "check_outside",
    "clean_stale_siblings",
    "disk_full_error",
    "is_disk_full",
    "folder_lock",
    "folder_size",
    "output_folder",
    "staged_folder",
    "staging_folder",
    "swap_into_place",
    "write_complete",
]
