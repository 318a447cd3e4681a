"""Negative controls: the catalogue of engine defects (`catalogue`, `mutants_*`), applying a mutant
to a scratch copy of the candidate (`apply`) and the scenario that runs the gate code each
mutant targets and reports killed or survived (`run`)."""
