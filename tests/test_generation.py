"""`generate()` against a slow reference loop written straight from the spec (§6-§7), plus termination, batching,
seeds, caches, streaming and rejected options."""

from __future__ import annotations

import logging
import re

import pytest
import torch
from transformers import LogitsProcessor

from conftest import tiny_model
from higgs_v3.sampling_higgs_v3 import counter_uniform
from oracles import BOC, EOC, NUM_CODEBOOKS, clone_prompt, left_pad, plain_prompt, reference_generate


C = NUM_CODEBOOKS


class BiasEOC(LogitsProcessor):
    """Raises codebook 0's EOC logit at the given steps (rows of the stock loop are b * C + c)."""

    def __init__(self, prompt_length, steps):
        self.prompt_length, self.steps = prompt_length, set(steps)

    def __call__(self, input_ids, scores):
        if input_ids.shape[1] - self.prompt_length in self.steps:
            is_cb0 = (torch.arange(scores.shape[0]) % C == 0)[:, None]
            bias = torch.zeros_like(scores)
            bias[:, EOC] = 1e4
            scores = scores + bias * is_cb0
        return scores


# ---------------------------------------------------------------------------------------------- greedy vs reference
def test_greedy_plain_prompt_matches_reference(model):
    prompt = plain_prompt()
    expected, _ = reference_generate(model, prompt, max_new_tokens=14)
    rows = model.generate(input_ids=prompt[None], do_sample=False, max_new_tokens=14)
    assert torch.equal(rows[0], expected)
    forced = torch.arange(C)[None, :] > torch.arange(C - 1)[:, None]  # the delay window's BOC triangle
    assert (rows[0, : C - 1][forced] == BOC).all()
    assert len(set(rows[0, :, 0].tolist())) > 1  # a varied path, not a constant


def test_greedy_with_reference_placeholders_matches_reference(model):
    torch.manual_seed(1)
    reference_rows = torch.randint(0, 1024, (10, C))
    prompt = clone_prompt(10)
    expected, _ = reference_generate(model, prompt, reference_rows, max_new_tokens=12)
    rows = model.generate(input_ids=prompt[None], audio_input_ids=reference_rows, do_sample=False, max_new_tokens=12)
    assert torch.equal(rows[0], expected)
    # The reference rows really matter: other rows give other codes.
    other = model.generate(input_ids=prompt[None], audio_input_ids=(reference_rows + 1) % 1024, do_sample=False,
                           max_new_tokens=12)
    assert not torch.equal(other, rows)


# ---------------------------------------------------------------------------------------------- termination
def test_eoc_inside_delay_window_is_ignored_and_countdown_emits_terminal_row(model):
    prompt = plain_prompt()
    steps = (3, 11)  # 3 lies in the delay window (ignored), 11 starts the countdown
    expected, done = reference_generate(model, prompt, max_new_tokens=40, eoc_bias_steps=steps)
    assert done and len(expected) == 11 + C - 1  # T + 7 rows, T = 11
    out = model.generate(input_ids=prompt[None], do_sample=False, max_new_tokens=40, return_dict_in_generate=True,
                         logits_processor=[BiasEOC(len(prompt), steps)])
    assert out.finished.tolist() == [True]
    assert out.lengths.tolist() == [18]
    assert torch.equal(out.sequences[0, :18], expected)
    assert out.sequences[0, 3, 0] == EOC  # emitted, but did not start the countdown
    assert out.audio_code_lengths.tolist() == [11]
    assert out.audio_codes.shape == (1, 11, C)
    assert int(out.audio_codes.max()) < 1024


def test_batch_rows_stop_on_their_own_and_are_padded(model):
    prompt = plain_prompt()
    ids = prompt[None].repeat(2, 1)

    class PerRow(LogitsProcessor):  # sequence 0 ends at step 9, sequence 1 at step 13
        def __call__(self, input_ids, scores):
            step = input_ids.shape[1] - len(prompt)
            target = {9: 0, 13: 1}.get(step)
            if target is not None:
                scores = scores.clone()
                scores[target * C, EOC] += 1e4
            return scores

    out = model.generate(input_ids=ids, do_sample=False, max_new_tokens=40, return_dict_in_generate=True,
                         logits_processor=[PerRow()])
    assert out.lengths.tolist() == [16, 20]
    assert out.finished.tolist() == [True, True]
    assert out.sequences.shape[1] == 20
    assert (out.sequences[0, 16:] == EOC).all()  # padding after the stop
    alone, _ = reference_generate(model, prompt, max_new_tokens=40, eoc_bias_steps=(13,))
    assert torch.equal(out.sequences[1], alone)  # the finished row did not change the other


def test_runaway_is_flagged_and_warned(model, caplog):
    caplog.set_level(logging.WARNING, logger="higgs_v3")  # whatever an earlier test left the package's level at
    logging.Logger.warning_once.cache_clear()  # warned once per process: an earlier test may have been warned
    prompt = plain_prompt()
    out = model.generate(input_ids=prompt[None], do_sample=False, max_new_tokens=10, return_dict_in_generate=True)
    assert out.finished.tolist() == [False]
    assert out.lengths.tolist() == [10]
    assert out.audio_code_lengths.tolist() == [3]
    assert "A sequence reached max_new_tokens without ending" in caplog.text
    caplog.clear()
    model.generate(input_ids=prompt[None], do_sample=False, max_new_tokens=10)
    assert "max_new_tokens without ending" not in caplog.text  # once: `finished` flags every one


def test_a_temperature_below_the_reported_runaway_figure_is_warned(model, caplog):
    """Below `LOW_TEMPERATURE` (0.5; boson-ai/higgs-audio#151: 0.3 never ended) `generate` warns once per value;
    sampling at 0.5 or above and greedy decoding do not."""
    caplog.set_level(logging.WARNING, logger="higgs_v3")
    prompt = plain_prompt()
    for options in ({"temperature": 0.5}, {"temperature": 1.0}, {"do_sample": False}, {"temperature": 0.3}):
        model.generate(input_ids=prompt[None], seed=0, max_new_tokens=2, **options)
    warned = [r.getMessage() for r in caplog.records if "temperature=" in r.getMessage()]
    assert warned == [
        "temperature=0.3 is below 0.5: at low temperatures the model is reported never to sample its end of speech and "
        "to run to max_new_tokens (boson-ai/higgs-audio#151: 0.3 hit the limit, 1.0 ended). The default, 1.0, is the "
        "official server's."
    ]


def test_eoc_whose_countdown_is_cut_by_the_limit_is_unfinished(model, caplog):
    """EOC at row 12 needs rows up to 18; with max_new_tokens=16 the terminal row never comes."""
    caplog.set_level(logging.WARNING, logger="higgs_v3")
    logging.Logger.warning_once.cache_clear()
    prompt = plain_prompt()
    out = model.generate(input_ids=prompt[None], do_sample=False, max_new_tokens=16, return_dict_in_generate=True,
                         logits_processor=[BiasEOC(len(prompt), (12,))])
    assert out.sequences[0, 12, 0] == EOC
    assert out.finished.tolist() == [False]
    assert out.lengths.tolist() == [16]
    assert out.audio_code_lengths.tolist() == [16 - (C - 1)]
    assert "reached max_new_tokens without ending" in caplog.text


def test_finished_is_read_off_the_returned_rows_when_the_loop_undoes_a_step(model, monkeypatch):
    """transformers' deferred stop check (used on MPS) runs one extra step and then removes it. When another criterion
    stops the batch one row before the terminal row, the removed step is the terminal row: the result must say
    unfinished, whatever our criterion saw. Forced here on the CPU."""
    import transformers.generation.utils as generation_utils
    from transformers import StoppingCriteria

    if not hasattr(generation_utils, "DeferredStopCheck"):
        pytest.skip("this transformers has no deferred stop check")

    class Event:  # the deferred check records device events; a no-op stands in on the CPU
        def __init__(self, *args, **kwargs):
            pass

        def record(self, *args):
            pass

        def synchronize(self):
            pass

    monkeypatch.setattr(generation_utils.DeferredStopCheck, "is_supported", staticmethod(lambda *a, **k: True))
    monkeypatch.setattr(torch, "Event", Event)
    prompt = plain_prompt()

    class StopAllAfterRow14(StoppingCriteria):  # e.g. max_time firing; EOC at row 9 makes row 15 the terminal row
        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), input_ids.shape[1] - len(prompt) - 1 >= 14)

    out = model.generate(input_ids=prompt[None], do_sample=False, max_new_tokens=40, return_dict_in_generate=True,
                         logits_processor=[BiasEOC(len(prompt), (9,))], stopping_criteria=[StopAllAfterRow14()])
    assert out.sequences.shape[1] == 15
    assert out.finished.tolist() == [False] and out.lengths.tolist() == [15]


def test_a_processor_that_needs_extra_arguments_gets_the_stock_error(model):
    """A user's logits processor with parameters beyond `(input_ids, scores)` is refused by the stock
    `LogitsProcessorList` with its own clear message (the list is transformers', unchanged)."""

    class NeedsExtra(LogitsProcessor):
        def __call__(self, input_ids, scores, cur_len):
            return scores

    with pytest.raises(ValueError, match=r"required parameters: \[.*'cur_len'\] for .*NeedsExtra"):
        model.generate(input_ids=plain_prompt()[None], do_sample=False, max_new_tokens=3, logits_processor=[NeedsExtra()])


# ---------------------------------------------------------------------------------------------- batching
def test_left_padded_batch_equals_rows_alone_greedy(model):
    torch.manual_seed(2)
    reference_rows = torch.randint(0, 1024, (9, C))
    prompts = [plain_prompt((1, 2, 3, 4, 5, 6, 7)), clone_prompt(9), plain_prompt((42,))]
    ids, mask = left_pad(prompts)
    batch = model.generate(input_ids=ids, attention_mask=mask, audio_input_ids=reference_rows, do_sample=False,
                           max_new_tokens=12)
    for i, prompt in enumerate(prompts):
        refs = reference_rows if i == 1 else None
        alone = model.generate(input_ids=prompt[None], audio_input_ids=refs, do_sample=False, max_new_tokens=12)
        assert torch.equal(batch[i], alone[0]), f"row {i}"


def test_left_padded_batch_equals_rows_alone_sampling_with_seeds(model):
    prompts = [plain_prompt((1, 2, 3, 4, 5)), plain_prompt((42,))]
    ids, mask = left_pad(prompts)
    options = dict(do_sample=True, temperature=1.3, top_k=50, top_p=0.95, max_new_tokens=12)
    batch = model.generate(input_ids=ids, attention_mask=mask, seed=[11, 12], **options)
    for i, prompt in enumerate(prompts):
        alone = model.generate(input_ids=prompt[None], seed=11 + i, **options)
        assert torch.equal(batch[i], alone[0]), f"row {i}"


class LongFirstShortSecond(LogitsProcessor):
    """Sequence 0 never ends (its codebook 0 never draws EOC); sequence 1, when there, ends at row `end`."""

    def __init__(self, prompt_length: int, end: int):
        self.prompt_length, self.end = prompt_length, end

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[0, EOC] = -float("inf")
        if scores.shape[0] > C and input_ids.shape[1] - self.prompt_length == self.end:
            scores[C] = -float("inf")
            scores[C, EOC] = 0.0
        return scores


def _voiced_item(model, rows: int, beside_a_neighbour: bool, **options):
    """One voiced item (40 reference rows), seeded, with `output_logits`: alone, or left padded beside a shorter item
    with a longer prompt (which ends at row `rows // 4`, at least 10). Sequence 0 of the output is the item."""
    torch.manual_seed(2)
    refs = torch.randint(0, 1024, (40, C))
    item, neighbour = clone_prompt(40), plain_prompt(tuple(range(100, 160)))
    ids, mask = left_pad([item, neighbour]) if beside_a_neighbour else (item[None], torch.ones(1, len(item)).long())
    out = model.generate(input_ids=ids, attention_mask=mask, audio_input_ids=refs, seed=[7, 8][:ids.shape[0]],
                         logits_processor=[LongFirstShortSecond(ids.shape[1], max(rows // 4, 10))], do_sample=True,
                         max_new_tokens=rows, return_dict_in_generate=True, output_logits=True, **options)
    assert out.sequences.shape[1] == rows and out.finished.tolist() == [False, True][:ids.shape[0]]
    return out


def _logits_of_item(output) -> torch.Tensor:
    return torch.stack([step[0] for step in output.logits])  # [rows, C, V]


def test_batch_invariant_makes_a_rows_logits_independent_of_its_batch():
    """Without `batch_invariant` a row's audio logits depend on the batch beside it (float rounding: the GEMM's row
    count, attention over left padding; docs/RELIABILITY.md); with it they are bit-identical, dynamic and static."""
    model = tiny_model(num_hidden_layers=1, max_window_layers=1)
    alone, together = (_voiced_item(model, 24, beside) for beside in (False, True))
    assert not torch.equal(_logits_of_item(alone), _logits_of_item(together))
    for cache in ({}, {"cache_implementation": "static"}):
        alone, together = (_voiced_item(model, 24, beside, batch_invariant=True, **cache) for beside in (False, True))
        assert torch.equal(_logits_of_item(alone), _logits_of_item(together)), cache
        assert torch.equal(alone.sequences[0], together.sequences[0]), cache
    with pytest.raises(ValueError, match=re.escape("batch_invariant must be True or False, got 'yes'.")):
        model.generate(input_ids=plain_prompt()[None], max_new_tokens=3, batch_invariant="yes")


@pytest.mark.integration
def test_batch_invariant_long_voiced_item_alone_and_batched():
    """The issue's case: an item of 2,000 rows with a voice, alone with the dynamic cache, and with the static cache
    beside a shorter neighbour (which ends at row 500 and has a longer prompt, so the item is left padded, and the
    empty cache slots are more masked keys): the same codes and bit-identical logits at every row. (Each cache kind
    alone vs batched: the unit test above, at 24 rows.)"""
    model = tiny_model(num_hidden_layers=1, max_window_layers=1)
    alone = _voiced_item(model, 2000, False, batch_invariant=True)
    together = _voiced_item(model, 2000, True, batch_invariant=True, cache_implementation="static")
    assert torch.equal(together.sequences[0], alone.sequences[0])
    assert torch.equal(_logits_of_item(together), _logits_of_item(alone))


def test_sampling_matches_reference_order(model):
    prompt = plain_prompt()
    seed, temperature, top_k, top_p = 5, 0.9, 40, 0.8
    expected, _ = reference_generate(model, prompt, max_new_tokens=12, sample=(seed, temperature, top_k, top_p))
    rows = model.generate(input_ids=prompt[None], do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p,
                          seed=seed, max_new_tokens=12)
    assert torch.equal(rows[0], expected)


def test_seeds_reproduce_and_differ(model):
    prompt = plain_prompt()[None]
    a = model.generate(input_ids=prompt, do_sample=True, seed=1, max_new_tokens=10)
    b = model.generate(input_ids=prompt, do_sample=True, seed=1, max_new_tokens=10)
    c = model.generate(input_ids=prompt, do_sample=True, seed=2, max_new_tokens=10)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    torch.manual_seed(7)
    d = model.generate(input_ids=prompt, do_sample=True, max_new_tokens=10)
    torch.manual_seed(7)
    e = model.generate(input_ids=prompt, do_sample=True, max_new_tokens=10)
    assert torch.equal(d, e)


def test_top_k_one_and_tiny_temperature_equal_greedy(model):
    prompt = plain_prompt()[None]
    greedy = model.generate(input_ids=prompt, do_sample=False, max_new_tokens=12)
    top1 = model.generate(input_ids=prompt, do_sample=True, top_k=1, seed=3, max_new_tokens=12)
    cold = model.generate(input_ids=prompt, do_sample=True, temperature=1e-4, seed=3, max_new_tokens=12)
    assert torch.equal(top1, greedy)
    assert torch.equal(cold, greedy)


def test_counter_uniform_is_uniform_and_key_dependent():
    seeds = torch.arange(4000)
    u = counter_uniform(seeds, 3, torch.zeros(4000, dtype=torch.long), C)
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.02
    assert abs(float((u < 0.25).float().mean()) - 0.25) < 0.03
    assert not torch.equal(u, counter_uniform(seeds, 4, torch.zeros(4000, dtype=torch.long), C))
    big = torch.tensor([2**40 + 5, 5])
    v = counter_uniform(big, 0, torch.zeros(2, dtype=torch.long), C)
    assert v[0] != v[1]  # the high 32 bits of a seed count


def test_min_new_tokens_bans_the_end_of_speech_before_its_row(model):
    """As transformers' `MinNewTokensLengthLogitsProcessor` bans EOS: codebook 0's EOC (the end of speech) is banned at
    steps below `min_new_tokens`, whatever a user's processor or the sampler would pick, checked against the reference
    loop. Forced at steps 9 and 14: with min_new_tokens=12 speech ends at row 14 (21 rows), with 9 at row 9 (16)."""
    prompt = plain_prompt()
    steps = (9, 14)
    for least, end in ((12, 14), (9, 9)):
        expected, done = reference_generate(model, prompt, max_new_tokens=40, eoc_bias_steps=steps,
                                            min_new_tokens=least)
        assert done and len(expected) == end + C - 1
        out = model.generate(input_ids=prompt[None], do_sample=False, max_new_tokens=40, min_new_tokens=least,
                             return_dict_in_generate=True, logits_processor=[BiasEOC(len(prompt), steps)])
        assert out.finished.tolist() == [True] and out.lengths.tolist() == [end + C - 1]
        assert torch.equal(out.sequences[0, : end + C - 1], expected)
    sample = (5, 0.9, 40, 0.8)
    expected, _ = reference_generate(model, prompt, max_new_tokens=22, eoc_bias_steps=steps, min_new_tokens=12,
                                     sample=sample)
    rows = model.generate(input_ids=prompt[None], seed=5, temperature=0.9, top_k=40, top_p=0.8, max_new_tokens=22,
                          min_new_tokens=12, logits_processor=[BiasEOC(len(prompt), steps)])
    assert torch.equal(rows[0], expected) and (rows[0, :14, 0] != EOC).all()
    with pytest.raises(ValueError, match=re.escape("min_new_tokens must be a number of audio rows >= 0 (no end of "
                                                   "speech before that row) or None, got -1.")):
        model.generate(input_ids=prompt[None], max_new_tokens=4, min_new_tokens=-1)


# ---------------------------------------------------------------------------------------------- caches, streamer
def test_generate_with_static_cache(model):
    """As transformers' `test_generate_with_static_cache`: a static cache gives the rows of a dynamic one, and the
    `return_dict_in_generate=True` output carries the cache under transformers' name (`cache`; `past_key_values` on
    5.5): one row per sequence, the prompt and every row fed but the last."""
    from transformers import DynamicCache, StaticCache

    from higgs_v3.compat_higgs_v3 import CACHE_KWARG

    ids, mask = left_pad([plain_prompt(), plain_prompt((5,))])
    outputs = {kind: model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=6,
                                    return_dict_in_generate=True, cache_implementation=kind)
               for kind in ("dynamic", "static")}
    assert torch.equal(outputs["dynamic"].sequences, outputs["static"].sequences)
    config = model.config
    for kind, cache_class in (("dynamic", DynamicCache), ("static", StaticCache)):
        cache = outputs[kind][CACHE_KWARG]
        assert isinstance(cache, cache_class) and cache is outputs[kind].to_tuple()[-1]
        assert int(cache.get_seq_length()) == ids.shape[1] + 6 - 1
        assert [tuple(layer.keys.shape) for layer in cache.layers] == [
            (2, config.num_key_value_heads, ids.shape[1] + 6 - 1, config.head_dim)] * config.num_hidden_layers


@pytest.mark.parametrize("variant", [dict(use_cache=False), dict(cache_implementation="static")])
def test_cache_variants_equal_dynamic_cache(model, variant):
    torch.manual_seed(3)
    reference_rows = torch.randint(0, 1024, (8, C))
    ids, mask = left_pad([clone_prompt(8), plain_prompt()])
    dynamic = model.generate(input_ids=ids, attention_mask=mask, audio_input_ids=reference_rows, do_sample=False,
                             max_new_tokens=11)
    other = model.generate(input_ids=ids, attention_mask=mask, audio_input_ids=reference_rows, do_sample=False,
                           max_new_tokens=11, **variant)
    assert torch.equal(dynamic, other)


def test_streamer_receives_each_row(model):
    class Collect:
        def __init__(self):
            self.rows, self.ended = [], False

        def put(self, value):
            self.rows.append(value.clone())

        def end(self):
            self.ended = True

    ids, mask = left_pad([plain_prompt(), plain_prompt((5,))])
    streamer = Collect()
    rows = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=9, streamer=streamer)
    assert streamer.ended
    assert all(r.shape == (2, C) for r in streamer.rows)
    assert torch.equal(torch.stack(streamer.rows, dim=1), rows)


def test_text_head_never_runs_while_generating(model):
    calls = []
    handle = model.lm_head.register_forward_hook(lambda *a: calls.append(1))
    try:
        model.generate(input_ids=plain_prompt()[None], do_sample=False, max_new_tokens=9)
    finally:
        handle.remove()
    assert calls == []


# ---------------------------------------------------------------------------------------------- rejected options
@pytest.mark.parametrize(
    "option",
    [
        dict(num_beams=2),
        dict(repetition_penalty=1.2),
        dict(bad_words_ids=[[5]]),
        dict(num_return_sequences=2),
        dict(no_repeat_ngram_size=3),
        dict(typical_p=0.5),
    ],
)
def test_rejected_options(model, option):
    (name, value), = option.items()
    with pytest.raises(ValueError, match=re.escape(f"does not support {name}={value!r} for audio codes") + ".*Supported: greedy"):
        model.generate(input_ids=plain_prompt()[None], max_new_tokens=4, **option)


def test_rejected_arguments(model):
    with pytest.raises(ValueError, match="does not support `assistant_model`"):
        model.generate(input_ids=plain_prompt()[None], max_new_tokens=4, assistant_model=model)
    with pytest.raises(ValueError, match="counts audio rows with `max_new_tokens`; got max_length=50"):
        model.generate(input_ids=plain_prompt()[None], max_length=50)
    with pytest.raises(ValueError, match=r"one seed per sequence \(2\), got shape \(3,\)"):
        model.generate(input_ids=plain_prompt()[None].repeat(2, 1), seed=[1, 2, 3], max_new_tokens=4)


def test_one_validator_names_every_problem_of_a_call_once(model, monkeypatch):
    """`generate` checks its arguments once, at its entry, and names every problem in one `ValueError`; the arguments'
    types and shapes first, then the merged options. `max_new_tokens` is read once: the value that counts."""
    ids = plain_prompt()[None]
    with pytest.raises(ValueError) as error:
        model.generate(input_ids=ids, max_new_tokens=0, do_sample="yes", seed=[1, 2], max_positions=0)
    assert str(error.value) == (
        "max_positions must be a positive number of positions or None, got 0. max_new_tokens must be a positive number "
        "of audio rows, got 0. do_sample must be True or False, got 'yes'.")
    with pytest.raises(ValueError) as error:
        model.generate(input_ids=ids, max_new_tokens=3, num_beams=2, top_p=0.0, seed=[1, 2])
    assert str(error.value).startswith("seed must be an int or one seed per sequence (1), got shape (2,).")
    with pytest.raises(ValueError) as error:
        model.generate(input_ids=ids, max_new_tokens=3, num_beams=2, top_p=0.0)
    assert str(error.value).startswith("generate() does not support num_beams=2 for audio codes")
    assert str(error.value).endswith("top_p must be a number in (0, 1] (1.0 keeps every code), got 0.0.")
    from transformers import GenerationConfig

    with pytest.raises(ValueError, match=r"^max_new_tokens must be a positive number of audio rows, got 1\.5\.$"):
        model.generate(input_ids=ids, generation_config=GenerationConfig(max_new_tokens=4), max_new_tokens=1.5)
    calls = []
    monkeypatch.setattr(type(model), "_prompt_problems",
                        lambda self, *args: calls.append(1) or [])  # the one host read of the prompts
    model.generate(input_ids=ids, do_sample=False, max_new_tokens=5)
    assert calls == [1]


def test_generate_encodes_reference_clips_once_before_its_loop(processor, monkeypatch):
    """The processor's clips are encoded once, before the loop (`merge_reference_clips`); no step's forward gets them.
    The speech equals that of the clip's voice."""
    from conftest import tiny_tts_model

    model = tiny_tts_model(10)
    clip = torch.randn(30000, generator=torch.Generator().manual_seed(3)) * 0.1
    inputs = processor("Hello there.", reference=clip, sampling_rate=24000)
    encoded, forwards = [], []
    encode = model.codec.encode_waveform
    monkeypatch.setattr(model.codec, "encode_waveform", lambda waveform: encoded.append(1) or encode(waveform))
    handle = model.register_forward_pre_hook(lambda module, args, kwargs: forwards.append(set(kwargs)), with_kwargs=True)
    try:
        rows = model.generate(**inputs, do_sample=False, max_new_tokens=10)
    finally:
        handle.remove()
    assert encoded == [1] and len(forwards) == 10
    assert not any(key.startswith("reference_audio") for keys in forwards for key in keys)
    voice = model.encode_reference(clip, sampling_rate=24000)
    assert torch.equal(rows, model.generate(**processor("Hello there.", reference=voice), do_sample=False,
                                            max_new_tokens=10))


@pytest.mark.integration
def test_decode_step_under_torch_compile_matches_eager():
    from transformers import CompileConfig

    model = tiny_model(seed=5)
    ids, mask = left_pad([plain_prompt(), plain_prompt((7, 8))])
    eager = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=12,
                           cache_implementation="static")
    compile_config = CompileConfig(fullgraph=True, dynamic=False)
    compile_config._compile_all_devices = True  # transformers compiles on CPU only when asked this way
    compiled = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=12,
                              cache_implementation="static", compile_config=compile_config)
    assert torch.equal(eager, compiled)
    assert model._compiled_call is not None  # the compiled forward really ran


def test_upstream_hooks_keep_the_shape_we_rely_on():
    """The pieces of transformers' stock loop that our fenced overrides build on; this fails when upstream moves."""
    import inspect

    from transformers import GenerationMixin

    processor_params = list(inspect.signature(GenerationMixin._get_logits_processor).parameters)
    assert processor_params[:2] == ["self", "generation_config"]
    sample_source = inspect.getsource(GenerationMixin._sample)
    assert "outputs.logits[:, -1" in sample_source  # we hand it [batch * C, positions, codebook_size]
    assert "generation_config.do_sample" in sample_source  # our sampler turns the draw into an argmax
    assert "has_eos_stopping_criteria" in sample_source  # finished rows are padded when a criterion has eos
    assert "pad_token_id * (1 - unfinished_sequences)" in sample_source
    prepare_params = inspect.signature(GenerationMixin.prepare_inputs_for_generation).parameters
    assert "input_ids" in prepare_params and any(p.kind == p.VAR_KEYWORD for p in prepare_params.values())


def test_text_eos_check_is_dropped_from_audio_generation(model):
    from transformers import GenerationConfig
    from transformers.generation.stopping_criteria import EosTokenCriteria, StoppingCriteriaList

    from higgs_v3.generation_higgs_v3 import HiggsAudioV3StoppingCriteria

    ours = HiggsAudioV3StoppingCriteria(1, C, EOC, 5, torch.device("cpu"))
    config = GenerationConfig(eos_token_id=151643, max_length=30)
    config._eos_token_tensor = torch.tensor([151643])  # what generate() prepares before asking for criteria
    criteria = model._get_stopping_criteria(generation_config=config, stopping_criteria=StoppingCriteriaList([ours]))
    assert ours in criteria and not any(isinstance(c, EosTokenCriteria) for c in criteria)
    text_only = model._get_stopping_criteria(generation_config=config, stopping_criteria=StoppingCriteriaList())
    assert any(isinstance(c, EosTokenCriteria) for c in text_only)  # untouched outside audio generation


def test_generate_refuses_input_ids_that_are_not_speech_prompts(model):
    """Plain tokenizer output (no `<|tts|>` ... `<|audio|>`) would generate sound without a word: `generate` refuses
    it up front, naming the rows and the processor; a left-padded batch of real prompts passes, and so does a
    right-padded one (a pipeline's tokenizer pads on its files' side), left-aligned at the entry: the same rows."""
    tts, text, audio, pad = 151667, 151672, 151670, 151643
    good = [tts, text, 9707, audio]
    cases = {
        "no markers": ([[9707, 11, 1879, 13]], None, [0]),
        "no <|audio|> at the end": ([good, [tts, text, 9707, 13]], None, [1]),
        "no <|text|>": ([[tts, 9707, 13, audio]], None, [0]),
        "padding not masked": ([[pad] + good], [[1, 1, 1, 1, 1]], [0]),
    }
    for name, (ids, mask, rows) in cases.items():
        kwargs = {} if mask is None else {"attention_mask": torch.tensor(mask)}
        with pytest.raises(ValueError) as error:
            model.generate(input_ids=torch.tensor(ids), max_new_tokens=9, **kwargs)
        assert str(error.value).startswith(
            f"input_ids row(s) {rows} are not Higgs Audio v3 speech prompts (<|tts|> ... <|text|> TEXT <|audio|>, "
            "left padded); plain tokenizer output would generate sound without a word. Build the inputs with "
            "HiggsAudioV3Processor: processor(text) or processor.apply_chat_template("), name
    rows = model.generate(input_ids=torch.tensor([[pad] + good, [tts, text, 9707, 13, audio]]),
                          attention_mask=torch.tensor([[0, 1, 1, 1, 1], [1] * 5]), max_new_tokens=9, do_sample=False)
    assert rows.shape == (2, 9, NUM_CODEBOOKS)
    right = model.generate(input_ids=torch.tensor([good + [pad], [tts, text, 9707, 13, audio]]),
                           attention_mask=torch.tensor([[1, 1, 1, 1, 0], [1] * 5]), max_new_tokens=9, do_sample=False)
    assert torch.equal(right, rows)
    # A training example (the prompt, then placeholders for the target's rows) is named as such.
    with pytest.raises(ValueError, match=re.escape(
        "input_ids row(s) [0] end in audio placeholders: they are training examples (processor(text=..., "
        "audio_target=...), the prompt followed by the target's rows), which teacher-force a forward pass; generate "
        "takes the prompt alone: processor(text) or processor.apply_chat_template(")):
        model.generate(input_ids=torch.tensor([good + [-100, -100]]), max_new_tokens=9)


def test_monitor_progress_shows_a_bar_of_rows_and_changes_nothing(model, capsys):
    """`monitor_progress=True` draws a tqdm bar (rows out of max_new_tokens) on stderr; off by default; the rows are
    those of a run without it."""
    inputs = dict(input_ids=torch.tensor([[151667, 151672, 9707, 151670]]), max_new_tokens=9, do_sample=False)
    plain = model.generate(**inputs)
    assert "Generating audio rows" not in capsys.readouterr().err
    shown = model.generate(**inputs, monitor_progress=True)
    err = capsys.readouterr().err
    assert torch.equal(shown, plain)
    assert "Generating audio rows" in err and re.search(r"\b9/9 \[", err), err
    sampled = model.generate(**{**inputs, "do_sample": True}, seed=3, monitor_progress=True)
    assert torch.equal(sampled, model.generate(**{**inputs, "do_sample": True}, seed=3))
