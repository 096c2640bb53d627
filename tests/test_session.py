# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""The decode session (`serving/session.py`, step-level batching) against its oracle, `model.generate` alone: with
`batch_invariant=True` a request's rows are bit-identical to `generate(seed=..., batch_invariant=True)` of its prompt
alone whenever it joins and whoever leaves (seeded random arrival schedules, with natural ends, limits, greedy and
sampled rows, voices, `min_new_tokens`); a cancelled row leaves the others unchanged; a request that fails, fails
alone; an idle session holds no cache rows."""

from __future__ import annotations

import random

import pytest
import torch

from higgs_v3.serving.session import Cancelled, DecodeRequest, DecodeSession

from conftest import tiny_model
from oracles import clone_prompt, plain_prompt

C = 8  # the tiny config's codebooks (the real count)


@pytest.fixture(scope="module")
def ending_model():
    """The tiny model with codebook 0's EOC logit scaled up (its head row times 3; tied to the embedding), so that
    sampled sequences end by themselves after 8 to 60 rows (seed by seed), as a real model's do."""
    model = tiny_model(num_hidden_layers=1, max_window_layers=1)
    with torch.no_grad():
        model.audio_head.weight[model.config.audio_eoc_token_id] *= 3
    return model


def _request(rng: random.Random) -> DecodeRequest:
    """A random request: a plain prompt of 1-8 words or a voiced one (4-12 reference rows), a seed, sampling options
    (greedy, default, or warped) and a limit of 8-48 rows."""
    words = tuple(rng.randrange(100, 5000) for _ in range(rng.randint(1, 8)))
    inputs: dict = {}
    if rng.random() < 0.3:
        rows = rng.randint(4, 12)
        prompt = clone_prompt(rows, words)
        inputs["audio_input_ids"] = torch.randint(0, 1024, (rows, C), generator=torch.Generator().manual_seed(
            rng.randrange(1000)))
    else:
        prompt = plain_prompt(words)
    inputs.update(input_ids=prompt[None], attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    options = rng.choice([{"do_sample": True}, {"do_sample": True, "temperature": 0.8, "top_k": 50, "top_p": 0.9},
                          {"do_sample": False}, {"do_sample": True, "min_new_tokens": 12}])
    return DecodeRequest(inputs, seed=rng.randrange(2**40), options={**options, "max_new_tokens": rng.randint(8, 48)})


def _alone(model, request: DecodeRequest, batch_invariant: bool = True) -> torch.Tensor:
    """The oracle: the request's rows from `model.generate` of its prompt alone."""
    return model.generate(**request.inputs, seed=request.seed, batch_invariant=batch_invariant,
                          **request.options)


def _run(session: DecodeSession, arrivals: dict[int, list[DecodeRequest]], cancels: dict[int, list] = {}) -> int:
    """Step `session`, adding each request at its step (when a slot is free; else at the next step), until every
    request ended. Returns the steps run; asserts the session held no cache rows once idle."""
    waiting, step = [], 0
    while arrivals or waiting or not session.idle:
        waiting += arrivals.pop(step, [])
        while waiting and session.free:
            session.add(waiting.pop(0))
        for request in cancels.get(step, []):
            session.cancel(request)
        session.step()
        step += 1
    assert session.cache_rows == 0 and session.cache is None
    return step


@pytest.mark.parametrize("schedule", range(6))
def test_requests_joining_and_leaving_at_random_steps_get_their_alone_rows(ending_model, schedule):
    rng = random.Random(schedule)
    requests = [_request(rng) for _ in range(rng.randint(3, 6))]
    arrivals: dict[int, list] = {}
    for request in requests:
        arrivals.setdefault(rng.choice([0, 0, 1, 3, 7, 15, 30]), []).append(request)
    session = DecodeSession(ending_model, max_batch_size=rng.choice([2, 3, 4]), batch_invariant=True)
    _run(session, arrivals)
    assert session.largest_batch >= 2
    for i, request in enumerate(requests):
        assert request.error is None, request.error
        alone = _alone(ending_model, request)
        assert torch.equal(request.output.sequences, alone), f"schedule {schedule}, request {i}"


def test_a_cancelled_row_leaves_the_others_unchanged_and_ends_with_cancelled(ending_model):
    rng = random.Random(7)
    requests = [_request(rng) for _ in range(3)]
    for request in requests:
        request.options = {**request.options, "max_new_tokens": 40, "min_new_tokens": 30}  # all alive at step 5
    ended = []
    for request in requests:
        request.on_end = ended.append
    session = DecodeSession(ending_model, max_batch_size=3, batch_invariant=True)
    _run(session, {0: requests[:2], 2: requests[2:]}, cancels={5: [requests[1]]})
    assert isinstance(requests[1].error, Cancelled) and requests[1].output is None
    assert ended.count(requests[1]) == 1 and len(ended) == 3
    for request in (requests[0], requests[2]):
        assert torch.equal(request.output.sequences, _alone(ending_model, request))


def test_a_failing_request_fails_alone(ending_model, monkeypatch):
    """A bad request is refused at `add` by generate's own validator; a prefill that raises for one request of an
    admitted group is retried request by request, so only that one ends with the error."""
    rng = random.Random(3)
    good = [_request(rng) for _ in range(2)]
    session = DecodeSession(ending_model, max_batch_size=3, batch_invariant=True)
    with pytest.raises(ValueError, match="not Higgs Audio v3 speech prompts"):
        session.add(DecodeRequest({"input_ids": torch.tensor([[1, 2, 3]])}, seed=1))
    with pytest.raises(ValueError, match="max_new_tokens must be a positive number of audio rows, got 0"):
        session.add(DecodeRequest(good[0].inputs, seed=1, options={"max_new_tokens": 0}))
    poison = DecodeRequest({"input_ids": plain_prompt((666,))[None]}, seed=5, options={"max_new_tokens": 9})
    forward = type(ending_model).forward

    def failing_forward(self, input_ids=None, **kwargs):
        if input_ids is not None and bool((input_ids == 666).any()):
            raise RuntimeError("this prompt breaks the model")
        return forward(self, input_ids=input_ids, **kwargs)

    monkeypatch.setattr(type(ending_model), "forward", failing_forward)
    _run(session, {0: [good[0], poison, good[1]]})
    monkeypatch.undo()
    assert str(poison.error) == "this prompt breaks the model" and poison.output is None
    for request in good:
        assert request.error is None and torch.equal(request.output.sequences, _alone(ending_model, request))


def test_a_full_session_refuses_a_request_and_a_bad_batch_size_is_named(ending_model):
    session = DecodeSession(ending_model, max_batch_size=1)
    session.add(_request(random.Random(1)))
    assert session.free == 0 and session.active == 1
    with pytest.raises(RuntimeError, match=r"The decode session is full \(1 requests\)"):
        session.add(_request(random.Random(2)))
    with pytest.raises(ValueError, match="max_batch_size must be a positive number of requests, got 0"):
        DecodeSession(ending_model, max_batch_size=0)


def test_rows_are_handed_over_as_drawn(ending_model):
    request = _request(random.Random(4))
    seen = []
    request.on_row = seen.append
    _run(DecodeSession(ending_model, batch_invariant=True), {0: [request]})
    assert torch.equal(torch.stack(seen)[None], request.output.sequences)


def test_a_decode_step_that_fails_ends_every_row_and_the_requests_waiting_for_their_prefill(ending_model, monkeypatch):
    rng = random.Random(5)
    running, waiting = _request(rng), _request(rng)
    session = DecodeSession(ending_model, max_batch_size=2)
    session.add(running)
    session.step()
    session.add(waiting)
    monkeypatch.setattr(DecodeSession, "_decode", lambda self: (_ for _ in ()).throw(RuntimeError("out of memory")))
    session.step()
    assert [str(request.error) for request in (running, waiting)] == ["out of memory"] * 2
    assert session.idle and session.cache_rows == 0 and session.free == 2


def test_max_prefill_tokens_spreads_admissions_over_steps_and_keeps_the_rows(ending_model, monkeypatch):
    """Four prompts of unequal lengths added at once, at most twice the longer of the first two prompts' tokens
    (padding included) per step: the first two prefilled together, then the rest as the bound allows, in order of
    arrival (a prompt longer than the bound alone); each request's rows unchanged."""
    requests = [DecodeRequest({"input_ids": plain_prompt(tuple(range(100, 100 + words)))[None]}, seed=words,
                              options={"do_sample": True, "max_new_tokens": 30}) for words in (3, 5, 2, 8)]
    lengths = [request.inputs["input_ids"].shape[1] for request in requests]
    prefilled = []
    forward = DecodeSession._prefill_forward
    monkeypatch.setattr(DecodeSession, "_prefill_forward", lambda self, admitted: (
        prefilled.append([requests.index(row.request) for row in admitted]), forward(self, admitted))[1])
    bound = 2 * max(lengths[:2])
    expected, group, width = [], [], 0
    for i, length in enumerate(lengths):  # the rule, spelled out: padded size of the group with the next one
        if group and (len(group) + 1) * max(width, length) > bound:
            expected.append(group)
            group, width = [], 0
        group, width = group + [i], max(width, length)
    expected.append(group)
    session = DecodeSession(ending_model, max_batch_size=4, batch_invariant=True, max_prefill_tokens=bound)
    _run(session, {0: requests})
    assert prefilled == expected and len(expected) >= 2 and expected[0] == [0, 1]
    for request in requests:
        assert torch.equal(request.output.sequences, _alone(ending_model, request))
    lone = DecodeSession(ending_model, max_batch_size=2, max_prefill_tokens=1)  # longer than the bound: alone
    prefilled.clear()
    _run(lone, {0: requests[:2]})
    assert prefilled == [[0], [1]]
    with pytest.raises(ValueError, match="max_prefill_tokens must be None .* or a positive number of prompt tokens, "
                                         "got 0"):
        DecodeSession(ending_model, max_prefill_tokens=0)
