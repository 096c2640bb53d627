"""`higgs-v3 eval` (installed package only): a Seed-TTS-eval list or a JSONL manifest spoken through `higgs-v3 batch`'s
machinery, then scored (WER / CER with an ASR pipeline, speaker similarity with a speaker-verification model, runaway
rate, retries, real-time factor). `items` reads the lists, `scoring` loads the scorers and scores, `run` is the command.
See docs/EVALUATION.md."""
