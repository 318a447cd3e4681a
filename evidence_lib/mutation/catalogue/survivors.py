"""Generated mutants that once survived the evidence and are now killed by a new or sharper gate:
each joins the negative-controls catalogue by its stable id (its patch is the generated one), so
every bundle re-checks it with the gate that kills it. `make mutation` found them; the gate named in
the target was added for them (docs/mutation.md, "Triage")."""

from __future__ import annotations

from evidence_lib.mutation.controls import Control, Target

CLOCK = Target("security", "refusals", ("the_test_clock_is_refused_to_a_login_that_is_not_superuser",), None)

SURVIVORS: tuple[Control, ...] = (
    Control(
        "test_clock_obeyed_for_any_login",
        "engine._now: the test clock (engine.clock_offset) is obeyed only for a superuser session (migration 0012)",
        (CLOCK,),
        generated="370a7e1a3cba",
    ),
    Control(
        "test_clock_refused_with_another_sqlstate",
        "engine._now: a session that is not superuser setting the test clock is refused with 42501",
        (CLOCK,),
        generated="0299fc65f92a",
    ),
)
