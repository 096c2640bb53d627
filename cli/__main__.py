"""`python -m higgs_v3.cli ...` (e.g. under `accelerate launch`): the `higgs-v3` command line."""

from .main import main


raise SystemExit(main())
