"""The export back to the original layout (`export`, `convert_checkpoint --to-original`): the inverse name
table against the real checkpoint's tensor list, original -> converted -> original bit for bit (names, shapes, dtypes,
values, config, tokenizer and codec config files), a fine-tuned model saved with `save_pretrained` exported and
converted again with identical logits, untied heads, and every refusal with its exact error. The exports beyond the
one round trip (zeros for the dropped tensor, the fine-tuned model, untied heads) are in the integration layer."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoProcessor

from higgs_v3.conversion import export
from higgs_v3.cli.main import main as cli_main
from higgs_v3.convert_checkpoint import convert
from higgs_v3.conversion.repo import ORIGINAL_CHAT_TEMPLATE_FILE
from higgs_v3.conversion.export import export_to_original, original_name
from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration
from higgs_v3.conversion.original_format import TOKENIZER_CONFIG, ConversionError, read_codec_config_file
from higgs_v3.conversion.folders import OWNER_FILE
from higgs_v3.processing_higgs_v3 import TTS_CHAT_TEMPLATE
from higgs_v3.testing.tiny import token_ids_read_once_per_content, write_tiny_original_checkpoint


REFERENCE = Path(__file__).resolve().parent / "reference"  # the real checkpoint's metadata, verbatim
CODEC_PREFIX = "tied.embedding.modality_embeddings.0.model."
MASK = CODEC_PREFIX + "semantic_model.masked_spec_embed"
ORIGINAL_FILES = ["LICENSE", "chat_template.jinja", "config.json", "higgs_audio_v2_tokenizer_config.json",
                  "model.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"]


def _headers(directory: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    with safe_open(str(directory / "model.safetensors"), framework="pt") as f:
        return {name: (f.get_slice(name).get_dtype(), tuple(f.get_slice(name).get_shape())) for name in f.keys()}


def main(argv: list[str]) -> int:
    """`python convert_checkpoint.py ARGV`, in this process: the command line's `convert` under the script's name."""
    return cli_main(["convert", *argv], convert_prog="convert_checkpoint.py")


def _run_main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module", autouse=True)
def tokenizer_parsed_once():
    """`read_original` parses the same tiny tokenizer several times here: once per content is enough."""
    with token_ids_read_once_per_content():
        yield


@pytest.fixture(scope="module")
def original(tiny_original) -> Path:
    return tiny_original


@pytest.fixture(scope="module")
def converted(original, tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("conv") / "higgs-audio-v3-hf"
    convert(original, output, verify=False)
    return output


@pytest.fixture(scope="module")
def exported(original, converted, tmp_path_factory) -> tuple[Path, str]:
    """The converted repo exported through the command line, with the original named for the dropped tensor."""
    output = tmp_path_factory.mktemp("back") / "exported"
    code, printed, errors = _run_main(["--to-original", "--input", str(converted), "--output", str(output),
                                       "--original", str(original)])
    assert code == 0, errors
    return output, printed


# --------------------------------------------------------------------------------------------------------- names
def test_the_inverse_table_gives_back_every_name_of_the_real_checkpoint():
    """Every tensor of the real checkpoint (its verbatim list) converted by `MAPPING_TABLE`'s rules, written out here,
    comes back to its original name; the untied heads too."""
    names = [line.split("\t")[0] for line in (REFERENCE / "checkpoint_tensors.tsv").read_text().splitlines() if line]
    assert len(names) == 927
    converted = {}
    for name in names:
        if name == MASK:
            continue
        if name.startswith(CODEC_PREFIX):
            converted[name] = "codec." + name[len(CODEC_PREFIX):]
        elif name.startswith("body.layers."):
            converted[name] = "model.layers." + name[len("body.layers."):]
        else:
            converted[name] = {"tied.embedding.text_embedding.weight": "model.embed_tokens.weight",
                               "tied.embedding.modality_embeddings.0.embedding.weight": "audio_embed.weight",
                               "body.norm.weight": "model.norm.weight"}[name]
    converted.update({"tied.head.text_head.weight": "lm_head.weight",
                      "tied.head.modality_heads.0.weight": "audio_head.weight"})
    assert {name: original_name(target) for name, target in converted.items()} == {n: n for n in converted}
    with pytest.raises(ConversionError, match=r"^The repo has a tensor 'model\.layers\.0\.self_attn\.q_proj\.lora_A"
                       r"\.weight' that has no place in the original checkpoint layout .* A LoRA adapter must be merged "
                       r"first \(model\.merge_and_unload\(\)\) and saved with save_pretrained\.$"):
        original_name("model.layers.0.self_attn.q_proj.lora_A.weight")


# ---------------------------------------------------------------------------------------------------- round trip
def test_original_converted_original_is_bit_identical(original, exported):
    output, printed = exported
    assert printed.splitlines() == [
        f"Exported 393 tensors (bfloat16) in the original layout into {output} (model.safetensors).",
        f"  {MASK}: copied from {original}",
    ]
    assert sorted(p.name for p in output.iterdir()) == ORIGINAL_FILES
    assert _headers(output) == _headers(original)  # names, dtypes (all BF16), shapes
    source, written = load_file(original / "model.safetensors"), load_file(output / "model.safetensors")
    assert all(torch.equal(written[name], value) for name, value in source.items())
    index = json.loads((output / "model.safetensors.index.json").read_text())
    assert index == json.loads((original / "model.safetensors.index.json").read_text())
    config, source_config = (json.loads((d / "config.json").read_text()) for d in (output, original))
    assert config.pop("transformers_version") and source_config.pop("transformers_version") == "5.5.0"
    assert config == source_config  # every key and value (rope_theta 1000000 == 1000000.0)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "LICENSE"):
        assert (output / name).read_bytes() == (original / name).read_bytes(), name
    codec_file = "higgs_audio_v2_tokenizer_config.json"
    assert read_codec_config_file(output / codec_file) == read_codec_config_file(original / codec_file)


@pytest.mark.integration
def test_without_the_original_the_dropped_tensor_is_zeros(original, converted, tmp_path):
    result = export_to_original(converted, tmp_path / "out")
    assert result.filled == {MASK: "zeros (the converted repo does not carry it; training-only, unused at inference)"}
    written = load_file(tmp_path / "out" / "model.safetensors")
    assert torch.equal(written[MASK], torch.zeros(32, dtype=torch.bfloat16))
    assert set(written) == set(load_file(original / "model.safetensors"))


# ------------------------------------------------------------------------------------------------- chat template
def test_a_repo_with_the_tts_template_only_gets_the_originals_from_original_or_none(original, converted, tmp_path,
                                                                                     caplog):
    """A repo without `original_chat_template.jinja` (as a processor's save_pretrained writes it) has the TTS template
    only: the export takes `--original`'s template, else writes none and says so (never the TTS one as the
    original's)."""
    repo = Path(shutil.copytree(converted, tmp_path / "repo"))
    (repo / ORIGINAL_CHAT_TEMPLATE_FILE).unlink()
    assert (repo / "chat_template.jinja").read_text(encoding="utf-8") == TTS_CHAT_TEMPLATE
    code, printed, errors = _run_main(["--to-original", "--input", str(repo), "--output", str(tmp_path / "with"),
                                       "--original", str(original)])
    assert code == 0, errors
    assert printed.splitlines()[1:] == [f"  chat_template.jinja: copied from {original}", f"  {MASK}: copied from {original}"]
    assert (tmp_path / "with" / "chat_template.jinja").read_bytes() == (original / "chat_template.jinja").read_bytes()
    how = ("not written (the repo has the TTS template only, not the original's, and no original_chat_template.jinja; "
           "pass --original DIR (original=) to copy the original checkpoint's)")
    with caplog.at_level("WARNING"):
        code, printed, errors = _run_main(["--to-original", "--input", str(repo), "--output", str(tmp_path / "without")])
    assert code == 0, errors
    assert f"  chat_template.jinja: {how}" in printed.splitlines()
    assert f"chat_template.jinja: {how}." in caplog.text
    assert sorted(p.name for p in (tmp_path / "without").iterdir()) == [n for n in ORIGINAL_FILES if n != "chat_template.jinja"]


# ------------------------------------------------------------------------------------------------ output folders
def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def _leftover(folder: Path, name: str, pid: int, content: str = "partial") -> Path:
    path = folder / name
    path.mkdir()
    (path / "state.txt").write_text(content)
    (path / OWNER_FILE).write_text(json.dumps({"pid": pid, "host": socket.gethostname()}))
    return path


def test_the_export_stages_claims_and_cleans_like_the_converter(converted, tmp_path, monkeypatch, caplog):
    """A dead export's staging folder is removed by the next export; an output lost between the two renames of a
    killed export is restored (and then refused without --overwrite); a live export's folders are left alone. The
    export's own staging folder is `<output>_exporting_<hex>`, claimed by this process, and leaves nothing behind."""
    output, dead = tmp_path / "out", _dead_pid()
    _leftover(tmp_path, "out_exporting_aa11", dead)  # SIGKILLed while writing
    _leftover(tmp_path, "out_replaced_9999", dead, "old")  # SIGKILLed between its two renames: no output
    _leftover(tmp_path, "out_exporting_9999", dead, "new")
    _leftover(tmp_path, "out_exporting_bb22", os.getppid())  # a live export, between its two renames
    _leftover(tmp_path, "out_replaced_bb22", os.getppid(), "live's old")
    with caplog.at_level("WARNING"), pytest.raises(ConversionError, match=r"^The output folder .* is not empty; pass "
                                                   r"--overwrite \(overwrite=True\) to replace it\.$"):
        export_to_original(converted, output)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "out_exporting_bb22", "out_replaced_bb22"]
    assert (output / "state.txt").read_text() == "old"
    assert "restored out from out_replaced_9999 (an export was killed while replacing it)" in caplog.text
    assert "removed out_exporting_aa11, left by an export that did not finish" in caplog.text
    seen = []
    verify = export._verify

    def spying_verify(planned, dtype, staging):
        seen.append((staging.name, json.loads((staging / OWNER_FILE).read_text())))
        return verify(planned, dtype, staging)

    monkeypatch.setattr(export, "_verify", spying_verify)
    export_to_original(converted, output, overwrite=True)
    [(name, owner)] = seen
    assert name.startswith("out_exporting_") and len(name) == len("out_exporting_") + 8
    assert owner == {"pid": os.getpid(), "host": socket.gethostname()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "out_exporting_bb22", "out_replaced_bb22"]
    assert sorted(p.name for p in output.iterdir()) == ORIGINAL_FILES  # the owner file removed once in place
    assert (tmp_path / "out_replaced_bb22" / "state.txt").read_text() == "live's old"


@pytest.mark.integration
def test_a_fine_tuned_model_exports_and_converts_back_with_identical_logits(converted, tmp_path):
    """A model changed after loading (as fine-tuning or a LoRA merge changes it), saved with `save_pretrained` and
    its processor (which rewrites tokenizer_config.json), exports; converting the export again gives the same model."""
    model = HiggsAudioV3ForConditionalGeneration.from_pretrained(converted, dtype="auto").eval()
    with torch.no_grad():
        for parameter in (model.audio_embed.weight, model.model.layers[0].mlp.up_proj.weight):
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)).to(
                parameter.dtype))
    tuned = tmp_path / "tuned"
    model.save_pretrained(tuned)
    AutoProcessor.from_pretrained(converted, trust_remote_code=True).save_pretrained(tuned)
    assert (tuned / "chat_template.jinja").read_text(encoding="utf-8") == TTS_CHAT_TEMPLATE
    assert not (tuned / ORIGINAL_CHAT_TEMPLATE_FILE).exists()  # save_pretrained keeps the TTS template only
    result = export_to_original(tuned, tmp_path / "exported", max_shard_size="20KB")  # sharded: the index is the format's
    assert json.loads((tmp_path / "exported" / "tokenizer_config.json").read_text()) == TOKENIZER_CONFIG
    assert result.filled["chat_template.jinja"].startswith("not written (the repo has the TTS template only")
    assert not (tmp_path / "exported" / "chat_template.jinja").exists()  # not the TTS template as the original's
    convert(tmp_path / "exported", tmp_path / "again", verify=False)
    again = HiggsAudioV3ForConditionalGeneration.from_pretrained(tmp_path / "again", dtype="auto").eval()
    ids = torch.tensor([[151667, 151672, 9707, 11, 1879, 151670]])
    with torch.no_grad():
        expected, got = model(input_ids=ids).logits, again(input_ids=ids).logits
    assert torch.equal(got, expected)
    assert not torch.equal(model.audio_embed.weight, HiggsAudioV3ForConditionalGeneration.from_pretrained(
        converted, dtype="auto").audio_embed.weight)  # the tuning did change the model


@pytest.mark.integration
def test_untied_heads_come_back_under_their_names(tmp_path):
    original = write_tiny_original_checkpoint(tmp_path / "untied", untied_heads=True, with_codec=False)
    convert(original, tmp_path / "conv", verify=False, without_codec=True)
    result = export_to_original(tmp_path / "conv", tmp_path / "back")
    assert result.filled == {}
    assert _headers(tmp_path / "back") == _headers(original)
    source, written = load_file(original / "model.safetensors"), load_file(tmp_path / "back" / "model.safetensors")
    assert all(torch.equal(written[name], value) for name, value in source.items())
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["text_config"]["tie_word_embeddings"] is config["audio_encoder_config"]["tie_word_embeddings"] is False


# ------------------------------------------------------------------------------------------------------ refusals
def test_the_converter_and_the_export_share_one_dtype_table(tmp_path):
    """`--dtype` has one table for both directions (`repo_files.WEIGHT_DTYPES`, whose names the command line's parser
    offers without importing torch) and one refusal."""
    from higgs_v3.cli import main as cli_module
    from higgs_v3.conversion import repo as repo_files

    assert cli_module.DTYPES == tuple(repo_files.WEIGHT_DTYPES)
    assert repo_files.WEIGHT_DTYPES == {"bfloat16": torch.bfloat16, "float16": torch.float16,
                                                     "float32": torch.float32}
    message = "dtype 'int8' is not supported; use one of bfloat16, float16, float32."
    for call in (lambda: export_to_original(tmp_path / "in", tmp_path / "out", dtype="int8"),
                 lambda: convert(tmp_path / "in", tmp_path / "out", dtype="int8")):
        with pytest.raises(ConversionError) as error:
            call()
        assert str(error.value) == message


def test_refusals(original, converted, tmp_path):
    with pytest.raises(ConversionError, match=r"^config\.json in '.*' has model_type 'higgs_multimodal_qwen3'; the "
                       r"export reads a converted repo \(model_type 'higgs_audio_v3'\)\. It is already in the original "
                       r"layout\.$"):
        export_to_original(original, tmp_path / "a")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(ConversionError, match=r"has no config\.json; expected a converted Higgs Audio v3 repo\. It looks "
                       r"like a PEFT adapter: merge it into the model \(model\.merge_and_unload\(\)\), then save that "
                       r"with save_pretrained\.$"):
        export_to_original(adapter, tmp_path / "a")
    no_tokenizer = Path(shutil.copytree(converted, tmp_path / "no_tokenizer"))
    (no_tokenizer / "tokenizer.json").unlink()
    with pytest.raises(ConversionError, match=r"has no tokenizer\.json; the original layout needs the tokenizer\."):
        export_to_original(no_tokenizer, tmp_path / "a")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter", "no_tokenizer"]  # no staging folder left
    extra = Path(shutil.copytree(converted, tmp_path / "extra"))
    tensors = load_file(extra / "model.safetensors")
    tensors["model.layers.2.input_layernorm.weight"] = tensors["model.layers.1.input_layernorm.weight"].clone()
    save_file(tensors, str(extra / "model.safetensors"))
    with pytest.raises(ConversionError, match=r"^The repo's tensors do not match its config\.json: unexpected "
                       r"body\.layers\.2\.input_layernorm\.weight \(not part of a model with this config\)\.$"):
        export_to_original(extra, tmp_path / "a")
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "keep.txt").write_text("precious")
    code, _, errors = _run_main(["--to-original", "--input", str(converted), "--output", str(kept)])
    prefix = "convert_checkpoint.py: error: "
    assert (code, errors) == (2, f"{prefix}The output folder {str(kept)!r} is not empty; pass --overwrite "
                                 "(overwrite=True) to replace it.\n")
    code, _, errors = _run_main(["--to-original", "--input", str(converted), "--output", str(kept),
                                 "--push-to-hub", "a/b"])
    assert (code, errors) == (2, f"{prefix}--push-to-hub do(es) not apply to --to-original (it takes --input, --output, --dtype, "
                                 "--max-shard-size, --overwrite and --original).\n")
    code, _, errors = _run_main(["--input", str(original), "--output", str(kept), "--original", str(original)])
    assert (code, errors) == (2, f"{prefix}--original only applies to --to-original.\n")
    assert [p.name for p in kept.iterdir()] == ["keep.txt"]


# ------------------------------------------------------------------ transformers' exporters (torch.export programs)
@pytest.mark.integration
@pytest.mark.parametrize("dynamic", [False, True])
def test_dynamo_export_for_generation_equals_eager(dynamic):
    """transformers' own exporter (`DynamoExporter.export_for_generation`, 5.24: `decompose_prefill_decode` runs
    `generate` with `min_new_tokens`, captures the prefill and decode forwards, `torch.export` traces each) against a
    static cache: the exported prefill's logits equal eager's bit for bit, its returned cache is eager's, and the
    exported decode run on that cache gives eager's logits. With `dynamic=True` the prefill also takes a prompt of
    another length and another number of reference rows (a static export is traced for one prompt length; a prefill
    traced with reference rows takes prompts with reference rows). About 2-4 s each."""
    import copy

    from transformers import GenerationConfig

    exporters = pytest.importorskip("transformers.exporters")  # 5.24; transformers 5.5 has no exporters
    from transformers.exporters.utils import decompose_prefill_decode

    from conftest import tiny_model
    from oracles import clone_prompt, left_pad, plain_prompt

    model = tiny_model()
    torch.manual_seed(3)
    ids, mask = left_pad([clone_prompt(8), plain_prompt()])
    inputs = {"input_ids": ids, "attention_mask": mask, "audio_input_ids": torch.randint(0, 1024, (8, 8))}
    static = GenerationConfig(cache_implementation="static", max_cache_len=48, do_sample=False)
    exported = exporters.DynamoExporter().export_for_generation(
        model, inputs, exporters.DynamoConfig(dynamic=dynamic), generation_config=static)
    assert set(exported.components) == {"prefill", "decode"}

    def run(stage, stage_inputs):  # the exported program, and eager on a copy of the same inputs
        runner = exported.runners[stage]
        program = runner(**{k: v for k, v in copy.deepcopy(stage_inputs).items() if k in runner.metadata.kwargs})
        with torch.no_grad():
            return program, model(**copy.deepcopy(stage_inputs))

    stages = decompose_prefill_decode(model, inputs, generation_config=static)
    prefill, eager_prefill = run("prefill", stages["prefill"][1])
    assert prefill.logits.shape == (2 * 8, ids.shape[1], 1026) and torch.equal(prefill.logits, eager_prefill.logits)
    assert all(torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
               for a, b in zip(prefill.cache.layers, eager_prefill.cache.layers))
    decode, eager_decode = run("decode", {**stages["decode"][1], "cache": prefill.cache})
    assert decode.logits.shape == (2 * 8, 1, 1026) and torch.equal(decode.logits, eager_decode.logits)
    if dynamic:
        other_ids, other_mask = left_pad([clone_prompt(5), plain_prompt((5, 6, 7, 8))])  # traced with rows: rows
        other = decompose_prefill_decode(model, {"input_ids": other_ids, "attention_mask": other_mask,
                                                 "audio_input_ids": torch.randint(0, 1024, (5, 8))},
                                         generation_config=static)
        prefill, eager_prefill = run("prefill", other["prefill"][1])
        assert prefill.logits.shape[1] == other_ids.shape[1] != ids.shape[1]
        assert torch.equal(prefill.logits, eager_prefill.logits)
