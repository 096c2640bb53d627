"""Test fixtures (installed package only): tiny checkpoints in the original and the converted layout, also the
`tiny-random` demo model. They import the product, never the reverse."""
