"""The converter on tiny original-format checkpoints: the converted folder's contents and generation, determinism,
huggingface_hub's shards, every refusal with its exact error (output folder untouched), the codec config's precedence,
untied heads, the real checkpoint's names and shapes, the verification's pieces, the mocked Hub push and
`from_original`. The full conversions verified in a fresh process, the script entry point and the import rule are in
the integration layer (`-m integration`)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi, split_torch_state_dict_into_shards
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoProcessor, GenerationConfig

import higgs_v3.conversion.cache as cache
import higgs_v3.convert_checkpoint as cc
import higgs_v3.conversion.original_format as original_format
import higgs_v3.conversion.verification as verification
from higgs_v3.configuration_higgs_v3 import HiggsAudioV3Config
from higgs_v3.conversion.original_format import REAL_CODEC_CONFIG
from higgs_v3.conversion.repo import (
    check_output_folder,
    push_folder_to_hub,
    remote_code_files,
    shard_split,
    write_weights,
)
from higgs_v3.cli.main import main as cli_main
from higgs_v3.convert_checkpoint import ConversionError, convert
from higgs_v3.delay_higgs_v3 import apply_delay_pattern
from higgs_v3.generation_higgs_v3 import MAX_NEW_TOKENS, default_generation_config
from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration
from higgs_v3.conversion.original_format import original_config, original_lm_shapes, read_original
from higgs_v3.processing_higgs_v3 import TTS_CHAT_TEMPLATE, HiggsAudioV3Processor
from higgs_v3.testing.tiny import (
    tiny_codec_config,
    token_ids_read_once_per_content,
    write_codec_config_file,
    write_tiny_original_checkpoint,
)


CODEC_PREFIX = "tied.embedding.modality_embeddings.0.model."
CODEC_FILE = "higgs_audio_v2_tokenizer_config.json"
CORE_CODE_FILES = {"configuration_higgs_v3.py", "modeling_higgs_v3.py", "processing_higgs_v3.py", "codec_higgs_v3.py",
                   "delay_higgs_v3.py", "generation_higgs_v3.py"}
NON_CODE_FILES = ["LICENSE", "README.md", "chat_template.jinja", "config.json", "generation_config.json",
                  "model.safetensors", "original_chat_template.jinja", "processor_config.json", "tokenizer.json",
                  "tokenizer_config.json"]
# sha256 of the sorted "name<TAB>[shape]" strings (concatenated) of the 528 codec tensors of the real checkpoint
# (shared/spec/reference/checkpoint_tensors.tsv, prefix removed).
REAL_CODEC_TENSORS_SHA256 = "2bb8512a60a4ceff6d99660cc60079d4b5fdcf47447a8c4543c3721b40d79f3b"
REPO_ID = "someone/higgs-audio-v3-hf"


def _expected_target(name: str) -> str | None:
    """The converted name of an original tensor, written out independently of the converter's table."""
    if name == "tied.embedding.text_embedding.weight":
        return "model.embed_tokens.weight"
    if name == "tied.embedding.modality_embeddings.0.embedding.weight":
        return "audio_embed.weight"
    if name == "body.norm.weight":
        return "model.norm.weight"
    if name.startswith("body.layers."):
        return "model.layers." + name[len("body.layers."):]
    if name == CODEC_PREFIX + "semantic_model.masked_spec_embed":
        return None
    if name.startswith(CODEC_PREFIX):
        return "codec." + name[len(CODEC_PREFIX):]
    raise AssertionError(name)


def _listing(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _expected_files() -> list[str]:
    return sorted(NON_CODE_FILES + [p.name for p in remote_code_files()])


def main(argv: list[str]) -> int:
    """`python convert_checkpoint.py ARGV`, in this process: the command line's `convert` under the script's name."""
    return cli_main(["convert", *argv], convert_prog="convert_checkpoint.py")


def _run_main(argv: list[str]) -> tuple[int, str]:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(argv)
    return code, stdout.getvalue()


@pytest.fixture(scope="module", autouse=True)
def tokenizer_parsed_once():
    """`read_original` parses the same tiny tokenizer dozens of times here: once per content is enough."""
    with token_ids_read_once_per_content():
        yield


@pytest.fixture(scope="module")
def original(tiny_original) -> Path:
    return tiny_original


@pytest.fixture(scope="module")
def converted(original, tmp_path_factory) -> tuple[Path, str]:
    """The tiny original converted once through the command line, without the fresh-process verification."""
    output = tmp_path_factory.mktemp("conv") / "higgs-audio-v3-hf"
    code, printed = _run_main(["--input", str(original), "--output", str(output), "--no-verify"])
    assert code == 0, printed
    return output, printed


def _hub_online(patch: pytest.MonkeyPatch, calls: list, token: str | None = "hf_token", whoami=None) -> None:
    """The Hub as `--push-to-hub` sees it, without a network: online (the probe connects), `token` stored, and
    `HfApi.whoami` answering (recorded in `calls`) or raising `whoami`."""
    import huggingface_hub
    import huggingface_hub.constants

    patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        patch.delenv(key, raising=False)
    patch.setattr(original_format, "_can_connect", lambda *args: True)  # the Hub probe's home
    patch.setattr(huggingface_hub, "get_token", lambda: token)

    def answer(self):
        calls.append(("whoami", {}))
        if whoami is not None:
            raise whoami
        return {"name": "someone"}

    patch.setattr(HfApi, "whoami", answer)


@pytest.fixture(scope="module")
def pushed(original, tmp_path_factory) -> tuple[Path, str, list]:
    """A second conversion through the command line, over an existing output (`--overwrite`) and pushed to the Hub
    (`HfApi.create_repo` / `upload_folder` mocked; the upload records the folder's files at that moment)."""
    output = tmp_path_factory.mktemp("pushed") / "target"
    output.mkdir()
    (output / "keep.txt").write_text("precious")
    calls = []

    def create_repo(self, **kwargs):
        calls.append(("create_repo", kwargs))

    def upload_folder(self, **kwargs):
        files = sorted(p.name for p in Path(kwargs["folder_path"]).iterdir())
        calls.append(("upload_folder", {**kwargs, "files": files}))
        return type("CommitInfo", (), {"commit_url": f"https://huggingface.co/{kwargs['repo_id']}/commit/abc"})()

    with pytest.MonkeyPatch.context() as patch:
        _hub_online(patch, calls)
        patch.setattr(HfApi, "create_repo", create_repo)
        patch.setattr(HfApi, "upload_folder", upload_folder)
        code, printed = _run_main(["--input", str(original), "--output", str(output), "--no-verify", "--overwrite",
                                   "--push-to-hub", REPO_ID, "--private"])
    assert code == 0, printed
    return output, printed, calls


@pytest.fixture(scope="module")
def untied_original(tmp_path_factory) -> Path:
    """A tiny original with untied heads (both head tensors present, both tie flags false) and no codec."""
    return write_tiny_original_checkpoint(tmp_path_factory.mktemp("untied") / "untied", untied_heads=True,
                                          with_codec=False)


@pytest.fixture
def broken(original, tmp_path) -> Path:
    """A fresh copy of the tiny original to damage."""
    return Path(shutil.copytree(original, tmp_path / "broken"))


@pytest.fixture
def guarded_output(tmp_path) -> Path:
    """An existing output folder with one file: a failed conversion must leave it (and its parent) exactly so."""
    output = tmp_path / "out" / "target"
    output.mkdir(parents=True)
    (output / "keep.txt").write_text("precious")
    return output


def _assert_untouched(output: Path) -> None:
    assert _listing(output) == {"keep.txt": b"precious"}
    assert sorted(p.name for p in output.parent.iterdir()) == ["target"]  # no staging folder left behind


# ---------------------------------------------------------------------------------------------- full conversion
def test_converted_folder_files(converted):
    output, printed = converted
    assert printed.startswith(f"Converted 392 tensors into {output} (model.safetensors).")
    assert "ignored tied.embedding.modality_embeddings.0.model.semantic_model.masked_spec_embed" in printed
    assert "Not verified (--no-verify)." in printed
    assert sorted(os.listdir(output)) == _expected_files()
    assert CORE_CODE_FILES <= set(os.listdir(output))
    assert sorted(p.name for p in output.parent.iterdir()) == [output.name]
    check_output_folder(output)


def test_converted_tensors_equal_the_original(original, converted):
    output, _ = converted
    source = load_file(original / "model.safetensors")
    written = load_file(output / "model.safetensors")
    expected = {_expected_target(k): v for k, v in source.items() if _expected_target(k) is not None}
    assert set(written) == set(expected)  # tied heads are not stored
    for name, value in written.items():
        assert value.dtype == (torch.float32 if name.startswith("codec.") else torch.bfloat16), name
        assert torch.equal(value, expected[name].to(value.dtype)), name


def test_converted_config_and_generation_config(converted):
    output, _ = converted
    with open(output / "config.json") as f:
        config = json.load(f)
    assert config["model_type"] == "higgs_audio_v3"
    assert config["auto_map"] == {
        "AutoConfig": "configuration_higgs_v3.HiggsAudioV3Config",
        "AutoModel": "modeling_higgs_v3.HiggsAudioV3ForConditionalGeneration",
        "AutoModelForTextToWaveform": "modeling_higgs_v3.HiggsAudioV3ForConditionalGeneration",
    }
    assert config["codec_config"] == tiny_codec_config()  # from the input folder's codec config file
    assert config["dtype"] == "bfloat16" and config["tie_word_embeddings"] is True
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (32, 2, 151936)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (4, 2, 8)
    assert config["rope_parameters"]["rope_theta"] == 1000000 and config["rms_norm_eps"] == 1e-6
    ids = {k: config[k] for k in ("tts_token_id", "audio_start_token_id", "audio_end_token_id", "text_token_id",
                                  "ref_audio_token_id", "ref_text_token_id", "eos_token_id", "pad_token_id")}
    assert ids == {"tts_token_id": 151667, "audio_start_token_id": 151670, "audio_end_token_id": 151671,
                   "text_token_id": 151672, "ref_audio_token_id": 151679, "ref_text_token_id": 151680,
                   "eos_token_id": 151643, "pad_token_id": 151643}
    assert (config["num_codebooks"], config["codebook_size"], config["audio_placeholder_id"]) == (8, 1026, -100)
    with open(output / "generation_config.json") as f:
        generation = json.load(f)
    # The official server's defaults: sampling at temperature 1.0, top-k and top-p off, MAX_NEW_TOKENS rows.
    assert {k: generation[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")} == dict.fromkeys(
        ("bos_token_id", "eos_token_id", "pad_token_id"), 151643)
    assert (generation["do_sample"], generation["temperature"], generation["max_new_tokens"]) == (
        True, 1.0, MAX_NEW_TOKENS)
    assert generation.get("top_k") in (None, 0) and generation.get("top_p") in (None, 1.0)
    assert generation["use_cache"] is True  # the 5.5 pipeline needs use_cache set
    default = default_generation_config(HiggsAudioV3Config.from_pretrained(output)).to_diff_dict()
    assert GenerationConfig.from_pretrained(output).to_diff_dict() == default  # the one home of these values


def test_tokenizer_processor_code_and_card(original, converted):
    output, _ = converted
    for name in ("tokenizer.json", "tokenizer_config.json", "LICENSE"):
        assert (output / name).read_bytes() == (original / name).read_bytes(), name
    # The TTS chat template in place of the original's ChatML (which renders no TTS prompt).
    assert "<|im_start|>" in (original / "chat_template.jinja").read_text()
    assert (output / "chat_template.jinja").read_text(encoding="utf-8") == TTS_CHAT_TEMPLATE
    # The original's is kept, byte for byte, for the export back to the original layout.
    assert (output / "original_chat_template.jinja").read_bytes() == (original / "chat_template.jinja").read_bytes()
    for path in remote_code_files():
        assert (output / path.name).read_bytes() == path.read_bytes(), path.name
    with open(output / "processor_config.json") as f:
        assert json.load(f)["auto_map"] == {"AutoProcessor": "processing_higgs_v3.HiggsAudioV3Processor"}
    card = (output / "README.md").read_text()
    front = card.split("---\n")[1]
    for line in ("library_name: transformers", "pipeline_tag: text-to-speech", "license: other",
                 "license_name: higgs-audio-v3-license", "license_link: LICENSE",
                 "base_model: bosonai/higgs-audio-v3-tts-4b", "- custom_code"):
        assert line in front.splitlines(), line
    assert 'pip install "transformers>=5.5.0,<5.25"' in card
    assert 'AutoModel.from_pretrained("path/to/this/folder", trust_remote_code=True' in card
    assert "non-commercial use only" in card
    assert "This folder was written without the numerical verification (`--no-verify`)." in card
    assert f"up to {MAX_NEW_TOKENS} code rows (about {round(MAX_NEW_TOKENS / 25)} s of audio)" in " ".join(card.split())


@pytest.mark.integration
def test_converted_folder_generates_audio_with_remote_code(converted):
    output, _ = converted
    model = AutoModel.from_pretrained(output, trust_remote_code=True).eval()
    processor = AutoProcessor.from_pretrained(output, trust_remote_code=True)
    assert model.dtype == torch.bfloat16
    assert {p.dtype for p in model.codec.parameters()} == {torch.float32}
    loaded = model.generation_config
    assert (loaded.do_sample, loaded.temperature, loaded.max_new_tokens) == (True, 1.0, MAX_NEW_TOKENS)
    assert loaded.top_k in (None, 0) and loaded.top_p in (None, 1.0)
    assert GenerationConfig.from_pretrained(output).to_diff_dict() == loaded.to_diff_dict()
    inputs = processor(text="Hello world.", return_tensors="pt")
    out = model.generate(**inputs, seed=0, max_new_tokens=12, return_dict_in_generate=True)
    assert len(out.audio) == 1
    audio = out.audio[0]
    assert audio.dim() == 1 and audio.numel() == (12 - 7) * 960  # 12 rows, 7 of them the delay tail
    assert bool(torch.isfinite(audio).all())


def test_converting_twice_gives_identical_files(converted, pushed):
    first, again = _listing(converted[0]), _listing(pushed[0])
    assert sorted(again) == sorted(first)
    for name in first:
        if name != "README.md":  # the card names the repo it was pushed to
            assert again[name] == first[name], name


def test_overwrite_replaces_the_output(pushed):
    output, _, _ = pushed
    assert "keep.txt" not in os.listdir(output)
    assert (output / "config.json").is_file()
    assert sorted(p.name for p in output.parent.iterdir()) == ["target"]


def test_sharded_float16_weights_are_huggingface_hubs_split(original, tmp_path):
    """float16 weights in 3 MB shards: the shards and the index are what huggingface_hub's split gives for the real
    tensors in the planned order (the converter plans it on meta tensors), the codec stays float32."""
    source = read_original(original)
    plan = cc.plan_conversion(source, torch.float16)
    shards = write_weights(source, plan.tensors, tmp_path, shard_split(plan.tensors, "3MB"))
    with open(tmp_path / "model.safetensors.index.json") as f:
        index = json.load(f)
    written = {}
    for shard in shards:
        with safe_open(str(tmp_path / shard), framework="pt") as f:
            for name in f.keys():
                assert index["weight_map"][name] == shard
                written[name] = f.get_tensor(name)
                assert written[name].dtype == (torch.float32 if name.startswith("codec.") else torch.float16), name
    in_plan_order = {t.target: written[t.target] for t in plan.tensors}
    split = split_torch_state_dict_into_shards(in_plan_order, max_shard_size="3MB")
    assert split.is_sharded and len(split.filename_to_tensors) >= 2
    assert shards == list(split.filename_to_tensors)
    assert index == {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
    original_tensors = load_file(original / "model.safetensors")
    assert torch.equal(written["model.norm.weight"], original_tensors["body.norm.weight"].to(torch.float16))
    assert len(written) == len(original_tensors) - 1


@pytest.mark.integration
@pytest.mark.parametrize("options", [[], ["--dtype", "float16", "--max-shard-size", "3MB"]],
                         ids=["bfloat16", "float16-sharded"])
def test_conversion_is_verified_in_a_fresh_process(original, converted, options, tmp_path):
    output = tmp_path / "verified"
    code, printed = _run_main(["--input", str(original), "--output", str(output), *options])
    assert code == 0, printed
    match = re.search(r"Verified: max \|diff\| of the audio logits = (\S+) \(tolerance (\S+)\)\.", printed)
    assert match, printed
    max_abs_diff, tolerance = float(match.group(1)), float(match.group(2))
    assert max_abs_diff <= 1e-4 < tolerance  # float32 against float32: only the summation order differs
    card = (output / "README.md").read_text()
    assert re.search(r"The conversion was verified numerically: .* \(max \|diff\| \d\.\d\de-\d\d\)\.", card)
    if not options:  # the verification changes nothing but the card
        unverified = _listing(converted[0])
        assert sorted(os.listdir(output)) == _expected_files()
        assert all(data == unverified[name] for name, data in _listing(output).items() if name != "README.md")
    else:
        assert "model.safetensors.index.json" in os.listdir(output) and "model.safetensors" not in os.listdir(output)


@pytest.mark.integration
def test_script_entry_point(original, tmp_path):
    done = subprocess.run(
        [sys.executable, cc.__file__, "--input", str(original), "--output", str(tmp_path / "script"), "--no-verify"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "Not verified (--no-verify)." in done.stdout
    assert (tmp_path / "script" / "config.json").is_file()


@pytest.mark.integration
@pytest.mark.parametrize("module", ["conversion.original_format", "convert_checkpoint", "conversion.verification",
                                    "conversion.repo"])
def test_converter_modules_do_not_import_the_fixtures(module, original, tmp_path):
    """Imported alone in a fresh process, a converter module pulls in no test fixture; converting does not either.
    The format module imports no torch (the command line reads `ORIGINAL_MODEL_TYPE` from it)."""
    script = (
        f"import sys, higgs_v3.{module} as m\n"
        "assert 'higgs_v3.testing.tiny' not in sys.modules, 'imported the fixtures'\n"
        "if m.__name__.endswith('original_format'):\n"
        "    assert 'torch' not in sys.modules and 'higgs_v3.convert_checkpoint' not in sys.modules\n"
        "    m.read_original(sys.argv[1])\n"
        "if m.__name__.endswith('convert_checkpoint'):\n"
        "    m.convert(sys.argv[1], sys.argv[2], verify=False)\n"
        "assert 'higgs_v3.testing.tiny' not in sys.modules, 'imported the fixtures at run time'\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(original), str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------------------------------------------ refusals
def _damage_config(directory: Path, edit) -> None:
    with open(directory / "config.json") as f:
        config = json.load(f)
    edit(config)
    with open(directory / "config.json", "w") as f:
        json.dump(config, f)


def _rewrite_tensors(directory: Path, edit) -> None:
    tensors = load_file(directory / "model.safetensors")
    edit(tensors)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    with open(directory / "model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": {k: "model.safetensors" for k in tensors}}, f)


def test_refuses_a_non_empty_output_without_overwrite(original, guarded_output):
    with pytest.raises(ConversionError, match=re.escape(
        f"The output folder '{guarded_output}' is not empty; pass --overwrite (overwrite=True) to replace it."
    )):
        convert(original, guarded_output, verify=False)
    _assert_untouched(guarded_output)


def test_an_output_filled_during_the_conversion_is_not_replaced(original, tmp_path, monkeypatch):
    """Another run fills the (empty) output while this one writes its staging folder: without --overwrite it is left
    as it is (`conversion.folders.staged_folder`), and the staging folder is removed."""
    def meanwhile(source, plan, staging, split, **kwargs):  # what this run writes does not matter here
        (staging / "config.json").write_text("{}")
        (tmp_path / "out" / "theirs.txt").write_text("another run's")
        return ["model.safetensors"], None, None

    (tmp_path / "out").mkdir()
    monkeypatch.setattr(cc, "_write_and_verify", meanwhile)
    with pytest.raises(ConversionError, match=re.escape(
        f"The output folder '{tmp_path / 'out'}' became non-empty during the conversion; not replacing it."
    )):
        convert(original, tmp_path / "out", verify=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["theirs.txt"]


def test_refuses_a_wrong_model_type(broken, guarded_output):
    _damage_config(broken, lambda c: c.update(model_type="qwen3"))
    with pytest.raises(ConversionError, match=re.escape(
        "config.json has model_type 'qwen3'; the converter reads the original Higgs Audio v3 format, model_type "
        "'higgs_multimodal_qwen3' (bosonai/higgs-audio-v3-tts-4b)."
    )):
        convert(broken, guarded_output, overwrite=True)
    _assert_untouched(guarded_output)


def test_refuses_an_already_converted_folder(converted, guarded_output):
    output, _ = converted
    with pytest.raises(ConversionError, match=re.escape(
        "config.json has model_type 'higgs_audio_v3'; the converter reads the original Higgs Audio v3 format, "
        "model_type 'higgs_multimodal_qwen3' (bosonai/higgs-audio-v3-tts-4b). This folder is already converted: "
        "load it with AutoModel.from_pretrained(path, trust_remote_code=True)."
    )):
        convert(output, guarded_output, overwrite=True)
    _assert_untouched(guarded_output)


def test_refuses_missing_files(broken, guarded_output):
    (broken / "tokenizer.json").unlink()
    (broken / "model.safetensors").unlink()
    (broken / "model.safetensors.index.json").unlink()
    with pytest.raises(ConversionError, match=re.escape(
        f"'{broken}' is not a complete original Higgs Audio v3 checkpoint: missing tokenizer.json, model.safetensors. "
        "Expected config.json, model.safetensors (with or without model.safetensors.index.json), tokenizer.json and "
        "tokenizer_config.json."
    )):
        convert(broken, guarded_output, overwrite=True)
    _assert_untouched(guarded_output)


def test_refuses_a_weight_file_missing_from_the_index(broken, guarded_output):
    (broken / "model.safetensors").rename(broken / "elsewhere.safetensors")
    with pytest.raises(ConversionError, match=re.escape(
        f"model.safetensors.index.json names model.safetensors, which is missing from '{broken}'."
    )):
        convert(broken, guarded_output, overwrite=True)
    _assert_untouched(guarded_output)


def test_refuses_pickle_weights(broken, guarded_output):
    (broken / "model.safetensors").unlink()
    (broken / "model.safetensors.index.json").unlink()
    (broken / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ConversionError, match=re.escape(
        f"'{broken}' has only pickle weights (pytorch_model.bin); this converter reads safetensors only and never "
        "loads pickle files."
    )):
        convert(broken, guarded_output, overwrite=True)
    _assert_untouched(guarded_output)


def test_refuses_a_truncated_safetensors_file(broken, guarded_output):
    path = broken / "model.safetensors"
    os.truncate(path, os.path.getsize(path) - 1000)
    with pytest.raises(ConversionError, match=re.escape(
        f"'{path}' is not a valid safetensors file (Error while deserializing header: incomplete metadata, file not "
        "fully covered). It is probably truncated or corrupted: download it again."
    )):
        convert(broken, guarded_output, overwrite=True)
    _assert_untouched(guarded_output)


def test_refuses_a_corrupted_safetensors_header(broken, guarded_output):
    path = broken / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[8:16] = b"#garbage"
    path.write_bytes(bytes(data))
    with pytest.raises(ConversionError, match=re.escape(f"'{path}' is not a valid safetensors file (Error while "
                                                        "deserializing header: invalid JSON in header")):
        convert(broken, guarded_output, overwrite=True)
    _assert_untouched(guarded_output)


def test_refuses_corrupted_tensor_data(broken, guarded_output):
    _rewrite_tensors(broken, lambda t: t["body.layers.1.mlp.up_proj.weight"].view(-1).__setitem__(5, float("nan")))
    with pytest.raises(ConversionError, match=re.escape(
        "Tensor 'body.layers.1.mlp.up_proj.weight' in model.safetensors holds NaN or infinite values; the file is "
        "corrupted: download it again."
    )):
        convert(broken, guarded_output, overwrite=True, verify=False)
    _assert_untouched(guarded_output)


def test_refuses_a_tokenizer_without_the_required_specials(broken, guarded_output):
    with open(broken / "tokenizer.json") as f:
        tokenizer = json.load(f)
    dropped = ("<|tts|>", "<|sfx:sigh|>")
    tokenizer["added_tokens"] = [t for t in tokenizer["added_tokens"] if t["content"] not in dropped]
    with open(broken / "tokenizer.json", "w") as f:
        json.dump(tokenizer, f)
    with pytest.raises(ConversionError, match=re.escape(
        "tokenizer.json lacks 2 of the required special tokens: <|tts|>, <|sfx:sigh|>. The Higgs Audio v3 tokenizer "
        "has <|endoftext|> and the 62 Higgs tokens"
    )):
        convert(broken, guarded_output, overwrite=True)
    _assert_untouched(guarded_output)


def test_refuses_unknown_tensors(broken, guarded_output):
    def add(tensors):
        tensors["body.layers.0.self_attn.rotary.inv_freq"] = torch.ones(4, dtype=torch.bfloat16)
        tensors["tied.head.modality_heads.1.weight"] = torch.ones(2, 2, dtype=torch.bfloat16)

    _rewrite_tensors(broken, add)
    with pytest.raises(ConversionError, match=re.escape(
        "The checkpoint has 2 tensor(s) no rule of the mapping table covers: "
        "['body.layers.0.self_attn.rotary.inv_freq', 'tied.head.modality_heads.1.weight']. Refusing to drop them "
        "silently; this is not the Higgs Audio v3 format the converter knows."
    )):
        convert(broken, guarded_output, overwrite=True)
    _assert_untouched(guarded_output)


def test_refuses_missing_and_extra_layers(broken, guarded_output):
    def edit(tensors):
        del tensors["body.layers.1.mlp.up_proj.weight"]
        tensors["body.layers.2.input_layernorm.weight"] = torch.ones(32, dtype=torch.bfloat16)

    _rewrite_tensors(broken, edit)
    with pytest.raises(ConversionError, match=re.escape(
        "The checkpoint does not match its config.json (hidden_size=32, num_hidden_layers=2, vocab_size=151936, 8 x "
        "1026 audio codes): missing (no source tensor): ['model.layers.1.mlp.up_proj.weight']; not part of a model "
        "with this config: ['body.layers.2.input_layernorm.weight -> model.layers.2.input_layernorm.weight']."
    )):
        convert(broken, guarded_output, overwrite=True)
    _assert_untouched(guarded_output)


def test_refuses_shapes_that_contradict_the_config(broken, guarded_output):
    _damage_config(broken, lambda c: c["text_config"].update(intermediate_size=48))
    with pytest.raises(ConversionError, match=re.escape(
        "wrong shape: ['body.layers.0.mlp.down_proj.weight [32, 64] (the config implies [32, 48] for "
        "model.layers.0.mlp.down_proj.weight)', "
    )):
        convert(broken, guarded_output, overwrite=True)
    _assert_untouched(guarded_output)


def test_refuses_bad_options(original, tmp_path):
    with pytest.raises(ConversionError, match=re.escape(
        "dtype 'int8' is not supported; use one of bfloat16, float16, float32."
    )):
        convert(original, tmp_path / "x", dtype="int8")
    accepted = "use e.g. 5GB or 500MB (units KB, MB, GB, TB, powers of 10) or a number of bytes."
    with pytest.raises(ConversionError, match=re.escape("--max-shard-size 'lots' is not a size (")) as error:
        convert(original, tmp_path / "x", max_shard_size="lots")
    assert str(error.value).endswith(accepted)
    for size in ("0MB", 0, -5):
        with pytest.raises(ConversionError, match=re.escape(f"--max-shard-size {size!r} is not a positive size; ")):
            convert(original, tmp_path / "x", max_shard_size=size)
    with pytest.raises(ConversionError, match=re.escape(
        "The input 'no/such/thing' is neither an existing folder nor a Hub repo id of the form 'owner/name' "
        "(for example 'bosonai/higgs-audio-v3-tts-4b')."
    )):
        convert("no/such/thing", tmp_path / "x")
    with pytest.raises(ConversionError, match=re.escape(
        f"The output folder '{original}' contains the input '{original}'; choose another output."
    )):
        convert(original, original, overwrite=True)
    assert not (tmp_path / "x").exists()


def test_refuses_values_float16_cannot_hold(broken, guarded_output):
    _rewrite_tensors(broken, lambda t: t["body.norm.weight"].__setitem__(3, 1e5))
    with pytest.raises(ConversionError, match=re.escape(
        "Tensor 'body.norm.weight' has values outside the range of torch.float16 (largest |value| 9.984e+04); "
        "convert with --dtype bfloat16 or float32 instead."
    )):
        convert(broken, guarded_output, overwrite=True, dtype="float16")
    _assert_untouched(guarded_output)


def test_hub_input_is_downloaded_without_pickle_files(original, tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(original_format, "hub_offline_reason", lambda: None)  # online
    calls = []

    def fake_snapshot_download(**kwargs):
        calls.append(kwargs)
        return str(original)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    assert original_format.resolve_input("bosonai/higgs-audio-v3-tts-4b", revision="v1.0") == original
    assert calls == [{"repo_id": "bosonai/higgs-audio-v3-tts-4b", "revision": "v1.0", "cache_dir": None,
                      "allow_patterns": ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.md", "LICENSE*", "NOTICE*"]}]
    assert len(read_original(original_format.resolve_input("bosonai/higgs-audio-v3-tts-4b")).tensors) == 393

    def offline(**kwargs):
        raise OSError("no network")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(ConversionError, match=re.escape(
        "Could not download 'bosonai/higgs-audio-v3-tts-4b' (revision main) from the Hugging Face Hub: no network"
    )):
        convert("bosonai/higgs-audio-v3-tts-4b", tmp_path / "other", verify=False)
    with pytest.raises(ConversionError, match=re.escape(
        f"--revision 'v1.0' only applies to a Hub repo id, but '{original}' is a local folder."
    )):
        convert(original, tmp_path / "other", revision="v1.0", verify=False)
    assert not (tmp_path / "other").exists()


def test_an_uncached_hub_checkpoint_offline_is_one_short_error(tmp_path, monkeypatch):
    """Offline (the probe fails or HF_HUB_OFFLINE), the Hub is asked for the local cache only (no retries for tens of
    seconds), and the error is one line without huggingface_hub's chained tracebacks."""
    import huggingface_hub

    calls = []

    def not_cached(**kwargs):
        calls.append(kwargs.get("local_files_only"))
        raise huggingface_hub.errors.LocalEntryNotFoundError("Cannot find an appropriate cached snapshot folder.")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", not_cached)
    reason = "the Hub (https://huggingface.co) did not answer within 3 s"
    monkeypatch.setattr(original_format, "hub_offline_reason", lambda: reason)
    with pytest.raises(ConversionError) as raised:
        original_format.resolve_input("bosonai/higgs-audio-v3-tts-4b")
    assert str(raised.value) == (
        "Could not download 'bosonai/higgs-audio-v3-tts-4b' (revision main) from the Hugging Face Hub: the Hub "
        "(https://huggingface.co) did not answer within 3 s, and it is not in the local Hugging Face cache. Download "
        "it once while online (`hf download bosonai/higgs-audio-v3-tts-4b`) or give a local folder with the "
        "checkpoint.")
    assert calls == [True] and raised.value.__cause__ is None and raised.value.__suppress_context__


def test_command_line_reports_errors(tmp_path, capsys):
    assert main(["--input", str(tmp_path / "nothing"), "--output", str(tmp_path / "out")]) == 2
    assert "convert_checkpoint.py: error: The input" in capsys.readouterr().err


# -------------------------------------------------------------------------------------------------- codec config
def test_codec_config_comes_from_the_input_folder(original):
    assert json.loads((original / CODEC_FILE).read_text())["architectures"] == ["HiggsAudioV2TokenizerModel"]
    source = read_original(original)
    assert source.codec_config == tiny_codec_config()  # bookkeeping keys (architectures, dtype, ...) dropped
    assert cc.plan_conversion(source).config.codec_config == tiny_codec_config()


def _codec_tensor_count(directory: Path) -> int:
    return sum(1 for name in read_original(directory).tensors if name.startswith(CODEC_PREFIX)) - 1  # minus the extra


def test_an_explicit_codec_config_wins_over_the_folders(broken, tmp_path, capsys):
    write_codec_config_file(broken, REAL_CODEC_CONFIG)  # a file that does not fit the tiny codec tensors
    source = read_original(broken)
    assert cc.plan_conversion(source, codec_config=tiny_codec_config()).config.codec_config == tiny_codec_config()
    with pytest.raises(ConversionError, match=re.escape(
        f"The {_codec_tensor_count(broken)} codec tensors under '{CODEC_PREFIX}' do not match {CODEC_FILE} in the "
        "input folder: "
    )):
        cc.plan_conversion(source)
    (tmp_path / "tiny_codec.json").write_text(json.dumps(tiny_codec_config()))
    from_file = original_format.read_codec_config_file(tmp_path / "tiny_codec.json")
    assert cc.plan_conversion(source, codec_config=from_file).config.codec_config == tiny_codec_config()
    # The command line reads --codec-config FILE; it wins over the folder's file (here both are the real config).
    (tmp_path / "real_codec.json").write_text(json.dumps(REAL_CODEC_CONFIG))
    assert main(["--input", str(broken), "--output", str(tmp_path / "out"), "--codec-config",
                 str(tmp_path / "real_codec.json")]) == 2
    assert "do not match the given codec config (--codec-config / codec_config=): " in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_without_a_codec_config_file_the_real_one_is_required(broken, guarded_output):
    (broken / CODEC_FILE).unlink()
    with pytest.raises(ConversionError) as error:
        convert(broken, guarded_output, overwrite=True)
    message = str(error.value)
    assert message.startswith(
        f"The {_codec_tensor_count(broken)} codec tensors under '{CODEC_PREFIX}' do not match the real codec config "
        "(conversion.original_format.REAL_CODEC_CONFIG): "
    )
    assert re.search(r": \d+ missing \(e\.g\. \['semantic_model\.encoder\.layers\.10\..+\]\); \d+ with another shape "
                     r"\(e\.g\. \['acoustic_decoder\..+ \(the config gives \(.+\)\)'.*\]\)\. Pass", message)
    assert message.endswith(
        "Pass the codec's config (a HiggsAudioV2TokenizerConfig as JSON) with --codec-config FILE (codec_config= in "
        f"Python), or put it into the input folder as {CODEC_FILE}."
    )
    _assert_untouched(guarded_output)
    assert cc.plan_conversion(read_original(broken), codec_config=tiny_codec_config()).config.codec_config is not None


def test_refuses_a_codec_of_another_shape(broken, guarded_output):
    name = CODEC_PREFIX + "fc.bias"
    _rewrite_tensors(broken, lambda t: t.update({name: torch.zeros(t[name].numel() + 1, dtype=torch.bfloat16)}))
    size = load_file(broken / "model.safetensors")[name].numel()
    with pytest.raises(ConversionError, match=re.escape(
        f"do not match {CODEC_FILE} in the input folder: 1 with another shape (e.g. ['fc.bias ({size},) (the config "
        f"gives ({size - 1},))']). Pass"
    )):
        convert(broken, guarded_output, overwrite=True)
    _assert_untouched(guarded_output)


def test_refuses_an_invalid_codec_config(original):
    with pytest.raises(ConversionError, match=re.escape(
        "The given codec config (--codec-config / codec_config=) is not a valid codec config: codec_config lacks"
    )):
        cc.plan_conversion(read_original(original), codec_config={"model_type": "higgs_audio_v2_tokenizer"})


def test_codec_is_required_unless_left_out(original, untied_original, tmp_path):
    lm_only = untied_original  # written with_codec=False
    assert not (lm_only / CODEC_FILE).exists()
    with pytest.raises(ConversionError, match=re.escape(
        f"The checkpoint has no codec tensors under '{CODEC_PREFIX}'; the original bundles its codec. Pass "
        "--without-codec (without_codec=True) to convert the language model alone"
    )):
        convert(lm_only, tmp_path / "out", verify=False)
    assert not (tmp_path / "out").exists()
    plan = cc.plan_conversion(read_original(original), without_codec=True)
    assert plan.config.codec_config is None
    assert not any(t.target.startswith("codec.") for t in plan.tensors)
    assert sum(1 for reason in plan.ignored.values() if reason == "codec tensor left out (--without-codec)") > 300


# ---------------------------------------------------------------------------------------------------- untied heads
def test_untied_heads_are_written_and_match_the_reference_forward(untied_original, tmp_path):
    """Untied heads become real tensors (written, loaded strictly); the reference forward uses the audio head."""
    source_dir = untied_original
    source = read_original(source_dir)
    plan = cc.plan_conversion(source, torch.float32, without_codec=True)
    assert plan.config.tie_word_embeddings is False
    shards = write_weights(source, plan.tensors, tmp_path, shard_split(plan.tensors, "5GB"))
    model = HiggsAudioV3ForConditionalGeneration(plan.config).eval()
    model.load_state_dict(load_file(tmp_path / shards[0]), strict=True)
    original = load_file(source_dir / "model.safetensors")
    assert torch.equal(model.audio_head.weight, original["tied.head.modality_heads.0.weight"].float())
    assert torch.equal(model.lm_head.weight, original["tied.head.text_head.weight"].float())
    assert not torch.equal(model.audio_head.weight, model.audio_embed.weight)
    input_ids, rows = verification.verification_prompt(model.config)
    reference = verification.reference_audio_logits(source, input_ids, rows, torch.float32)
    with torch.no_grad():
        logits = model(input_ids=input_ids, audio_input_ids=rows).logits.transpose(0, 1)  # [C, L, V] -> [L, C, V]
    assert verification.compare_logits(logits, reference)[0] < 1e-4
    # The reference really uses the untied head: with the embedding instead, the logits differ.
    tied_logits = (model.model(input_ids=None, inputs_embeds=model.build_inputs_embeds(input_ids, rows))
                   .last_hidden_state[0] @ model.audio_embed.weight.T).view(-1, 8, 1026)
    assert (tied_logits - reference).abs().max() > 0.1


def test_one_untied_head_makes_both_heads_real_tensors(untied_original, tmp_path):
    """Only the audio head untied: the text head becomes a copy of the token embedding (a separate tensor)."""
    source_dir = Path(shutil.copytree(untied_original, tmp_path / "untied"))
    _rewrite_tensors(source_dir, lambda t: t.pop("tied.head.text_head.weight"))
    _damage_config(source_dir, lambda c: c["text_config"].update(tie_word_embeddings=True))
    source = read_original(source_dir)
    plan = cc.plan_conversion(source, torch.float32, without_codec=True)
    assert plan.config.tie_word_embeddings is False
    sources = {t.target: t.source for t in plan.tensors}
    assert sources["lm_head.weight"] == "tied.embedding.text_embedding.weight::as_head"
    shards = write_weights(source, plan.tensors, tmp_path, shard_split(plan.tensors, "5GB"))
    written = load_file(tmp_path / shards[0])
    assert torch.equal(written["lm_head.weight"], written["model.embed_tokens.weight"])


@pytest.mark.integration
def test_untied_heads_conversion_is_verified_in_a_fresh_process(untied_original, tmp_path):
    result = convert(untied_original, tmp_path / "out", without_codec=True, dtype="float32")
    assert result.tie_word_embeddings is False and result.max_abs_diff <= 1e-4 < result.tolerance


def test_refuses_untied_heads_when_the_config_says_tied(untied_original, tmp_path):
    source = Path(shutil.copytree(untied_original, tmp_path / "untied"))
    _damage_config(source, lambda c: c["audio_encoder_config"].update(tie_word_embeddings=True))
    with pytest.raises(ConversionError, match=re.escape(
        "config.json sets audio_encoder_config.tie_word_embeddings to true, but 'tied.head.modality_heads.0.weight' "
        "differs from 'tied.embedding.modality_embeddings.0.embedding.weight' (max |diff| "
    )):
        cc.plan_conversion(read_original(source), without_codec=True)


@pytest.mark.parametrize("edit", ["out_dim", "hidden_size"])
def test_an_audio_width_unequal_to_the_hidden_size_names_both(broken, edit):
    """Either width changed gives the same message, naming both (not "the converter supports only <hidden_size>")."""
    if edit == "out_dim":
        _damage_config(broken, lambda c: c["audio_encoder_config"].update(out_dim=7))
        values = "audio_encoder_config.out_dim = 7 but text_config.hidden_size = 32"
    else:
        _damage_config(broken, lambda c: c["text_config"].update(hidden_size=7))
        values = "audio_encoder_config.out_dim = 32 but text_config.hidden_size = 7"
    with pytest.raises(ConversionError) as error:
        cc.plan_conversion(read_original(broken), without_codec=True)
    assert str(error.value) == (f"config.json has {values}; the two must be equal (the audio codes are embedded at the "
                                "backbone's width), so one of them was changed: the checkpoint's tensors have the real "
                                "width.")


def test_head_copies_equal_to_the_embeddings_stay_tied(broken):
    def add(tensors):
        tensors["tied.head.text_head.weight"] = tensors["tied.embedding.text_embedding.weight"].clone()

    _rewrite_tensors(broken, add)
    plan = cc.plan_conversion(read_original(broken))
    assert plan.config.tie_word_embeddings is True
    assert plan.ignored["tied.head.text_head.weight"] == "identical to tied.embedding.text_embedding.weight (tied)"
    assert "lm_head.weight" not in {t.target for t in plan.tensors}


# ------------------------------------------------------------------------------------------ the real checkpoint
def test_real_checkpoint_names_and_shapes_are_fully_accounted():
    """The converter's plan for the real checkpoint's 927 tensors (headers only, no data): every key mapped or
    ignored on purpose, the real codec config chosen (no codec config file), every target shape as the converted
    config implies."""
    config = original_config()
    shapes = original_lm_shapes(config)
    codec = original_format.codec_tensor_shapes(REAL_CODEC_CONFIG)
    codec["semantic_model.masked_spec_embed"] = (768,)
    lines = "".join(sorted(f"{name}\t{list(shape)}" for name, shape in codec.items()))
    assert hashlib.sha256(lines.encode()).hexdigest() == REAL_CODEC_TENSORS_SHA256  # the real codec, name for name
    shapes.update({CODEC_PREFIX + name: shape for name, shape in codec.items()})
    assert len(shapes) == 927
    tensors = {name: original_format.SourceTensor(name, Path("model.safetensors"), "BF16", shape)
               for name, shape in shapes.items()}
    token_ids = {t: i for i, t in enumerate(["<|endoftext|>", *original_format.HIGGS_SPECIAL_TOKENS], start=151664)}
    token_ids["<|endoftext|>"] = token_ids["eos"] = token_ids["pad"] = 151643
    checkpoint = original_format.OriginalCheckpoint(Path("."), config, tensors, token_ids, {})
    plan = cc.plan_conversion(checkpoint)
    assert len(plan.tensors) == 926
    assert plan.ignored == {CODEC_PREFIX + "semantic_model.masked_spec_embed":
                            "HuBERT's training-only mask, unused by the codec"}
    assert plan.config.codec_config == REAL_CODEC_CONFIG
    assert (plan.config.hidden_size, plan.config.num_hidden_layers, plan.config.tts_token_id) == (2560, 36, 151667)
    assert {t.target: t.source for t in plan.tensors}["model.layers.35.self_attn.k_norm.weight"] == \
        "body.layers.35.self_attn.k_norm.weight"
    assert sum(t.nbytes for t in plan.tensors if t.dtype == torch.float32) == 4 * sum(
        torch.Size(s).numel() for n, s in codec.items() if n != "semantic_model.masked_spec_embed")


def test_the_reference_codec_config_file_is_the_real_codec_config():
    """The official repo's `higgs_audio_v2_tokenizer_config.json` (spec reference copy), read as the converter reads
    it from an input folder, is `REAL_CODEC_CONFIG` exactly."""
    reference = Path(__file__).resolve().parent / "reference" / CODEC_FILE  # verbatim copy of the spec's file
    assert original_format.read_codec_config_file(reference) == REAL_CODEC_CONFIG


# ------------------------------------------------------------------------------------------------- verification
def test_verification_prompt_rows_follow_the_delay_pattern():
    config = HiggsAudioV3Config()
    input_ids, rows = verification.verification_prompt(config)
    assert rows.shape == (5 + 7, 8)
    raw = torch.stack([rows[t + c, c] for t in range(5) for c in range(8)]).view(5, 8)
    assert torch.equal(rows, apply_delay_pattern(raw, config.audio_boc_token_id, config.audio_eoc_token_id))
    ids = input_ids[0].tolist()
    assert ids[:2] == [config.tts_token_id, config.ref_text_token_id] and ids[-1] == config.audio_start_token_id
    assert ids.count(config.audio_placeholder_id) == rows.shape[0]
    assert torch.equal(verification.verification_prompt(config)[1], rows)  # fixed


def test_reference_forward_matches_the_converted_model(original, converted):
    """The numeric check in process: the converted (bf16) folder loaded in float32 against the reference forward over
    the original tensors rounded to bf16."""
    model = HiggsAudioV3ForConditionalGeneration.from_pretrained(converted[0], dtype=torch.float32).eval()
    input_ids, rows = verification.verification_prompt(model.config)
    reference = verification.reference_audio_logits(read_original(original), input_ids, rows, torch.bfloat16)
    with torch.no_grad():
        logits = model(input_ids=input_ids, audio_input_ids=rows).logits.transpose(0, 1)  # [C, L, V] -> [L, C, V]
    max_abs_diff, tolerance = verification.compare_logits(logits, reference)
    assert max_abs_diff <= 1e-4 < tolerance
    # A wrong mapping (q_norm and k_norm swapped) is caught.
    layer = model.model.layers[0].self_attn
    with torch.no_grad():
        q_norm = layer.q_norm.weight.clone()
        layer.q_norm.weight.copy_(layer.k_norm.weight)
        layer.k_norm.weight.copy_(q_norm)
        swapped = model(input_ids=input_ids, audio_input_ids=rows).logits.transpose(0, 1)
    with pytest.raises(ConversionError, match=r"Verification failed: the converted model's audio logits differ from "
                                              r"the original tensors' forward by max \|diff\| = \S+, above the "
                                              r"tolerance \S+\."):
        verification.compare_logits(swapped, reference)


def test_verification_refuses_bad_shapes_nan_and_loading_problems():
    reference = torch.zeros(3, 8, 1026)
    with pytest.raises(ConversionError, match=re.escape(
        "Verification failed: logits of shape (2, 8, 1026), expected (3, 8, 1026)."
    )):
        verification.compare_logits(torch.zeros(2, 8, 1026), reference)
    with pytest.raises(ConversionError, match=re.escape("max |diff| = nan, above the tolerance 0.001.")):
        verification.compare_logits(torch.full((3, 8, 1026), float("nan")), reference)
    config = HiggsAudioV3Config()
    report = {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": [], "error_msgs": [],
              "tied_audio_head": True, "tied_text_head": True, "codec_dtypes": None}
    verification.check_loading_report(report, config)
    with pytest.raises(ConversionError, match=re.escape(
        "Verification failed: loading the converted folder reported {'missing_keys': ['audio_embed.weight']}."
    )):
        verification.check_loading_report({**report, "missing_keys": ["audio_embed.weight"]}, config)
    with pytest.raises(ConversionError, match=re.escape(
        "Verification failed: the loaded heads are tied=False/True (audio/text) but the conversion says "
        "tie_word_embeddings=True."
    )):
        verification.check_loading_report({**report, "tied_audio_head": False}, config)


@pytest.mark.integration
def test_verification_catches_a_wrong_mapping(original, tmp_path, monkeypatch):
    """Swap q_norm and k_norm in the mapping table: the conversion fails its fresh-process verification, nothing is
    written."""
    layer = r"body\.layers\.(\d+)\."
    swapped = (
        (layer + r"self_attn\.q_norm\.weight", r"model.layers.\1.self_attn.k_norm.weight", "swapped"),
        (layer + r"self_attn\.k_norm\.weight", r"model.layers.\1.self_attn.q_norm.weight", "swapped"),
    ) + original_format.MAPPING_TABLE
    monkeypatch.setattr(original_format, "_COMPILED_TABLE", tuple((re.compile(p), t, w) for p, t, w in swapped))
    with pytest.raises(ConversionError, match=r"Verification failed: the converted model's audio logits differ from "
                                              r"the original tensors' forward by max \|diff\| = \S+, above the "
                                              r"tolerance \S+\."):
        convert(original, tmp_path / "out")
    assert sorted(os.listdir(tmp_path)) == []


# -------------------------------------------------------------------------------------------------------- the hub
def test_push_to_hub_uploads_the_folder_in_one_commit(pushed):
    output, printed, calls = pushed
    assert f"Pushed to https://huggingface.co/{REPO_ID}/commit/abc" in printed
    assert [name for name, _ in calls] == ["whoami", "create_repo", "upload_folder"]
    assert calls[1][1] == {"repo_id": REPO_ID, "repo_type": "model", "private": True, "exist_ok": True}
    upload = calls[2][1]
    assert (upload["repo_id"], upload["repo_type"], Path(upload["folder_path"])) == (REPO_ID, "model", output)
    assert upload["files"] == _expected_files()
    assert f'AutoModel.from_pretrained("{REPO_ID}", trust_remote_code=True' in (output / "README.md").read_text()


@pytest.mark.parametrize("case", ["offline", "unreachable", "no login", "bad token"])
def test_push_to_hub_checks_the_hub_and_the_login_before_converting(original, tmp_path, monkeypatch, capsys, case):
    import huggingface_hub.constants

    calls = []
    _hub_online(monkeypatch, calls, token=None if case == "no login" else "hf_token",
                whoami=OSError("401 Client Error: Unauthorized\nmore") if case == "bad token" else None)
    if case == "offline":
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    if case == "unreachable":
        monkeypatch.setattr(original_format, "_can_connect", lambda *args: False)
    monkeypatch.setattr(cc, "read_original", lambda *args: pytest.fail("converted before checking the Hub"))
    code, printed = _run_main(["--input", str(original), "--output", str(tmp_path / "out"), "--push-to-hub", REPO_ID])
    assert (code, printed) == (2, "")  # a user-side fault, found before converting
    assert not (tmp_path / "out").exists()
    expected = {
        "offline": f"convert_checkpoint.py: error: --push-to-hub {REPO_ID} needs the Hub, but HF_HUB_OFFLINE is set; nothing was converted. "
                   "Connect and run again, or run without --push-to-hub and upload the folder later.",
        "unreachable": f"convert_checkpoint.py: error: --push-to-hub {REPO_ID} needs the Hub, but the Hub (https://huggingface.co) did not "
                       "answer within 3 s; nothing was converted.",
        "no login": f"convert_checkpoint.py: error: --push-to-hub {REPO_ID} needs a Hugging Face login, and there is none; nothing was "
                    "converted. Run `hf auth login` (or set HF_TOKEN) and run again.",
        "bad token": f"convert_checkpoint.py: error: --push-to-hub {REPO_ID}: the Hub refused the login check (401 Client Error: "
                     "Unauthorized); nothing was converted. Run `hf auth login` (or set HF_TOKEN) and run again.",
    }[case]
    err = capsys.readouterr().err
    assert err.startswith(expected) and len(err.splitlines()) == 1, err


def test_a_failed_upload_prints_the_summary_and_how_to_upload_later(original, converted, tmp_path, monkeypatch, capsys):
    calls = []
    _hub_online(monkeypatch, calls)
    monkeypatch.setattr(HfApi, "create_repo", lambda self, **kwargs: None)

    def upload_folder(self, **kwargs):
        raise ConnectionError("Connection reset by peer\n(and 70 more lines)")

    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    output = tmp_path / "out"
    code, printed = _run_main(["--input", str(original), "--output", str(output), "--no-verify", "--push-to-hub",
                               REPO_ID])
    assert code == 1
    first, first_printed = converted  # the same conversion without a push: the same summary
    assert printed == first_printed.replace(str(first), str(output)) and "Not verified (--no-verify)." in printed
    err = capsys.readouterr().err.split("Writing the config, tokenizer, processor and code...\n")[1]  # after the steps
    assert err == (  # the upload is not a user fault: exit 1
        f"convert_checkpoint.py: error: The upload to {REPO_ID} failed (Connection reset by peer). The converted folder {str(output)!r} is "
        f"complete; upload it later with `hf upload {REPO_ID} {output} .` or, in Python, "
        f"higgs_v3.conversion.repo.push_folder_to_hub({str(output)!r}, {REPO_ID!r}).\n"
    )
    check_output_folder(output)  # complete, as the message says
    with pytest.raises(original_format.PushError, match=re.escape(f"The upload to {REPO_ID} failed (Connection reset")):
        push_folder_to_hub(output, REPO_ID)  # the converted folder is pushed with this, the message's function


def test_push_refuses_an_incomplete_folder(converted, tmp_path, monkeypatch):
    output, _ = converted
    incomplete = Path(shutil.copytree(output, tmp_path / "incomplete"))
    (incomplete / "codec_higgs_v3.py").unlink()
    (incomplete / "processing_higgs_v3.py").unlink()
    calls = []
    monkeypatch.setattr(HfApi, "create_repo", lambda self, **kwargs: calls.append(kwargs))
    monkeypatch.setattr(HfApi, "upload_folder", lambda self, **kwargs: calls.append(kwargs))
    with pytest.raises(ConversionError, match=re.escape(
        f"The converted folder '{incomplete}' is incomplete: code file "
    )) as error:
        push_folder_to_hub(incomplete, "someone/repo")
    assert calls == []
    assert "code file codec_higgs_v3.py is missing" in str(error.value)
    assert "code file processing_higgs_v3.py is missing" in str(error.value)


# --------------------------------------------------------------------------------------------------- from_original
def test_from_original_converts_once_into_a_cache(original, converted, tmp_path, monkeypatch):
    calls = []

    def convert_by_copy(source, target, **kwargs):  # the conversion itself is tested above
        calls.append((Path(source), kwargs))
        shutil.copytree(converted[0], target)

    monkeypatch.setattr(cache, "convert", convert_by_copy)
    model = cache.from_original(original, cache_dir=tmp_path / "cache", verify=False)
    assert type(model).__name__ == "HiggsAudioV3ForConditionalGeneration" and model.dtype == torch.bfloat16
    cached = sorted((tmp_path / "cache").iterdir())
    assert len(cached) == 1 and cached[0].name.startswith("higgs-audio-v3-tts-4b-")
    assert calls == [(original, {"dtype": "bfloat16", "overwrite": True, "verify": False, "codec_config": None,
                                 "progress": cache._to_stderr})]
    again = cache.from_original(original, cache_dir=tmp_path / "cache", verify=False)
    assert len(calls) == 1  # not converted twice
    ids = torch.tensor([[151667, 151672, 9707, 151670]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, again(input_ids=ids).logits)
    assert cache.converted_path(original, tmp_path / "cache") == cached[0]
    # The pair: the model and the processor of the same converted folder.
    pair_model, processor = cache.from_original(original, cache_dir=tmp_path / "cache", verify=False, with_processor=True)
    assert len(calls) == 1 and type(processor).__name__ == "HiggsAudioV3Processor"
    expected = HiggsAudioV3Processor.from_pretrained(cached[0])("Hello there.")
    assert torch.equal(processor("Hello there.")["input_ids"], expected["input_ids"])
    processor.check_model_config(pair_model.config)


def test_auto_classes_on_an_original_folder_point_to_from_original(original):
    """The original repo has no processor and no `auto_map`: instead of a plain tokenizer (no TTS prompts),
    `AutoProcessor` raises an error that names `from_original` (once `conversion.cache` is imported), and so do
    `AutoModel` / `AutoModelForTextToWaveform`; `AutoTokenizer` still reads the tokenizer."""
    from transformers import AutoTokenizer

    with pytest.raises(ValueError) as error:
        AutoProcessor.from_pretrained(original)
    assert str(error.value) == (
        f"{str(original)!r} is an original Higgs Audio v3 checkpoint, which has no processor: load it with `model, "
        f"processor = higgs_v3.from_original({str(original)!r}, with_processor=True)` (converted once into a local "
        "cache), or convert it with convert_checkpoint.py and load the converted folder."
    )
    assert type(AutoTokenizer.from_pretrained(original)).__name__ in ("Qwen2Tokenizer", "Qwen2TokenizerFast")
    from transformers import AutoModelForTextToWaveform

    for auto_class in (AutoModel, AutoModelForTextToWaveform):  # the same advice, not a list of every config class
        with pytest.raises(ValueError) as error:
            auto_class.from_pretrained(original)
        assert str(error.value) == (
            f"{str(original)!r} is an original Higgs Audio v3 checkpoint, which has no model code for transformers "
            f"(no auto_map): load it with `model, processor = higgs_v3.from_original({str(original)!r}, "
            "with_processor=True)` (converted once into a local cache), or convert it with convert_checkpoint.py and "
            "load the converted folder."
        )


def test_the_codec_config_is_part_of_the_cache_key(original, tmp_path, monkeypatch):
    targets = []

    def fake_convert(source, target, **kwargs):
        targets.append((Path(target), kwargs["codec_config"]))
        Path(target).mkdir(parents=True)
        (Path(target) / "config.json").write_text("{}")

    monkeypatch.setattr(cache, "convert", fake_convert)
    first = cache.converted_path(original, tmp_path / "cache")
    explicit = cache.converted_path(original, tmp_path / "cache", codec_config=tiny_codec_config())
    assert first != explicit
    assert cache.converted_path(original, tmp_path / "cache", codec_config=tiny_codec_config()) == explicit
    assert targets == [(first, None), (explicit, tiny_codec_config())]
