"""Scenario 3, races: the v2 protocol's races as isolation specs (`race_specs`), every
interleaving enumerated and run `repeat` times on fresh databases with real separate sessions,
each transcript compared with the committed expected file (`tests/expected/races/<spec>.out`,
or an alternative `<spec>_<n>.out` where the contract allows two outcomes), the waits proven in
pg_locks / pg_blocking_pids, and pg_stat_database.deadlocks read before and after.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt

from evidence_lib import PROJECT_ROOT
from evidence_lib.engine.flows import QueueMode
from evidence_lib.harness.isolation import PermutationRun, RaceContext, RaceSpec, run_spec, transcript
from evidence_lib.harness.load import competing_load
from evidence_lib.pg.db import connect, one
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios import race_specs, race_specs_next, race_specs_scope, race_specs_scope_v1, race_specs_v1
from evidence_lib.scenarios.support import consistency
from evidence_lib.scenarios.support.parts import Databases, Part, PartSpec, candidate_databases, run_parts
from evidence_lib.scenarios.support.setup import modes, scenario_server

SCENARIO = "03_races"
EXPECTED_DIR = PROJECT_ROOT / "tests" / "expected" / "races"


def run(
    queue_modes: str = "flow,step",
    repeat: int = 3,
    database_url: str = "",
    hooks: str = "",
    timeout: float = 10.0,
    load: bool = False,
) -> ScenarioResult:
    """Every spec's every interleaving `repeat` times; `load` keeps every core busy and two writer
    sessions writing on the same server meanwhile (`harness.load`), the stability check."""
    result = ScenarioResult(
        SCENARIO,
        "Races as isolation specs",
        {"queue_modes": queue_modes, "repeat": repeat, "hooks": hooks, "load": load},
    )
    with (
        result.capture_logs(),
        scenario_server(database_url) as server,
        candidate_databases(server, hooks=hooks, prefix="race") as databases,
        competing_load(server) if load else contextlib.nullcontext() as loaded,
    ):
        before = deadlocks(server.maintenance_url)
        run_parts(result, parts(repeat, timeout), databases, modes(queue_modes))
        after = deadlocks(server.maintenance_url)
    # the gates are per spec (`no_deadlock @ <spec>`), from the sessions' own errors; the server's
    # counter is reported beside them (its statistics may lag the last session by a moment)
    result.notes.append(f"pg_stat_database.deadlocks (all databases) {before} -> {after}")
    if loaded is not None:
        result.notes.append(f"competing load while the specs ran: {loaded.describe()}")
    consistency.gates(result)
    _chart(result)
    return result


SPECS = race_specs.ALL + race_specs_next.ALL + race_specs_v1.ALL + race_specs_scope.ALL + race_specs_scope_v1.ALL
DEADLOCK = "40P01"
# permutations run at once, each on its own database (harness.isolation.run_spec): a permutation
# mostly waits for the server (a clone, sessions, proven lock waits), so three keep two cores busy
PERMUTATION_JOBS = 3


def deadlocks(url: str) -> int:
    with connect(url) as conn:
        conn.execute("select pg_stat_clear_snapshot()")
        return int(one(conn, "select coalesce(sum(deadlocks), 0) from pg_stat_database"))


def parts(repeat: int = 3, timeout: float = 10.0) -> list[PartSpec]:
    """One part per spec: every interleaving `repeat` times, each on a fresh database."""
    return [PartSpec(spec.name, _spec_part(spec, repeat, timeout)) for spec in SPECS]


def _spec_part(spec: RaceSpec, repeat: int, timeout: float) -> Part:
    def part(result: ScenarioResult, databases: Databases, mode: QueueMode) -> None:
        def inspect(ctx: RaceContext, run: PermutationRun) -> None:
            with ctx.connect() as conn:
                consistency.check(result, conn, mode, f"{run.race} {' '.join(run.permutation)} #{run.attempt}")

        runs = run_spec(spec, mode, databases, repeat=repeat, timeout=timeout, inspect=inspect, jobs=PERMUTATION_JOBS)
        record(result, spec, mode, runs)
        hit = [r for r in runs if any(DEADLOCK in line for line in [*r.lines, r.error])]
        result.gate(
            "no_deadlock",
            not hit,
            f"{len(hit)} of {len(runs)} permutation runs hit a deadlock (SQLSTATE {DEADLOCK})"
            + (f", first: {' '.join(hit[0].permutation)}" if hit else ""),
            mode,
            point=spec.name,
        )

    return part


def expected(name: str, directory: Path = EXPECTED_DIR) -> list[str]:
    """The committed expected transcripts of a spec: `<name>.out` and its alternatives."""
    files = [directory / f"{name}.out", *sorted(directory.glob(f"{name}_[0-9]*.out"))]
    return [f.read_text() for f in files if f.exists()]


def compare(name: str, runs: list[PermutationRun]) -> list[tuple[int, str]]:
    """(attempt, diff) for every attempt whose transcript matches no expected file."""
    wanted = expected(name)
    out = []
    for attempt in sorted({r.attempt for r in runs}):
        text = transcript([r for r in runs if r.attempt == attempt])
        if text not in wanted:
            base = wanted[0] if wanted else ""
            diff = "\n".join(
                difflib.unified_diff(base.splitlines(), text.splitlines(), f"{name}.out", "this run", lineterm="")
            )
            out.append((attempt, diff or "no expected file"))
    return out


def stability(spec: RaceSpec, mode: str, runs: list[PermutationRun]) -> dict[str, object]:
    """How many distinct transcripts each permutation gave over its attempts (1: stable)."""
    texts: dict[tuple[str, ...], set[str]] = {}
    for run in runs:
        texts.setdefault(run.permutation, set()).add(run.transcript())
    unstable = [" ".join(p) for p, t in texts.items() if len(t) > 1]
    return {
        "race": spec.name,
        "mode": mode,
        "permutations": len(texts),
        "attempts": len({r.attempt for r in runs}),
        "runs": len(runs),
        "most_distinct_transcripts": max((len(t) for t in texts.values()), default=0),
        "unstable_permutations": "; ".join(unstable),
    }


def record(result: ScenarioResult, spec: RaceSpec, mode: str, runs: list[PermutationRun]) -> None:
    """Transcripts, tables and the gates of one spec in one mode."""
    result.transcripts.append(f"race {spec.name} [{mode}]: {spec.description}\n\n" + transcript(runs))
    result.append_rows(
        "permutations",
        [
            {
                "race": spec.name,
                "mode": mode,
                "permutation": " ".join(r.permutation),
                "attempt": r.attempt,
                "passed": r.passed,
                "invalid": r.invalid,
                "waits": len(r.proofs),
                "seconds": round(r.seconds, 3),
                "error": r.error,
            }
            for r in runs
        ],
    )
    result.append_rows(
        "lock_proofs",
        [
            {
                "race": spec.name,
                "mode": mode,
                "permutation": " ".join(r.permutation),
                "attempt": r.attempt,
                "step": p.step,
                "lock": p.target,
                "held_by": ", ".join(p.holders),
                "waiting_pid": p.pids[0] if p.pids else None,
                "holding_pid": p.pids[1] if p.pids else None,
            }
            for r in runs
            for p in r.proofs
        ],
    )
    failed = [r for r in runs if not r.passed]
    valid = [r for r in runs if not r.invalid]
    interleavings = len(spec.interleavings())
    result.gate(
        spec.name,
        bool(valid) and not failed,
        f"{interleavings} interleavings x {len({r.attempt for r in runs})} attempts: {len(valid)} runs, "
        f"{len(failed)} failed, {len(runs) - len(valid)} invalid; "
        + (
            "; ".join(f"{' '.join(r.permutation)}: {r.error or [c for c in r.checks if not c[1]]}" for r in failed[:2])
            or "all checks pass"
        ),
        mode,
    )
    result.append_rows("stability", [stability(spec, mode, runs)])
    diffs = compare(spec.name, runs)
    result.append_rows(
        "transcript_diffs", [{"race": spec.name, "mode": mode, "attempt": a, "diff": d} for a, d in diffs]
    )
    result.gate(
        f"{spec.name}_transcript_matches_expected",
        not diffs,
        f"every attempt's transcript equals tests/expected/races/{spec.name}.out (or an alternative)"
        if not diffs
        else f"{len(diffs)} attempt(s) differ; first diff:\n{diffs[0][1][:600]}",
        mode,
    )
    contended = [(r, p) for r in valid for p in r.proofs if p.locktype != "advisory" and "ctl" not in p.holders]
    example = contended[0] if contended else None
    if not spec.contention:
        return
    result.gate(
        f"{spec.name}_contention_proven",
        bool(contended),
        (
            f"{len(contended)} waits on another session's lock proven in pg_locks / pg_blocking_pids, e.g. "
            f"{example[1].step} (pid {example[1].pids[0] if example[1].pids else '?'}) waited on {example[1].target} "
            f"held by {', '.join(example[1].holders)} (pid {example[1].pids[1] if example[1].pids else '?'}) in "
            f"'{' '.join(example[0].permutation)}'"
        )
        if example
        else "no permutation made a session wait on another session's lock",
        mode,
    )


def _chart(result: ScenarioResult) -> None:
    frame = result.tables.get("permutations")
    if frame is None or frame.empty:
        return
    fig, ax = plt.subplots(figsize=(9, 4))
    groups = [(name, group["seconds"].tolist()) for name, group in frame.groupby("race")]
    ax.boxplot([g for _, g in groups], vert=False)
    ax.set_yticks(range(1, len(groups) + 1), [str(n) for n, _ in groups], fontsize=8)
    ax.set_xlabel("seconds per permutation run (setup, steps, checks), every mode and attempt")
    ax.set_ylabel("race spec")
    ax.set_title("Races: time per permutation")
    fig.tight_layout()
    result.chart("permutation_time", fig)


def accept(
    database_url: str = "", directory: Path = EXPECTED_DIR, progress: Callable[[str], None] = print
) -> list[Path]:
    """Run every spec once in both modes and write the expected files (reviewed by hand before
    committing: a second distinct transcript is written as an alternative `<spec>_1.out`)."""
    from evidence_lib.scenarios.support.setup import scenario_server as server_of

    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with server_of(database_url) as server, candidate_databases(server, prefix="race") as databases:
        for spec in SPECS:
            texts: list[str] = []
            for mode in ("flow", "step"):
                text = transcript(run_spec(spec, mode, databases))
                if text not in texts:
                    texts.append(text)
            for i, text in enumerate(texts):
                path = directory / (f"{spec.name}.out" if i == 0 else f"{spec.name}_{i}.out")
                path.write_text(text)
                written.append(path)
                progress(f"wrote {path.relative_to(PROJECT_ROOT)}" + ("  (an ALTERNATIVE: review it)" if i else ""))
    return written
