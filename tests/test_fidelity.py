"""What makes this port compute what the official server computes (docs/FIDELITY.md): the logits processors that
default generation actually builds (temperature 1.0 and nothing else), the bf16 / fp16 fused embedding summed with one
rounding in the prefill and in every decode step, and the 4096-position limit of one request."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch
from transformers import GenerationMixin, pipeline

from conftest import tiny_model
from higgs_v3 import HiggsAudioV3ForConditionalGeneration, HiggsAudioV3Processor, generation_higgs_v3
from higgs_v3.cli.main import main
from higgs_v3.generation_higgs_v3 import MAX_POSITIONS, default_generation_config
from higgs_v3.sampling_higgs_v3 import HiggsAudioV3SeededSampler, counter_uniform


C, V = 8, 1026
TTS, TEXT, AUDIO, REF_AUDIO, PLACEHOLDER = 151667, 151672, 151670, 151679, -100
PROMPT = torch.tensor([[TTS, TEXT, 9707, 11, 1879, AUDIO]])


@pytest.fixture
def applied(monkeypatch):
    """The logits processors the stock loop really runs, one list per `generate` call, recorded where transformers
    builds them (so remote-code classes, the pipeline and the command line are seen too)."""
    calls = []
    original = GenerationMixin._get_logits_processor

    def recording(self, *args, **kwargs):
        processors = original(self, *args, **kwargs)
        calls.append([type(p).__name__ for p in processors])
        return processors

    monkeypatch.setattr(GenerationMixin, "_get_logits_processor", recording)
    return calls


DEFAULT = ["HiggsAudioV3DelayPatternLogitsProcessor", "HiggsAudioV3SeededSampler"]


# ---------------------------------------------------------------------------------------------- default sampling
def test_default_generation_applies_temperature_one_and_nothing_else(model, applied):
    model.generate(input_ids=PROMPT, max_new_tokens=3, seed=0)
    assert applied == [DEFAULT]
    config = default_generation_config(model.config)
    assert (config.do_sample, config.temperature, config.top_k, config.top_p, config.min_p) == (True, 1.0, 0, 1.0, None)
    # Written out as off, so `generation_config.json` means the same to any reader.
    assert {"top_k": 0, "top_p": 1.0}.items() <= config.to_diff_dict().items()


def test_user_warpers_apply_in_the_spec_order(model, applied):
    model.generate(input_ids=PROMPT, max_new_tokens=3, seed=0, temperature=0.7, top_k=5, top_p=0.9, min_p=0.05)
    assert applied == [["TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper", *DEFAULT]]
    model.generate(input_ids=PROMPT, max_new_tokens=3, do_sample=False, top_k=5)  # greedy: no warper, no draw
    assert applied[-1] == ["HiggsAudioV3DelayPatternLogitsProcessor"]


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory, tiny_random_repo):
    """The converted tiny random model (codec included) with a short generation limit."""
    from transformers import GenerationConfig

    folder = Path(shutil.copytree(tiny_random_repo, tmp_path_factory.mktemp("repo") / "tiny"))
    config = GenerationConfig.from_pretrained(folder)
    config.max_new_tokens = 12
    config.save_pretrained(folder)
    return folder


def test_the_pipeline_and_the_command_line_apply_the_defaults_too(tiny_repo, tmp_path, applied):
    model = HiggsAudioV3ForConditionalGeneration.from_pretrained(tiny_repo)
    assert (model.generation_config.top_k, model.generation_config.top_p) == (0, 1.0)
    processor = HiggsAudioV3Processor.from_pretrained(tiny_repo)
    tts = pipeline("text-to-speech", model=model, tokenizer=processor.tokenizer, processor=processor)
    tts("Hello there.", forward_params={"seed": 1, "max_new_tokens": 12})
    assert applied == [DEFAULT]
    assert main(["speak", "--model", str(tiny_repo), "--device", "cpu", "-q", "Hello.", "-o", str(tmp_path / "a.wav")]) == 0
    assert applied[1:] and all(names == DEFAULT for names in applied[1:])


# ---------------------------------------------------------------------------------------------- fused embedding
def summed_by_index(weight: torch.Tensor, rows: torch.LongTensor) -> torch.Tensor:
    """The official server's fused embedding, `F.embedding(rows + offsets, W).sum(-2)`, written with plain indexing:
    `[..., C]` rows -> `[..., H]`, one reduction in the weight's dtype (one rounding)."""
    offsets = torch.arange(C) * V
    return weight[rows + offsets].sum(-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cache", [{}, dict(cache_implementation="static"), dict(use_cache=False)])
def test_fused_embedding_rounds_once_in_prefill_and_every_step(dtype, cache):
    model = tiny_model(seed=2).to(dtype)
    weight = model.audio_embed.weight
    reference = torch.randint(0, 1024, (9, C), generator=torch.Generator().manual_seed(0))
    prompt = torch.tensor([[TTS, REF_AUDIO, *[PLACEHOLDER] * 9, TEXT, 9707, 11, AUDIO]])
    seen = []
    handle = model.model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs["inputs_embeds"]),
                                                   with_kwargs=True)
    try:
        rows = model.generate(input_ids=prompt, audio_input_ids=reference, do_sample=False, max_new_tokens=6, **cache)
    finally:
        handle.remove()
    assert seen[0].dtype == dtype
    assert torch.equal(seen[0][0, 2:11], summed_by_index(weight, reference))  # the reference rows in the prefill
    steps = seen[1:]
    assert len(steps) == rows.shape[1] - 1
    for step, embeds in enumerate(steps):  # each decode step feeds the previous row (all rows without a cache)
        assert torch.equal(embeds[0, -1], summed_by_index(weight, rows[0, step])), f"step {step + 1}"


def test_one_rounding_differs_from_rounding_while_adding():
    """The reason for the above: in bf16, `embedding_bag` (round after every add) and one rounded sum differ."""
    weight = torch.randn(C * V, 256, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    rows = torch.randint(0, 1024, (64, C), generator=torch.Generator().manual_seed(2))
    once = summed_by_index(weight, rows)
    bag = torch.nn.functional.embedding_bag(rows + torch.arange(C) * V, weight, mode="sum")
    assert not torch.equal(once, bag)


# ---------------------------------------------------------------------------------------------- position limit
def test_max_new_tokens_is_clipped_to_the_position_limit(model, monkeypatch):
    warnings = []
    monkeypatch.setattr(generation_higgs_v3.logger, "warning", warnings.append)
    rows = model.generate(input_ids=PROMPT, do_sample=False, max_new_tokens=20, max_positions=PROMPT.shape[1] + 9)
    assert rows.shape[1] == 9
    assert warnings[0] == (
        "max_new_tokens=20 after a 6-position prompt would pass the limit of 15 positions (max_positions, the official "
        "server's); generating at most 9 rows."
    )
    assert MAX_POSITIONS == 4096


def test_a_prompt_that_fills_the_limit_is_refused(model):
    with pytest.raises(ValueError, match=re.escape(
        "The prompt has 6 positions, but one request may use at most max_positions=6 (prompt plus generated rows, the "
        "official server's limit)."
    )):
        model.generate(input_ids=PROMPT, max_new_tokens=2, max_positions=6)
    assert model.generate(input_ids=PROMPT, do_sample=False, max_new_tokens=3, max_positions=None).shape[1] == 3


def test_sampler_memory_is_bounded_and_blocks_do_not_change_the_draws():
    """The seeded sampler keeps `block_steps` steps of uniforms (not `max_new_tokens`); every step's draw still uses
    the counter-based uniform of (seed, step, codebook), across block boundaries."""
    seeds = torch.tensor([3, 2**40 + 1])
    sampler = HiggsAudioV3SeededSampler(seeds, C, prompt_length=5)
    scores = torch.randn(2 * C, V, generator=torch.Generator().manual_seed(4))
    cdf = torch.softmax(scores, -1).cumsum(-1)
    for step in (0, 1, 255, 256, 257, 600, 3):
        drawn = sampler(torch.zeros(2 * C, 5 + step, dtype=torch.long), scores).argmax(-1)  # [B*C]
        uniform = counter_uniform(seeds.repeat_interleave(C), step, torch.arange(2 * C) % C, C)  # [B*C]
        expected = (cdf > (uniform * cdf[:, -1])[:, None]).int().argmax(-1)  # first entry whose cdf passes it
        assert torch.equal(drawn, expected), step
        assert sampler.uniforms.shape == (sampler.block_steps, 2 * C)


# ---------------------------------------------------------------------------------------------- bf16 greedy parity
def cached_reference_generate(model, prompt, reference_rows, max_new_tokens):
    """Greedy rows of one sequence as the spec words them (§5-§6), with the backbone's own KV cache as the official
    server runs it: fused embeddings summed with one rounding in the model dtype (`W[rows + offsets].sum(-2)`), the
    head on the last position, fp32 logits, argmax, the state machine of `oracles.SpecStateMachine`. Nothing of our
    generation code (input preparation, logits processors, stopping criterion) is used."""
    from transformers import DynamicCache

    from oracles import SpecStateMachine

    config = model.config
    weight = model.audio_embed.weight  # [C * V, H]
    offsets = torch.arange(config.num_codebooks) * config.codebook_size
    cache, machine, rows = DynamicCache(config=config), SpecStateMachine(config.num_codebooks), []
    with torch.no_grad():
        embeds = model.model.embed_tokens(prompt.clamp(min=0))  # [L, H]
        if reference_rows is not None:
            embeds[prompt == config.audio_placeholder_id] = weight[reference_rows + offsets].sum(-2)  # replaces
        inputs = embeds[None]
        for _ in range(max_new_tokens):
            hidden = model.model(inputs_embeds=inputs, past_key_values=cache, use_cache=True).last_hidden_state
            logits = (hidden[0, -1] @ weight.T).float().view(config.num_codebooks, config.codebook_size)
            row = logits.argmax(-1).tolist()
            done = machine.step(row)
            rows.append(row)
            if done:
                break
            inputs = weight[torch.tensor(row) + offsets].sum(-2)[None, None]  # [1, 1, H]
    return torch.tensor(rows)


@pytest.mark.integration
def test_bf16_greedy_rows_equal_the_spec_at_the_real_width():
    """At the real layer width (2560) bf16 rounding decides greedy rows: a fused embedding that rounds while it adds
    diverges within a few rows. Two layers, random weights (std 0.02 as initialised, embeddings scaled up so the audio
    logits are not flat), plain and clone prompts."""
    from oracles import clone_prompt, plain_prompt

    torch.manual_seed(0)
    model = tiny_model(
        hidden_size=2560, intermediate_size=9728, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        num_hidden_layers=2, initializer_range=0.02,
    ).to(torch.bfloat16)
    with torch.no_grad():
        model.audio_embed.weight.mul_(8)
    reference = torch.randint(0, 1024, (12, C), generator=torch.Generator().manual_seed(1))
    cases = [(plain_prompt(), None), (plain_prompt((40, 1079, 13)), None), (clone_prompt(12), reference)]
    for prompt, rows in cases:
        expected = cached_reference_generate(model, prompt, rows, 24)
        ours = model.generate(input_ids=prompt[None], audio_input_ids=rows, do_sample=False, max_new_tokens=24)
        assert ours.shape[1] == expected.shape[0], prompt.tolist()  # it stops where the spec's loop stops
        assert torch.equal(ours[0], expected), prompt.tolist()


def test_generation_options_raise_no_library_warnings(model):
    """The stock loop is told greedy with neutral sampling fields: none of its "flag only used in sample mode" or
    "not valid and may be ignored" warnings may reach a user, whatever options they pass."""
    import logging

    import warnings

    records = []
    handler = logging.Handler(level=logging.WARNING)
    handler.emit = records.append
    library = logging.getLogger("transformers")
    library.addHandler(handler)
    logging.Logger.warning_once.cache_clear()  # transformers' once-per-process warnings: as in a fresh process
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.generate(input_ids=PROMPT, max_new_tokens=3, seed=1)
            model.generate(input_ids=PROMPT, max_new_tokens=3, do_sample=False)
            model.generate(input_ids=PROMPT, max_new_tokens=3, seed=1, temperature=0.5, top_k=4, top_p=0.5, min_p=0.1)
    finally:
        library.removeHandler(handler)
    assert [r.getMessage() for r in records] == []
    assert [str(w.message) for w in caught if "transformers" in w.filename] == []


def test_a_users_generation_config_takes_the_models_defaults_for_what_it_leaves_unset(model, applied):
    from transformers import GenerationConfig

    rows = model.generate(input_ids=PROMPT, generation_config=GenerationConfig(max_new_tokens=4), seed=3)
    assert applied == [DEFAULT]  # sampling at temperature 1.0, as the model's defaults say; not greedy
    assert torch.equal(rows, model.generate(input_ids=PROMPT, max_new_tokens=4, seed=3))


def test_output_audio_without_a_codec_is_refused_before_generating(model):
    with pytest.raises(ValueError, match=re.escape("output_audio=True needs the codec, and this model has none")):
        model.generate(input_ids=PROMPT, max_new_tokens=3, output_audio=True, return_dict_in_generate=True)


def test_steps_without_a_cache_do_not_check_the_prompt_again(model, monkeypatch):
    """Without a KV cache every step embeds the prompt again; its checks (host reads) ran once, at `generate`'s entry."""
    from oracles import clone_prompt

    calls = []
    check = generation_higgs_v3.codes_problem
    monkeypatch.setattr(generation_higgs_v3, "codes_problem", lambda *args: calls.append(args[3]) or check(*args))
    reference = torch.randint(0, 1024, (4, C), generator=torch.Generator().manual_seed(5))
    model.generate(input_ids=clone_prompt(4)[None], audio_input_ids=reference, do_sample=False, max_new_tokens=5,
                   use_cache=False)
    assert calls == ["the reference rows (audio_input_ids)"]
