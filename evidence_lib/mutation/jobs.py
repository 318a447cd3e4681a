"""The sweep's jobs: processes of their own (spawned, so nothing is inherited but what is handed
in), each on its own databases of one server, every verdict sent back the moment it is reached.

- reach jobs (`reach_in_jobs`): the SQL mutants grouped by the function they change, the groups
  spread over the jobs by size; each job replays the model's histories once (`reach.ReachOracle`);
- part jobs (`parts_in_jobs`): one task per mutant (the covering parts, fastest first) or per
  candidate part (its run on the candidate: coverage and the gates green there). A Python mutant
  is judged in a child forked for it (mutmut 3's fork per mutant): a mutant that leaves a worker's
  threads running (a `stop` deleted, a loop condition flipped) takes them with it when the child
  exits, instead of keeping the job process alive for ever and loading the next mutant's parts.

A job that breaks is said: every mutant it had not judged yet gets RuntimeError with the reason,
never a silent gap and never a kill.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import pickle
import queue
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from evidence_lib.mutation.controls import Target
from evidence_lib.mutation.coverage import Covered
from evidence_lib.mutation.judging import TargetRunner
from evidence_lib.mutation.mutant import Mutant, Verdict
from evidence_lib.mutation.oracles import SEED, judge_with_parts
from evidence_lib.mutation.reach import ReachOracle, ReachStats
from evidence_lib.pg.db import Server

JOB_SILENCE = 900.0  # seconds without a word from any reach job before the sweep gives up on them


@dataclass(frozen=True)
class Judged:
    mutant_id: str
    verdict: Verdict


def _balanced(mutants: list[Mutant], jobs: int) -> list[list[Mutant]]:
    groups: dict[str, list[Mutant]] = {}
    for m in mutants:
        groups.setdefault(m.functions[0] if len(m.functions) == 1 else f"({m.id})", []).append(m)
    shares: list[list[Mutant]] = [[] for _ in range(max(1, jobs))]
    for group in sorted(groups.values(), key=len, reverse=True):
        min(shares, key=len).extend(group)
    return [s for s in shares if s]


def _reach_job(server_url: str, candidate: str, mutants: list[Mutant], examples: int, tag: str,
               out: Any) -> None:  # fmt: skip
    server = Server(maintenance_url=server_url, kind="external")
    try:
        stats = ReachOracle(server, candidate, mutants, lambda i, v: out.put(("verdict", i, v)), examples=examples,
                            seed=SEED, tag=tag).run()  # fmt: skip
        out.put(("stats", tag, stats))
    except BaseException as exc:  # said to the sweep, which names every mutant left without a verdict
        out.put(("error", tag, f"{type(exc).__name__}: {str(exc)[:300]}"))


def reach_in_jobs(server: Server, candidate: str, mutants: list[Mutant], jobs: int,
                  examples: int) -> Iterator[Judged | ReachStats]:  # fmt: skip
    """Judge `mutants` (SQL) with the reach oracle in `jobs` processes; yields every verdict as it
    comes, and each job's stats at its end."""
    if not mutants:
        return
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    shares = _balanced(mutants, jobs)
    processes = [
        context.Process(target=_reach_job, args=(server.maintenance_url, candidate, share, examples, f"r{i}", out),
                        name=f"reach-{i}", daemon=True)
        for i, share in enumerate(shares)
    ]
    for p in processes:
        p.start()
    judged: set[str] = set()
    open_jobs = {f"r{i}": share for i, share in enumerate(shares)}
    broken: dict[str, str] = {}
    try:
        while open_jobs:
            try:
                item = out.get(timeout=JOB_SILENCE)
            except queue.Empty:
                for tag in list(open_jobs):
                    broken[tag] = f"no word from the job in {JOB_SILENCE:.0f} s"
                break
            if item[0] == "verdict":
                judged.add(item[1])
                yield Judged(item[1], item[2])
            elif item[0] == "stats":
                open_jobs.pop(item[1], None)
                yield item[2]
            else:
                broken[item[1]] = item[2]
                open_jobs.pop(item[1], None)
            for tag in list(open_jobs):  # a job that died without a word
                process = processes[int(tag[1:])]
                if not process.is_alive() and out.empty():
                    broken[tag] = f"the job's process ended (exit code {process.exitcode})"
                    open_jobs.pop(tag)
        for tag, why in broken.items():
            for m in shares[int(tag[1:])]:
                if m.id not in judged:
                    yield Judged(m.id, Verdict("RuntimeError", "the sweep", f"the reach job {tag} broke: {why}"))
    finally:
        for p in processes:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()


# -- part jobs ---------------------------------------------------------------------------------


@dataclass
class _PartJob:
    server: Server
    candidate: str
    run_target: TargetRunner
    tag: str


_JOB: _PartJob | None = None


def runner_of(path: str) -> tuple[TargetRunner, Callable[[], list[Target]]]:
    module = importlib.import_module(path)
    return module.run_target, module.all_targets


def _init_part_job(server_url: str, candidate: str, runner: str) -> None:
    global _JOB
    tag = multiprocessing.current_process().name.rsplit("-", 1)[-1]
    _JOB = _PartJob(Server(maintenance_url=server_url, kind="external"), candidate, runner_of(runner)[0], f"j{tag}")


def _judge_mutant(mutant: Mutant, parts: list[Covered], n: int) -> Judged:
    if mutant.kind == "python":
        return in_a_fork(lambda: _judged(mutant, parts, n), mutant.id)
    return _judged(mutant, parts, n)


def in_a_fork(judge: Callable[[], Judged], mutant_id: str) -> Judged:
    """`judge()` in a forked child whose threads all die with it (`os._exit`); its verdict comes
    back through a pipe. A child that dies without one gives RuntimeError, never a kill."""
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: judge, send, and exit without waiting for any thread
        status = 0
        try:
            os.close(readable)
            data = pickle.dumps(judge())
            with os.fdopen(writable, "wb") as out:
                out.write(data)
        except BaseException:  # nothing may escape a forked child
            status = 1
        finally:
            os._exit(status)
    os.close(writable)
    with os.fdopen(readable, "rb") as got:
        data = got.read()
    _, status = os.waitpid(pid, 0)
    if data:
        judged = pickle.loads(data)
        assert isinstance(judged, Judged)
        return judged
    died = f"the process judging it died (wait status {status})"
    return Judged(mutant_id, Verdict("RuntimeError", "the sweep", died))


def _judged(mutant: Mutant, parts: list[Covered], n: int) -> Judged:
    assert _JOB is not None
    try:
        return Judged(mutant.id, judge_with_parts(_JOB.server, _JOB.candidate, mutant, parts, _JOB.run_target,
                                                  f"{_JOB.tag}m{n}"))  # fmt: skip
    except Exception as exc:  # the machinery broke on this mutant: said, never a silent survivor
        return Judged(mutant.id, Verdict("RuntimeError", "the sweep", f"{type(exc).__name__}: {str(exc)[:300]}"))


CANDIDATE_DEADLINE = 600.0  # seconds for one part on the candidate (a part takes seconds to a minute)


def _run_candidate(target: Target, n: int) -> Covered:
    assert _JOB is not None
    from evidence_lib.mutation.judging import TargetRun

    try:
        run: TargetRun = _JOB.run_target(_JOB.server, _JOB.candidate, target, CANDIDATE_DEADLINE, f"{_JOB.tag}c{n}",
                                         coverage=True)  # fmt: skip
    except Exception as exc:
        return Covered(target.label, 0.0, red=[f"-/the part could not run: {type(exc).__name__}: {exc}"])
    covered = run.covered()
    if run.escaped:
        covered.red.append(f"-/stopped: {type(run.escaped[0]).__name__}: {str(run.escaped[0])[:200]}")
    return covered


def parts_in_jobs(server: Server, candidate: str, runner: str, jobs: int, *,
                  targets: list[Target] | None = None,
                  mutants: list[tuple[Mutant, list[Covered]]] | None = None) -> Iterator[Covered | Judged]:  # fmt: skip
    """Run `targets` on the candidate (yielding each part's Covered), or judge `mutants` with
    their covering parts (yielding each Judged), `jobs` at a time, as they finish."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max(1, jobs), mp_context=context, initializer=_init_part_job,
                             initargs=(server.maintenance_url, candidate, runner)) as pool:  # fmt: skip
        futures: list[Future[Any]] = [pool.submit(_run_candidate, t, n) for n, t in enumerate(targets or [])]
        futures += [pool.submit(_judge_mutant, m, parts, n) for n, (m, parts) in enumerate(mutants or [])]
        for future in as_completed(futures):
            yield future.result()
