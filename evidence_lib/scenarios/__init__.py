"""Evidence scenarios: the code the notebooks and the tests both call."""
