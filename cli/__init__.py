"""`higgs-v3`, the command line (installed package only): `speak`, `batch`, `finetune`, `convert`, `make-tiny`,
`tags` (`main.main`); `python -m higgs_v3.cli` runs it too."""
