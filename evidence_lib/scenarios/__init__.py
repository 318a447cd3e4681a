"""Evidence scenarios: one module per notebook (the code the notebooks and the tests both call),
with `support/` for what several share."""
