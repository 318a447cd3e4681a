"""The statuses mean what the shared schema says (issue 32): each defect that once let a status lie
is shown here not to come back."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import psycopg
import pytest

from evidence_lib.bundle.cli import main
from evidence_lib.harness.locks import LivenessTimeout
from evidence_lib.harness.waits import WaitTimeout
from evidence_lib.model.check import CheckResult
from evidence_lib.mutation import jobs, report, select, sweep
from evidence_lib.mutation.catalogue import catalogue
from evidence_lib.mutation.controls import Target
from evidence_lib.mutation.coverage import CoverageMap, Covered
from evidence_lib.mutation.judging import TargetRun, mutant_markers, part_verdict
from evidence_lib.mutation.mutant import Verdict
from evidence_lib.mutation.oracles import ModelOracle, judge_with_parts
from evidence_lib.mutation.reach import ReachOracle
from evidence_lib.mutation.registry import generated
from evidence_lib.pg import db
from evidence_lib.pg.db import Server, connect, one
from evidence_lib.results.gate import Gate
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios import mutation as scenario

SMALL = ("_is_valid_slug", "_task_message")
TARGET = Target("ab_proof", "proof", (), "flow")
CANDIDATE = Covered("ab_proof/proof [flow]", 1.0, green=["flow/b_created_once", "flow/run_completed"])


class NotClaimable(psycopg.errors.DatabaseError):
    sqlstate = "DR006"  # as psycopg raises an SQLSTATE it has no class for


def _run(*gates: Gate, escaped: list[BaseException] | None = None, hit: bool = False) -> TargetRun:
    return TargetRun(TARGET, list(gates), 1.0, hit, escaped=escaped or [])


def test_a_red_gate_kills_only_when_it_was_green_on_the_candidate() -> None:
    killed = part_verdict(_run(Gate("b_created_once", False, mode="flow")), CANDIDATE, 10)
    assert killed is not None and killed.status == "Killed" and "b_created_once" in killed.detail
    other = part_verdict(_run(Gate("a_gate_the_candidate_never_had", False, mode="flow")), CANDIDATE, 10)
    assert other is not None and other.status == "RuntimeError" and "not green on the candidate" in other.detail
    assert part_verdict(_run(Gate("b_created_once", True, mode="flow")), CANDIDATE, 10) is None


@pytest.mark.parametrize(
    ("escaped", "status"),
    [
        (NotClaimable("not claimable"), "Killed"),  # the engine's own refusal
        (psycopg.errors.UniqueViolation("duplicate key"), "Killed"),  # the engine's constraint
        (psycopg.OperationalError("the connection is lost"), "RuntimeError"),  # not the engine
        (psycopg.errors.UndefinedFile("could not access file"), "RuntimeError"),  # a missing binary or file
        (KeyError("rows"), "RuntimeError"),  # a harness bug
        (psycopg.errors.QueryCanceled("canceling statement due to statement timeout"), "Timeout"),
        (LivenessTimeout("a session neither completed nor blocked"), "Timeout"),
        (WaitTimeout("every waiter registered: not within 8 s"), "Killed"),  # the scenario's own wait ran out
    ],
)
def test_a_part_stopped_by_something_other_than_the_engine_is_a_runtime_error(
    escaped: BaseException, status: str
) -> None:
    stopped = Gate("proof_ran_to_the_end", False, f"{escaped}", "flow")
    verdict = part_verdict(_run(stopped, escaped=[escaped]), CANDIDATE, 10)
    assert verdict is not None and verdict.status == status, verdict


def test_an_exception_raised_in_the_mutated_worker_file_kills_and_elsewhere_does_not() -> None:
    try:
        raise AttributeError("'NoneType' object has no attribute 'pipeline'")
    except AttributeError as exc:
        raised = exc
    stopped = Gate("proof_ran_to_the_end", False, "x", "flow")
    here = part_verdict(_run(stopped, escaped=[raised]), CANDIDATE, 10, ("tests/test_mutation_status.py",))
    assert here is not None and here.status == "Killed" and "mutated code raised" in here.detail
    elsewhere = part_verdict(_run(stopped, escaped=[raised]), CANDIDATE, 10,
                             mutant_markers("0123456789ab", "evidence_lib/workers/v2.py"))  # fmt: skip
    assert elsewhere is not None and elsewhere.status == "RuntimeError"


def _raised_by(code: str, filename: str, wrap: type[BaseException] | None = None) -> BaseException:
    """An exception raised by `code` compiled under `filename`, re-raised `from` it by the harness
    as `wrap` when given (as a scenario re-raises what a worker thread raised)."""
    try:
        try:
            exec(compile(code, filename, "exec"), {})
        except BaseException as exc:
            if wrap is None:
                raise
            raise wrap("the worker thread failed") from exc
    except BaseException as exc:
        return exc
    raise AssertionError("nothing raised")


@pytest.mark.parametrize(
    ("code", "filename", "wrap", "status"),
    [
        # the mutant's own compiled code (apply.py compiles it as `<mutant id>`): a NameError
        ("worker.close()", "<mutant 0123456789ab>", None, "Killed"),
        # another worker module refuses the state the mutant left, re-raised by the harness
        ("raise ValueError('worker config out of range')", "/x/evidence_lib/workers/config.py", RuntimeError,
         "Killed"),
        # a lost connection seen in worker code is the harness's, not the mutant's
        ("import psycopg\nraise psycopg.OperationalError('server closed the connection')",
         "/x/evidence_lib/workers/v2.py", None, "RuntimeError"),
        # the scenario's own code raised: not the worker's
        ("raise KeyError('rows')", "/x/evidence_lib/scenarios/admission.py", None, "RuntimeError"),
    ],
)
def test_a_worker_mutant_is_killed_by_what_the_worker_code_raised_anywhere_in_the_chain(
    code: str, filename: str, wrap: type[BaseException] | None, status: str
) -> None:
    raised = _raised_by(code, filename, wrap)
    stopped = Gate("proof_ran_to_the_end", False, "x", "flow")
    verdict = part_verdict(_run(stopped, escaped=[raised]), CANDIDATE, 10,
                           mutant_markers("0123456789ab", "evidence_lib/workers/v2.py"))  # fmt: skip
    assert verdict is not None and verdict.status == status, verdict


def test_a_timeout_is_tried_again_with_twice_the_time(server: Server, template_db: str) -> None:
    mutant = next(m for m in generated().mutants if m.kind == "sql" and m.functions == ("_task_message",))
    asked: list[float] = []

    def runner(server: Server, template: str, target: Target, deadline: float, tag: str,
               coverage: bool = False, patch: str = "") -> TargetRun:  # fmt: skip
        asked.append(deadline)
        return _run(hit=len(asked) == 1)  # the first run hits its deadline, the second is green

    verdict = judge_with_parts(server, template_db, mutant, [CANDIDATE], runner, "tt")
    assert asked == [asked[0], 2 * asked[0]] and verdict.status == "Survived", verdict
    asked.clear()

    def slow(server: Server, template: str, target: Target, deadline: float, tag: str,
             coverage: bool = False, patch: str = "") -> TargetRun:  # fmt: skip
        asked.append(deadline)
        return _run(hit=True)

    verdict = judge_with_parts(server, template_db, mutant, [CANDIDATE], slow, "tu")
    assert verdict.status == "Timeout" and "twice the time" in verdict.detail and len(asked) == 2


def test_two_model_oracles_side_by_side_kill_nothing_with_a_probe(server: Server, template_db: str) -> None:
    """The role probe once created a cluster-wide role inside the oracle's transaction: the second
    job waited on the first's uncommitted role until its statement timeout, a "kill"."""
    results: dict[int, bool] = {}

    def one(i: int) -> None:
        oracle = ModelOracle(server, template_db, examples=1, tag=f"side{i}")
        try:
            results[i] = oracle.calibrate().passed
        finally:
            oracle.close()

    with connect(server.maintenance_url) as conn:
        conn.execute("drop role if exists engine_model_nobody")
    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert results == {0: True, 1: True}


@pytest.mark.parametrize(("outcomes", "passed"), [((False, True), True), ((False, False), False)])
def test_a_candidate_cut_off_once_is_calibrated_again_with_twice_the_statement_timeout(
    server: Server, template_db: str, outcomes: tuple[bool, bool], passed: bool
) -> None:
    """Under load a statement of the candidate's histories can pass the statement timeout: the
    candidate then runs once more with twice the timeout instead of being red for the whole sweep
    (every verdict a RuntimeError); a candidate that disagrees twice stays red."""
    oracle = ModelOracle(server, template_db, examples=0, tag="cal")
    timeouts: list[str] = []
    real_run = oracle._run

    def run(deadline: float | None, part: str = "all") -> CheckResult:
        timeouts.append(str(one(oracle.conn, "show statement_timeout")))
        result = real_run(deadline, "tour:flow")
        if not outcomes[len(timeouts) - 1]:
            result.out_of_time = "canceling statement due to statement timeout (planted)"
        return result

    try:
        oracle._run = run  # type: ignore[method-assign]
        assert oracle.calibrate().passed is passed
    finally:
        oracle.close()
    assert timeouts == ["2s", "4s"]


def test_the_candidate_agrees_gate_turns_red_on_a_candidate_the_model_disagrees_with(
    server: Server, template_db: str, tmp_path: Path
) -> None:
    control = next(c for c in catalogue() if c.name == "settle_does_not_bump_the_generation")
    name = db.scratch_name("badcand")
    url = db.create_database(server, name, template=template_db)
    try:
        with connect(url) as conn, conn.transaction():
            conn.execute(control.mutant().patch.encode())
        settings = sweep.Settings(objects=SMALL, examples=1, history=None, parts_oracle=False)
        bad = sweep.run(server, name, "testrev", settings)
    finally:
        db.drop_database(server, name)
    assert not bad.candidate_agrees and any("model disagrees" in p for p in bad.candidate_problems)
    result = ScenarioResult("12_mutation", "t", {})
    scenario.record(result, bad)
    gate = next(g for g in result.gates if g.name == "the_candidate_agrees_with_every_oracle")
    assert not gate.passed and "model disagrees" in gate.detail


def test_the_reach_oracle_agrees_with_the_whole_replay(server: Server, template_db: str) -> None:
    """Trying each mutant only at the operations that reach its function gives the verdict that
    replaying every history with the mutant applied gives (killed or not)."""
    mutants = [m for m in generated().mutants if m.kind == "sql" and m.functions and m.functions[0] in SMALL]
    fast: dict[str, str] = {}
    ReachOracle(server, template_db, mutants, lambda i, v: fast.__setitem__(i, v.status), examples=1).run()
    oracle = ModelOracle(server, template_db, examples=1, tag="whole")
    try:
        oracle.calibrate()
        slow = {m.id: oracle.judge(m).status for m in mutants}
    finally:
        oracle.close()
    detected = ("Killed", "Timeout")
    assert {i: s in detected for i, s in fast.items()} == {i: s in detected for i, s in slow.items()}


def test_a_stale_equivalent_is_reported(server: Server, template_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep, "equivalents", lambda: {"ffffffffffff": "argued for a mutant that is gone"})
    settings = sweep.Settings(objects=("_is_valid_slug",), examples=1, history=None, parts_oracle=False)
    ran = sweep.run(server, template_db, "testrev", settings)
    assert ran.stale_equivalents == ["ffffffffffff"]
    result = ScenarioResult("12_mutation", "t", {})
    scenario.record(result, ran)
    assert not next(g for g in result.gates if g.name == "no_argued_equivalent_is_stale").passed


def test_a_run_resumes_from_its_journal_and_merge_refuses_an_incomplete_set(
    server: Server, template_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = []
    for i in (1, 2, 3):
        settings = sweep.Settings(objects=SMALL, examples=1, history=None, parts_oracle=False,
                                  shard=select.Shard(i, 3), journal=tmp_path / f"s{i}")  # fmt: skip
        ran = sweep.run(server, template_db, "testrev", settings)
        reports.append(report.to_report(ran))
        (tmp_path / f"s{i}" / "mutation.json").write_text(json.dumps(reports[-1]))
    journal = tmp_path / "s1" / "journal.jsonl"
    lines = journal.read_text().splitlines()
    assert len(lines) > 2, "the shard journaled its verdicts"
    journal.write_text("\n".join(lines[:2]) + "\n" + lines[2][:10])  # stopped after one verdict, mid-line
    settings = sweep.Settings(objects=SMALL, examples=1, history=None, parts_oracle=False,
                              shard=select.Shard(1, 3), journal=tmp_path / "s1")  # fmt: skip
    again = sweep.run(server, template_db, "testrev", settings)
    assert again.reused == 1 and report.statuses(report.to_report(again)) == report.statuses(reports[0])
    merged = report.merge(reports)
    assert len(report.statuses(merged)) == sum(len(report.statuses(r)) for r in reports)
    with pytest.raises(report.BadReport, match="a shard is missing"):
        report.merge(reports[:2])
    out = tmp_path / "m"
    assert main(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a shard is missing" in err[0] and not (out / "mutation.json").exists()
    with pytest.raises(report.BadReport, match="appears in two shards"):
        report.merge([reports[0], reports[0], reports[1], reports[2]])


def test_a_run_stopped_in_the_parts_phase_resumes_without_the_model(server: Server, template_db: str,
                                                                    tmp_path: Path) -> None:  # fmt: skip
    """The model's verdict on a mutant it leaves alive is journaled; a resumed run goes straight
    to the parts with it (the model's histories are not replayed for it)."""
    settings = sweep.Settings(objects=SMALL, examples=1, history=None, parts_oracle=False, journal=tmp_path / "j")
    first = sweep.run(server, template_db, "testrev", settings)
    assert first.reach, "the first run replayed the model's histories"
    journal = tmp_path / "j" / "journal.jsonl"
    header, *lines = journal.read_text().splitlines()
    ids = sorted({json.loads(line)["id"] for line in lines})
    planted = [json.dumps({"id": i, "status": "Survived", "by": "model", "detail": "planted", "seconds": 0.0,
                           "stage": "model"}) for i in ids]  # fmt: skip
    journal.write_text("\n".join([header, *planted]) + "\n")  # stopped after the model phase
    again = sweep.run(server, template_db, "testrev", settings)
    assert not again.reach, "no history was replayed"
    assert {o.mutant.id for o in again.outcomes} == set(ids)
    assert all(o.verdict.detail == "planted" for o in again.outcomes)


def test_a_runtime_error_in_the_journal_is_judged_again_on_resume(tmp_path: Path) -> None:
    """A mutant that could not be judged (often because the run was being stopped) is not reused:
    the resumed run judges it again; every other verdict is reused."""
    from evidence_lib.mutation.journal import Header, Journal

    header = Header("rev", "gen", "sel", "plan")
    first = Journal(tmp_path, header)
    first.append("aaaaaaaaaaaa", Verdict("Killed", "model", "a counterexample"))
    first.append("bbbbbbbbbbbb", Verdict("RuntimeError", "races/x", "server closed the connection"))
    first.append("cccccccccccc", Verdict("Survived", "model", "agreed", 0.0), stage="model")
    first.append("dddddddddddd", Verdict("RuntimeError", "model", "the server went away"), stage="model")
    first.append("eeeeeeeeeeee", Verdict("RuntimeError", "races/x", "the server went away"))
    first.append("eeeeeeeeeeee", Verdict("Killed", "races/x", "judged again and killed"))
    first.close()
    resumed = Journal(tmp_path, header)
    resumed.close()
    assert set(resumed.done) == {"aaaaaaaaaaaa", "eeeeeeeeeeee"} and set(resumed.model) == {"cccccccccccc"}
    assert resumed.judged_again == {"bbbbbbbbbbbb", "dddddddddddd"}


def test_the_model_check_tour_is_tried_in_both_modes_other_parts_in_the_faster() -> None:
    """The tour runs its probes in flow mode only: its step mode, though faster, does not stand
    for it (trigger mutants survived that way); a race's two modes do stand for each other."""
    mutant = next(m for m in generated().mutants if m.obj == "function engine._task_claims_are_history")
    parts = [Covered(label, seconds, sql={"_task_claims_are_history": 1}) for label, seconds in
             (("model_check/tour [flow]", 2.6), ("model_check/tour [step]", 0.4), ("races/double_claim [flow]", 1.1),
              ("races/double_claim [step]", 1.2))]  # fmt: skip
    chosen = [p.label for p in CoverageMap(parts).parts_for(mutant)]
    assert chosen == ["model_check/tour [step]", "races/double_claim [flow]", "model_check/tour [flow]"]


def test_a_python_mutant_is_judged_in_a_fork_that_takes_its_threads_with_it() -> None:
    never = threading.Event()

    def leaves_a_thread() -> jobs.Judged:  # a mutant whose worker thread never stops
        threading.Thread(target=never.wait, name="leaked", daemon=False).start()
        return jobs.Judged("0123456789ab", Verdict("Survived", "", "every covering part stayed green"))

    before = threading.active_count()
    judged = jobs.in_a_fork(leaves_a_thread, "0123456789ab")
    assert judged.verdict.status == "Survived" and threading.active_count() == before

    def dies() -> jobs.Judged:
        raise SystemExit(3)

    died = jobs.in_a_fork(dies, "0123456789ab")
    assert died.verdict.status == "RuntimeError" and "died" in died.verdict.detail, died
