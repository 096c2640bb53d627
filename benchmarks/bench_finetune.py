# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Fine-tuning figures for docs/TRAINING.md: the tiny run's measured throughput and the real model's computed memory.

    python benchmarks/bench_finetune.py [--steps 40] [--threads 1] [--positions 1024 2048 4096] [--rank 16]

1. **Measured** here: transformers' `Trainer` on the tiny test model (2 layers, width 32, the real vocabulary and
   audio head) over the two examples of the overfit test (batch 2), full fine-tuning with and
   without gradient checkpointing and LoRA (rank `--rank`, width 128 as in the test); optimizer steps per second and
   trained positions per second, after 5 warm-up steps.
2. **Computed** from the shapes (`estimate_lora_memory`, below), never measured: the memory of a LoRA run
   of the real 4B model at batch 1 (bf16 weights, codec fp32, gradient checkpointing) for examples of `--positions`
   positions. The codec's parameters are counted on the meta device from the real codec config.

Prints a JSON document (and the markdown tables) to stdout. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the package's parent, for a checkout's `benchmarks/`


def lora_parameter_count(config, rank: int = 16) -> int:
    """Parameters LoRA adds on `training.finetune.BACKBONE_PROJECTIONS` (`rank * (in + out)` per projection), from a
    config's shapes."""
    hidden, inter = config.hidden_size, config.intermediate_size
    query, key_value = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
    shapes = [(hidden, query), (hidden, key_value), (hidden, key_value), (query, hidden),
              (hidden, inter), (hidden, inter), (inter, hidden)]
    return config.num_hidden_layers * sum(rank * (fan_in + fan_out) for fan_in, fan_out in shapes)


def backbone_parameter_count(config) -> int:
    """Parameters of everything but the codec (token and fused audio embeddings, both heads tied to them, the decoder
    layers with their norms), from a config's shapes."""
    hidden, inter, head_dim = config.hidden_size, config.intermediate_size, config.head_dim
    query, key_value = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
    layer = hidden * (query + 2 * key_value) + query * hidden + 3 * hidden * inter + 2 * hidden + 2 * head_dim
    return config.vocab_size * hidden + config.audio_vocab_size * hidden + config.num_hidden_layers * layer + hidden


def estimate_lora_memory(config, positions: int, rank: int = 16, codec_parameters: int = 0) -> dict[str, int]:
    r"""Bytes a LoRA run needs at batch 1, **computed from the shapes** (not measured): bf16 weights with the codec in
    fp32, fp32 adapters (PEFT's default) with their gradients and AdamW's two moments, and the activations of one
    `positions`-long example under gradient checkpointing with a fused attention kernel (SDPA / flash: no
    `positions^2` matrix) and LoRA dropout 0. Framework overhead (CUDA context, allocator slack) is not included.

    - `checkpoints`: each decoder layer's input, kept for the backward pass: `layers * positions * hidden` bf16.
    - `layer_recompute`: one layer's saved tensors while it is recomputed and differentiated (the normed inputs, q /
      k / v before and after their norm and rotary embedding, the attention output, the MLP's gate, up, activation
      and product, the projections' outputs: `positions * (5 hidden + 3 q + 3 kv + 4 intermediate)` bf16 values),
      doubled for their gradients.
    - `head_and_loss`: the audio logits (bf16), their fp32 copy in the loss, its log-softmax and its gradient:
      `positions * num_codebooks * codebook_size * (2 + 3 * 4)` bytes. The 151936-wide text head never runs."""
    hidden, inter = config.hidden_size, config.intermediate_size
    query, key_value = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
    lora = lora_parameter_count(config, rank)
    per_position = 5 * hidden + 2 * query + query + 2 * key_value + key_value + 4 * inter  # saved per layer, bf16
    parts = {
        "weights_bf16": 2 * backbone_parameter_count(config),
        "codec_fp32": 4 * codec_parameters,
        "lora_weights_grads_adam": 16 * lora,
        "checkpoints": 2 * config.num_hidden_layers * positions * hidden,
        "layer_recompute": 2 * 2 * positions * per_position,
        "head_and_loss": positions * config.num_codebooks * config.codebook_size * (2 + 3 * 4),
    }
    parts["total"] = sum(parts.values())
    return parts


def tiny_throughput(steps: int, rank: int) -> list[dict]:
    import torch
    from transformers import AutoTokenizer, PrinterCallback, Trainer, TrainerCallback, TrainingArguments

    from higgs_v3 import HiggsAudioV3ForConditionalGeneration, HiggsAudioV3Processor

    from higgs_v3.testing import tiny
    from higgs_v3.training.finetune import HiggsAudioV3DataCollator, HiggsAudioV3SpeechDataset, lora_config

    with tempfile.TemporaryDirectory() as scratch:
        processor = HiggsAudioV3Processor(AutoTokenizer.from_pretrained(tiny.write_tiny_tokenizer(scratch)))
    generator = torch.Generator().manual_seed(0)
    texts = ["Hello there.", "Good bye now."]
    batch = [processor(text=t, audio_target=torch.randint(0, 1024, (n, 8), generator=generator))
             for t, n in zip(texts, (10, 12))]
    keys = ("input_ids", "audio_input_ids", "audio_labels")
    dataset = HiggsAudioV3SpeechDataset([{k: b[k][0] for k in keys} for b in batch], texts)
    positions = sum(int(b["input_ids"].shape[1]) for b in batch)

    class Clock(TrainerCallback):
        def __init__(self):
            self.times = []

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter())

    runs = []
    for name, lora, checkpointing, width in (("full", False, False, 32), ("full", False, True, 32),
                                             ("LoRA", True, True, 128)):
        torch.manual_seed(0)
        overrides = {} if width == 32 else {"hidden_size": width, "head_dim": width // 4, "intermediate_size": 2 * width}
        model = HiggsAudioV3ForConditionalGeneration(
            tiny.tiny_config(with_codec=False, attn_implementation="eager", initializer_range=0.3, **overrides)
        )
        if lora:
            from peft import get_peft_model

            model = get_peft_model(model, lora_config(rank))
        clock = Clock()
        with tempfile.TemporaryDirectory() as output:
            args = TrainingArguments(output_dir=output, max_steps=steps + 5, learning_rate=1e-2, per_device_train_batch_size=2,
                                     gradient_checkpointing=checkpointing, save_strategy="no", report_to="none",
                                     use_cpu=True, remove_unused_columns=False, label_names=["audio_labels"],
                                     disable_tqdm=True, logging_strategy="no")
            trainer = Trainer(model=model, args=args, train_dataset=dataset, callbacks=[clock],
                              data_collator=HiggsAudioV3DataCollator(processor))
            trainer.remove_callback(PrinterCallback)  # stdout is the JSON document
            trainer.train()
        seconds = clock.times[-1] - clock.times[4]
        runs.append({"run": name, "width": width, "gradient_checkpointing": checkpointing, "steps": steps,
                     "steps_per_second": steps / seconds, "positions_per_second": steps * positions / seconds,
                     "positions_per_step": positions})
    return runs


def real_memory(positions: list[int], rank: int) -> list[dict]:
    import torch

    from higgs_v3 import HiggsAudioV3Config
    from higgs_v3.codec_higgs_v3 import HiggsAudioV3Codec
    from higgs_v3.conversion.original_format import REAL_CODEC_CONFIG

    config = HiggsAudioV3Config()  # the real model's shapes (spec/reference/config.json)
    with torch.device("meta"):
        codec = HiggsAudioV3Codec.from_codec_config(REAL_CODEC_CONFIG)
    codec_parameters = sum(p.numel() for p in codec.parameters())
    rows = []
    for length in positions:
        parts = estimate_lora_memory(config, length, rank=rank, codec_parameters=codec_parameters)
        rows.append({"positions": length, "rank": rank, "lora_parameters": lora_parameter_count(config, rank),
                     "codec_parameters": codec_parameters, **{k: v / 2**30 for k, v in parts.items()}})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--positions", type=int, nargs="+", default=[1024, 2048, 4096])
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    result = {"threads": args.threads, "torch": torch.__version__, "tiny_throughput": tiny_throughput(args.steps, args.rank),
              "real_lora_memory_gib_computed": real_memory(args.positions, args.rank)}
    print(json.dumps(result, indent=2))
    print("\n| run | width | gradient checkpointing | steps/s | positions/s |\n|---|---|---|---|---|")
    for run in result["tiny_throughput"]:
        print(f"| {run['run']} | {run['width']} | {'yes' if run['gradient_checkpointing'] else 'no'} | "
              f"{run['steps_per_second']:.1f} | {run['positions_per_second']:.0f} |")
    print("\n| positions | weights bf16 | codec fp32 | LoRA + grads + AdamW | checkpoints | layer recompute | head + loss | "
          "total |\n|---|---|---|---|---|---|---|---|")
    for row in result["real_lora_memory_gib_computed"]:
        print(f"| {row['positions']} | {row['weights_bf16']:.2f} | {row['codec_fp32']:.2f} | "
              f"{row['lora_weights_grads_adam']:.2f} | {row['checkpoints']:.2f} | {row['layer_recompute']:.2f} | "
              f"{row['head_and_loss']:.2f} | **{row['total']:.2f}** |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
