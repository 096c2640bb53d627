"""Tensor parallelism on CPU: the tiny model loaded under `torchrun --nproc_per_node 2` (gloo) with its own plan
generates, on both ranks, exactly the greedy rows of one process: a left-padded batch with the dynamic and with the
static cache, and a prompt with a reference voice; the text head (sharded and gathered) gives the same logits. The
plan itself (what is sharded, what stays whole) is checked in the unit layer. One launch runs every case
(`distributed_tp_worker.py`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from higgs_v3.testing import tiny
from higgs_v3.compat_higgs_v3 import REPLICATE_STYLE, tensor_parallel_kwargs
from higgs_v3.conversion.repo import save_processor_files
from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration
from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor


HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from distributed_tp_worker import run_cases  # noqa: E402  (the worker's cases, run here in one process)


def test_the_plan_shards_the_backbone_and_keeps_the_audio_tensors_whole():
    """The class declares its plan: the text head as Qwen3ForCausalLM's, the fused audio embedding and the audio head
    replicated (explicitly where the installed transformers has the style); the backbone's plan is Qwen3's."""
    model = HiggsAudioV3ForConditionalGeneration(tiny.tiny_config(with_codec=False))
    replicate = {"audio_embed": "replicate", "audio_head": "replicate"} if REPLICATE_STYLE else {}
    assert HiggsAudioV3ForConditionalGeneration._tp_plan == {"lm_head": "colwise_gather_output", **replicate}
    backbone = {f"model.{k}": v for k, v in model.config.base_model_tp_plan.items()}
    assert backbone["model.layers.*.self_attn.q_proj"] == "colwise" and backbone["model.layers.*.mlp.down_proj"] == "rowwise"
    assert backbone.items() <= model.tp_plan.items()
    assert not any(name.startswith("codec") for name in model.tp_plan)
    kwargs = tensor_parallel_kwargs()
    if "distributed_config" in kwargs:  # 5.24: the non-deprecated API
        assert kwargs["distributed_config"].tp_plan == "auto"
    else:  # 5.5
        assert kwargs == {"tp_plan": "auto"}


@pytest.mark.integration
def test_two_ranks_generate_the_rows_of_one_process(tmp_path):
    torch.manual_seed(0)
    model = HiggsAudioV3ForConditionalGeneration(tiny.tiny_config(initializer_range=0.3)).eval()
    tiny.randomize_codebooks(model.codec)
    model_dir = tmp_path / "model"
    model.save_pretrained(model_dir)
    tiny.write_tiny_tokenizer(model_dir)
    save_processor_files(model_dir, model.config)
    clip = np.sin(np.arange(36000) / 24000 * 2 * np.pi * 220).astype(np.float32)  # 1.5 s at 24 kHz
    voice_path = model.encode_reference(clip, text="A short hum.", sampling_rate=24000).save(tmp_path / "voice.safetensors")
    processor = HiggsAudioV3Processor.from_model_config(AutoTokenizer.from_pretrained(model_dir), model.config)
    expected = run_cases(model, processor, voice_path)

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(HERE / "distributed_tp_worker.py"), str(model_dir), str(voice_path), str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        saved = torch.load(tmp_path / f"rank{rank}.pt")
        assert saved["world_size"] == 2
        for name in ("dynamic", "static", "voice"):
            assert torch.equal(saved["results"][name], expected[name]), (rank, name)
        torch.testing.assert_close(saved["results"]["text_logits"], expected["text_logits"], rtol=1e-5, atol=1e-5)
        layout = saved["layout"]
        # Sharded: the backbone's projections hold half their rows (colwise) or columns (rowwise) on each rank.
        assert layout["model.layers.0.self_attn.q_proj.weight"][1] == (16, 32)
        assert layout["model.layers.0.mlp.down_proj.weight"][1] == (32, 32)
        # Whole on every rank: the fused audio embedding (= the tied audio head) and the codec.
        assert layout["audio_embed.weight"] == ("Parameter", (8208, 32))
        assert all(kind == "Parameter" for name, (kind, _) in layout.items() if name.startswith("codec."))
    assert expected["voice"].shape[0] == 1 and expected["dynamic"].shape[0] == 2
