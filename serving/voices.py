# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Saved voices of the server: one `<name>.safetensors` per voice in `--voices-dir`, written whole
(`HiggsAudioV3Voice.save` goes through `audio_io_higgs_v3.atomic_output`), read with `HiggsAudioV3Voice.load`. A name is
1 to 64 letters, digits, `_` or `-`, starting with a letter or digit, and not `default` (the model's own voice): it
cannot name anything outside the folder."""

from __future__ import annotations

import re
from pathlib import Path


VOICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
DEFAULT_VOICE = "default"


def name_problem(name) -> str | None:
    if not isinstance(name, str) or not VOICE_NAME.fullmatch(name):
        return (f"voice name {name!r} is not accepted; a name is 1 to 64 letters, digits, '_' or '-', starting with a "
                "letter or digit.")
    if name == DEFAULT_VOICE:
        return f"{DEFAULT_VOICE!r} is the model's own voice; choose another name."
    return None


class VoiceStore:
    """The voices of `folder` (created when missing)."""

    def __init__(self, folder):
        self.folder = Path(folder).expanduser()
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.safetensors"

    def names(self) -> list[str]:
        return sorted(p.stem for p in self.folder.glob("*.safetensors") if VOICE_NAME.fullmatch(p.stem))

    def load(self, name: str):
        from ..audio_io_higgs_v3 import HiggsAudioV3Voice

        return HiggsAudioV3Voice.load(self.path(name))

    def save(self, name: str, voice) -> Path:
        return voice.save(self.path(name))

    def delete(self, name: str) -> bool:
        try:
            self.path(name).unlink()
        except FileNotFoundError:
            return False
        return True


__all__ = ["DEFAULT_VOICE", "VOICE_NAME", "VoiceStore", "name_problem"]
