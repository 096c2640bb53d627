"""`device_map` placements with the codec as its own unit (issue 17, item 3).

The codec runs outside `forward` (`encode_reference`, `decode_audio`, `generate`'s decode, the streamer), so it must be
one unit of a device map, never offloaded by accelerate's hooks, and every call moves codes / waveforms to its device
explicitly. A CPU has one device: a split here is CPU + disk (accelerate offloads the disk entries behind hooks, the
same mechanism as a "cpu" entry next to a GPU), and the real GPU + CPU path runs in `benchmarks/gpu_benchmark.py`
(`--placement` check) when a GPU is lent."""

from __future__ import annotations

import pytest
import torch
import transformers
from accelerate import infer_auto_device_map
from accelerate.hooks import attach_align_device_hook
from accelerate.utils import compute_module_sizes

from higgs_v3 import HiggsAudioV3ForConditionalGeneration
from higgs_v3.codec_higgs_v3 import codec_device_map, place_codec

from higgs_v3.testing import tiny

from conftest import tiny_model


PROMPT = [[151667, 151672, 9707, 11, 1879, 151670]]
ROWS = 14


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The tiny model with the tiny codec (random codebooks), saved; its greedy output and a streamed run."""
    model = tiny_model(codec_config=tiny.tiny_codec_config())
    tiny.randomize_codebooks(model.codec)
    folder = tmp_path_factory.mktemp("placement") / "tiny"
    model.save_pretrained(folder)
    ids = torch.tensor(PROMPT)
    out = model.generate(input_ids=ids, do_sample=False, max_new_tokens=ROWS, return_dict_in_generate=True)
    return model, folder, out


def _streamed(model) -> list[torch.Tensor]:
    streamer = model.audio_streamer(first_chunk_frames=2, chunk_frames=2, context_frames=1)
    model.generate(input_ids=torch.tensor(PROMPT), do_sample=False, max_new_tokens=ROWS, streamer=streamer)
    return list(streamer)


def _check_same_speech(placed, model, out) -> None:
    """Identical rows and waveforms out of `generate`, `decode_audio`, the streamer and `encode_reference`."""
    got = placed.generate(input_ids=torch.tensor(PROMPT), do_sample=False, max_new_tokens=ROWS,
                          return_dict_in_generate=True)
    assert torch.equal(got.sequences, out.sequences)
    assert len(got.audio) == 1 and got.audio[0].numel() > 0
    assert torch.equal(got.audio[0], out.audio[0])
    assert torch.equal(placed.decode_audio(out.sequences, out.lengths)[0], out.audio[0])
    expected_chunks, chunks = _streamed(model), _streamed(placed)
    assert len(chunks) == len(expected_chunks) > 1
    assert all(torch.equal(a, b) for a, b in zip(chunks, expected_chunks))
    waveform = torch.randn(24000, generator=torch.Generator().manual_seed(1)) * 0.1
    assert torch.equal(placed.encode_reference(waveform, sampling_rate=24000).codes,
                       model.encode_reference(waveform, sampling_rate=24000).codes)


def _check_same_clip_rows(placed, model, processor) -> None:
    """A reference clip (`processor(reference=clip)`) encoded by the placed codec: the same filled rows, on the rows'
    device, and the same greedy generation as the plain model's."""
    clip = torch.randn(30000, generator=torch.Generator().manual_seed(2)) * 0.1
    inputs = processor("Hello there.", reference=clip, sampling_rate=24000)
    clips = (inputs["audio_input_ids"], inputs["reference_audio"], inputs["reference_audio_lengths"])
    expected = model.config.audio_spec.delay(model.encode_reference(clip, sampling_rate=24000).codes)  # its voice's
    rows = placed.merge_reference_clips(*clips)
    assert rows.device == inputs["audio_input_ids"].device and torch.equal(rows, expected)
    options = {"do_sample": False, "max_new_tokens": ROWS}
    assert torch.equal(placed.generate(**inputs, **options), model.generate(**inputs, **options))


def _codec_is_plain(model, device: str) -> None:
    """The codec on `device` with real weights, no accelerate hook and frozen."""
    assert {t.device.type for t in model.codec.state_dict().values()} == {device}
    assert not any(hasattr(module, "_hf_hook") for module in model.codec.modules())
    assert not any(p.requires_grad for p in model.codec.parameters())
    assert model.codec.device == torch.device(device)


def test_expand_root_entry_gives_the_root_device_to_the_top_level_modules():
    def expand(device_map):
        return codec_device_map(device_map, HiggsAudioV3ForConditionalGeneration._top_level_modules)

    assert expand({"": "cuda:0", "codec": "cpu"}) == {
        "model": "cuda:0", "audio_embed": "cuda:0", "audio_head": "cuda:0", "lm_head": "cuda:0", "codec": "cpu"}
    assert expand({"": 0, "lm_head": 1}) == {"model": 0, "audio_embed": 0, "audio_head": 0, "codec": 0, "lm_head": 1}
    deeper = {"": 0, "model.layers.1": 1, "codec": "cpu"}  # the root's modules are not known without the model
    assert expand(deeper) is deeper
    assert expand("auto") == "auto" and expand({"": "cpu"}) == {"": "cpu"}


def test_auto_device_map_splits_the_decoder_layers_and_keeps_the_codec_whole(saved):
    """A memory limit that leaves room for the embeddings, one decoder layer and the codec: the layers are split, the
    codec is one entry. Without `HiggsAudioV3Codec` in `_no_split_modules` accelerate cuts it into 20-odd entries."""
    model, _, _ = saved
    sizes = compute_module_sizes(model)
    max_memory = {"cpu": sizes["model.embed_tokens"] + sizes["codec"] + sizes["model.layers.0"]}
    placement = infer_auto_device_map(model, max_memory=max_memory,
                                      no_split_module_classes=list(model._no_split_modules))
    assert placement["model.layers.0"] == "cpu" and placement["model.layers.1"] == "disk"
    assert [key for key in placement if key.startswith("codec")] == ["codec"]
    without = [name for name in model._no_split_modules if name != "HiggsAudioV3Codec"]
    split = infer_auto_device_map(model, max_memory=max_memory, no_split_module_classes=without)
    assert len([key for key in split if key.startswith("codec.")]) > 10  # what the declaration prevents


def test_codec_offloaded_by_accelerate_is_put_back_on_its_device(saved, processor):
    """The state `device_map={"": "cuda:0", "codec": "cpu"}` leaves after accelerate's dispatch (the codec's weights
    replaced by meta tensors, kept in the hook's weights map, hooks around every forward; here the execution device is
    the CPU): `place_codec` gives the codec its weights back on the CPU and removes the hooks; without the weights
    (an offload that lost them) the codec is refused rather than left on the meta device."""
    model, folder, out = saved
    placed = HiggsAudioV3ForConditionalGeneration.from_pretrained(folder).eval()
    attach_align_device_hook(placed.codec, execution_device="cpu", offload=True,
                             weights_map={k: v.clone() for k, v in placed.codec.state_dict().items()})
    assert {p.device.type for p in placed.codec.parameters()} == {"meta"}
    placed.hf_device_map = {"model": "cpu", "audio_embed": "cpu", "audio_head": "cpu", "lm_head": "cpu", "codec": "cpu"}
    place_codec(placed)
    _codec_is_plain(placed, "cpu")
    assert all(torch.equal(a, b) for a, b in zip(placed.codec.state_dict().values(), model.codec.state_dict().values()))
    got = placed.generate(input_ids=torch.tensor(PROMPT), do_sample=False, max_new_tokens=ROWS,
                          return_dict_in_generate=True)
    assert torch.equal(got.audio[0], out.audio[0])
    _check_same_clip_rows(placed, model, processor)
    lost = HiggsAudioV3ForConditionalGeneration.from_pretrained(folder).eval()
    lost.codec.to("meta")  # what an offload that lost the weights leaves
    lost.hf_device_map = {"": "cpu", "codec": "disk"}
    with pytest.raises(ValueError, match=r"^The codec has weights on the meta device \(\[.+\]\.\.\.\) under device "
                                         r"map entry 'codec': 'disk' \(offloaded without its weights\); give the codec"):
        place_codec(lost)


@pytest.mark.integration
def test_device_map_with_the_codec_on_its_own_entry(saved, tmp_path, processor):
    """`{"": "cpu", "codec": "disk"}`: a real split (accelerate dispatches and offloads the codec to the disk); the
    codec ends up on the CPU, one entry of `hf_device_map`, and the speech is the plain load's, bit for bit."""
    model, folder, out = saved
    placed = HiggsAudioV3ForConditionalGeneration.from_pretrained(
        folder, device_map={"": "cpu", "codec": "disk"}, offload_folder=tmp_path).eval()
    assert placed.hf_device_map == {"model": "cpu", "audio_embed": "cpu", "audio_head": "cpu", "lm_head": "cpu",
                                    "codec": "cpu"}
    _codec_is_plain(placed, "cpu")
    _check_same_speech(placed, model, out)
    _check_same_clip_rows(placed, model, processor)


# transformers 5.5.0 leaves the tied `audio_head.weight` out of its disk-offload index (accelerate's loader raises
# KeyError 'audio_head.weight' in the first forward); 5.24.0 writes it. Versions in between are not tested.
TIED_DISK_OFFLOAD = tuple(int(part) for part in transformers.__version__.split(".")[:2]) >= (5, 24)


@pytest.mark.integration
@pytest.mark.skipif(not TIED_DISK_OFFLOAD, reason="transformers 5.5 does not disk-offload a tied weight (see above)")
def test_auto_device_map_with_a_split_backbone(saved, tmp_path):
    """`device_map="auto"` with a `max_memory` that sends the second decoder layer, the audio embedding and the codec
    to the disk: the layers run behind accelerate's hooks (the fused embedding is looked up through its module, so its
    offloaded weight is brought in), the codec is loaded whole onto the CPU; the speech is the plain load's."""
    model, folder, out = saved
    sizes = compute_module_sizes(model)
    max_memory = {"cpu": sizes["model.embed_tokens"] + sizes["codec"] + sizes["model.layers.0"]}
    placed = HiggsAudioV3ForConditionalGeneration.from_pretrained(
        folder, device_map="auto", max_memory=max_memory, offload_folder=tmp_path).eval()
    placement = placed.hf_device_map
    assert placement["model.layers.0"] == "cpu" and placement["model.layers.1"] == "disk"
    assert placement["audio_embed"] == "disk"
    assert [key for key in placement if key.startswith("codec")] == ["codec"] and placement["codec"] == "cpu"
    _codec_is_plain(placed, "cpu")
    _check_same_speech(placed, model, out)


def test_a_device_map_that_splits_the_codec_is_refused(saved, tmp_path):
    _, folder, _ = saved
    device_map = {"model": "cpu", "audio_embed": "cpu", "audio_head": "cpu", "lm_head": "cpu",
                  "codec.acoustic_decoder": "disk", "codec": "cpu"}
    with pytest.raises(ValueError, match=r"^The device map splits the codec over several entries "
                                         r"\(\['codec.acoustic_decoder'\]\); the codec is one unit: give it one entry"):
        HiggsAudioV3ForConditionalGeneration.from_pretrained(folder, device_map=device_map, offload_folder=tmp_path)
