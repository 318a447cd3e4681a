"""The reach oracle: the model's histories run once on the candidate, and each mutant is tried only
at the operations that reach its function, each on that operation alone.

PIT forks the test run at the mutated method; we fork the model's replay at the mutated function.
The job's session runs the candidate's histories (the tour in both queue modes, then the seeded
random histories) inside one transaction, every operation judged by the reference model as in the
model check. Before an operation runs for real, it is tried on the candidate inside a savepoint:
that trial tells which engine functions the operation reaches (`pg_stat_get_xact_function_calls`,
and for a call that raised, `callgraph`: the frames of its error, and what a function with an
exception block may have called) and what state it leaves (a digest of every engine and PGMQ
table, timestamps and uuids masked). For every live mutant
of a function it reaches, the same operation is tried again on the same state with the mutant's
`create or replace` in a savepoint (PostgreSQL's DDL is transactional), judged by the model, and
rolled back; sequences are set back after each trial, so every trial starts from exactly the
candidate's state. A mutant's state is compared with the candidate's only in the tables either
run wrote (PostgreSQL's per-transaction row counts, `touches`): the others are what they were.

- the model disagrees: Killed, by that operation (the transcript names it);
- it agrees and the state equals the candidate's: the mutant changed nothing here; it stays live
  and is tried again at the next operation that reaches its function;
- it agrees but the state differs (a difference the model does not see, or a timing it accepts
  either way): later operations could tell, so the history it happened in is replayed with the
  mutant applied from its start (`ModelOracle.judge` of that part: one mode's tour, or the random
  histories); the histories before it were the candidate's under the mutant, the ones after it
  start from the template again. A mutant that agrees there is tried again from the next history;
- a statement runs past its timeout: tried once more with twice the limit, then Timeout, naming
  the operation it was running.

A mutant live after the last operation agreed with the model everywhere its function ran:
Survived (the scenario parts judge it next). A mutant whose function no operation reaches is not
judged here. Engine calls made outside an operation (a probe's own setup) cannot be tried one by
one: the mutants of those functions are judged by the whole replay. Mutants that touch no
function (a constraint, a grant on a table) are judged by the whole replay too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

from evidence_lib.model import ops
from evidence_lib.model.bench import OutOfTime
from evidence_lib.model.check import check
from evidence_lib.mutation.apply import MutantDoesNotCompile, apply_sql
from evidence_lib.mutation.callgraph import call_graph
from evidence_lib.mutation.mutant import Mutant, Verdict
from evidence_lib.mutation.oracles import ALL, RANDOM, SEED, STATEMENT_TIMEOUT_MS, ModelOracle
from evidence_lib.mutation.states import Touches, digests, touches, written
from evidence_lib.pg import db
from evidence_lib.pg.db import Conn, Server

CALLS = """
select p.proname, pg_catalog.pg_stat_get_xact_function_calls(p.oid)
  from pg_catalog.pg_proc as p join pg_catalog.pg_namespace as n on n.oid = p.pronamespace
 where n.nspname = 'engine'
"""
SEQUENCES = """
select c.oid::regclass::text
  from pg_catalog.pg_class as c join pg_catalog.pg_namespace as n on n.oid = c.relnamespace
 where n.nspname in ('engine', 'pgmq') and c.relkind = 'S'
 order by 1
"""
INLINED = """
select p.proname from pg_catalog.pg_proc as p
  join pg_catalog.pg_namespace as n on n.oid = p.pronamespace
  join pg_catalog.pg_language as l on l.oid = p.prolang
 where n.nspname = 'engine' and l.lanname = 'sql'
"""
Report = Callable[[str, Verdict], None]


def _calls(conn: Conn) -> dict[str, int]:
    return {str(name): int(n) for name, n in conn.execute(CALLS).fetchall() if n}


@dataclass
class _Live:
    mutant: Mutant
    trials: int = 0
    resume_after: int = 0  # not tried until the bench's history count passes this (a diverged history)
    replayed: list[str] = field(default_factory=list)  # the parts of the histories replayed whole


@dataclass
class ReachStats:
    """What the replay did, for the report."""

    operations: int = 0
    trials: int = 0
    candidate_trials: int = 0
    replayed: int = 0  # mutants sent to the whole replay
    replayed_parts: int = 0  # replays of one part of the histories (the tour of one mode, or the random ones)
    seconds: float = 0.0
    candidate_agrees: bool = True
    candidate_problem: str = ""


@dataclass
class ReachOracle:
    """One job's reach oracle on a clone of the candidate template (see the module docstring)."""

    server: Server
    candidate: str
    mutants: list[Mutant]
    report: Report
    examples: int = 2
    seed: int = SEED
    tag: str = "0"
    stats: ReachStats = field(default_factory=ReachStats)

    def run(self) -> ReachStats:
        started = time.perf_counter()
        name = db.scratch_name(f"ro{self.tag}")
        url = db.create_database(self.server, name, template=self.candidate)
        try:
            with psycopg.connect(url, autocommit=True, prepare_threshold=None, application_name="reach_oracle") as conn:
                self._judge(conn)
        finally:
            db.drop_database(self.server, name)
        self.stats.seconds = time.perf_counter() - started
        return self.stats

    # -- the replay ------------------------------------------------------------------------

    def _judge(self, conn: Conn) -> None:
        self.conn = conn
        conn.execute("set track_functions = 'all'")
        conn.execute("set track_counts = on")  # `touches` reads the rows written per table
        self.live: dict[str, list[_Live]] = {}
        whole: list[Mutant] = []
        for mutant in self._compiling(conn):
            if len(mutant.functions) == 1:
                self.live.setdefault(mutant.functions[0], []).append(_Live(mutant))
            else:
                whole.append(mutant)
        self.whole: list[Mutant] = whole
        self.sequences: list[str] = []
        self.after_calls: dict[str, int] = {}
        self.candidate_refused = False  # the candidate refused the operation being tried
        self.candidate_wrote: set[str] = set()  # the tables the candidate's run of the operation wrote
        self.tables: set[str] = set()  # the tables after it
        self.oracle: ModelOracle | None = None  # the whole replay's, made when first needed
        try:
            self._reach()
            if self.whole:
                self._replay_whole(self.whole)
        finally:
            if self.oracle is not None:
                self.oracle.close()

    def _reach(self) -> None:
        conn = self.conn
        if self.live:
            conn.execute("begin")
            try:
                conn.execute(f"set local statement_timeout = {STATEMENT_TIMEOUT_MS}")
                self.after_calls = _calls(conn)
                result = check(self.server, self.candidate, examples=self.examples, steps=30, seed=self.seed,
                               shrink=False, conn=conn, observer=self)  # fmt: skip
            finally:
                conn.execute("rollback")
            self.stats.candidate_agrees = result.passed
            found = result.tour or result.counterexample
            self.stats.candidate_problem = found.error if found else result.out_of_time
            inlined = {str(f) for f, in conn.execute(INLINED).fetchall()}
            for function, lives in self.live.items():
                for live in lives:
                    if live.trials:
                        replayed = f"; the state differed after an operation of {', '.join(live.replayed)}, and " \
                            "those histories replayed with the mutant agreed too" if live.replayed else ""
                        self.report(live.mutant.id, Verdict(
                            "Survived", "model",
                            f"agreed with the model at all {live.trials} operations that reach it, leaving the "
                            f"candidate's state{replayed}"))  # fmt: skip
                    elif function in inlined:  # PostgreSQL may inline it: its calls are not counted
                        self.whole.append(live.mutant)
                    else:
                        self.report(live.mutant.id, Verdict("NoCoverage", "model",
                                                            "no operation of the model reaches it"))  # fmt: skip

    def _compiling(self, conn: Conn) -> Iterator[Mutant]:
        """The mutants whose patch the server accepts (each tried in a transaction that rolls back)."""
        for mutant in self.mutants:
            conn.execute("begin")
            try:
                apply_sql(conn, mutant)
            except MutantDoesNotCompile as exc:
                self.report(mutant.id, Verdict("CompileError", "the server", str(exc)))
                continue
            finally:
                conn.execute("rollback")
            yield mutant

    def _replay(self, mutant: Mutant, part: str) -> Verdict:
        """The histories of `part` with `mutant` applied from their start, on the oracle's own
        database (this session's transaction stays as it is)."""
        if self.oracle is None:
            self.oracle = ModelOracle(self.server, self.candidate, examples=self.examples, seed=self.seed,
                                      tag=f"{self.tag}w")  # fmt: skip
        verdict = self.oracle.judge(mutant, part=part)
        if verdict.status == "Timeout":  # once more with twice the time: a loaded machine is not a defect
            verdict = self.oracle.judge(mutant, factor=2.0, part=part)
        return verdict

    def _replay_whole(self, mutants: list[Mutant]) -> None:
        for mutant in mutants:
            self.stats.replayed += 1
            self.report(mutant.id, self._replay(mutant, ALL))

    def _replay_part(self, history: Any, live: _Live) -> None:
        """A mutant that agreed with the model but left another state: every history before this
        one was the candidate's under it too (each trial left the candidate's state), and the ones
        after it start from the template again, so only this history needs the mutant from its
        start: one mode's tour, or the random histories. A mutant that agrees there is tried again
        from the next history on."""
        phase = history.bench.phase
        part = phase if phase.startswith("tour:") or phase == RANDOM else ALL
        self.stats.replayed_parts += 1
        verdict = self._replay(live.mutant, part)
        if verdict.status == "Survived" and part.startswith("tour:"):
            live.replayed.append(part)
            live.resume_after = history.bench.histories
            return
        self.live[live.mutant.functions[0]].remove(live)
        self.report(live.mutant.id, verdict)

    # -- the observer (model.bench.Observer) -------------------------------------------------

    def before(self, history: Any, op: Any) -> None:
        self.stats.operations += 1
        now = _calls(self.conn)
        outside = {f for f, n in now.items() if n != self.after_calls.get(f, 0)}
        for function in outside & set(self.live):  # reached between operations: no single operation to try
            self._to_whole(function)
        active = {f: [x for x in xs if x.resume_after < history.bench.histories] for f, xs in self.live.items()}
        if not any(active.values()):
            return
        self.conn.execute("savepoint reach_candidate")
        values: list[tuple[str, int, bool]] = []
        expected: dict[str, str] = {}
        reached = set[str]()
        try:
            self.sequences = [r[0] for r in self.conn.execute(SEQUENCES).fetchall()]
            values = self._sequence_values()
            raised: list[str] = []
            self.candidate_refused = False
            token = ops.RAISED.set(raised)
            before_op = touches(self.conn)
            try:
                answer, _ = op.real(self.conn)  # the candidate: which functions it reaches, the state it leaves
                self.candidate_refused = answer.kind == "error"
            finally:
                ops.RAISED.reset(token)
            counted = {f for f, n in _calls(self.conn).items() if n != now.get(f, 0)}
            reached = call_graph().reached(counted, raised) & {f for f, xs in active.items() if xs}
            if reached:
                after_op = touches(self.conn)
                self.candidate_wrote, self.tables = written(before_op, after_op), set(after_op)
                expected = digests(self.conn)
                self.stats.candidate_trials += 1
        except OutOfTime:
            reached = set()  # the candidate itself runs out of time here: the real run reports it
        finally:
            self.conn.execute("rollback to savepoint reach_candidate")
            self.conn.execute("release savepoint reach_candidate")
            self._reset(values)
        for function in sorted(reached):
            for live in active[function]:
                self._try(history, op, live, expected, values)

    def after(self, history: Any, op: Any) -> None:
        self.after_calls = _calls(self.conn)

    # -- one trial --------------------------------------------------------------------------

    def _try(self, history: Any, op: Any, live: _Live, expected: dict[str, str],
             values: list[tuple[str, int, bool]]) -> None:  # fmt: skip
        live.trials += 1
        self.stats.trials += 1
        where = f"operation {self.stats.operations} ({op.text[:120]})"
        outcome = self._trial(history, op, live.mutant, expected, values, STATEMENT_TIMEOUT_MS)
        if outcome[0] == "timeout":
            outcome = self._trial(history, op, live.mutant, expected, values, 2 * STATEMENT_TIMEOUT_MS)
        kind, detail = outcome
        if kind == "same":
            return
        if kind == "diverged":  # the model agrees, the state differs: only a replay of this history can tell
            self._replay_part(history, live)
            return
        self.live[live.mutant.functions[0]].remove(live)
        if kind == "killed":
            self.report(live.mutant.id, Verdict("Killed", "model: the reach oracle", f"{where}: {detail}"[:600]))
        elif kind == "timeout":
            self.report(live.mutant.id, Verdict(
                "Timeout", "model: the reach oracle",
                f"{where} ran past statement_timeout ({STATEMENT_TIMEOUT_MS} ms, then twice that): {detail}"[:600]))

    def _trial(self, history: Any, op: Any, mutant: Mutant, expected: dict[str, str],
               values: list[tuple[str, int, bool]], timeout_ms: int) -> tuple[str, str]:  # fmt: skip
        self.conn.execute("savepoint reach_mutant")
        try:
            self.conn.execute(f"set local statement_timeout = {timeout_ms}")
            apply_sql(self.conn, mutant)
            before_op = touches(self.conn)
            try:
                problem = history.trial(op)
            except OutOfTime as exc:
                return "timeout", str(exc)
            except psycopg.OperationalError:
                raise  # the session is gone: the machinery broke, not the mutant
            except Exception as exc:  # the engine's answer broke the checker: a detection, as in the model check
                return "killed", f"{type(exc).__name__}: {str(exc)[:400]}"
            if problem:
                return "killed", problem
            if history.refused and self.candidate_refused:  # both calls rolled back: neither wrote anything
                return "same", ""
            return ("same", "") if self._same_state(before_op, expected) else ("diverged", "")
        finally:
            self.conn.execute("rollback to savepoint reach_mutant")
            self.conn.execute("release savepoint reach_mutant")
            self.conn.execute(f"set local statement_timeout = {STATEMENT_TIMEOUT_MS}")
            self._reset(values)

    def _same_state(self, before_op: Touches, expected: dict[str, str]) -> bool:
        """The state the mutant's operation left equals the candidate's: the same tables, and every
        table either of them wrote has the same digest (one neither wrote is what it was before
        both, so it is equal without being read)."""
        after_op = touches(self.conn)
        if set(after_op) != self.tables:
            return False
        either = written(before_op, after_op) | self.candidate_wrote
        return all(expected.get(t) == d for t, d in digests(self.conn, either).items())

    def _sequence_values(self) -> list[tuple[str, int, bool]]:
        if not self.sequences:
            return []
        parts = [
            psycopg.sql.SQL("select {}::text, last_value, is_called from {}").format(
                psycopg.sql.Literal(s), psycopg.sql.SQL(s)
            )
            for s in self.sequences
        ]
        return [(str(n), int(v), bool(c)) for n, v, c in
                self.conn.execute(psycopg.sql.SQL(" union all ").join(parts)).fetchall()]  # fmt: skip

    def _reset(self, values: list[tuple[str, int, bool]]) -> None:
        """Sequences are not transactional: put them back where the candidate's state had them."""
        if values:
            self.conn.execute(
                "select pg_catalog.setval(s.name::regclass, s.value, s.called) "
                "from unnest(%s::text[], %s::bigint[], %s::boolean[]) as s (name, value, called)",
                ([v[0] for v in values], [v[1] for v in values], [v[2] for v in values]),
            )

    def _to_whole(self, function: str) -> None:
        for live in self.live.pop(function, []):
            self.whole.append(live.mutant)


def describe(stats: ReachStats) -> str:
    return json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in stats.__dict__.items()})
