"""Probes of the v2 protocol beyond the tour: the envelope at each limit (limit - 1, limit,
limit + 1), message-id arrays of every wrong shape, every test hook armed to fail, the live
definition changed behind the engine's back (DR005, then restored), and reconciling a v1 run."""

from __future__ import annotations

from typing import Any

from evidence_lib.model import ops, ops_more
from evidence_lib.model.ops import Op
from evidence_lib.model.probes_defs import Checker
from evidence_lib.model.reference import Model, Outcome, Window
from evidence_lib.model.state import INPUT_MAX, RESULT_MAX
from evidence_lib.pg.db import Conn

PAD = len('{"pad": ""}')  # octet_length of {"pad": "<n x's>"} is PAD + n


def padded(size: int) -> dict[str, str]:
    return {"pad": "x" * (size - PAD)}


def _flow(m: Checker, slug: str, a: dict[str, Any], b: dict[str, Any], flow: dict[str, Any] | None = None,
          mode: str = "flow") -> None:  # fmt: skip
    options = {"max_attempts": 1, "base_delay": 0, "timeout": 10, **(flow or {})}
    m.check(ops_more.create_flow(slug, options["max_attempts"], options["base_delay"], options["timeout"], mode))
    m.check(ops_more.add_step(slug, "A", [], a.get("max_attempts"), None, a.get("timeout"), a.get("start_delay")))
    m.check(ops_more.add_step(slug, "B", b.get("deps", ["A"]), b.get("max_attempts"), None, b.get("timeout"),
                              b.get("start_delay")))  # fmt: skip


def _start(m: Checker, slug: str, input: Any = None) -> str | None:
    before = set(m.model.runs)
    m.check(ops.start_run(slug, {"n": 1} if input is None else input))
    new = set(m.model.runs) - before
    return new.pop() if new else None


def envelope(m: Checker) -> None:
    """Each envelope check at its boundaries; the runs that start are left queued."""
    _flow(m, "Env900", {"timeout": 900}, {"timeout": 900})
    _start(m, "Env900")
    _flow(m, "Env901", {}, {"timeout": 901})
    _start(m, "Env901")
    _flow(m, "EnvAto901", {"timeout": 901}, {})
    _start(m, "EnvAto901")
    _flow(m, "Env3600", {}, {"start_delay": 3600})
    run = _start(m, "Env3600")
    _flow(m, "Env3601", {}, {"start_delay": 3601})
    _start(m, "Env3601")
    _flow(m, "EnvA1", {"start_delay": 1}, {})
    _start(m, "EnvA1")
    _flow(m, "EnvMa", {}, {"max_attempts": 2})
    _start(m, "EnvMa")
    _flow(m, "EnvFlowMa", {}, {}, {"max_attempts": 2})
    _start(m, "EnvFlowMa")
    _flow(m, "EnvStepMa1", {"max_attempts": 1}, {"max_attempts": 1}, {"max_attempts": 3})
    _start(m, "EnvStepMa1")  # the steps' own max_attempts 1 override the flow's 3
    _flow(m, "EnvRoots", {}, {"deps": []})
    _start(m, "EnvRoots")
    m.check(ops_more.create_flow("EnvOne", 1, 0, 10, "flow"))
    m.check(ops_more.add_step("EnvOne", "A"))
    _start(m, "EnvOne")
    m.check(ops_more.add_step("EnvOne", "B", ["A"]))
    m.check(ops_more.add_step("EnvOne", "C", ["B"]))
    _start(m, "EnvOne")
    for size in (INPUT_MAX - 1, INPUT_MAX, INPUT_MAX + 1):
        _start(m, "Env900", padded(size))
    if run is not None:
        a_run = run
        msg = m.msg_ids.get((a_run, "A"))
        queue = m.model.flows["Env3600"].queues["A"]
        for ids in ([], [None], [msg, msg], [[msg]]):
            m.check(ops.claim(a_run, "A", queue, ids, msg, f"message ids {ids}"))
        m.check(ops.claim(a_run, "A", queue, [msg], msg, "right"))
        claim = next(c for c, v in m.model.claims.items() if v.run == a_run)
        for size in (RESULT_MAX + 1, RESULT_MAX):
            m.check(ops.settle(claim, "completed", padded(size), "fresh", a_run))
        for actions in (0, 65, 64):
            m.check(ops.reconcile(a_run, actions))  # dispatches B with its start delay of 3600 s


def hooks(m: Checker, flow: str) -> None:
    """Every hook point armed to fail: the call answers DR900 and writes nothing, except an
    action of reconcile, which is rolled back and recorded as an engine error."""
    armed = ops_more.armed
    m.check(armed("start.after_definition_lock", ops.start_run(flow, {"n": 2})))
    run = _start(m, flow)
    assert run is not None
    defn = m.model.flows[flow]
    msg = m.msg_ids.get((run, "A"))
    right = ops.claim(run, "A", defn.queues["A"], [msg], msg, "right")
    for point in ("claim.after_run_lock", "claim.before_guarded_update"):
        m.check(armed(point, right))
    m.check(right)
    claim = next(c for c, v in m.model.claims.items() if v.run == run)
    m.check(armed("settle.after_run_lock", ops.settle(claim, "completed", {"a": 1}, "fresh", run)))
    m.check(armed("take_over.after_run_lock", ops.take_over(run, "A", claim, defn.queues["A"], msg, "armed")))
    m.check(ops.settle(claim, "completed", {"a": 1}, "fresh", run))
    for point in ("reconcile.after_work_lock", "reconcile.before_mark_processed", "reconcile.action"):
        m.check(armed(point, ops.reconcile(run, 8)))  # the last one records an engine error and backs off


def tamper(run_flow: str, table: str, column: str, value: Any, step: str = "B") -> Op:
    """A superuser changes the live definition behind the engine (its hash follows by trigger)."""
    where = "flow_slug = %s" + (" and step_slug = %s" if table == "steps" else "")
    params: tuple[Any, ...] = (value, run_flow) + ((step,) if table == "steps" else ())

    def real(conn: Conn) -> tuple[Outcome, Any]:
        if table == "deps":
            query = ("delete from engine.deps where flow_slug = %s and step_slug = %s" if value is None else
                     "insert into engine.deps (flow_slug, dep_slug, step_slug) values (%s, %s, %s)")  # fmt: skip
            conn.execute(query, (run_flow, step) if value is None else (run_flow, value, step))
        else:
            conn.execute(f"update engine.{table} set {column} = %s where {where}", params)
        return Outcome("value", None), None

    def model(m: Model, ids: Any, now: Window) -> Outcome:
        flow = m.flows[run_flow]
        if table == "flows":
            setattr(flow, {"queue_mode": "mode"}.get(column, column), value)
        elif table == "deps":
            flow.defs[step].deps = () if value is None else (value,)
        elif column == "queue_name":
            flow.queues[step] = value
            flow.defs[step].queue = value
        else:
            setattr(flow.defs[step], {"step_index": "index"}.get(column, column), value)
        return Outcome("value", None)

    return Op("tamper", f"(superuser) set {table}.{column} = {value} for {run_flow}", real, model)


CHANGES: tuple[tuple[str, str, Any, Any], ...] = (
    ("flows", "max_attempts", 2, 1), ("flows", "base_delay", 5, 0), ("flows", "timeout", 11, 10),
    ("flows", "queue_mode", "step", "flow"), ("steps", "max_attempts", 1, None), ("steps", "base_delay", 1, None),
    ("steps", "timeout", 12, None), ("steps", "start_delay", 1, None), ("steps", "step_index", 5, 1),
    ("steps", "queue_name", "other_route", None), ("deps", "dep_slug", None, "A"),
)  # fmt: skip


def definition_changes(m: Checker, flow: str) -> None:
    """Each part of a definition changed under a started run: claim and reconcile refuse it
    (DR005); put back, they go on."""
    run = _start(m, flow)
    assert run is not None
    defn = m.model.flows[flow]
    msg = m.msg_ids.get((run, "A"))
    route = defn.queues["B"]
    for table, column, changed, original in CHANGES:
        back = route if column == "queue_name" else original
        m.check(tamper(flow, table, column, changed))
        m.check(ops.reconcile(run, 8))
        m.check(ops.claim(run, "A", defn.queues["A"], [msg], msg, "right"))
        m.check(tamper(flow, table, column, back))
    m.check(ops.claim(run, "A", defn.queues["A"], [msg], msg, "right"))


def reconcile_next(m: Checker) -> None:
    """v2_reconcile_next takes the due runs one call each, in its order, skips what it is told to,
    and reconciles each exactly as v2_reconcile; out-of-range max_actions are refused first."""
    for actions in (0, 65, None):
        m.check(ops.reconcile_next(actions))
    for _ in range(3):  # three dirty runs: each started, its A claimed and settled
        run = _start(m, "Env900")
        assert run is not None
        queue, msg = m.model.flows["Env900"].queues["A"], m.msg_ids.get((run, "A"))
        m.check(ops.claim(run, "A", queue, [msg], msg, "right"))
        claim = next(c for c, v in m.model.claims.items() if v.run == run)
        m.check(ops.settle(claim, "completed", {"r": run[:4]}, "fresh", run))
    due = m.model.due((m.now(), m.now()))
    if due:
        m.check(ops.reconcile_next(8, tuple(due[:1])))
    for _ in range(len(due) + 1):
        m.check(ops.reconcile_next(1))
    m.check(ops.reconcile_next(64))


def wakeups(m: Checker, slug: str) -> None:
    """v2_listen names the engine's channels only (DR014); idempotent; v2_unlisten forgets one or
    all; each event consumes the one registration it wakes: a start A's queue, an accepted
    settlement engine_v2_dirty, B's dispatch B's queue."""
    queues = m.model.flows[slug].queues
    for channel in (None, "nope", "engine_queue_no_such_queue", "engine_v2_dirty", f"engine_queue_{queues['A']}",
                    "engine_v2_dirty"):  # fmt: skip
        m.check(ops_more.listen(channel))
    m.check(ops_more.unlisten("engine_v2_dirty"))
    m.check(ops_more.listen("engine_v2_dirty"))
    m.check(ops_more.unlisten(None))
    m.check(ops_more.listen(f"engine_queue_{queues['A']}"))
    m.check(ops_more.listen("engine_v2_dirty"))
    run = _start(m, slug)
    assert run is not None
    msg = m.msg_ids.get((run, "A"))
    m.check(ops_more.listen(f"engine_queue_{queues['B']}"))
    m.check(ops.claim(run, "A", queues["A"], [msg], msg, "right"))
    claim = next(c for c, v in m.model.claims.items() if v.run == run)
    m.check(ops.settle(claim, "completed", {"w": 1}, "fresh", run))
    m.check(ops.reconcile(run, 8))
    m.check(ops_more.unlisten(None))
    m.check(ghost_listener("engine_v2_dirty"))
    m.check(ops_more.unlisten(None))


def v2_calls_on_v1(m: Checker, run: str) -> None:
    m.check(ops.reconcile(run, 8))
    m.check(ops.claim(run, "A", "v1d__a", [1], 1, "v1 run"))
    m.check(ops.claim(run, "Z", "v1d__a", [1], 1, "v1 run, a step its flow does not have"))  # DR015 first


def step_options(m: Checker) -> None:
    """A (timeout 20 s) -> B (timeout 40 s): each claim's lease and options are its own step's,
    not the flow's first step's. B's claim is taken over, the new claim fails (which fails the
    run) and the revoked one then settles: a stale receipt carries the run's requested generation,
    which is ahead of the processed one (nothing reconciled the failure yet)."""
    _flow(m, "Opts", {"timeout": 20}, {"timeout": 40})
    run = _start(m, "Opts")
    assert run is not None
    queues = m.model.flows["Opts"].queues
    msg = m.msg_ids.get((run, "A"))
    m.check(ops.claim(run, "A", queues["A"], [msg], msg, "right"))
    first = next(c for c, v in m.model.claims.items() if v.run == run)
    m.check(ops.settle(first, "completed", {"a": 1}, "fresh", run))
    m.check(ops.reconcile(run, 8))
    msg = m.msg_ids.get((run, "B"))
    m.check(ops.claim(run, "B", queues["B"], [msg], msg, "right"))
    revoked = next(c for c, v in m.model.claims.items() if v.run == run and v.step == "B")
    m.advance(43)  # past B's lease horizon: timeout 40 s + 2 s
    m.check(ops.take_over(run, "B", revoked, queues["B"], msg, "current claim"))
    current = next(c for c, v in m.model.claims.items() if v.run == run and v.step == "B" and v.state == "current")
    m.check(ops.settle(current, "failed", {"error": "boom"}, "fresh", run))
    m.check(ops.settle(revoked, "completed", {"b": 1}, "fresh", run))


GHOST_PID = 2147483647  # no session has this pid


def ghost_listener(channel: str) -> Op:
    """A registration left by a session that is gone (its backend exited without v2_unlisten),
    then v2_listen on the same channel: the ghost is swept, else it could take the one wake-up."""

    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            conn.execute("insert into engine.listeners (channel, pid, listening_since) "
                         "values (%s, %s, now() - interval '1 hour')", (channel, GHOST_PID))  # fmt: skip
            conn.execute("select engine.v2_listen(%s)", (channel,))
            left = conn.execute("select count(*) from engine.listeners where pid = %s", (GHOST_PID,)).fetchone()
            return Outcome("value", ("ghosts left", left[0] if left else None)), None

        return ops.call(conn, go)

    def model(m: Model, ids: Any, now: Window) -> Outcome:
        listened = m.listen(channel)
        return listened if listened.kind == "error" else Outcome("value", ("ghosts left", 0))

    return Op("ghost_listener", f"(a session gone) listeners row on {channel}, then v2_listen {channel}", real,
              model)  # fmt: skip


def inputs(m: Checker) -> None:
    """B's input after A was taken over (A's task then carries an infrastructure loss) and in a
    flow whose second root (step index 1) gets the run input as it is."""
    _flow(m, "Lost", {}, {})
    run = _start(m, "Lost", {"lost": 1})
    assert run is not None
    queue, msg = m.model.flows["Lost"].queues["A"], m.msg_ids.get((run, "A"))
    m.check(ops.claim(run, "A", queue, [msg], msg, "right"))
    first = next(c for c, v in m.model.claims.items() if v.run == run)
    m.advance(13)  # past the lease horizon: timeout 10 s + 2 s
    m.check(ops.take_over(run, "A", first, queue, msg, "current claim"))
    second = next(c for c, v in m.model.claims.items() if v.run == run and v.state == "current")
    m.check(ops.settle(second, "completed", {"a": "after a takeover"}, "fresh", run))
    m.check(ops.reconcile(run, 8))
    b_queue, b_msg = m.model.flows["Lost"].queues["B"], m.msg_ids.get((run, "B"))
    m.check(ops.claim(run, "B", b_queue, [b_msg], b_msg, "right"))
