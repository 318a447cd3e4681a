"""A mutation run: select the mutants, record coverage on the candidate, judge every mutant with
the oracle chain on `jobs` databases of one server (one process each), reuse verdicts from the
history where nothing they depend on changed, and hand back every verdict.

The scenarios layer hands in its part runner by name (`runner`, "module:function"), so this
package imports no scenario, and each job process imports it for itself.
"""

from __future__ import annotations

import importlib
import multiprocessing
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evidence_lib import progress
from evidence_lib.mutation import select
from evidence_lib.mutation.coverage import CoverageMap, Covered, python_calls
from evidence_lib.mutation.equivalents import equivalents
from evidence_lib.mutation.generate import Generated
from evidence_lib.mutation.history import DEFAULT, History, fingerprint
from evidence_lib.mutation.judging import TargetRunner
from evidence_lib.mutation.mutant import Mutant
from evidence_lib.mutation.oracles import SEED, ModelOracle, Verdict, judge_with_parts
from evidence_lib.mutation.registry import generated
from evidence_lib.pg.db import Server

RUNNER = "evidence_lib.scenarios.support.targets"
SKIPPED_PARTS = ("response_loss/server_restart",)  # crashes the whole server: not while jobs share it


@dataclass
class Settings:
    jobs: int = 1
    since: str = ""
    shard: select.Shard | None = None
    sample: int | None = None  # None: every selected mutant
    objects: tuple[str, ...] = ()
    operators: tuple[str, ...] = ()
    examples: int = 2  # seeded random histories per mutant in the model oracle, after the tour
    history: Path | None = DEFAULT
    coverage: Path | None = None  # a coverage map to reuse (else recorded, and cached beside the history)
    coverage_folder: Path | None = None  # parts recorded by a bundle's scenarios (COVERAGE_ENV), completed here
    parts_oracle: bool = True  # False: a model survivor stays Pending (a quick look, never a full verdict)
    runner: str = RUNNER

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
    candidate_agrees: bool = True  # the candidate itself passes the model oracle
    shard: str = ""

    @property
    def reused(self) -> int:
        return sum(1 for o in self.outcomes if o.reused)


def choose(settings: Settings, revision: str, pool: list[Mutant]) -> list[Mutant]:
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
    return select.shard(chosen, settings.shard)


# -- coverage ------------------------------------------------------------------------------


def _runner(path: str) -> tuple[TargetRunner, Callable[[], list[Any]]]:
    module = importlib.import_module(path)
    return module.run_target, module.all_targets


def record_coverage(server: Server, candidate: str, runner_path: str, known: CoverageMap | None = None) -> CoverageMap:
    """Run every part once on the candidate, recording what it executes and how long it takes
    (only the parts `known` lacks in every mode, when given)."""
    run_target, all_targets = _runner(runner_path)
    out = known or CoverageMap()
    have = {p.label.split(" [", 1)[0] for p in out.parts}
    targets = [t for t in all_targets() if not any(t.label.startswith(s) for s in SKIPPED_PARTS)
               and t.label.split(" [", 1)[0] not in have]  # fmt: skip
    for i, target in enumerate(targets):
        progress.report(f"coverage: {target.label}", i, len(targets), unit="parts")
        with python_calls() as python:
            run = run_target(server, candidate, target, 300.0, f"cov{i}", coverage=True)
        if run.red:  # the candidate must be green wherever it is measured
            raise RuntimeError(f"the candidate is red in {target.label}: {', '.join(run.red)}")
        out.parts.append(Covered(target.label, round(run.seconds, 3), dict(run.executed), sorted(python)))
    oracle = ModelOracle(server, candidate, tag="cov")
    try:
        out.model, out.model_seconds = oracle.calls()
    finally:
        oracle.close()
    return out


def coverage_key() -> str:
    return fingerprint(("evidence_lib", "migrations", "sql"))


# -- judging -------------------------------------------------------------------------------


@dataclass
class Job:
    """One job's state: its model oracle database and what it needs to judge."""

    server: Server
    candidate: str
    oracle: ModelOracle
    coverage: CoverageMap
    run_target: TargetRunner
    tag: str
    parts_oracle: bool = True


_JOB: Job | None = None


def _start_job(server_url: str, candidate: str, coverage: CoverageMap, settings: Settings, tag: str) -> Job:
    server = Server(maintenance_url=server_url, kind="external")
    oracle = ModelOracle(server, candidate, examples=settings.examples, seed=SEED, tag=tag)
    oracle.calibrate()
    return Job(server, candidate, oracle, coverage, _runner(settings.runner)[0], tag, settings.parts_oracle)


def _init(server_url: str, candidate: str, coverage: CoverageMap, settings: Settings) -> None:
    global _JOB
    tag = multiprocessing.current_process().name.rsplit("-", 1)[-1]
    _JOB = _start_job(server_url, candidate, coverage, settings, f"j{tag}")


def judge(job: Job, mutant: Mutant, n: int) -> Verdict:
    """The oracle chain for one mutant."""
    cov = job.coverage
    if not cov.covered(mutant):
        return Verdict("NoCoverage", "", "nothing in the evidence executes what it changes")
    model: Verdict | None = None
    if cov.model_covers(mutant):
        model = job.oracle.judge(mutant)
        if model.status != "Survived":
            return model
    if not job.parts_oracle:
        return model or Verdict("Pending", "", "not judged: the parts oracle was off")
    parts = judge_with_parts(job.server, job.candidate, mutant, cov, job.run_target, f"{job.tag}m{n}")
    if parts.status == "NoCoverage" and model is not None:
        return Verdict("Survived", "model", "the model agreed and no scenario part executes it", model.seconds)
    if model is not None:
        return Verdict(parts.status, parts.by, parts.detail, model.seconds + parts.seconds, parts.parts_run)
    return parts


def _judge_in_job(mutant: Mutant, n: int) -> tuple[str, Verdict]:
    assert _JOB is not None
    try:
        return mutant.id, judge(_JOB, mutant, n)
    except Exception as exc:  # the machinery broke on this mutant: said, never a silent survivor
        return mutant.id, Verdict("RuntimeError", "the sweep", f"{type(exc).__name__}: {str(exc)[:300]}")


def _judged(server: Server, candidate: str, coverage: CoverageMap, todo: list[Mutant],
            settings: Settings) -> Iterator[tuple[str, Verdict]]:  # fmt: skip
    if not todo:
        return
    if settings.jobs <= 1:
        job = _start_job(server.maintenance_url, candidate, coverage, settings, "j0")
        global _JOB
        _JOB = job
        try:
            for n, mutant in enumerate(todo):
                yield _judge_in_job(mutant, n)
        finally:
            job.oracle.close()
            _JOB = None
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(settings.jobs, mp_context=context, initializer=_init,
                             initargs=(server.maintenance_url, candidate, coverage, settings)) as pool:  # fmt: skip
        futures: list[Future[tuple[str, Verdict]]] = [pool.submit(_judge_in_job, m, n) for n, m in enumerate(todo)]
        for future in as_completed(futures):
            yield future.result()


def plan(settings: Settings, revision: str) -> list[Mutant]:
    """The mutants this run judges (BadSelection for an unknown object, operator or revision)."""
    return choose(settings, revision, generated().mutants)


def run(server: Server, candidate: str, revision: str, settings: Settings, chosen: list[Mutant] | None = None) -> Sweep:
    """Judge the selected mutants; `candidate` is a migrated template database on `server`."""
    started = time.perf_counter()
    everything = generated()
    chosen = plan(settings, revision) if chosen is None else chosen
    sweep = Sweep(revision, settings.describe(revision), generated=everything, selected=len(chosen),
                  shard=str(settings.shard or ""))  # fmt: skip
    argued = equivalents()
    history = History(settings.history)
    todo: list[Mutant] = []
    for mutant in chosen:
        if mutant.id in argued:
            sweep.outcomes.append(Outcome(mutant, Verdict("Ignored", "argued equivalent", argued[mutant.id])))
        elif (verdict := history.reusable(mutant.id)) is not None:
            sweep.outcomes.append(Outcome(mutant, verdict, reused=True))
        else:
            todo.append(mutant)
    sweep.coverage = _coverage(server, candidate, settings) if todo else CoverageMap()
    by_id = {m.id: m for m in todo}
    tally: Counter[str] = Counter()
    for done, (mutant_id, verdict) in enumerate(_judged(server, candidate, sweep.coverage, todo, settings)):
        tally[verdict.status] += 1
        counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(tally.items()))
        progress.report(f"judging mutants ({counts})", done + 1, len(todo), unit="mutants")
        sweep.outcomes.append(Outcome(by_id[mutant_id], verdict))
        history.record(mutant_id, verdict)
        if done % 50 == 49:
            history.save()
    history.save()
    sweep.outcomes.sort(key=lambda o: (o.mutant.file, o.mutant.span.start, o.mutant.id))
    sweep.seconds = time.perf_counter() - started
    return sweep


def _coverage(server: Server, candidate: str, settings: Settings) -> CoverageMap:
    if not settings.parts_oracle:  # the model alone: only what its histories execute
        oracle = ModelOracle(server, candidate, tag="cov")
        try:
            model, seconds = oracle.calls()
        finally:
            oracle.close()
        return CoverageMap([], model, seconds)
    folder = settings.coverage_folder
    if folder is not None and any(folder.glob("*.jsonl")):
        progress.report("coverage: the parts the scenarios of this bundle recorded, and the rest")
        known = CoverageMap.from_folder(folder)
        known.parts = [p for p in known.parts if not any(p.label.startswith(s) for s in SKIPPED_PARTS)]
        return record_coverage(server, candidate, settings.runner, known)
    cached = settings.coverage or (DEFAULT.parent / f"coverage-{coverage_key()}.json")
    if cached.is_file():
        return CoverageMap.load(cached)
    progress.report("coverage: every part once on the candidate")
    coverage = record_coverage(server, candidate, settings.runner)
    cached.parent.mkdir(parents=True, exist_ok=True)
    coverage.save(cached)
    return coverage

