"""One rank of `test_tensor_parallel.py`, run under `torchrun --nproc_per_node 2` (gloo, CPU): loads the tiny model
sharded by its own plan (`compat_higgs_v3.tensor_parallel_kwargs`), generates `CASES` greedily and saves what it
got, with how its parameters are laid out, to `OUT/rank{R}.pt`. Not a test module (pytest does not collect it)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist


CASES: dict[str, dict] = {
    "dynamic": {"texts": ["Hello world.", "The quick brown fox jumps."], "cache_implementation": None, "voice": False},
    "static": {"texts": ["Hello world.", "The quick brown fox jumps."], "cache_implementation": "static",
               "voice": False},
    "voice": {"texts": ["Hello world."], "cache_implementation": None, "voice": True},
}
"""Each case: the texts (a batch is left padded), the cache, whether the prompt takes the reference voice."""

MAX_NEW_TOKENS = 16


def run_cases(model, processor, voice_path: Path) -> dict[str, torch.Tensor]:
    """The greedy rows `[batch, rows, num_codebooks]` of every case, and the text logits of the first prompt."""
    results = {}
    for name, case in CASES.items():
        inputs = processor(text=case["texts"], reference=str(voice_path) if case["voice"] else None)
        results[name] = model.generate(**inputs, do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
                                       cache_implementation=case["cache_implementation"])
    inputs = processor(text=CASES["dynamic"]["texts"][:1])
    with torch.no_grad():
        results["text_logits"] = model(**inputs, return_text_logits=True).text_logits
    return results


def main(model_dir: str, voice_path: str, out_dir: str) -> None:
    from transformers import AutoTokenizer

    from higgs_v3.compat_higgs_v3 import tensor_parallel_kwargs
    from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration
    from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor

    torch.set_num_threads(1)
    model = HiggsAudioV3ForConditionalGeneration.from_pretrained(model_dir, **tensor_parallel_kwargs()).eval()
    processor = HiggsAudioV3Processor.from_model_config(AutoTokenizer.from_pretrained(model_dir), model.config)
    rank = dist.get_rank()
    layout = {name: (type(p).__name__, tuple(getattr(p, "to_local", lambda p=p: p)().shape))
              for name, p in model.named_parameters()}
    results = run_cases(model, processor, Path(voice_path))
    torch.save({"results": results, "layout": layout, "world_size": dist.get_world_size()},
               Path(out_dir) / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
