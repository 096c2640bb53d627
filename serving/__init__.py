# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""`higgs-v3 serve`: OpenAI's speech API over HTTP on one machine (installed package only; needs the `serve` extra)."""
