"""The delay pattern's end-of-speech rule (`speech_end_row`, `speech_rows`), against the spec's state machine run
as a plain loop (§6), on hand-made and random codebook-0 streams, whole and in pieces."""

from __future__ import annotations

import pytest
import torch

from higgs_v3.delay_higgs_v3 import NO_END, speech_end_row, speech_finished, speech_rows


EOC = 1025


def end_by_state_machine(codebook0: list[int], num_codebooks: int) -> tuple[int | None, int, bool]:
    """(row that started the countdown or None, rows emitted, done), stepping the spec's per-sequence state."""
    delay, countdown = 0, None
    for step, code in enumerate(codebook0):
        if delay < num_codebooks:
            delay += 1
        elif countdown is not None:
            countdown -= 1
            if countdown == 0:
                return end_row, step + 1, True
        elif code == EOC:
            end_row, countdown = step, num_codebooks - 2
            if countdown == 0:  # two codebooks: the EOC row is the terminal row
                return end_row, step + 1, True
    return (end_row if countdown is not None else None), len(codebook0), False


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


@pytest.mark.parametrize("num_codebooks", [2, 3, 8])
def test_random_streams_match_the_state_machine_whole_and_in_pieces(num_codebooks):
    generator = torch.Generator().manual_seed(num_codebooks)
    for _ in range(200):
        length = int(torch.randint(1, 30, (), generator=generator))
        codes = torch.randint(0, 4, (length,), generator=generator)
        codes = torch.where(codes == 0, EOC, codes)  # about one EOC in four
        expected_end, expected_rows, done = end_by_state_machine(codes.tolist(), num_codebooks)
        end = speech_end_row(codes[None], EOC, num_codebooks)[0]
        assert int(end) == (NO_END if expected_end is None else expected_end)
        assert bool(speech_finished(end, num_codebooks, length)) == done
        assert int(speech_rows(end, num_codebooks, length)) == expected_rows
        # Streamed: one row at a time, and in chunks of 4, folded with `minimum`, as the streamers do.
        for chunk in (1, 4):
            folded = torch.tensor(NO_END)
            for first in range(0, length, chunk):
                piece = codes[None, first : first + chunk]
                folded = torch.minimum(folded, speech_end_row(piece, EOC, num_codebooks, first_row=first)[0])
            assert int(folded) == int(end)


def test_empty_and_batched_shapes():
    assert speech_end_row(torch.zeros(2, 0, dtype=torch.long), EOC, 8).tolist() == [NO_END, NO_END]
    assert speech_end_row(torch.full((2, 3, 12), EOC), EOC, 8).shape == (2, 3)
    assert speech_rows(torch.tensor([NO_END, 9]), 8, torch.tensor([20, 12])).tolist() == [20, 12]  # 9 + 7 > 12
