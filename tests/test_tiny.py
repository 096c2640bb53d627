"""Tiny Higgs Audio v3 checkpoints: the tokenizer (real added-token ids, real tokenizer_config fields), the
original-format checkpoint (real config keys, original tensor names, bf16, deterministic) and the tiny random model in
the converted layout. The REFERENCE_* literals below are verbatim copies of `shared/spec/reference/` (the real
checkpoint's metadata), so these checks do not depend on our own constants."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import AutoModel, AutoProcessor

from higgs_v3.conversion.original_format import REAL_CODEC_CONFIG
from higgs_v3.conversion.repo import check_output_folder
from higgs_v3.generation_higgs_v3 import MAX_NEW_TOKENS
from higgs_v3.conversion.original_format import original_config, original_lm_shapes, read_codec_config_file
from higgs_v3.testing.tiny import (
    TINY_CODEC_OVERRIDES,
    codec_state_dict_names,
    make_tiny_random_model,
    tiny_codec_config,
    write_tiny_original_checkpoint,
    write_tiny_tokenizer,
)


REFERENCE_DIR = Path(__file__).resolve().parent / "reference"  # verbatim copy of the spec's reference/ files

REFERENCE_CONFIG_JSON = r'''{
 "_hidden_size": 2560,
 "_vocab_size": 151936,
 "architectures": [
  "HiggsMultimodalQwen3ForConditionalGeneration"
 ],
 "audio_encoder_config": {
  "_name_or_path": "",
  "architectures": null,
  "chunk_size_feed_forward": 0,
  "dtype": null,
  "encoder_type": "discrete",
  "id2label": {
   "0": "LABEL_0",
   "1": "LABEL_1"
  },
  "is_encoder_decoder": false,
  "label2id": {
   "LABEL_0": 0,
   "LABEL_1": 1
  },
  "max_chunk_size": 50,
  "mel_per_sample": 8,
  "model_type": "higgs_audio_encoder",
  "num_codebooks": 8,
  "out_dim": 2560,
  "output_attentions": false,
  "output_hidden_states": false,
  "problem_type": null,
  "qwen3_aut_config": null,
  "return_dict": true,
  "tie_word_embeddings": true,
  "use_delay_pattern": true,
  "vocab_size": 1026,
  "whisper_config": null
 },
 "audio_token_id": -100,
 "ignore_index": -100,
 "model_type": "higgs_multimodal_qwen3",
 "text_config": {
  "_name_or_path": "/ceph/models/Qwen3-4B-Base",
  "architectures": [
   "Qwen3ForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "dtype": "bfloat16",
  "eos_token_id": 151643,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 2560,
  "initializer_range": 0.02,
  "intermediate_size": 9728,
  "layer_types": [
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention",
   "full_attention"
  ],
  "max_position_embeddings": 32768,
  "max_window_layers": 36,
  "model_type": "qwen3",
  "num_attention_heads": 32,
  "num_hidden_layers": 36,
  "num_key_value_heads": 8,
  "pad_token_id": null,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
   "rope_theta": 1000000,
   "rope_type": "default"
  },
  "sliding_window": null,
  "tie_word_embeddings": true,
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
 },
 "transformers_version": "5.5.0"
}'''

REFERENCE_TOKENIZER_CONFIG_JSON = r'''{
 "add_prefix_space": false,
 "backend": "tokenizers",
 "bos_token": null,
 "clean_up_tokenization_spaces": false,
 "eos_token": "<|endoftext|>",
 "errors": "replace",
 "extra_special_tokens": [
  "<|asr|>",
  "<|streaming_asr|>",
  "<|tts|>",
  "<|streaming_tts|>",
  "<|audio_cont_txt|>",
  "<|audio|>",
  "<|audio_end|>",
  "<|text|>",
  "<|text_end|>",
  "<|eoc|>",
  "<|user|>",
  "<|assistant|>",
  "<|system|>",
  "<|await_audio|>",
  "<|ref_audio|>",
  "<|ref_text|>",
  "<|emotion:elation|>",
  "<|emotion:amusement|>",
  "<|emotion:enthusiasm|>",
  "<|emotion:determination|>",
  "<|emotion:pride|>",
  "<|emotion:contentment|>",
  "<|emotion:affection|>",
  "<|emotion:relief|>",
  "<|emotion:contemplation|>",
  "<|emotion:confusion|>",
  "<|emotion:surprise|>",
  "<|emotion:awe|>",
  "<|emotion:longing|>",
  "<|emotion:arousal|>",
  "<|emotion:anger|>",
  "<|emotion:fear|>",
  "<|emotion:disgust|>",
  "<|emotion:bitterness|>",
  "<|emotion:sadness|>",
  "<|emotion:shame|>",
  "<|emotion:helplessness|>",
  "<|env:music|>",
  "<|env:noise|>",
  "<|style:singing|>",
  "<|style:shouting|>",
  "<|style:whispering|>",
  "<|sfx:cough|>",
  "<|sfx:laughter|>",
  "<|sfx:crying|>",
  "<|sfx:screaming|>",
  "<|sfx:burping|>",
  "<|sfx:humming|>",
  "<|sfx:sigh|>",
  "<|sfx:sniff|>",
  "<|sfx:sneeze|>",
  "<|prosody:speed_very_slow|>",
  "<|prosody:speed_slow|>",
  "<|prosody:speed_fast|>",
  "<|prosody:speed_very_fast|>",
  "<|prosody:pitch_low|>",
  "<|prosody:pitch_high|>",
  "<|prosody:pause|>",
  "<|prosody:long_pause|>",
  "<|chatml|>",
  "<|prosody:expressive_high|>",
  "<|prosody:expressive_low|>"
 ],
 "is_local": true,
 "model_max_length": 131072,
 "pad_token": "<|endoftext|>",
 "split_special_tokens": false,
 "tokenizer_class": "Qwen2Tokenizer",
 "unk_token": null
}'''

REFERENCE_ADDED_TOKENS_TSV = '''id	token	special
151643	<|endoftext|>	true
151644	<|im_start|>	true
151645	<|im_end|>	true
151646	<|object_ref_start|>	true
151647	<|object_ref_end|>	true
151648	<|box_start|>	true
151649	<|box_end|>	true
151650	<|quad_start|>	true
151651	<|quad_end|>	true
151652	<|vision_start|>	true
151653	<|vision_end|>	true
151654	<|vision_pad|>	true
151655	<|image_pad|>	true
151656	<|video_pad|>	true
151657	<tool_call>	false
151658	</tool_call>	false
151659	<|fim_prefix|>	false
151660	<|fim_middle|>	false
151661	<|fim_suffix|>	false
151662	<|fim_pad|>	false
151663	<|repo_name|>	false
151664	<|file_sep|>	false
151665	<|asr|>	true
151666	<|streaming_asr|>	true
151667	<|tts|>	true
151668	<|streaming_tts|>	true
151669	<|audio_cont_txt|>	true
151670	<|audio|>	true
151671	<|audio_end|>	true
151672	<|text|>	true
151673	<|text_end|>	true
151674	<|eoc|>	true
151675	<|user|>	true
151676	<|assistant|>	true
151677	<|system|>	true
151678	<|await_audio|>	true
151679	<|ref_audio|>	true
151680	<|ref_text|>	true
151681	<|emotion:elation|>	true
151682	<|emotion:amusement|>	true
151683	<|emotion:enthusiasm|>	true
151684	<|emotion:determination|>	true
151685	<|emotion:pride|>	true
151686	<|emotion:contentment|>	true
151687	<|emotion:affection|>	true
151688	<|emotion:relief|>	true
151689	<|emotion:contemplation|>	true
151690	<|emotion:confusion|>	true
151691	<|emotion:surprise|>	true
151692	<|emotion:awe|>	true
151693	<|emotion:longing|>	true
151694	<|emotion:arousal|>	true
151695	<|emotion:anger|>	true
151696	<|emotion:fear|>	true
151697	<|emotion:disgust|>	true
151698	<|emotion:bitterness|>	true
151699	<|emotion:sadness|>	true
151700	<|emotion:shame|>	true
151701	<|emotion:helplessness|>	true
151702	<|env:music|>	true
151703	<|env:noise|>	true
151704	<|style:singing|>	true
151705	<|style:shouting|>	true
151706	<|style:whispering|>	true
151707	<|sfx:cough|>	true
151708	<|sfx:laughter|>	true
151709	<|sfx:crying|>	true
151710	<|sfx:screaming|>	true
151711	<|sfx:burping|>	true
151712	<|sfx:humming|>	true
151713	<|sfx:sigh|>	true
151714	<|sfx:sniff|>	true
151715	<|sfx:sneeze|>	true
151716	<|prosody:speed_very_slow|>	true
151717	<|prosody:speed_slow|>	true
151718	<|prosody:speed_fast|>	true
151719	<|prosody:speed_very_fast|>	true
151720	<|prosody:pitch_low|>	true
151721	<|prosody:pitch_high|>	true
151722	<|prosody:pause|>	true
151723	<|prosody:long_pause|>	true
151724	<|chatml|>	true
151725	<|prosody:expressive_high|>	true
151726	<|prosody:expressive_low|>	true
'''

REFERENCE_LM_TENSORS_TSV = '''tied.embedding.text_embedding.weight	[151936, 2560]	BF16
tied.embedding.modality_embeddings.0.embedding.weight	[8208, 2560]	BF16
body.layers.0.input_layernorm.weight	[2560]	BF16
body.layers.0.self_attn.q_proj.weight	[4096, 2560]	BF16
body.layers.0.self_attn.k_proj.weight	[1024, 2560]	BF16
body.layers.0.self_attn.v_proj.weight	[1024, 2560]	BF16
body.layers.0.self_attn.o_proj.weight	[2560, 4096]	BF16
body.layers.0.self_attn.q_norm.weight	[128]	BF16
body.layers.0.self_attn.k_norm.weight	[128]	BF16
body.layers.0.post_attention_layernorm.weight	[2560]	BF16
body.layers.0.mlp.gate_proj.weight	[9728, 2560]	BF16
body.layers.0.mlp.up_proj.weight	[9728, 2560]	BF16
body.layers.0.mlp.down_proj.weight	[2560, 9728]	BF16
body.layers.35.input_layernorm.weight	[2560]	BF16
body.layers.35.self_attn.q_proj.weight	[4096, 2560]	BF16
body.layers.35.self_attn.k_proj.weight	[1024, 2560]	BF16
body.layers.35.self_attn.v_proj.weight	[1024, 2560]	BF16
body.layers.35.self_attn.o_proj.weight	[2560, 4096]	BF16
body.layers.35.self_attn.q_norm.weight	[128]	BF16
body.layers.35.self_attn.k_norm.weight	[128]	BF16
body.layers.35.post_attention_layernorm.weight	[2560]	BF16
body.layers.35.mlp.gate_proj.weight	[9728, 2560]	BF16
body.layers.35.mlp.up_proj.weight	[9728, 2560]	BF16
body.layers.35.mlp.down_proj.weight	[2560, 9728]	BF16
body.norm.weight	[2560]	BF16
'''


def _reference_added_tokens() -> list[tuple[int, str, bool]]:
    lines = REFERENCE_ADDED_TOKENS_TSV.strip().splitlines()[1:]
    return [(int(i), token, special == "true") for i, token, special in (line.split("\t") for line in lines)]


@pytest.fixture(scope="module")
def original_dir(tiny_original):
    return tiny_original


# ------------------------------------------------------------------------------------------------------- tokenizer
def test_tokenizer_files_are_the_original_format(tokenizer_dir):
    assert sorted(os.listdir(tokenizer_dir)) == ["tokenizer.json", "tokenizer_config.json"]
    with open(tokenizer_dir / "tokenizer_config.json") as f:
        assert json.load(f) == json.loads(REFERENCE_TOKENIZER_CONFIG_JSON)
    with open(tokenizer_dir / "tokenizer.json") as f:
        data = json.load(f)
    added = [(t["id"], t["content"], t["special"]) for t in data["added_tokens"]]
    assert added == _reference_added_tokens()
    assert all(t["normalized"] is False and t["lstrip"] is False and t["rstrip"] is False for t in data["added_tokens"])
    assert data["model"]["type"] == "BPE" and data["model"]["byte_fallback"] is False
    assert data["pre_tokenizer"]["type"] == "Sequence" and data["decoder"]["type"] == "ByteLevel"
    vocab = data["model"]["vocab"]
    assert sorted(vocab.values()) == list(range(151643))  # ids 0..151642 from the BPE, as in the real file
    assert 200 < len(data["model"]["merges"]) <= 300  # learned from a fixed text (it runs out of pairs at 253)


def test_every_added_token_is_one_token_with_its_real_id(tokenizer):
    assert type(tokenizer).__name__ == "Qwen2Tokenizer"
    for token_id, token, _ in _reference_added_tokens():
        assert tokenizer.convert_tokens_to_ids(token) == token_id, token
        assert tokenizer.encode(token, add_special_tokens=False) == [token_id], token
        assert tokenizer.decode([token_id]) == token
    assert tokenizer.vocab_size == 151643
    assert len(tokenizer) == 151727


def test_tokenizer_specials_and_settings(tokenizer):
    assert tokenizer.eos_token == "<|endoftext|>" and tokenizer.eos_token_id == 151643
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.pad_token_id == 151643
    assert tokenizer.bos_token is None
    assert tokenizer.split_special_tokens is False
    # No bos, no eos added: the TTS prompt is exactly the tokens written.
    assert tokenizer.encode("<|tts|>", add_special_tokens=True) == [151667]
    # The real tokenizer's special flags: the Qwen tool/fim tokens are not special, the Higgs tokens are.
    assert tokenizer.added_tokens_decoder[151657].special is False
    assert tokenizer.added_tokens_decoder[151664].special is False
    assert tokenizer.added_tokens_decoder[151656].special is True
    assert tokenizer.added_tokens_decoder[151681].special is True


def test_tags_inside_text_and_round_trip(tokenizer):
    text = "<|tts|><|text|><|emotion:awe|>Hello world, this is ünïcode 😀 and 42!<|sfx:laughter|>Haha<|audio|>"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert ids[:3] == [151667, 151672, 151692]
    assert ids[-1] == 151670
    assert 151708 in ids
    assert max(i for i in ids if i < 151643) < 600  # ordinary text uses the small BPE, never a filler id
    assert tokenizer.decode(ids) == text
    plain = "The quick brown fox, naïve café: 1234.\nNew line\ttab."
    assert tokenizer.decode(tokenizer.encode(plain, add_special_tokens=False)) == plain
    # A misspelled tag is ordinary text: several pieces, none of them an added token.
    wrong = tokenizer.encode("<|emotion:happy|>", add_special_tokens=False)
    assert len(wrong) > 1 and all(i < 151643 for i in wrong)


def test_tokenizer_is_deterministic(tmp_path, tokenizer_dir):
    again = write_tiny_tokenizer(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (again / name).read_bytes() == (tokenizer_dir / name).read_bytes()


# ----------------------------------------------------------------------------------------------- original format
def test_original_config_matches_the_real_one():
    assert original_config() == json.loads(REFERENCE_CONFIG_JSON)
    # Same keys in the same order at every level, only dimensions differ for the tiny one.
    tiny = original_config(hidden_size=32, num_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                           intermediate_size=64)
    real = json.loads(REFERENCE_CONFIG_JSON)
    assert list(tiny) == list(real)
    assert list(tiny["text_config"]) == list(real["text_config"])
    assert list(tiny["audio_encoder_config"]) == list(real["audio_encoder_config"])


def test_original_lm_tensor_names_and_shapes_match_the_real_checkpoint():
    real = {}
    for line in REFERENCE_LM_TENSORS_TSV.strip().splitlines():
        name, shape, dtype = line.split("\t")
        real[name] = tuple(json.loads(shape))
    shapes = original_lm_shapes(json.loads(REFERENCE_CONFIG_JSON))
    assert len(shapes) == 2 + 36 * 11 + 1
    assert {k: v for k, v in shapes.items() if k in real} == real
    assert set(real) <= set(shapes)


def test_tiny_original_checkpoint_files_and_tensors(original_dir):
    assert sorted(os.listdir(original_dir)) == [
        "LICENSE",
        "chat_template.jinja",
        "config.json",
        "higgs_audio_v2_tokenizer_config.json",
        "model.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    with open(original_dir / "config.json") as f:
        config = json.load(f)
    assert config["model_type"] == "higgs_multimodal_qwen3"
    assert config["text_config"]["vocab_size"] == 151936 and config["_vocab_size"] == 151936
    assert config["text_config"]["hidden_size"] == 32 and config["audio_encoder_config"]["out_dim"] == 32
    assert config["text_config"]["num_hidden_layers"] == 2 and len(config["text_config"]["layer_types"]) == 2

    with safe_open(str(original_dir / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
        dtypes = {f.get_slice(name).get_dtype() for name in names}
        embed_shape = f.get_slice("tied.embedding.text_embedding.weight").get_shape()
        audio_shape = f.get_slice("tied.embedding.modality_embeddings.0.embedding.weight").get_shape()
    assert dtypes == {"BF16"}
    assert embed_shape == [151936, 32] and audio_shape == [8 * 1026, 32]
    layer_names = {
        f"body.layers.{i}.{suffix}"
        for i in range(2)
        for suffix in (
            "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
            "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
            "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
        )
    }
    prefix = "tied.embedding.modality_embeddings.0.model."
    codec_names = {prefix + n for n in codec_state_dict_names(tiny_codec_config())}
    assert names == layer_names | codec_names | {
        "tied.embedding.text_embedding.weight",
        "tied.embedding.modality_embeddings.0.embedding.weight",
        "body.norm.weight",
        prefix + "semantic_model.masked_spec_embed",
    }
    with open(original_dir / "model.safetensors.index.json") as f:
        index = json.load(f)
    assert index["weight_map"] == {name: "model.safetensors" for name in names}
    tensors = load_file(original_dir / "model.safetensors")
    assert index["metadata"]["total_size"] == sum(t.numel() * 2 for t in tensors.values())
    assert "<|im_start|>" in (original_dir / "chat_template.jinja").read_text()
    # The codec config file: the real file's keys (bookkeeping included), the tiny codec's values.
    with open(original_dir / "higgs_audio_v2_tokenizer_config.json") as f:
        codec_file = json.load(f)
    with open(REFERENCE_DIR / "higgs_audio_v2_tokenizer_config.json") as f:
        assert sorted(codec_file) == sorted(json.load(f))
    assert read_codec_config_file(original_dir / "higgs_audio_v2_tokenizer_config.json") == tiny_codec_config()


def test_the_codec_config_file_can_be_left_out(tmp_path):
    directory = write_tiny_original_checkpoint(tmp_path, write_codec_config=False)
    assert not (directory / "higgs_audio_v2_tokenizer_config.json").exists()
    with safe_open(str(directory / "model.safetensors"), framework="pt") as f:
        assert any(name.startswith("tied.embedding.modality_embeddings.0.model.") for name in f.keys())


def test_tiny_codec_config_is_the_real_one_with_small_widths():
    tiny, real = tiny_codec_config(), REAL_CODEC_CONFIG
    assert list(tiny) == list(real)
    for key, value in tiny.items():
        if isinstance(value, dict):
            assert list(value) == list(real[key])
            changed = {k: v for k, v in value.items() if v != real[key][k]}
            assert changed == TINY_CODEC_OVERRIDES[key], key
        elif value != real[key]:
            assert TINY_CODEC_OVERRIDES[key] == value, key
    # The strides, sample rates and quantizer count stay real: 24 kHz, hop 960, 8 codebooks of 1024.
    for key in ("sample_rate", "downsample_factor", "target_bandwidths", "codebook_size", "strides"):
        assert tiny[key] == real[key]
    assert tiny["acoustic_model_config"]["downsampling_ratios"] == real["acoustic_model_config"]["downsampling_ratios"]
    assert tiny_codec_config() is not tiny and tiny_codec_config() == tiny


def test_tiny_original_checkpoint_is_deterministic(tmp_path, original_dir):
    again = write_tiny_original_checkpoint(tmp_path / "again")
    for name in os.listdir(original_dir):
        assert (again / name).read_bytes() == (original_dir / name).read_bytes(), name
    other_dir = write_tiny_original_checkpoint(tmp_path / "other", seed=1, with_codec=False)
    other = load_file(other_dir / "model.safetensors")
    first = load_file(original_dir / "model.safetensors")
    assert not torch.equal(other["body.norm.weight"], first["body.norm.weight"])
    assert not any(name.startswith("tied.embedding.modality_embeddings.0.model.") for name in other)


def test_untied_heads_option(tmp_path):
    directory = write_tiny_original_checkpoint(tmp_path, with_codec=False, untied_heads=True)
    tensors = load_file(directory / "model.safetensors")
    assert tensors["tied.head.text_head.weight"].shape == (151936, 32)
    assert tensors["tied.head.modality_heads.0.weight"].shape == (8 * 1026, 32)
    assert not torch.equal(tensors["tied.head.modality_heads.0.weight"],
                           tensors["tied.embedding.modality_embeddings.0.embedding.weight"])
    with open(directory / "config.json") as f:
        config = json.load(f)
    assert config["text_config"]["tie_word_embeddings"] is False
    assert config["audio_encoder_config"]["tie_word_embeddings"] is False


def test_command_line_writes_an_original_checkpoint(tmp_path, capsys):
    from higgs_v3.cli.main import main

    assert main(["make-tiny", "--original", str(tmp_path / "cli"), "--no-codec"]) == 0
    assert "Wrote a tiny original" in capsys.readouterr().out
    with open(tmp_path / "cli" / "config.json") as f:
        assert json.load(f)["model_type"] == "higgs_multimodal_qwen3"


# ------------------------------------------------------------------------------------------------ tiny random model
@pytest.fixture(scope="module")
def tiny_random_dir(tiny_random_repo):
    return tiny_random_repo


def test_tiny_random_model_files(tiny_random_dir, tmp_path):
    directory = tiny_random_dir
    files = set(os.listdir(directory))
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "processor_config.json", "modeling_higgs_v3.py", "configuration_higgs_v3.py", "codec_higgs_v3.py",
            "processing_higgs_v3.py", "audio_io_higgs_v3.py"} <= files
    with open(directory / "config.json") as f:
        config = json.load(f)
    assert config["model_type"] == "higgs_audio_v3"
    assert config["auto_map"]["AutoModelForTextToWaveform"] == "modeling_higgs_v3.HiggsAudioV3ForConditionalGeneration"
    assert config["codec_config"] == tiny_codec_config()
    with open(directory / "generation_config.json") as f:
        generation = json.load(f)
    assert generation["do_sample"] is True and generation["temperature"] == 1.0
    assert generation["max_new_tokens"] == MAX_NEW_TOKENS
    assert generation.get("top_k") in (None, 0) and generation.get("top_p") in (None, 1.0)
    check_output_folder(directory)  # config with auto_map, every code file auto_map needs, weights, tokenizer
    # Byte-identical tensors from the same seed.
    again = make_tiny_random_model(tmp_path / "again")
    assert (again / "model.safetensors").read_bytes() == (directory / "model.safetensors").read_bytes()


@pytest.mark.integration
def test_tiny_random_model_loads_with_remote_code(tiny_random_dir):
    directory = tiny_random_dir
    processor = AutoProcessor.from_pretrained(directory, trust_remote_code=True)
    assert type(processor).__name__ == "HiggsAudioV3Processor"
    assert processor(text="Hello.", return_tensors="pt")["input_ids"][0, 0].item() == 151667
    model = AutoModel.from_pretrained(directory, trust_remote_code=True).eval()
    assert type(model).__name__ == "HiggsAudioV3ForConditionalGeneration"
    assert model.codec is not None
    ids = torch.tensor([[151667, 151672, 9707, 151670]])
    logits = model(input_ids=ids).logits
    assert logits.shape == (8, 4, 1026)  # [batch * num_codebooks, positions, codebook_size]
    # Random codebooks: a clip encodes to varied codes, and different codes decode to different audio.
    torch.manual_seed(0)
    codes = model.codec.encode(torch.randn(1, 1, 960 * 6) * 0.3)
    assert codes.shape == (1, 8, 6) and len(set(codes.flatten().tolist())) > 8
    quiet = model.codec.decode(torch.zeros(1, 8, 6, dtype=torch.long))
    assert not torch.equal(model.codec.decode(codes), quiet)
