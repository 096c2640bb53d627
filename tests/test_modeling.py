"""The model: forward shapes, placeholder substitution, tying, text head parity with Qwen3, loss, save/load round
trips with remote code (in process; in a fresh process as an integration test), and bad input."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from transformers import Qwen3Config, Qwen3ForCausalLM

from conftest import tiny_config, tiny_model
from higgs_v3 import HiggsAudioV3Config, HiggsAudioV3ForConditionalGeneration
from higgs_v3.conversion.original_format import REAL_CODEC_CONFIG
from higgs_v3.generation_higgs_v3 import _audio_code_offsets


C, V = 8, 1026
PROMPT = [151667, 151679, -100, -100, -100, 151672, 9707, 11, 1879, 151670]


def test_forward_logits_are_musicgen_rows_of_the_tied_head(model):
    """`logits` `[batch * C, positions, V]`, row `b * C + c` = codebook `c` of sequence `b`: each row's logits are the
    backbone's hidden states times that codebook's block of the fused embedding (the head is tied to it), whatever
    positions are kept (a decode step's one position is a view of the same numbers)."""
    rows = torch.randint(0, V, (3, C), generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([PROMPT, [151643] * 4 + [151667, 151672, 9707, 11, 1879, 151670]])
    mask = (ids != 151643).long()
    out = model(input_ids=ids, attention_mask=mask, audio_input_ids=rows)
    hidden = model.model(inputs_embeds=model.build_inputs_embeds(ids, rows), attention_mask=mask).last_hidden_state
    weight = model.audio_embed.weight  # [C * V, H]
    expected = torch.stack([hidden[b] @ weight[c * V:(c + 1) * V].T for b in range(2) for c in range(C)])  # [2C, L, V]
    assert out.logits.shape == (2 * C, len(PROMPT), V) and out.text_logits is None
    torch.testing.assert_close(out.logits, expected, rtol=0, atol=1e-5)
    last = model(input_ids=ids, attention_mask=mask, audio_input_ids=rows, logits_to_keep=1, return_text_logits=True)
    assert last.logits.shape == (2 * C, 1, V) and last.text_logits.shape == (2, 1, 151936)
    torch.testing.assert_close(last.logits, expected[:, -1:], rtol=0, atol=1e-5)
    assert model.audio_head.weight is weight


def test_forward_takes_exactly_one_of_input_ids_and_inputs_embeds(model):
    ids = torch.tensor([[151667, 151672, 9707, 151670]])
    for kwargs in ({}, {"input_ids": ids, "inputs_embeds": model.build_inputs_embeds(ids)}):
        with pytest.raises(ValueError, match=r"^You must specify exactly one of input_ids or inputs_embeds$"):
            model(**kwargs)
    assert "_codebook_rows" not in inspect.signature(model.forward).parameters  # one layout, no private flag


def test_placeholder_embeddings_replace_token_embeddings(model):
    rows = torch.tensor([[c * 7 + r for c in range(C)] for r in range(3)])
    embeds = model.build_inputs_embeds(torch.tensor([PROMPT]), rows)
    w_audio, w_text = model.audio_embed.weight, model.model.embed_tokens.weight
    for k, position in enumerate([2, 3, 4]):
        expected = sum(w_audio[c * V + int(rows[k, c])] for c in range(C))  # hand-computed sum of rows
        torch.testing.assert_close(embeds[0, position], expected, rtol=0, atol=1e-6)
    for position in [0, 1, 5, 6, 7, 8, 9]:
        assert torch.equal(embeds[0, position], w_text[PROMPT[position]])
    # [batch, rows, C] + mask gives the same as the flat rows.
    padded = torch.cat([rows, torch.zeros(2, C, dtype=torch.long)])[None]
    mask = torch.tensor([[True, True, True, False, False]])
    assert torch.equal(model.build_inputs_embeds(torch.tensor([PROMPT]), padded, mask), embeds)


def test_generation_embedding_path_equals_embed_audio_rows(model):
    """The decode step embeds the stock loop's newest column `[batch * C, 1]` with precomputed offsets; the result must
    equal `embed_audio_rows` of the same rows."""
    rows = torch.randint(0, V, (3, C))
    offsets = _audio_code_offsets(3, C, V, "cpu")
    assert offsets.shape == (3 * C, 1) and offsets[:C, 0].tolist() == [c * V for c in range(C)]
    column = rows.reshape(-1, 1)  # row b * C + c holds codebook c of sequence b
    fused = (column + offsets).view(-1, C)
    assert torch.equal(model._embed_fused_rows(fused), model.embed_audio_rows(rows))


def test_text_logits_equal_qwen3_for_causal_lm(model):
    fields = {k: v for k, v in model.config.to_dict().items() if k in Qwen3Config().to_dict()}
    qwen = Qwen3ForCausalLM(Qwen3Config(**fields, attn_implementation=model.config._attn_implementation)).eval()
    qwen.model.load_state_dict(model.model.state_dict(), strict=True)
    qwen.tie_weights()
    assert qwen.lm_head.weight is qwen.model.embed_tokens.weight
    ids = torch.tensor([[151667, 151672, 9707, 11, 1879, 151670]])
    ours = model(input_ids=ids, return_text_logits=True).text_logits
    theirs = qwen(input_ids=ids).logits
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_tying_holds(model):
    assert model.audio_head.weight is model.audio_embed.weight
    assert model.lm_head.weight is model.model.embed_tokens.weight
    names = set(model.state_dict())
    assert {"audio_embed.weight", "model.embed_tokens.weight"} <= names


def test_audio_loss_matches_manual_cross_entropy(model):
    """The loss reads forward's layout: per codebook, the mean cross-entropy of the logits at `p` against the labels
    at `p + 1` over every labelled pair of the batch (by hand, one pair at a time); with `logits_to_keep`, over the kept
    positions."""
    torch.manual_seed(0)
    ids = torch.tensor([[151667, 151672, 9707, 151670, 0, 0, 0], [151667, 151672, 11, 151670, 0, 0, 0]])
    rows = torch.randint(0, V, (2, 3, C))
    inputs_embeds = torch.cat([model.build_inputs_embeds(ids[:, :4]), model.embed_audio_rows(rows)], dim=1)
    labels = torch.full((2, 7, C), -100)
    labels[:, 4:] = rows
    labels[0, 5, 2] = -100  # one ignored code
    out = model(inputs_embeds=inputs_embeds, audio_labels=labels)
    logits = out.logits.float().view(2, C, 7, V)  # [B, C, L, V]
    for keep in (0, 3):
        first = 7 - keep if keep else 0  # positions scored: first .. 6
        pairs = [[(b, p - 1, int(labels[b, p, c])) for b in range(2) for p in range(first + 1, 7) if labels[b, p, c] != -100]
                 for c in range(C)]
        expected = torch.stack([torch.stack([F.cross_entropy(logits[b, c, p], torch.tensor(t)) for b, p, t in pairs[c]])
                                .mean() for c in range(C)])
        kept = out if not keep else model(inputs_embeds=inputs_embeds, audio_labels=labels, logits_to_keep=keep)
        torch.testing.assert_close(kept.audio_loss_per_codebook, expected)
        torch.testing.assert_close(kept.loss, expected.mean())
    out.loss.backward()
    assert model.audio_embed.weight.grad is not None
    model.zero_grad()


# ---------------------------------------------------------------------------------------------- bad input
def test_reference_rows_are_checked_once_at_generates_entry(model):
    """The placeholders against the rows and the rows' codes: refused by `generate` before anything runs (one host
    read each, never per step); `forward` trusts its inputs (transformers' contract)."""
    ids, rows = torch.tensor([PROMPT]), torch.zeros(3, C, dtype=torch.long)
    with pytest.raises(ValueError, match=r"^input_ids has 3 reference placeholder positions \(id -100\) but "
                                         r"audio_input_ids has 2 rows; each placeholder takes exactly one"):
        model.generate(input_ids=ids, audio_input_ids=rows[:2], max_new_tokens=2)
    with pytest.raises(ValueError, match=r"^input_ids has 3 reference placeholder positions \(id -100\) but no "
                                         r"audio_input_ids were given\.$"):
        model.generate(input_ids=ids, max_new_tokens=2)
    for value, got in ((1026, "values from 0 to 1026"), (-3, "values from -3 to 0")):
        bad = rows.clone()
        bad[1, 4] = value
        with pytest.raises(ValueError, match=re.escape(
                f"The reference rows (audio_input_ids) must be integer codes [..., frames, 8] with at least 1 frame, "
                f"each in 0..1025; got {got}.")):
            model.generate(input_ids=ids, audio_input_ids=bad, max_new_tokens=2)
    with pytest.raises(ValueError, match=re.escape("; got shape (3, 4).")):
        model.generate(input_ids=ids, audio_input_ids=torch.zeros(3, 4, dtype=torch.long), max_new_tokens=2)
    with pytest.raises(ValueError, match=re.escape("; got Tensor of dtype torch.float32.")):
        model.generate(input_ids=ids, audio_input_ids=rows.float(), max_new_tokens=2)
    with pytest.raises(ValueError, match=re.escape("got (1, 3, 8) and a mask of (1, 2).")):
        model.generate(input_ids=ids, audio_input_ids=rows[None], audio_input_ids_mask=torch.ones(1, 2), max_new_tokens=2)
    assert model(input_ids=ids, audio_input_ids=rows).logits.shape == (C, len(PROMPT), V)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(num_codebooks=1), r"num_codebooks must be at least 2 .*, got 1"),
        (dict(audio_boc_token_id=2000), r"audio_boc_token_id=2000 must lie in 0\.\.1025 \(codebook_size=1026\)"),
        (dict(audio_eoc_token_id=1024), r"audio_boc_token_id=1024 and audio_eoc_token_id=1024 must be two different codes"),
        (dict(codebook_size=1030), r"BOC and EOC must be the last two entries of each codebook"),
        (dict(tts_token_id=200000), r"tts_token_id=200000 must be a token id in 0\.\.151935"),
        (dict(frame_rate=7), r"sampling_rate=24000 must be a positive multiple of frame_rate=7"),
        (dict(num_codebooks=4, codec_config=REAL_CODEC_CONFIG),
         r"codec_config gives 8 quantizers .* but num_codebooks=4"),
    ],
)
def test_inconsistent_config(fields, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**fields)


def test_config_names_every_problem_of_its_audio_fields_and_codec_config_at_once():
    """One validator: the audio fields and the codec config (keys whose transformers defaults differ from the real
    codec, sub-configs of another kind) are checked together and every problem is named in one `ValueError`."""
    from higgs_v3.testing.tiny import tiny_codec_config

    with pytest.raises(ValueError) as error:
        tiny_config(num_codebooks=1, frame_rate=7, tts_token_id=200000)
    assert str(error.value) == (
        "num_codebooks must be at least 2 (the delay pattern's end needs a countdown of num_codebooks - 2 rows), got 1. "
        "sampling_rate=24000 must be a positive multiple of frame_rate=7. "
        "tts_token_id=200000 must be a token id in 0..151935 (vocab_size=151936).")
    cases = {
        "target_bandwidths": "codec_config lacks ['target_bandwidths']: the codec is always built from a complete "
                             "config (the transformers defaults differ from the real codec), e.g. the converter's "
                             "`REAL_CODEC_CONFIG`.",
        "downsampling_ratios": "codec_config['acoustic_model_config'] lacks ['downsampling_ratios'] (their DAC "
                               "defaults differ from the codec's).",
        "wavlm": "codec_config['semantic_model_config'] must be a 'hubert' config, got model_type='wavlm'.",
    }
    for case, message in cases.items():
        codec = tiny_codec_config()
        if case == "wavlm":
            codec["semantic_model_config"]["model_type"] = "wavlm"
        else:
            (codec["acoustic_model_config"] if case == "downsampling_ratios" else codec).pop(case)
        with pytest.raises(ValueError) as error:
            tiny_config(codec_config=codec)
        assert str(error.value) == message
    codec = tiny_codec_config()
    codec["sample_rate"], codec["codebook_size"] = 16000, 1000
    with pytest.raises(ValueError, match=r"^codec_config sample_rate=16000 differs from sampling_rate=24000\. "
                                         r"codec_config codebook_size=1000 must equal audio_boc_token_id=1024"):
        tiny_config(codec_config=codec)


# ---------------------------------------------------------------------------------------------- round trips
def _run(code: str, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environment, timeout=300)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny model saved with `save_pretrained` (remote code included), and the model itself."""
    model = tiny_model(seed=4)
    repo = tmp_path_factory.mktemp("saved") / "repo"
    model.save_pretrained(repo)
    return model, repo


def test_saved_repo_has_remote_code_auto_map_and_generation_config(saved):
    _, repo = saved
    files = set(os.listdir(repo))
    assert {"config.json", "generation_config.json", "model.safetensors", "configuration_higgs_v3.py",
            "modeling_higgs_v3.py", "generation_higgs_v3.py", "compat_higgs_v3.py", "delay_higgs_v3.py"} <= files
    config = json.loads((repo / "config.json").read_text())
    assert config["model_type"] == "higgs_audio_v3"
    assert config["auto_map"]["AutoModelForTextToWaveform"] == "modeling_higgs_v3.HiggsAudioV3ForConditionalGeneration"
    assert config["auto_map"]["AutoModel"] == "modeling_higgs_v3.HiggsAudioV3ForConditionalGeneration"
    generation = json.loads((repo / "generation_config.json").read_text())
    assert generation["max_new_tokens"] == 2048 and generation["do_sample"] is True


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_save_then_load_with_remote_code_in_process(saved, dtype):
    """The in-process half of the round trip (the fresh-process half is an integration test): the local class and
    the remote code (`transformers_modules....`) load every weight, keep the ties and give the same logits."""
    from transformers import AutoModel, AutoModelForTextToWaveform

    model, repo = saved
    ids, rows = torch.tensor([PROMPT]), torch.randint(0, 1024, (3, C))
    local = HiggsAudioV3ForConditionalGeneration.from_pretrained(repo, dtype=getattr(torch, dtype),
                                                                 attn_implementation="eager")
    expected = local(input_ids=ids, audio_input_ids=rows).logits
    if dtype == "float32":
        torch.testing.assert_close(expected, model(input_ids=ids, audio_input_ids=rows).logits, rtol=0, atol=0)
    remote, info = AutoModel.from_pretrained(repo, trust_remote_code=True, dtype=getattr(torch, dtype),
                                             output_loading_info=True, attn_implementation="eager")
    assert type(remote).__module__.startswith("transformers_modules"), type(remote).__module__
    assert all(not v for v in info.values()), info
    assert remote.audio_head.weight is remote.audio_embed.weight
    assert remote.lm_head.weight is remote.model.embed_tokens.weight
    logits = remote(input_ids=ids, audio_input_ids=rows).logits
    assert logits.dtype == getattr(torch, dtype)
    assert torch.equal(logits, expected), (logits - expected).abs().max()
    tts = AutoModelForTextToWaveform.from_pretrained(repo, trust_remote_code=True, device_map="auto")
    assert str(tts.device) == "cpu"


@pytest.mark.integration
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_save_then_load_with_remote_code_in_fresh_process(saved, tmp_path, dtype):
    """The round trip in a fresh process (nothing of this process's imports): loading info, ties, exact logits."""
    model, repo = saved
    ids = torch.tensor([PROMPT])
    rows = torch.randint(0, 1024, (3, C))
    torch.save({"ids": ids, "rows": rows}, tmp_path / "inputs.pt")
    local = HiggsAudioV3ForConditionalGeneration.from_pretrained(repo, dtype=getattr(torch, dtype),
                                                                 attn_implementation="eager")
    reference = local(input_ids=ids, audio_input_ids=rows).logits
    if dtype == "float32":
        torch.testing.assert_close(reference, model(input_ids=ids, audio_input_ids=rows).logits, rtol=0, atol=0)
    torch.save(reference, tmp_path / "expected.pt")
    result = _run(f"""
        import torch
        torch.set_num_threads({torch.get_num_threads()})  # same reduction order as this process
        from transformers import AutoModel, AutoModelForTextToWaveform
        model, info = AutoModel.from_pretrained({str(repo)!r}, trust_remote_code=True,
                                                dtype=torch.{dtype}, output_loading_info=True,
                                                attn_implementation="eager")
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        assert all(not v for v in info.values()), info
        assert model.audio_head.weight is model.audio_embed.weight
        assert model.lm_head.weight is model.model.embed_tokens.weight
        inputs = torch.load({str(tmp_path / 'inputs.pt')!r})
        logits = model(input_ids=inputs["ids"], audio_input_ids=inputs["rows"]).logits
        expected = torch.load({str(tmp_path / 'expected.pt')!r})
        assert logits.dtype == torch.{dtype}, logits.dtype
        assert torch.equal(logits, expected), (logits - expected).abs().max()
        tts = AutoModelForTextToWaveform.from_pretrained({str(repo)!r}, trust_remote_code=True, device_map="auto")
        assert str(tts.device) == "cpu"
        print("OK")
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK")


def test_auto_map_holds_only_the_classes_that_fit(tmp_path):
    """No `AutoModelForTextToSpectrogram` (the pipeline would treat the model as a spectrogram model and fetch a
    vocoder); a config written by an earlier conversion with it loses it when loaded, so a re-save drops it."""
    from higgs_v3.configuration_higgs_v3 import AUTO_MAP, HiggsAudioV3Config

    expected = {
        "AutoConfig": "configuration_higgs_v3.HiggsAudioV3Config",
        "AutoModel": "modeling_higgs_v3.HiggsAudioV3ForConditionalGeneration",
        "AutoModelForTextToWaveform": "modeling_higgs_v3.HiggsAudioV3ForConditionalGeneration",
    }
    assert AUTO_MAP == expected
    old = HiggsAudioV3Config(num_hidden_layers=1).to_dict()
    old["auto_map"] = {**expected, "AutoModelForTextToSpectrogram": expected["AutoModel"]}
    (tmp_path / "config.json").write_text(json.dumps(old))
    loaded = HiggsAudioV3Config.from_pretrained(tmp_path)
    assert loaded.auto_map == expected
    loaded.save_pretrained(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "config.json").read_text())["auto_map"] == expected


def test_a_config_of_another_model_type_is_refused(tmp_path):
    """transformers only warns when a config.json of another `model_type` is read into HiggsAudioV3Config (and builds
    one from the other model's fields): refused, through the config class and the model class alike."""
    Qwen3Config(num_hidden_layers=1).save_pretrained(tmp_path)
    message = (f"{str(tmp_path)!r} holds a config of model_type 'qwen3', not a Higgs Audio v3 one ('higgs_audio_v3'); "
               "give a converted Higgs Audio v3 checkpoint (an original one converts with convert_checkpoint.py or "
               "`higgs_v3.from_original`).")
    for loader in (HiggsAudioV3Config, HiggsAudioV3ForConditionalGeneration):
        with pytest.raises(ValueError) as error:
            loader.from_pretrained(tmp_path)
        assert str(error.value) == message
    no_type = HiggsAudioV3Config(num_hidden_layers=1).to_dict()
    del no_type["model_type"]
    (tmp_path / "config.json").write_text(json.dumps(no_type))
    assert HiggsAudioV3Config.from_pretrained(tmp_path).num_hidden_layers == 1  # no model_type: read as before


def test_the_codec_stays_float32_when_the_model_is_cast(tmp_path):
    """`model.to(torch.bfloat16)`, `half()` and `bfloat16()` cast the language model only: the codec keeps its float32
    weights bit for bit (never rounded through half precision), the module order and the head tying are kept, and the
    cast model still makes float32 audio. The command line's `--dtype auto` is float32 on a CPU."""
    from higgs_v3.testing import tiny
    from higgs_v3.cli.models import auto_dtype, load_model

    torch.manual_seed(0)
    model = HiggsAudioV3ForConditionalGeneration(tiny.tiny_config()).eval()
    names = list(model.state_dict())
    codec = {name: value.clone() for name, value in model.codec.state_dict().items()}
    for cast in (lambda m: m.to(torch.bfloat16), lambda m: m.half(), lambda m: m.bfloat16(),
                 lambda m: m.to("cpu", torch.float16)):
        model = cast(model)
        assert model.audio_embed.weight.dtype in (torch.bfloat16, torch.float16)
        assert model.model.layers[0].mlp.up_proj.weight.dtype == model.audio_embed.weight.dtype
        assert {p.dtype for p in model.codec.parameters()} == {torch.float32}
        assert all(torch.equal(codec[name], value) for name, value in model.codec.state_dict().items())
        assert list(model.state_dict()) == names and model.audio_head.weight is model.audio_embed.weight
    model = model.to(torch.bfloat16)
    out = model.generate(input_ids=torch.tensor([[151667, 151672, 9707, 151670]]), max_new_tokens=10, seed=0,
                         return_dict_in_generate=True)
    assert out.audio[0].dtype == torch.float32 and out.audio[0].numel() > 0
    model.float()
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    # --dtype auto: float32 on a CPU (also for a checkpoint saved in bfloat16), bfloat16 on CUDA.
    assert (auto_dtype(torch.device("cpu")), auto_dtype(torch.device("cuda", 0)), auto_dtype(torch.device("mps"))) == (
        "float32", "bfloat16", "float32")
    model.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    loaded = load_model(tmp_path / "bf16", "cpu", "auto")
    assert loaded.audio_embed.weight.dtype == torch.float32
    asked = load_model(tmp_path / "bf16", "cpu", "bfloat16")
    assert asked.audio_embed.weight.dtype == torch.bfloat16
    assert {p.dtype for p in asked.codec.parameters()} == {torch.float32}


# ------------------------------------------------------------------------------- transformers' common tests, mirrored
def test_keep_in_fp32_modules_exist(model):
    """As transformers' `test_keep_in_fp32_modules_exist`: every name in the fp32 lists matches a state-dict module.
    The codec is in the strict list only (fp32 in fp16 and bf16 loads alike), and a model without a codec lists
    nothing."""
    from higgs_v3.testing import tiny

    with_codec = tiny_model(codec_config=tiny.tiny_codec_config())
    assert (with_codec._keep_in_fp32_modules, with_codec._keep_in_fp32_modules_strict) == (set(), {"codec"})
    names = list(with_codec.state_dict())
    assert all(any(re.search(rf"(?:^|\.){module}(?:\.|$)", name) for name in names)
               for module in with_codec._keep_in_fp32_modules_strict)
    assert model.codec is None and (model._keep_in_fp32_modules, model._keep_in_fp32_modules_strict) == (set(), set())


def test_keep_in_fp32_modules(tmp_path):
    """As transformers' `test_keep_in_fp32_modules`: saved, then loaded in fp16 (which upcasts both lists) and in bf16
    (the strict list only): the codec's parameters are float32 in both, every other parameter is in the dtype asked."""
    from higgs_v3.testing import tiny

    tiny_model(codec_config=tiny.tiny_codec_config()).save_pretrained(tmp_path)
    for dtype in (torch.float16, torch.bfloat16):
        loaded = HiggsAudioV3ForConditionalGeneration.from_pretrained(tmp_path, dtype=dtype)
        dtypes = {name: param.dtype for name, param in loaded.named_parameters()}
        assert {d for name, d in dtypes.items() if name.startswith("codec.")} == {torch.float32}
        assert {d for name, d in dtypes.items() if not name.startswith("codec.")} == {dtype}


def test_eager_matches_sdpa_inference_with_output_attentions(model):
    """As transformers' `test_eager_matches_sdpa_inference` with `output_attentions=True`, which runs only for models
    whose `forward(**kwargs: Unpack[TransformersKwargs])` says they can return attentions (its `_can_output_attn`):
    eager returns one `[batch, heads, L, L]` map per layer whose rows sum to 1, and sdpa the same logits."""
    kwargs = inspect.signature(model.forward).parameters["kwargs"]
    assert "output_attentions" in kwargs.annotation.__args__[0].__annotations__  # transformers' `_can_output_attn`
    ids = torch.tensor([[151643, 151643, 151667, 151672, 9707, 11, 1879, 151670], [151667, 151672, 9707, 11, 1879, 11,
                                                                                  1879, 151670]])
    mask = (ids != 151643).long()
    eager = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    sdpa_model = tiny_model(attn_implementation="sdpa")
    sdpa = sdpa_model(input_ids=ids, attention_mask=mask, output_attentions=True)
    config = model.config
    assert len(eager.attentions) == config.num_hidden_layers
    assert all(a.shape == (2, config.num_attention_heads, 8, 8) for a in eager.attentions)
    torch.testing.assert_close(eager.attentions[0].sum(-1)[0, :, 2:], torch.ones(config.num_attention_heads, 6))
    assert (eager.attentions[0][0, :, :, :2][:, 2:] == 0).all()  # the left padding gets no weight
    torch.testing.assert_close(sdpa.logits[:, 2:], eager.logits[:, 2:], rtol=1e-4, atol=1e-4)
