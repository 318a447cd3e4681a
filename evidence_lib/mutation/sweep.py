"""A mutation run: select the mutants, judge each with the oracle chain, write every verdict to the
journal as it comes, and hand back the sweep.

1. the reach oracle (`reach`): the model's histories replayed once per job, each SQL mutant tried
   at exactly the operations that reach its function;
2. the candidate's run of every scenario part the remaining mutants need (coverage of engine
   functions and worker lines, and the gates green there: only those can kill);
3. the parts oracle: for what the model leaves alive and the Python mutants, the covering parts,
   fastest first.

Verdicts are reused from the journal of an interrupted run of the same selection (resume), or from
the history where nothing they depend on changed (never a Timeout or a RuntimeError: those are
judged again). The scenarios layer hands in its part runner by name (`runner`, "module:function"),
so this package imports no scenario.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from evidence_lib import progress
from evidence_lib.mutation import select
from evidence_lib.mutation.controls import Target
from evidence_lib.mutation.coverage import TEST_SUPPORT, UNIT_TESTS, WORKER_TESTS, CoverageMap, Covered
from evidence_lib.mutation.equivalents import equivalents
from evidence_lib.mutation.generate import Generated
from evidence_lib.mutation.history import DEFAULT, History, fingerprint
from evidence_lib.mutation.jobs import Judged, parts_in_jobs, reach_in_jobs, runner_of
from evidence_lib.mutation.journal import Header, Journal
from evidence_lib.mutation.mutant import Mutant, Verdict
from evidence_lib.mutation.reach import ReachStats
from evidence_lib.mutation.registry import generated
from evidence_lib.pg.db import Server

RUNNER = "evidence_lib.scenarios.support.targets"
SKIPPED_PARTS = ("response_loss/server_restart",)  # crashes the whole server: not while jobs share it
FINAL = ("Killed", "Timeout", "CompileError", "RuntimeError", "Ignored")
# A mutant the model survives is tried by its covering parts, likeliest first, until they have cost
# this much of the candidate's own time: a survivor of every covering part would cost minutes each
# (a v2 function is covered by 30-40 parts). What is not tried is said in the verdict, and the
# score can only be lower for it, never higher. Measured on the whole sweep of 5d6974c
# (docs/mutation.md): 56 of the 58 part kills placed in the coverage map came within 15 s of the
# candidate's time, the other 2 after 36 and 43 s; 20 s instead of 60 s halves what the
# survivors cost (12 268 s to 6 475 s of candidate time over its 489 survivors).
PARTS_BUDGET = 20.0
# A part mostly waits (a lease to expire, a session proven blocked, a worker's poll), so the parts
# phase runs more parts than the model phase runs jobs: measured in docs/mutation.md.
PART_JOBS_PER_JOB = 2
# parts with concurrent sessions, first for a locking mutant (the SQL probes hold transactions
# open in one session while another calls the engine, and cost well under a second)
CONCURRENT = ("races/", "reconciliation/", "admission/isolation", "queue_identity/concurrent", "model_check/regress_")


def likeliest_first(mutant: Mutant, parts: list[Covered], budget: float) -> tuple[list[Covered], int]:
    """The covering parts to try, in order, within `budget` seconds of the candidate's time; and
    how many were left out. A lock changes what two sessions see: the parts with concurrent
    sessions go first for a locking mutant; the project's tests of the worker code, which call it
    directly and check what it returns, go first for a Python mutant; otherwise the fastest first."""
    concurrent = mutant.family in ("locking", "higher-order") or "Lock" in mutant.operator
    python = mutant.kind == "python"
    ordered = sorted(parts, key=lambda p: (not (concurrent and p.label.startswith(CONCURRENT)),
                                           not (python and p.label.startswith(UNIT_TESTS)), p.seconds))  # fmt: skip
    if budget <= 0:
        return ordered, 0
    kept: list[Covered] = []
    spent = 0.0
    for part in ordered:
        if kept and spent + part.seconds > budget:
            break
        kept.append(part)
        spent += part.seconds
    return kept, len(ordered) - len(kept)


@dataclass
class Settings:
    jobs: int = 1
    since: str = ""
    shard: select.Shard | None = None
    sample: int | None = None  # None: every selected mutant
    objects: tuple[str, ...] = ()
    operators: tuple[str, ...] = ()
    examples: int = 2  # seeded random histories in the model's replay, after the tour
    history: Path | None = DEFAULT
    coverage: Path | None = None  # a coverage map to pick the parts from (else recorded, and cached)
    coverage_folder: Path | None = None  # parts recorded by a bundle's scenarios (COVERAGE_ENV), completed here
    parts_oracle: bool = True  # False: a model survivor stays Pending (a quick look, never a full verdict)
    runner: str = RUNNER
    journal: Path | None = None  # a folder: verdicts appended as they come; a rerun resumes from it
    parts_budget: float = PARTS_BUDGET  # seconds of the candidate's part time tried per mutant (0: no limit)
    part_jobs: int = 0  # scenario parts run at once (0: PART_JOBS_PER_JOB x jobs)

    @property
    def parts_at_once(self) -> int:
        return self.part_jobs or PART_JOBS_PER_JOB * self.jobs

    def describe(self, revision: str) -> str:
        parts = []
        if self.since:
            parts.append(f"diff since {self.since}")
        if self.sample is not None:
            parts.append(f"sample of {self.sample} (seed {revision[:12]})")
        if self.objects or self.operators:
            chosen = ("objects", self.objects) if self.objects else ("operators", self.operators)
            parts.append(f"{chosen[0]} {','.join(chosen[1])}")
        if not parts:
            parts.append("full sweep")
        if self.shard:
            parts.append(f"shard {self.shard}")
        return ", ".join(parts)


@dataclass
class Outcome:
    mutant: Mutant
    verdict: Verdict
    reused: bool = False


@dataclass
class Sweep:
    revision: str
    mode: str
    outcomes: list[Outcome] = field(default_factory=list)
    generated: Generated = field(default_factory=Generated)
    selected: int = 0
    seconds: float = 0.0
    coverage: CoverageMap = field(default_factory=CoverageMap)
    candidate_agrees: bool = True  # the candidate agrees with the model, and is green in every part used
    candidate_problems: list[str] = field(default_factory=list)  # why it does not
    shard: str = ""
    planned: list[str] = field(default_factory=list)  # the ids of the whole selection (every shard's)
    stale_equivalents: list[str] = field(default_factory=list)  # argued ids no longer generated
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase
    reach: list[ReachStats] = field(default_factory=list)

    @property
    def reused(self) -> int:
        return sum(1 for o in self.outcomes if o.reused)


def digest(ids: list[str]) -> str:
    """The identity of a set of mutant ids (the generator's version when it is every generated id)."""
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:16]


def choose(settings: Settings, revision: str, pool: list[Mutant], *, sharded: bool = True) -> list[Mutant]:
    chosen = pool
    if settings.objects:
        chosen = select.by_objects(chosen, settings.objects)
    if settings.operators:
        chosen = select.by_operators(chosen, settings.operators)
    if settings.since:
        changed = select.since(chosen, settings.since)
        if settings.sample is not None:  # the sample plus every changed object's mutants
            rest = [m for m in chosen if m not in set(changed)]
            chosen = sorted({*changed, *select.sample(rest, settings.sample, revision)}, key=lambda m: m.id)
        else:
            chosen = changed
    elif settings.sample is not None:
        chosen = select.sample(chosen, settings.sample, revision)
    return select.shard(chosen, settings.shard) if sharded else chosen


def plan(settings: Settings, revision: str) -> list[Mutant]:
    """The mutants this run judges (BadSelection for an unknown object, operator or revision)."""
    return choose(settings, revision, generated().mutants)


def coverage_key() -> str:
    return fingerprint(("evidence_lib", "migrations", "sql", *WORKER_TESTS, *TEST_SUPPORT))


class _Run:
    """One sweep in progress: where each verdict goes (the sweep, the history, the journal)."""

    def __init__(self, sweep: Sweep, history: History, journal: Journal | None, total: int) -> None:
        self.sweep, self.history, self.journal, self.total = sweep, history, journal, total
        self.tally: Counter[str] = Counter()

    def emit(self, mutant: Mutant, verdict: Verdict, reused: bool = False) -> None:
        self.sweep.outcomes.append(Outcome(mutant, verdict, reused))
        self.tally[verdict.status] += 1
        if not reused:
            self.history.record(mutant.id, verdict)
        if self.journal is not None and mutant.id not in self.journal.done:
            self.journal.append(mutant.id, verdict)
        counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(self.tally.items()))
        progress.report(f"judging mutants ({counts})", len(self.sweep.outcomes), self.total, unit="mutants")


def run(server: Server, candidate: str, revision: str, settings: Settings, chosen: list[Mutant] | None = None) -> Sweep:
    """Judge the selected mutants; `candidate` is a migrated template database on `server`."""
    started = time.perf_counter()
    everything = generated()
    chosen = plan(settings, revision) if chosen is None else chosen
    planned = [m.id for m in choose(settings, revision, everything.mutants, sharded=False)] if chosen else []
    sweep = Sweep(revision, settings.describe(revision), generated=everything, selected=len(chosen),
                  shard=str(settings.shard or ""), planned=planned)  # fmt: skip
    argued = equivalents()
    ids = {m.id for m in everything.mutants}
    sweep.stale_equivalents = sorted(i for i in argued if i not in ids)
    header = Header(revision, digest(sorted(ids)), sweep.mode, digest(planned))
    journal = Journal(settings.journal, header) if settings.journal else None
    if journal is not None and journal.judged_again:
        progress.report(f"resuming: {len(journal.judged_again)} mutants journaled as RuntimeError are judged again")
    history = History(settings.history)
    state = _Run(sweep, history, journal, len(chosen))
    todo: list[Mutant] = []
    for mutant in chosen:
        if mutant.id in argued:
            state.emit(mutant, Verdict("Ignored", "argued equivalent", argued[mutant.id]))
        elif journal is not None and mutant.id in journal.done:
            state.emit(mutant, journal.done[mutant.id], reused=True)
        elif (verdict := history.reusable(mutant.id)) is not None:
            state.emit(mutant, verdict, reused=True)
        else:
            todo.append(mutant)
    try:
        _judge(server, candidate, settings, todo, state)
    finally:
        history.save()
        if journal is not None:
            journal.close()
    sweep.outcomes.sort(key=lambda o: (o.mutant.file, o.mutant.span.start, o.mutant.id))
    sweep.seconds = time.perf_counter() - started
    return sweep


def _judge(server: Server, candidate: str, settings: Settings, todo: list[Mutant], state: _Run) -> None:
    sweep, by_id = state.sweep, {m.id: m for m in todo}
    clock = time.perf_counter()
    after_model: dict[str, Verdict] = {}  # a model survivor or a mutant the model does not reach
    journal = state.journal
    if journal is not None:  # the model's verdicts of an interrupted run: straight to the parts
        after_model.update({i: v for i, v in journal.model.items() if i in by_id})
    sql = [m for m in todo if m.kind == "sql" and m.id not in after_model]
    for item in reach_in_jobs(server, candidate, sql, settings.jobs, settings.examples):
        if isinstance(item, ReachStats):
            sweep.reach.append(item)
            if not item.candidate_agrees:
                sweep.candidate_agrees = False
                sweep.candidate_problems.append(f"the model disagrees with the candidate: {item.candidate_problem}")
        elif item.verdict.status in FINAL:
            state.emit(by_id[item.mutant_id], item.verdict)
        else:
            after_model[item.mutant_id] = item.verdict
            if journal is not None:
                journal.append(item.mutant_id, item.verdict, stage="model")
    sweep.phases["model"] = time.perf_counter() - clock
    rest = [m for m in todo if m.kind != "sql" or m.id in after_model]
    if not settings.parts_oracle:
        for m in rest:
            state.emit(m, after_model.get(m.id) or Verdict("Pending", "", "not judged: the parts oracle was off"))
        return
    clock = time.perf_counter()
    sweep.coverage = _candidate_parts(server, candidate, settings, rest, sweep)
    sweep.phases["candidate parts"] = time.perf_counter() - clock
    usable = [p for p in sweep.coverage.parts if not p.red]
    cover = CoverageMap(usable, sweep.coverage.model, sweep.coverage.model_seconds)
    clock = time.perf_counter()
    work: list[tuple[Mutant, list[Covered]]] = []
    left_out: dict[str, int] = {}
    for m in rest:
        parts, left_out[m.id] = likeliest_first(m, cover.parts_for(m), settings.parts_budget)
        model = after_model.get(m.id)
        if parts:
            work.append((m, parts))
        elif model is not None and model.status == "Survived":
            state.emit(m, replace(model, detail=f"{model.detail}; no scenario part executes it"))
        else:
            state.emit(m, Verdict("NoCoverage", "", "neither the model nor any scenario part executes it"))
    for done in parts_in_jobs(server, candidate, settings.runner, settings.parts_at_once, mutants=work):
        assert isinstance(done, Judged)
        verdict, model = done.verdict, after_model.get(done.mutant_id)
        if model is not None:
            verdict = replace(verdict, seconds=verdict.seconds + model.seconds)
        if verdict.status == "Survived" and left_out.get(done.mutant_id):
            verdict = replace(verdict, detail=f"{verdict.detail}; {left_out[done.mutant_id]} more covering parts not "
                              f"tried (the budget of {settings.parts_budget:.0f} s of the candidate's time)")
        state.emit(by_id[done.mutant_id], verdict)
    sweep.phases["parts"] = time.perf_counter() - clock


def _candidate_parts(server: Server, candidate: str, settings: Settings, rest: list[Mutant],
                     sweep: Sweep) -> CoverageMap:  # fmt: skip
    """The candidate's run of every part the remaining mutants need, in this sweep: coverage (engine
    functions, worker lines) and the gates green there. A bundle's scenarios ran them minutes ago
    on this candidate (their records are used as they are); otherwise a cached map picks the parts
    (every part when there is none) and they run on the candidate now."""
    folder = settings.coverage_folder
    python = any(m.kind == "python" for m in rest)  # the worker tests judge Python mutants only
    if folder is not None and any(folder.glob("*.jsonl")):
        known = CoverageMap.from_folder(folder)
        have = {p.label for p in known.parts}
        missing = [t for t in _targets(settings, python) if t.label not in have]
        progress.report(f"candidate: the parts this bundle's scenarios ran, and {len(missing)} more")
        known.parts = [p for p in known.parts if not _skipped(p.label)]
        known.parts += _run_on_candidate(server, candidate, settings, missing)
        return _checked(known, sweep)
    cached = settings.coverage or (DEFAULT.parent / f"coverage-{coverage_key()}.json")
    targets = _targets(settings, python)
    if cached.is_file():
        old = CoverageMap.load(cached)
        needed = {p.label for m in rest for p in old.parts_for(m)}
        targets = [t for t in targets if t.label in needed or t.label not in {p.label for p in old.parts}]
    progress.report(f"candidate: {len(targets)} scenario parts, for coverage and the gates green there")
    fresh = CoverageMap(_run_on_candidate(server, candidate, settings, targets))
    if not cached.is_file() or len(targets) == len(_targets(settings, True)):
        cached.parent.mkdir(parents=True, exist_ok=True)
        fresh.save(cached)
    return _checked(fresh, sweep)


def _skipped(label: str) -> bool:
    return any(label.startswith(s) for s in SKIPPED_PARTS)


def _targets(settings: Settings, python: bool) -> list[Target]:
    """The parts to run on the candidate; the project's worker tests only when `python` mutants
    are to be judged."""
    return [t for t in runner_of(settings.runner)[1]() if not _skipped(t.label)
            and (python or not t.label.startswith(UNIT_TESTS))]  # fmt: skip


def _run_on_candidate(server: Server, candidate: str, settings: Settings, targets: list[Target]) -> list[Covered]:
    out: list[Covered] = []
    at_once = settings.parts_at_once
    for n, item in enumerate(parts_in_jobs(server, candidate, settings.runner, at_once, targets=targets)):
        assert isinstance(item, Covered)
        progress.report(f"candidate: {item.label}", n + 1, len(targets), unit="parts")
        out.append(item)
    return out


def _checked(coverage: CoverageMap, sweep: Sweep) -> CoverageMap:
    for part in coverage.parts:
        if part.red:
            sweep.candidate_agrees = False
            sweep.candidate_problems.append(f"the candidate is red in {part.label}: {', '.join(part.red[:3])}")
    return coverage
