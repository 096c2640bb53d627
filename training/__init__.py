"""Fine-tuning (installed package only): training items, the codes cache, the collator, LoRA, `higgs-v3 finetune`."""
