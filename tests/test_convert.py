"""The converter on tiny original-format checkpoints: a full conversion verified in a fresh process, the converted
folder's contents and generation, determinism, every refusal with its exact error (output folder untouched), untied
heads, the real checkpoint's names and shapes, the mocked Hub push and `from_original`."""

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
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoProcessor

import higgs_v3.convert_checkpoint as cc
from higgs_v3.codec_higgs_v3 import tiny_codec_config
from higgs_v3.configuration_higgs_v3 import REAL_CODEC_CONFIG
from higgs_v3.convert_checkpoint import ConversionError, convert, main
from higgs_v3.tiny_higgs_v3 import original_config, original_lm_shapes, write_tiny_original_checkpoint


CODEC_PREFIX = "tied.embedding.modality_embeddings.0.model."
EXPECTED_CODE_FILES = [
    "audio_io_higgs_v3.py",
    "codec_higgs_v3.py",
    "compat_higgs_v3.py",
    "configuration_higgs_v3.py",
    "delay_higgs_v3.py",
    "generation_higgs_v3.py",
    "modeling_higgs_v3.py",
    "processing_higgs_v3.py",
]
EXPECTED_FILES = sorted(
    [
        "LICENSE",
        "README.md",
        "chat_template.jinja",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "processor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        *EXPECTED_CODE_FILES,
    ]
)
# sha256 of the sorted "name<TAB>[shape]" strings (concatenated) of the 528 codec tensors of the real checkpoint
# (shared/spec/reference/checkpoint_tensors.tsv, prefix removed).
REAL_CODEC_TENSORS_SHA256 = "2bb8512a60a4ceff6d99660cc60079d4b5fdcf47447a8c4543c3721b40d79f3b"


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


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Path:
    return write_tiny_original_checkpoint(tmp_path_factory.mktemp("orig") / "higgs-audio-v3-tts-4b")


@pytest.fixture(scope="module")
def converted(original, tmp_path_factory) -> tuple[Path, str]:
    """The tiny original converted once through the command line, with the built-in verification."""
    output = tmp_path_factory.mktemp("conv") / "higgs-audio-v3-hf"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["--input", str(original), "--output", str(output)])
    assert code == 0, stdout.getvalue()
    return output, stdout.getvalue()


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
def test_conversion_is_verified_in_a_fresh_process(converted):
    output, printed = converted
    match = re.search(r"Verified: max \|diff\| of the audio logits = (\S+) \(tolerance (\S+)\)\.", printed)
    assert match, printed
    max_abs_diff, tolerance = float(match.group(1)), float(match.group(2))
    assert max_abs_diff <= 1e-4 < tolerance  # float32 against float32: only the summation order differs
    assert "ignored tied.embedding.modality_embeddings.0.model.semantic_model.masked_spec_embed" in printed
    assert sorted(os.listdir(output)) == EXPECTED_FILES
    assert sorted(p.name for p in output.parent.iterdir()) == [output.name]


def test_converted_tensors_equal_the_original(original, converted):
    output, _ = converted
    source = load_file(original / "model.safetensors")
    written = load_file(output / "model.safetensors")
    expected = {_expected_target(k): v for k, v in source.items() if _expected_target(k) is not None}
    assert set(written) == set(expected)  # tied heads are not stored
    for name, value in written.items():
        if name.startswith("codec."):
            assert value.dtype == torch.float32, name
        else:
            assert value.dtype == torch.bfloat16, name
        assert torch.equal(value, expected[name].to(value.dtype)), name


def test_converted_config_and_generation_config(converted):
    output, _ = converted
    with open(output / "config.json") as f:
        config = json.load(f)
    assert config["model_type"] == "higgs_audio_v3"
    assert config["auto_map"] == {
        "AutoConfig": "configuration_higgs_v3.HiggsAudioV3Config",
        "AutoModel": "modeling_higgs_v3.HiggsAudioV3ForConditionalGeneration",
        "AutoModelForTextToSpectrogram": "modeling_higgs_v3.HiggsAudioV3ForConditionalGeneration",
        "AutoModelForTextToWaveform": "modeling_higgs_v3.HiggsAudioV3ForConditionalGeneration",
    }
    assert config["codec_config"] == tiny_codec_config()
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
    assert {k: v for k, v in generation.items() if k != "transformers_version"} == {
        "bos_token_id": 151643, "do_sample": True, "eos_token_id": 151643, "max_new_tokens": 2048,
        "pad_token_id": 151643, "temperature": 1.0, "use_cache": True,  # the 5.5 pipeline needs use_cache set
    }


def test_official_generation_config_matches_the_models_default(converted):
    output, _ = converted
    model = AutoModel.from_pretrained(output, trust_remote_code=True)
    loaded = model.generation_config
    assert (loaded.do_sample, loaded.temperature, loaded.max_new_tokens) == (True, 1.0, 2048)
    assert loaded.top_k in (None, 0) and loaded.top_p in (None, 1.0)
    official = cc.official_generation_config(model.config).to_diff_dict()
    assert model._default_audio_generation_config().to_diff_dict() == official


def test_tokenizer_processor_code_and_card(original, converted):
    output, _ = converted
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "LICENSE"):
        assert (output / name).read_bytes() == (original / name).read_bytes(), name
    here = Path(cc.__file__).parent
    for name in EXPECTED_CODE_FILES:
        assert (output / name).read_bytes() == (here / name).read_bytes(), name
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
    assert re.search(r"The conversion was verified numerically: .* \(max \|diff\| \d\.\d\de-\d\d\)\.", card)
    assert "trust_remote_code=True" in card


def test_converted_folder_generates_audio(converted):
    output, _ = converted
    model = AutoModel.from_pretrained(output, trust_remote_code=True).eval()
    processor = AutoProcessor.from_pretrained(output, trust_remote_code=True)
    assert model.dtype == torch.bfloat16
    assert {p.dtype for p in model.codec.parameters()} == {torch.float32}
    inputs = processor(text="Hello world.", return_tensors="pt")
    out = model.generate(**inputs, seed=0, max_new_tokens=12, return_dict_in_generate=True)
    assert len(out.audio) == 1
    audio = out.audio[0]
    assert audio.dim() == 1 and audio.numel() == (12 - 7) * 960  # 12 rows, 7 of them the delay tail
    assert bool(torch.isfinite(audio).all())


def test_converting_twice_gives_identical_files(original, converted, tmp_path):
    output, _ = converted
    result = convert(original, tmp_path / "again", verify=False)
    assert result.max_abs_diff is None and result.num_tensors == len(load_file(output / "model.safetensors"))
    again = _listing(tmp_path / "again")
    first = _listing(output)
    assert sorted(again) == sorted(first)
    for name in first:
        if name != "README.md":  # the card states the verification figure (absent here)
            assert again[name] == first[name], name


def test_sharded_float16_output(original, tmp_path):
    result = convert(original, tmp_path / "sharded", dtype="float16", max_shard_size="3MB", verify=False)
    assert result.shards == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    with open(tmp_path / "sharded" / "model.safetensors.index.json") as f:
        index = json.load(f)
    assert sorted(set(index["weight_map"].values())) == result.shards
    for shard in result.shards:  # at most 3 MB of data, unless one tensor alone is larger (as transformers does)
        names = [k for k, v in index["weight_map"].items() if v == shard]
        data = os.path.getsize(tmp_path / "sharded" / shard) - 8 - int.from_bytes(
            (tmp_path / "sharded" / shard).read_bytes()[:8], "little")
        assert data <= 3_000_000 or names == ["model.embed_tokens.weight"], (shard, data, names[:3])
    source = load_file(original / "model.safetensors")
    for shard in result.shards:
        with safe_open(str(tmp_path / "sharded" / shard), framework="pt") as f:
            for name in f.keys():
                assert index["weight_map"][name] == shard
                value = f.get_tensor(name)
                assert value.dtype == (torch.float32 if name.startswith("codec.") else torch.float16), name
    assert torch.equal(
        load_file(tmp_path / "sharded" / index["weight_map"]["model.norm.weight"])["model.norm.weight"],
        source["body.norm.weight"].to(torch.float16),
    )
    assert sum(len(load_file(tmp_path / "sharded" / s)) for s in result.shards) == len(source) - 1


@pytest.mark.slow
def test_script_entry_point(original, tmp_path):
    script = Path(cc.__file__)
    done = subprocess.run(
        [sys.executable, str(script), "--input", str(original), "--output", str(tmp_path / "script"), "--no-verify"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "Not verified (--no-verify)." in done.stdout
    assert (tmp_path / "script" / "config.json").is_file()


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


def test_overwrite_replaces_the_output(original, guarded_output):
    convert(original, guarded_output, verify=False, overwrite=True)
    assert "keep.txt" not in os.listdir(guarded_output)
    assert (guarded_output / "config.json").is_file()
    assert sorted(p.name for p in guarded_output.parent.iterdir()) == ["target"]


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
        "Tensor 'body.layers.1.mlp.up_proj.weight' in model.safetensors holds NaN or infinite values (rows 0..64); "
        "the file is corrupted: download it again."
    )):
        convert(broken, guarded_output, overwrite=True)
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
        "['body.layers.0.self_attn.rotary.inv_freq', 'tied.head.modality_heads.1.weight']. Refusing to drop them silently; this is not the Higgs Audio v3 format "
        "the converter knows."
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


def test_refuses_a_codec_of_unknown_shape(broken, guarded_output):
    name = CODEC_PREFIX + "fc.bias"
    _rewrite_tensors(broken, lambda t: t.update({name: torch.zeros(t[name].numel() + 1, dtype=torch.bfloat16)}))
    with pytest.raises(ConversionError, match=re.escape(
        f"codec tensors under '{CODEC_PREFIX}' match no known codec configuration: "
    )) as error:
        convert(broken, guarded_output, overwrite=True)
    expected = "the tiny test codec config: 0 missing (e.g. []), 0 unexpected (e.g. []), 1 with another shape"
    assert expected in str(error.value)
    _assert_untouched(guarded_output)


def test_codec_is_required_unless_left_out(original, tmp_path):
    lm_only = write_tiny_original_checkpoint(tmp_path / "lm_only", with_codec=False)
    with pytest.raises(ConversionError, match=re.escape(
        f"The checkpoint has no codec tensors under '{CODEC_PREFIX}'; the original bundles its codec. Pass "
        "--without-codec (without_codec=True) to convert the language model alone"
    )):
        convert(lm_only, tmp_path / "out", verify=False)
    assert not (tmp_path / "out").exists()
    result = convert(original, tmp_path / "no_codec", without_codec=True, verify=False)
    with open(tmp_path / "no_codec" / "config.json") as f:
        assert json.load(f)["codec_config"] is None
    assert not any(name.startswith("codec.") for name in load_file(tmp_path / "no_codec" / "model.safetensors"))
    assert sum(1 for reason in result.ignored.values() if reason == "codec tensor left out (--without-codec)") > 300


def test_refuses_bad_options(original, tmp_path):
    with pytest.raises(ConversionError, match=re.escape(
        "dtype 'int8' is not supported; use one of bfloat16, float16, float32."
    )):
        convert(original, tmp_path / "x", dtype="int8")
    with pytest.raises(ConversionError, match=re.escape(
        "--max-shard-size 'lots' is not a size; use e.g. 5GB, 500MB, 2GiB or a byte count."
    )):
        convert(original, tmp_path / "x", max_shard_size="lots")
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

    calls = []

    def fake_snapshot_download(**kwargs):
        calls.append(kwargs)
        return str(original)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    result = convert("bosonai/higgs-audio-v3-tts-4b", tmp_path / "out", revision="v1.0", verify=False)
    assert calls == [{"repo_id": "bosonai/higgs-audio-v3-tts-4b", "revision": "v1.0", "cache_dir": None,
                      "allow_patterns": ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.md", "LICENSE*", "NOTICE*"]}]
    assert result.num_tensors == 392

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


def test_command_line_reports_errors(tmp_path, capsys):
    assert main(["--input", str(tmp_path / "nothing"), "--output", str(tmp_path / "out")]) == 1
    assert "error: The input" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------- untied heads
def test_untied_heads_are_mapped_and_verified(tmp_path):
    source = write_tiny_original_checkpoint(tmp_path / "untied", untied_heads=True, with_codec=False)
    result = convert(source, tmp_path / "out", without_codec=True, dtype="float32", verify=False)
    assert result.tie_word_embeddings is False
    from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    model = HiggsAudioV3ForConditionalGeneration.from_pretrained(tmp_path / "out").eval()
    original = load_file(source / "model.safetensors")
    assert torch.equal(model.audio_head.weight, original["tied.head.modality_heads.0.weight"].float())
    assert torch.equal(model.lm_head.weight, original["tied.head.text_head.weight"].float())
    assert not torch.equal(model.audio_head.weight, model.audio_embed.weight)
    checkpoint = cc.read_original(source)
    input_ids, rows = cc.verification_prompt(model.config)
    reference = cc.reference_audio_logits(checkpoint, input_ids, rows, torch.float32)
    with torch.no_grad():
        logits = model(input_ids=input_ids, audio_input_ids=rows).logits[0]
    assert (logits - reference).abs().max() < 1e-4
    # The reference really uses the untied head: with the embedding instead, the logits differ.
    tied_logits = (model.model(input_ids=None, inputs_embeds=model.build_inputs_embeds(input_ids, rows))
                   .last_hidden_state[0] @ model.audio_embed.weight.T).view(-1, 8, 1026)
    assert (tied_logits - reference).abs().max() > 0.1


def test_refuses_untied_heads_when_the_config_says_tied(tmp_path, guarded_output):
    source = write_tiny_original_checkpoint(tmp_path / "untied", untied_heads=True, with_codec=False)
    _damage_config(source, lambda c: c["audio_encoder_config"].update(tie_word_embeddings=True))
    with pytest.raises(ConversionError, match=re.escape(
        "config.json sets audio_encoder_config.tie_word_embeddings to true, but 'tied.head.modality_heads.0.weight' "
        "differs from 'tied.embedding.modality_embeddings.0.embedding.weight' (max |diff| "
    )):
        convert(source, guarded_output, overwrite=True, without_codec=True)
    _assert_untouched(guarded_output)


def test_head_copies_equal_to_the_embeddings_stay_tied(broken, tmp_path):
    def add(tensors):
        tensors["tied.head.text_head.weight"] = tensors["tied.embedding.text_embedding.weight"].clone()

    _rewrite_tensors(broken, add)
    result = convert(broken, tmp_path / "out", verify=False)
    assert result.tie_word_embeddings is True
    assert result.ignored["tied.head.text_head.weight"] == "identical to tied.embedding.text_embedding.weight (tied)"


# ------------------------------------------------------------------------------------------ the real checkpoint
def test_real_checkpoint_names_and_shapes_are_fully_accounted():
    """The converter's plan for the real checkpoint's 927 tensors (headers only, no data): every key mapped or
    ignored on purpose, the real codec config recognised, every target shape as the converted config implies."""
    config = original_config()
    shapes = original_lm_shapes(config)
    codec = cc._codec_shapes(REAL_CODEC_CONFIG)
    codec["semantic_model.masked_spec_embed"] = (768,)
    lines = "".join(sorted(f"{name}\t{list(shape)}" for name, shape in codec.items()))
    assert hashlib.sha256(lines.encode()).hexdigest() == REAL_CODEC_TENSORS_SHA256  # the real codec, name for name
    shapes.update({CODEC_PREFIX + name: shape for name, shape in codec.items()})
    assert len(shapes) == 927
    tensors = {name: cc.SourceTensor(name, Path("model.safetensors"), "BF16", shape) for name, shape in shapes.items()}
    token_ids = {t: i for i, t in enumerate(["<|endoftext|>", *cc.HIGGS_SPECIAL_TOKENS], start=151664)}
    token_ids["<|endoftext|>"] = token_ids["eos"] = token_ids["pad"] = 151643
    checkpoint = cc.OriginalCheckpoint(Path("."), config, tensors, token_ids, {})
    plan = cc.plan_conversion(checkpoint)
    assert len(plan.tensors) == 926
    assert plan.ignored == {CODEC_PREFIX + "semantic_model.masked_spec_embed":
                            "HuBERT's training-only mask embedding, unused by the codec"}
    assert plan.config.codec_config == REAL_CODEC_CONFIG
    assert (plan.config.hidden_size, plan.config.num_hidden_layers, plan.config.tts_token_id) == (2560, 36, 151667)
    assert {t.target: t.source for t in plan.tensors}["model.layers.35.self_attn.k_norm.weight"] == \
        "body.layers.35.self_attn.k_norm.weight"
    assert sum(t.nbytes for t in plan.tensors if t.dtype == torch.float32) == 4 * sum(
        torch.Size(s).numel() for n, s in codec.items() if n != "semantic_model.masked_spec_embed")


# -------------------------------------------------------------------------------------------------------- the hub
class _FakeHfApi:
    calls: list = []

    def __init__(self, token=None):
        self.token = token

    def create_repo(self, **kwargs):
        _FakeHfApi.calls.append(("create_repo", kwargs))

    def create_commit(self, **kwargs):
        _FakeHfApi.calls.append(("create_commit", kwargs))
        return type("Commit", (), {"commit_url": f"https://huggingface.co/{kwargs['repo_id']}/commit/abc"})()


def test_push_to_hub_uploads_everything_in_one_commit(original, tmp_path, monkeypatch, capsys):
    import huggingface_hub

    _FakeHfApi.calls = []
    monkeypatch.setattr(huggingface_hub, "HfApi", _FakeHfApi)
    code = main(["--input", str(original), "--output", str(tmp_path / "out"), "--no-verify",
                 "--push-to-hub", "someone/higgs-audio-v3-hf", "--private"])
    assert code == 0
    assert "Pushed to https://huggingface.co/someone/higgs-audio-v3-hf/commit/abc" in capsys.readouterr().out
    assert [name for name, _ in _FakeHfApi.calls] == ["create_repo", "create_commit"]
    assert _FakeHfApi.calls[0][1] == {"repo_id": "someone/higgs-audio-v3-hf", "repo_type": "model", "private": True,
                                      "exist_ok": True}
    commit = _FakeHfApi.calls[1][1]
    assert commit["repo_id"] == "someone/higgs-audio-v3-hf"
    paths = [op.path_in_repo for op in commit["operations"]]
    assert paths == EXPECTED_FILES
    uploaded = {op.path_in_repo: Path(op.path_or_fileobj) for op in commit["operations"]}
    assert 'AutoModel.from_pretrained("someone/higgs-audio-v3-hf", trust_remote_code=True' in \
        uploaded["README.md"].read_text()
    with open(uploaded["config.json"]) as f:
        assert json.load(f)["auto_map"]["AutoModel"] == "modeling_higgs_v3.HiggsAudioV3ForConditionalGeneration"
    modeling = Path(cc.__file__).parent / "modeling_higgs_v3.py"
    assert uploaded["modeling_higgs_v3.py"].read_bytes() == modeling.read_bytes()


def test_push_refuses_an_incomplete_folder(converted, tmp_path, monkeypatch):
    import huggingface_hub

    output, _ = converted
    incomplete = Path(shutil.copytree(output, tmp_path / "incomplete"))
    (incomplete / "codec_higgs_v3.py").unlink()
    (incomplete / "processing_higgs_v3.py").unlink()
    _FakeHfApi.calls = []
    monkeypatch.setattr(huggingface_hub, "HfApi", _FakeHfApi)
    with pytest.raises(ConversionError, match=re.escape(
        f"The converted folder '{incomplete}' is incomplete: code file "
    )):
        cc.push_folder_to_hub(incomplete, "someone/repo")
    assert _FakeHfApi.calls == []
    with pytest.raises(ConversionError) as error:
        cc.check_output_folder(incomplete)
    assert "code file codec_higgs_v3.py is missing" in str(error.value)
    assert "code file processing_higgs_v3.py is missing" in str(error.value)


# --------------------------------------------------------------------------------------------------- from_original
def test_from_original_converts_once_into_a_cache(original, tmp_path, monkeypatch):
    model = cc.from_original(original, cache_dir=tmp_path / "cache", verify=False, dtype="float32")
    assert type(model).__name__ == "HiggsAudioV3ForConditionalGeneration"
    cached = sorted((tmp_path / "cache").iterdir())
    assert len(cached) == 1 and cached[0].name.startswith("higgs-audio-v3-tts-4b-")
    assert model.dtype == torch.float32

    def no_second_conversion(*args, **kwargs):
        raise AssertionError("converted twice")

    monkeypatch.setattr(cc, "convert", no_second_conversion)
    again = cc.from_original(original, cache_dir=tmp_path / "cache", verify=False, dtype="float32")
    ids = torch.tensor([[151667, 151672, 9707, 151670]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, again(input_ids=ids).logits)
    assert cc.converted_path(original, tmp_path / "cache", dtype="float32") == cached[0]


# ------------------------------------------------------------------------------------------------- verification
@pytest.mark.slow
def test_verification_catches_a_wrong_mapping(original, tmp_path, monkeypatch):
    """Swap q_norm and k_norm in the mapping table: the conversion fails its verification, nothing is written."""
    swapped = tuple(
        (r"body\.layers\.(\d+)\.self_attn\.q_norm\.weight", r"model.layers.\1.self_attn.k_norm.weight", "swapped")
        if pattern.startswith(r"body\.layers\.(\d+)\.self_attn") else (pattern, target, what)
        for pattern, target, what in cc.MAPPING_TABLE
    ) + ((r"body\.layers\.(\d+)\.self_attn\.k_norm\.weight", r"model.layers.\1.self_attn.q_norm.weight", "swapped"),
         (r"body\.layers\.(\d+)\.self_attn\.(q_proj|k_proj|v_proj|o_proj)\.weight",
          r"model.layers.\1.self_attn.\2.weight", "attention"))
    monkeypatch.setattr(cc, "_COMPILED_TABLE", tuple((re.compile(p), t, w) for p, t, w in swapped))
    with pytest.raises(ConversionError, match=r"Verification failed: the converted model's audio logits differ from "
                                              r"the original tensors' forward by max \|diff\| = \S+, above the "
                                              r"tolerance \S+\."):
        convert(original, tmp_path / "out")
    assert sorted(os.listdir(tmp_path)) == []
