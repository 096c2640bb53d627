"""The delay pattern (`delay_higgs_v3`) tested head-on: `apply_delay_pattern` / `revert_delay_pattern` against the
spec's element loop (§4), `rows_to_codes` and the end-of-speech rule (`speech_end_row`, `speech_rows`,
`speech_finished`) against the spec's state machine run as a loop (§6), and the audio spec's arithmetic. Hand-written
cases first (the spec's picture, Dia's `test_delay_in_audio` idea: each codebook is its raw column shifted down by its
index), then property tests with hypothesis (profile in conftest: derandomized, so every run draws the same examples).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from higgs_v3 import HiggsAudioV3Config
from higgs_v3.delay_higgs_v3 import (
    check_codes,
    codes_problem,
    NO_END,
    HiggsAudioV3AudioSpec,
    apply_delay_pattern,
    revert_delay_pattern,
    rows_to_codes,
    speech_end_row,
    speech_finished,
    speech_rows,
)
from oracles import BOC, EOC, delayed_by_loop, end_by_state_machine, reverted_by_loop, rows_to_codes_by_loop


# ---------------------------------------------------------------------------------------------- hand-written cases
def test_the_spec_picture():
    """Spec §4's example, C = 3 and T = 4: a, b, c are the codebooks' codes (10+t, 20+t, 30+t)."""
    raw = torch.tensor([[10, 20, 30], [11, 21, 31], [12, 22, 32], [13, 23, 33]])
    delayed = torch.tensor(
        [
            [10, BOC, BOC],
            [11, 20, BOC],
            [12, 21, 30],
            [13, 22, 31],
            [EOC, 23, 32],
            [EOC, EOC, 33],
        ]
    )
    assert torch.equal(apply_delay_pattern(raw, BOC, EOC), delayed)
    assert torch.equal(revert_delay_pattern(delayed), raw)


@pytest.mark.parametrize("batch, frames, books", [(1, 1, 2), (1, 2, 3), (2, 4, 3), (2, 1, 8), (4, 8, 8)])
def test_delay_shifts_each_codebook_down_by_its_index(batch, frames, books):
    boc, eoc = -2, -1  # any two ids: the pattern does not care what they are
    codes = torch.arange(batch * frames * books).view(batch, frames, books)
    delayed = apply_delay_pattern(codes, boc, eoc)
    assert delayed.shape == (batch, frames + books - 1, books) and delayed.dtype == torch.long
    for c in range(books):  # c BOCs, the raw column, then C - 1 - c EOCs
        column = torch.cat([torch.full((batch, c), boc), codes[:, :, c], torch.full((batch, books - 1 - c), eoc)], 1)
        assert torch.equal(delayed[:, :, c], column), f"codebook {c}"
    assert torch.equal(revert_delay_pattern(delayed), codes)


def test_rows_to_codes_hand_made():
    """Spec §6's worked example (C = 3, EOC at row 4: rows 0..5, T = 4) padded with EOC to 8 rows, next to a runaway
    sequence with a stray BOC and EOC in real positions, and a sequence cut before its first complete frame."""
    C = 3
    ended = [[10, BOC, BOC], [11, 20, BOC], [12, 21, 30], [13, 22, 31], [EOC, 23, 32], [EOC, EOC, 33], [EOC] * 3,
             [EOC] * 3]
    runaway = [[1, BOC, BOC], [2, 5, BOC], [BOC, 6, 9], [3, EOC, 8], [4, 7, 7], [5, 8, 6], [6, 9, 5], [7, 1, 4]]
    rows = torch.tensor([ended, runaway])
    codes, frames = rows_to_codes(rows, BOC, EOC)
    assert frames.tolist() == [4, 6]
    assert codes.tolist() == [
        [[10, 20, 30], [11, 21, 31], [12, 22, 32], [13, 23, 33], [0, 0, 0], [0, 0, 0]],
        [[1, 5, 9], [2, 6, 8], [0, 0, 7], [3, 7, 6], [4, 8, 5], [5, 9, 4]],  # BOC at (2, 0) and EOC at (2, 1) -> 0
    ]
    codes, frames = rows_to_codes(rows, BOC, EOC, lengths=torch.tensor([3, 8]))  # given lengths win
    assert frames.tolist() == [1, 6] and codes[0].tolist() == [[10, 20, 30]] + [[0, 0, 0]] * 5
    short, frames = rows_to_codes(rows[:, : C - 1], BOC, EOC)
    assert short.shape == (2, 0, C) and frames.tolist() == [0, 0]


def test_hand_made_rows():
    C = 3
    rows = torch.tensor(
        [
            [1, EOC, 5, 6, EOC, 8],  # EOC at row 1 is inside the delay window (rows 0..2): row 4 ends it
            [1, 2, 3, EOC, 9, EOC],  # first EOC at row 3 = C: ends speech with T = 3 frames, 3 + 2 rows
            [EOC, 2, EOC, 4, 5, 6],  # only inside the window: never ends
            [1, 2, 3, 4, 5, EOC],  # ends at the last row: the terminal row has not come yet
        ]
    )
    end = speech_end_row(rows, EOC, C)
    assert end.tolist() == [4, 3, NO_END, 5]
    assert speech_rows(end, C, rows.shape[1]).tolist() == [6, 5, 6, 6]
    assert speech_finished(end, C, rows.shape[1]).tolist() == [True, True, False, False]


def test_empty_and_batched_shapes():
    assert speech_end_row(torch.zeros(2, 0, dtype=torch.long), EOC, 8).tolist() == [NO_END, NO_END]
    assert speech_end_row(torch.full((2, 3, 12), EOC), EOC, 8).shape == (2, 3)
    assert speech_rows(torch.tensor([NO_END, 9]), 8, torch.tensor([20, 12])).tolist() == [20, 12]  # 9 + 7 > 12


def test_revert_of_fewer_rows_than_a_frame_is_empty():
    assert revert_delay_pattern(torch.zeros(3, 7, 8, dtype=torch.long)).shape == (3, 0, 8)  # no complete frame


LONG = torch.long


@pytest.mark.parametrize(
    "codes, options, got",
    [
        (torch.zeros(2, 8, dtype=LONG), {}, None),
        (np.zeros((1, 3, 8), dtype=np.int16), {"min_frames": 3}, None),
        (torch.full((2, 4, 8), 1023, dtype=torch.int32), {"batched": True}, None),
        (torch.zeros(2, 8, dtype=LONG), {"min_frames": 3}, "shape (2, 8)"),
        (torch.zeros(8, dtype=LONG), {}, "shape (8,)"),
        (torch.zeros(2, 7, dtype=LONG), {}, "shape (2, 7)"),
        (torch.zeros(2, 8, dtype=LONG), {"batched": True}, "shape (2, 8)"),
        (torch.zeros(2, 8), {}, "Tensor of dtype torch.float32"),
        (torch.zeros(2, 8, dtype=torch.bool), {}, "Tensor of dtype torch.bool"),
        (np.zeros((2, 8)), {}, "ndarray of dtype float64"),
        ([[0] * 8], {}, "list"),
        (torch.tensor([[0] * 7 + [1024]]), {}, "values from 0 to 1024"),
        (torch.tensor([[-1] * 8]), {}, "values from -1 to -1"),
    ],
)
def test_the_codes_rule(codes, options, got):
    """`check_codes` / `codes_problem`, the one home of the codes rule, in its one wording."""
    problem = codes_problem(codes, 8, 1024, "the codes", **options)
    if got is None:
        assert problem is None
        checked = check_codes(codes, 8, 1024, "the codes", **options)
        assert checked.dtype == torch.long and torch.equal(checked, torch.as_tensor(codes).long())
        return
    min_frames, batched = options.get("min_frames", 1), options.get("batched", False)
    expected = (f"The codes must be integer codes [{'batch' if batched else '...'}, frames, 8] with at least "
                f"{min_frames} frame{'s' if min_frames > 1 else ''}, each in 0..1023; got {got}.")
    assert problem == expected
    with pytest.raises(ValueError) as error:
        check_codes(codes, 8, 1024, "the codes", **options)
    assert str(error.value) == expected


# ---------------------------------------------------------------------------------------------- audio spec
def test_audio_spec_defaults_and_config():
    spec = HiggsAudioV3AudioSpec()
    assert (spec.samples_per_frame, spec.max_delay) == (960, 7)
    assert (spec.rows(50), spec.frames(57), spec.frames(7), spec.frames(3)) == (57, 50, 0, 0)
    assert (spec.rows_for_seconds(2.0), spec.rows_for_seconds(0.01), spec.rows_for_seconds(0)) == (57, 8, 7)
    assert spec.seconds(50) == 2.0
    assert HiggsAudioV3Config().audio_spec == spec
    assert HiggsAudioV3AudioSpec(**spec.to_dict()) == spec
    assert HiggsAudioV3AudioSpec.from_config(HiggsAudioV3Config(num_codebooks=4, frame_rate=50)).rows(10) == 13
    raw = torch.randint(0, 1024, (2, 10, 8))
    rows = spec.delay(raw)
    assert torch.equal(rows, apply_delay_pattern(raw, BOC, EOC))
    assert torch.equal(spec.rows_to_codes(rows)[0], raw)
    assert spec.speech_end_row(rows[..., 0]).tolist() == [10, 10]
    # A clip of fewer frames than codebooks: codebook 0's EOCs in the delay window do not count, row C ends it.
    assert spec.speech_end_row(spec.delay(raw[:, :5])[..., 0]).tolist() == [8, 8]


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(num_codebooks=1), "num_codebooks must be at least 2 (the delay pattern's end needs a countdown of "
                                "num_codebooks - 2 rows), got 1."),
        (dict(audio_boc_token_id=7, audio_eoc_token_id=7), "audio_boc_token_id=7 and audio_eoc_token_id=7 must be two "
                                                           "different codes >= 0."),
        (dict(audio_eoc_token_id=-1), "audio_boc_token_id=1024 and audio_eoc_token_id=-1 must be two different codes "
                                      ">= 0."),
        (dict(frame_rate=7), "sampling_rate=24000 must be a positive multiple of frame_rate=7."),
        (dict(frame_rate=0), "sampling_rate=24000 must be a positive multiple of frame_rate=0."),
        (dict(sampling_rate=-24000), "sampling_rate=-24000 must be a positive multiple of frame_rate=25."),
        (dict(num_codebooks=1, frame_rate=0), "rows), got 1. sampling_rate=24000 must be a positive multiple of "
                                              "frame_rate=0."),  # every problem, in one error
    ],
)
def test_audio_spec_validation(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        HiggsAudioV3AudioSpec(**fields)


@settings(max_examples=40)
@given(
    books=st.integers(2, 16),
    frame_rate=st.integers(1, 100),
    samples_per_frame=st.integers(1, 2000),
    frames=st.integers(0, 100_000),
    seconds=st.floats(0, 3600, allow_nan=False),
)
def test_audio_spec_arithmetic(books, frame_rate, samples_per_frame, frames, seconds):
    rate = frame_rate * samples_per_frame
    spec = HiggsAudioV3AudioSpec(num_codebooks=books, frame_rate=frame_rate, sampling_rate=rate)
    assert spec.samples_per_frame == samples_per_frame and spec.max_delay == books - 1
    assert spec.rows(frames) == frames + books - 1
    assert spec.frames(spec.rows(frames)) == frames
    assert spec.frames(frames) == (frames - books + 1 if frames >= books - 1 else 0)
    assert spec.seconds(frames) == frames / frame_rate
    held = spec.frames(spec.rows_for_seconds(seconds))  # the fewest whole frames that hold `seconds`
    assert held - 1 < seconds * frame_rate <= held


# ---------------------------------------------------------------------------------------------- properties
SHAPES = dict(books=st.integers(2, 8), frames=st.integers(1, 12), batch=st.sampled_from([(), (1,), (3,), (2, 2)]))
IDS = st.one_of(
    st.just((BOC, EOC)),
    st.tuples(st.integers(-5, 5000), st.integers(-5, 5000)).filter(lambda ids: ids[0] != ids[1]),
)  # any two different ids: the pattern does not care what they are


def code_arrays(shape, high: int = 1023, specials: tuple[int, ...] = ()):
    elements = st.one_of(st.integers(0, high), st.sampled_from(specials)) if specials else st.integers(0, high)
    return arrays(np.int64, shape, elements=elements).map(torch.from_numpy)


@settings(max_examples=80)
@given(data=st.data(), ids=IDS, **SHAPES)
def test_apply_equals_the_loop_and_revert_undoes_it(data, ids, books, frames, batch):
    boc, eoc = ids
    codes = data.draw(code_arrays((*batch, frames, books)), label="codes")
    delayed = apply_delay_pattern(codes, boc, eoc)
    assert delayed.shape == (*batch, frames + books - 1, books) and delayed.dtype == torch.long
    for raw, rows in zip(codes.reshape(-1, frames, books), delayed.reshape(-1, frames + books - 1, books)):
        assert torch.equal(rows, delayed_by_loop(raw, boc, eoc))
    assert torch.equal(revert_delay_pattern(delayed), codes)


@settings(max_examples=50)
@given(data=st.data(), books=st.integers(2, 8), extra=st.integers(0, 12), batch=st.sampled_from([(), (2,)]))
def test_revert_equals_the_loop(data, books, extra, batch):
    """Any matrix of at least C - 1 rows (not only a delayed one) reverts to `D[t + c, c]`."""
    rows = data.draw(code_arrays((*batch, books - 1 + extra, books), specials=(BOC, EOC)), label="rows")
    reverted = revert_delay_pattern(rows)
    assert reverted.shape == (*batch, extra, books)
    flat = rows.reshape(-1, *rows.shape[-2:])
    for delayed, raw in zip(flat, reverted.reshape(len(flat), extra, books)):
        assert torch.equal(raw, reverted_by_loop(delayed))


@settings(max_examples=80)
@given(data=st.data(), ids=st.sampled_from([(BOC, EOC), (4, 5)]), books=st.integers(2, 8), num_rows=st.integers(0, 20),
       batch=st.integers(1, 3), given_lengths=st.booleans())
def test_rows_to_codes_equals_the_loop(data, ids, books, num_rows, batch, given_lengths):
    boc, eoc = ids
    rows = data.draw(code_arrays((batch, num_rows, books), high=boc - 1, specials=ids), label="rows")
    lengths = data.draw(st.lists(st.integers(0, num_rows), min_size=batch, max_size=batch), label="lengths") \
        if given_lengths else None
    codes, frames = rows_to_codes(rows, boc, eoc, None if lengths is None else torch.tensor(lengths))
    expected, expected_frames = rows_to_codes_by_loop(rows, boc, eoc, lengths)
    assert torch.equal(codes, expected)
    assert frames.tolist() == expected_frames


@settings(max_examples=120)
@given(
    data=st.data(),
    books=st.integers(2, 8),
    length=st.integers(0, 30),
    batch=st.integers(1, 3),
)
def test_end_of_speech_matches_the_state_machine_whole_and_in_pieces(data, books, length, batch):
    """`speech_end_row` over whole streams, one row at a time (a streamer's every put) and in random pieces folded
    with `minimum`, against the spec's state machine stepped row by row."""
    codebook0 = data.draw(code_arrays((batch, length), high=3, specials=(EOC,)), label="codebook0")
    end = speech_end_row(codebook0, EOC, books)
    assert end.shape == (batch,)
    for b in range(batch):
        expected_end, expected_rows, done = end_by_state_machine(codebook0[b].tolist(), books)
        assert int(end[b]) == (NO_END if expected_end is None else expected_end)
        assert bool(speech_finished(end[b], books, length)) == done
        assert int(speech_rows(end[b], books, length)) == expected_rows
    cuts = data.draw(st.sets(st.integers(1, max(length - 1, 1)), max_size=5), label="cuts") if length > 1 else set()
    for bounds in (list(range(length + 1)), sorted({0, length, *cuts})):
        folded = torch.full((batch,), NO_END)
        for first, last in zip(bounds, bounds[1:]):
            folded = torch.minimum(folded, speech_end_row(codebook0[:, first:last], EOC, books, first_row=first))
        assert torch.equal(folded, end)
