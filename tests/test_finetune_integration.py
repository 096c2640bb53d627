"""Fine-tuning end to end (integration layer): overfitting through transformers' `Trainer`, fully and with PEFT LoRA,
until greedy generation says exactly the target codes and stops on the right row; gradient checkpointing, gradient
accumulation, resuming; the adapter's save / load / merge round trip; the merged model reloaded as remote code; the
`higgs-v3 finetune` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from conftest import tiny_model
from higgs_v3 import HiggsAudioV3Processor
from higgs_v3.training.finetune import HiggsAudioV3DataCollator, HiggsAudioV3SpeechDataset, lora_config, save_full_repo
from higgs_v3.testing.tiny import tiny_codec_config, write_tiny_tokenizer


pytestmark = pytest.mark.integration

C = 8
TEXTS = ["Hello there.", "Good bye now."]


@pytest.fixture(scope="module")
def processor(tmp_path_factory):
    return HiggsAudioV3Processor(AutoTokenizer.from_pretrained(write_tiny_tokenizer(tmp_path_factory.mktemp("tok"))))


def targets() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(0, 1024, (frames, C), generator=generator) for frames in (10, 12)]


def dataset(processor) -> HiggsAudioV3SpeechDataset:
    examples = [processor(text=text, audio_target=codes) for text, codes in zip(TEXTS, targets())]
    keys = ("input_ids", "audio_input_ids", "audio_labels")
    return HiggsAudioV3SpeechDataset([{k: e[k][0] for k in keys} for e in examples], TEXTS)


def training_arguments(output_dir, **overrides):
    from transformers import TrainingArguments  # in the tests, not at the top: the unit layer collects this module

    options = dict(output_dir=str(output_dir), learning_rate=1e-2, lr_scheduler_type="constant", warmup_steps=0,
                   per_device_train_batch_size=2, logging_steps=10, save_strategy="no", report_to="none",
                   use_cpu=True, remove_unused_columns=False, label_names=["audio_labels"], seed=0, disable_tqdm=True)
    options.update(overrides)
    return TrainingArguments(**options)


def greedy_codes(model, processor, text: str):
    out = model.generate(**processor(text=text), do_sample=False, max_new_tokens=40, return_dict_in_generate=True,
                         output_audio=False)
    return out


def assert_says_the_targets(model, processor):
    """Greedy generation reproduces every target exactly and stops on its terminal row."""
    model.eval()
    for text, codes in zip(TEXTS, targets()):
        out = greedy_codes(model, processor, text)
        assert out.finished.tolist() == [True], text
        assert out.lengths.tolist() == [codes.shape[0] + C - 1], text
        assert torch.equal(out.audio_codes[0], codes), text


def test_full_finetune_overfits_with_checkpointing_accumulation_and_resume(processor, tmp_path):
    """Full fine-tuning through `Trainer` (gradient checkpointing, batch 1 with 2 accumulation steps): the loss goes to
    near zero and greedy generation says the targets exactly. A second run resumed from the step-20 checkpoint ends
    with the same weights. The codec is never trained."""
    from transformers import Trainer

    train = dataset(processor)
    model = tiny_model(codec_config=tiny_codec_config()).train()
    args = training_arguments(tmp_path / "run", max_steps=40, per_device_train_batch_size=1,
                              gradient_accumulation_steps=2, gradient_checkpointing=True, save_strategy="steps",
                              save_steps=20)
    trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=HiggsAudioV3DataCollator(processor))
    trainer.train()
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert not any(id(p) in optimized or p.grad is not None for p in model.codec.parameters())
    assert all(p.dtype == torch.float32 for p in model.codec.parameters())
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert losses[-1] < 0.25 and losses[0] > 5  # the mean of steps 31-40: 0.09 (transformers 5.24), 0.16 (5.5)
    assert_says_the_targets(model, processor)

    resumed_model = tiny_model(codec_config=tiny_codec_config()).train()
    resumed = Trainer(model=resumed_model, args=args, train_dataset=train, data_collator=HiggsAudioV3DataCollator(processor))
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-20"))
    assert resumed.state.global_step == 40
    for (name, p), q in zip(model.named_parameters(), resumed_model.parameters()):
        assert torch.allclose(p, q, atol=1e-5), name
    assert_says_the_targets(resumed_model, processor)


def test_lora_overfits_and_round_trips(processor, tmp_path):
    """LoRA on the backbone's projections only (a wider tiny model: rank-limited updates of a 32-wide one cannot
    fit random codes): greedy generation says the targets; the adapter saved and loaded on a fresh base, the merged
    model, and the merged model saved and reloaded with trust_remote_code=True all give identical greedy codes."""
    from peft import PeftModel, get_peft_model
    from transformers import Trainer

    def base():
        return tiny_model(hidden_size=128, head_dim=32, intermediate_size=256)

    model = get_peft_model(base(), lora_config(rank=16))
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trained and all(".layers." in n and "lora_" in n for n in trained)
    assert {n.split(".")[-4] for n in trained} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    trainer = Trainer(model=model, args=training_arguments(tmp_path / "lora", max_steps=60, learning_rate=3e-2),
                      train_dataset=dataset(processor), data_collator=HiggsAudioV3DataCollator(processor))
    trainer.train()
    # The loss levels off near 0.3 (the frozen final RMSNorm bounds the logits' scale, so no codebook gets a
    # probability near 1), but every argmax is the target's: greedy generation says it exactly.
    assert [log["loss"] for log in trainer.state.log_history if "loss" in log][-1] < 0.5
    assert_says_the_targets(model, processor)
    expected = [greedy_codes(model, processor, text).sequences for text in TEXTS]

    model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    loaded = PeftModel.from_pretrained(base(), tmp_path / "adapter").eval()
    merged = loaded.merge_and_unload()
    assert not any("lora_" in n for n, _ in merged.named_parameters())
    for text, rows in zip(TEXTS, expected):
        assert torch.equal(greedy_codes(merged, processor, text).sequences, rows)

    folder = save_full_repo(merged, processor, tmp_path / "merged")
    reloaded = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(reloaded).__module__.startswith("transformers_modules.")  # the repo's own code, not the package's
    for text, rows in zip(TEXTS, expected):
        assert torch.equal(greedy_codes(reloaded, processor, text).sequences, rows)


def test_finetune_command(tmp_path, monkeypatch, capsys):
    """`higgs-v3 finetune` on a folder of wav + txt pairs with the tiny random model (its codec encodes the clips):
    progress lines with the loss and the held-out loss, checkpoints, the tuned model and adapter, a sample;
    --push-to-hub uploads the folder checked here (the merged repo, or the adapter with --push-adapter, after a resumed
    run); bad data is one line naming the item, or skipped and counted with --skip-invalid (a bf16 run with gradient
    checkpointing). Only the LoRA parameters are trained (the codec stays frozen through `from_pretrained`); `model/`
    and `adapter/` are swapped into place whole, and `model/` carries the base's original chat template and LICENSE."""
    import shutil

    import numpy as np
    import soundfile

    from higgs_v3.cli import main as cli_main

    from higgs_v3.conversion import repo as repo_files
    from higgs_v3.cli.models import ensure_tiny_random

    base = tmp_path / "base"  # the tiny random model, with what a converted original repo carries besides
    shutil.copytree(ensure_tiny_random(), base)
    (base / repo_files.ORIGINAL_CHAT_TEMPLATE_FILE).write_text("{{ original }}", encoding="utf-8")
    (base / "LICENSE").write_text("license text", encoding="utf-8")

    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        samples = 0.1 * np.random.default_rng(i).standard_normal(12000 + 2400 * i).astype(np.float32)
        soundfile.write(data / f"line{i}.wav", samples, 24000)
        (data / f"line{i}.txt").write_text(f"Line number {i}.", encoding="utf-8")
    pushed = []
    monkeypatch.setattr(repo_files, "push_folder_to_hub",
                        lambda folder, repo_id, **kw: pushed.append((folder, repo_id)) or f"https://hub/{repo_id}")
    monkeypatch.setattr(repo_files, "check_hub_push", lambda repo_id, **kw: "me")  # checked before training
    out = tmp_path / "out"
    common = ["finetune", "--data", str(data), "--model", str(base), "--output", str(out), "--lora",
              "--learning-rate", "1e-2", "--held-out", "0.34", "--save-steps", "2", "--device", "cpu"]
    assert cli_main.main([*common, "--max-steps", "4", "--epochs", "1", "--push-to-hub", "me/tuned"]) == 0
    captured = capsys.readouterr()
    assert "2 training and 1 held-out examples (3 clips encoded, 0 from the cache)" in captured.err
    from peft import get_peft_model

    from higgs_v3 import HiggsAudioV3Config
    from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration
    from higgs_v3.training.finetune import lora_config, trainable_parameters

    shapes = HiggsAudioV3ForConditionalGeneration(HiggsAudioV3Config.from_pretrained(base))  # LoRA's count: shapes only
    lora, _ = trainable_parameters(get_peft_model(shapes, lora_config(16)))
    assert f"Training {lora:,} of " in captured.err  # no codec parameter
    assert "step 4/4: loss " in captured.err and "held-out loss " in captured.err
    assert f"Sample: 'Line number 0.' -> {out / 'sample.wav'} (" in captured.err
    assert captured.out.startswith("Fine-tuned 4 steps in ") and "pushed https://hub/me/tuned" in captured.out
    assert {p.name for p in out.glob("checkpoint-*")} == {"checkpoint-2", "checkpoint-4"}
    assert (out / "adapter" / "adapter_config.json").is_file() and (out / "sample.wav").is_file()
    assert pushed == [(out / "model", "me/tuned")]
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["auto_map"]["AutoModel"].endswith("HiggsAudioV3ForConditionalGeneration")
    assert (out / "model" / "processor_config.json").is_file() and (out / "model" / "tokenizer.json").is_file()
    assert (out / "model" / repo_files.ORIGINAL_CHAT_TEMPLATE_FILE).read_text() == "{{ original }}"
    assert (out / "model" / "LICENSE").read_text() == "license text"
    assert not [p.name for p in out.iterdir() if "_saving_" in p.name or "_replaced_" in p.name]
    from higgs_v3.conversion.export import export_to_original

    export_to_original(out / "model", tmp_path / "exported")  # the tuned model in the original layout: its template
    assert (tmp_path / "exported" / "chat_template.jinja").read_text() == "{{ original }}"
    assert (tmp_path / "exported" / "LICENSE").read_text() == "license text"

    (data / "line9.wav").write_bytes((data / "line0.wav").read_bytes())  # no transcript
    assert cli_main.main([*common, "--output", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("higgs-v3: error: line9: ") and "has no transcript" in err and "\n" not in err

    import huggingface_hub

    class FakeApi:  # the adapter goes up with HfApi.upload_folder
        def __init__(self, *args, **kwargs):
            pass

        def create_repo(self, repo_id, **kwargs):
            pushed.append(("create", repo_id))

        def upload_folder(self, repo_id, folder_path, **kwargs):
            assert (Path(folder_path) / "adapter_config.json").is_file()
            pushed.append((Path(folder_path), repo_id))
            return f"https://hub/{repo_id}/commit"

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    half = out / "checkpoint-5"  # a kill or a full disk while Trainer wrote it: no completion marker
    shutil.copytree(out / "checkpoint-4", half)
    (half / ".higgs_v3_complete.json").unlink()
    (half / "trainer_state.json").unlink()
    assert cli_main.main([*common, "--max-steps", "6", "--resume", "--skip-invalid", "--bf16",
                              "--gradient-checkpointing", "--push-to-hub", "me/adapter", "--push-adapter",
                              "--sample-seconds", "0"]) == 0
    captured = capsys.readouterr()
    assert "Skipped line9: " in captured.err and "0 clips encoded, 3 from the cache" in captured.err
    assert ("Ignoring checkpoint-5: it has no completion marker (it was not written to the end).\n"
            "Resuming from checkpoint-4, the newest complete checkpoint.\n") in captured.err
    assert captured.out.startswith("Fine-tuned 6 steps") and "pushed https://hub/me/adapter/commit" in captured.out
    assert captured.out.rstrip().endswith("; skipped 1 bad item (line9).")
    assert (out / "checkpoint-6").is_dir() and pushed[1:] == [("create", "me/adapter"), (out / "adapter", "me/adapter")]
    assert captured.out.startswith("Fine-tuned 6 steps, resumed at step 4, in ")

    assert cli_main.main([*common, "--max-steps", "6", "--resume", "--skip-invalid", "--sample-seconds", "0"]) == 0
    captured = capsys.readouterr()  # the finished run resumed: nothing trained or replaced, its own loss (not 0.0000)
    assert captured.err.startswith("Nothing to do: checkpoint-6 is at step 6, at or past --max-steps 6, and ")
    history = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())["log_history"]
    loss = [entry["loss"] for entry in history if "loss" in entry][-1]
    assert captured.out.startswith(f"Nothing to train: the run had finished at step 6 (last training loss {loss:.4f}, "
                                   "held-out loss ")
