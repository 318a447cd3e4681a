"""Probes of the schema: for every named constraint, unique index and trigger of the engine's
tables, a superuser write that only it refuses, answered with its SQLSTATE and its name (a
constraint's error names it; a trigger's names none). Check and unique constraints are probed
with `session_replication_role = replica` (user triggers off, so the constraint itself answers);
foreign keys and triggers without it, foreign keys checked at once (`set constraints all
immediate`). A write that is not refused is a defect the model cannot agree with: the schema
lost a rule.

The rows written come from the state the tour has built; nothing here commits."""

from __future__ import annotations

from typing import Any

import psycopg

from evidence_lib.model.ops import Op, note_raised
from evidence_lib.model.reference import Model, Outcome, Window
from evidence_lib.pg.db import Conn

NEW = "'00000000-0000-4000-8000-0000000000aa'::uuid"
F = "(select flow_slug from engine.flows order by flow_slug limit 1)"
S = "(select flow_slug, step_slug from engine.steps order by 1, 2 limit 1)"
V1RUN = "(select run_id from engine.runs where protocol = 'v1' and status = 'started' order by run_id limit 1)"
RUN = "(select run_id from engine.runs order by run_id limit 1)"
STATE = "(select run_id from engine.step_states order by run_id limit 1)"
STARTED = "(select run_id from engine.runs where status = 'started' order by run_id limit 1)"
TASK = "(select run_id, step_slug from engine.step_tasks where message_id is not null order by 1, 2 limit 1)"
CLEAN = "(select run_id from engine.run_work where health = 'clean' order by run_id limit 1)"
SETTLED = "(select claim_id from engine.task_claims where state = 'settled' order by claim_id limit 1)"
REVOKED = "(select claim_id from engine.task_claims where state = 'revoked' order by claim_id limit 1)"
CURRENT = "(select claim_id from engine.task_claims where state = 'current' order by claim_id limit 1)"

# (what is refused, the write, replica mode) ; the expected answer is "<sqlstate>:<constraint or ''>"
CHECKS: dict[str, tuple[str, str]] = {
    "flow_slug_is_a_valid_slug": ("23514", "insert into engine.flows (flow_slug) values ('bad-slug')"),
    "flow_queue_name_fits_in_47_characters": ("23514", f"insert into engine.flows (flow_slug) values ('{'q' * 48}')"),
    "flow_max_attempts_is_at_least_one": ("23514", f"update engine.flows set max_attempts = 0 where flow_slug = {F}"),
    "flow_base_delay_is_not_negative": ("23514", f"update engine.flows set base_delay = -1 where flow_slug = {F}"),
    "flow_timeout_is_at_least_one_second": ("23514", f"update engine.flows set timeout = 0 where flow_slug = {F}"),
    "flow_queue_mode_is_flow_or_step": ("23514", f"update engine.flows set queue_mode = 'x' where flow_slug = {F}"),
    "flows_are_identified_by_slug": ("23505", f"insert into engine.flows (flow_slug) select {F}"),
    "flow_default_queue_names_are_unique": ("23505", f"insert into engine.flows (flow_slug) select upper({F})"),
    "steps_are_identified_by_flow_and_slug": ("23505", "insert into engine.steps (flow_slug, step_slug, step_index, "
                                              "queue_name) select flow_slug, step_slug, 99, queue_name from "
                                              "engine.steps order by 1, 2 limit 1"),
    "step_index_is_unique_within_its_flow": ("23505", "insert into engine.steps (flow_slug, step_slug, step_index, "
                                             "queue_name) select flow_slug, 'zz', step_index, queue_name from "
                                             "engine.steps order by 1, 2 limit 1"),
    "step_slug_is_a_valid_slug": ("23514", f"update engine.steps set step_slug = 'bad-slug' where (flow_slug, "
                                  f"step_slug) = {S}"),
    "step_slug_run_is_reserved_for_the_run_input": ("23514", "update engine.steps set step_slug = 'run' where "
                                                    f"(flow_slug, step_slug) = {S}"),
    "step_index_is_not_negative": ("23514", f"update engine.steps set step_index = -1 where (flow_slug, step_slug) = {S}"),
    "deps_count_is_not_negative": ("23514", f"update engine.steps set deps_count = -1 where (flow_slug, step_slug) = {S}"),
    "step_max_attempts_is_at_least_one": ("23514", "update engine.steps set max_attempts = 0 where "
                                          f"(flow_slug, step_slug) = {S}"),
    "step_base_delay_is_not_negative": ("23514", f"update engine.steps set base_delay = -1 where (flow_slug, "
                                        f"step_slug) = {S}"),
    "step_timeout_is_at_least_one_second": ("23514", f"update engine.steps set timeout = 0 where (flow_slug, "
                                            f"step_slug) = {S}"),
    "step_start_delay_is_not_negative": ("23514", f"update engine.steps set start_delay = -1 where (flow_slug, "
                                         f"step_slug) = {S}"),
    "step_route_is_a_lower_case_pgmq_name": ("23514", "update engine.steps set queue_name = 'Upper' where "
                                             f"(flow_slug, step_slug) = {S}"),
    "deps_are_identified_by_flow_step_and_dep": ("23505", "insert into engine.deps select * from engine.deps "
                                                 "order by 1, 2, 3 limit 1"),
    "step_never_depends_on_itself": ("23514", "insert into engine.deps (flow_slug, dep_slug, step_slug) select "
                                     "flow_slug, step_slug, step_slug from engine.steps order by 1, 2 limit 1"),
    "runs_are_identified_by_run_id": ("23505", "insert into engine.runs select * from engine.runs order by run_id limit 1"),
    "run_status_is_known": ("23514", f"update engine.runs set status = 'x' where run_id = {STARTED}"),
    "remaining_steps_is_not_negative": ("23514", f"update engine.runs set remaining_steps = -1 where run_id = {RUN}"),
    "completed_run_has_completed_at": ("23514", f"update engine.runs set completed_at = now() where run_id = {STARTED}"),
    "failed_run_has_failed_at": ("23514", f"update engine.runs set failed_at = now() where run_id = {STARTED}"),
    "run_protocol_is_v1_or_v2": ("23514", f"update engine.runs set protocol = 'v3' where run_id = {V1RUN}"),
    "v2_run_records_its_definition_hash": ("23514", f"update engine.runs set definition_hash = 'x' where run_id = "
                                           f"{V1RUN}"),
    "step_states_are_identified_by_run_and_step": ("23505", "insert into engine.step_states select * from "
                                                   "engine.step_states order by 1, 2 limit 1"),
    "step_state_status_is_known": ("23514", f"update engine.step_states set status = 'x' where run_id = {STATE}"),
    "remaining_deps_is_not_negative": ("23514", f"update engine.step_states set remaining_deps = -1 where run_id = {STATE}"),
    "step_tasks_are_identified_by_run_step_and_index": ("23505", "insert into engine.step_tasks (run_id, step_slug, "
                                                        "flow_slug, task_index) select run_id, step_slug, flow_slug, "
                                                        "task_index from engine.step_tasks order by 1, 2 limit 1"),
    "step_task_status_is_known": ("23514", f"update engine.step_tasks set status = 'x' where (run_id, step_slug) = {TASK}"),
    "task_index_is_zero_for_single_task_steps": ("23514", "update engine.step_tasks set task_index = 1 where "
                                                 f"(run_id, step_slug) = {TASK}"),
    "attempts_count_is_not_negative": ("23514", "update engine.step_tasks set attempts_count = -1 where "
                                       f"(run_id, step_slug) = {TASK}"),
    "infrastructure_losses_is_not_negative": ("23514", "update engine.step_tasks set infrastructure_losses = -1 "
                                              f"where (run_id, step_slug) = {TASK}"),
    "message_identity_is_complete_or_absent": ("23514", "update engine.step_tasks set message_id = null where "
                                               f"(run_id, step_slug) = {TASK}"),
    "one_task_per_physical_message": ("23505", "insert into engine.step_tasks (run_id, step_slug, flow_slug, "
                                      "task_index, queue_name, message_id) select s.run_id, s.step_slug, s.flow_slug, "
                                      "0, t.queue_name, t.message_id from engine.step_states s, engine.step_tasks t "
                                      "where t.message_id is not null and not exists (select from engine.step_tasks x "
                                      "where x.run_id = s.run_id and x.step_slug = s.step_slug) order by 1, 2 limit 1"),
    "run_work_is_identified_by_its_run": ("23505", "insert into engine.run_work select * from engine.run_work "
                                          "order by run_id limit 1"),
    "generations_are_not_negative": ("23514", f"update engine.run_work set processed_generation = -1 where run_id = "
                                     f"{CLEAN}"),
    "processed_generation_never_exceeds_requested": ("23514", "update engine.run_work set processed_generation = "
                                                     f"requested_generation + 1 where run_id = {CLEAN}"),
    "health_is_clean_backoff_or_attention": ("23514", f"update engine.run_work set health = 'x' where run_id = {CLEAN}"),
    "consecutive_errors_is_not_negative": ("23514", "update engine.run_work set consecutive_errors = -1 where "
                                           f"run_id = {CLEAN}"),
    "backoff_has_a_next_attempt_time": ("23514", "update engine.run_work set health = 'backoff', next_attempt_at = "
                                        f"null where run_id = {CLEAN}"),
    "attention_has_a_reason": ("23514", "update engine.run_work set health = 'attention', attention_reason = null "
                               f"where run_id = {CLEAN}"),
    "task_claims_are_identified_by_claim_id": ("23505", "insert into engine.task_claims select * from "
                                               "engine.task_claims where state <> 'current' order by claim_id limit 1"),
    "claim_state_is_current_settled_or_revoked": ("23514", f"update engine.task_claims set state = 'x' where claim_id "
                                                  f"= {SETTLED}"),
    "revoked_claim_has_revoked_at": ("23514", f"update engine.task_claims set revoked_at = now() where claim_id = "
                                     f"{SETTLED}"),
    "only_a_revoked_claim_is_replaced": ("23514", "update engine.task_claims set replaced_by = claim_id where "
                                         f"claim_id = {SETTLED}"),
    "lease_ends_after_the_claim": ("23514", "update engine.task_claims set lease_expires_at = claimed_at where "
                                   f"claim_id = {SETTLED}"),
    "claim_attempt_is_positive": ("23514", f"update engine.task_claims set attempt = 0 where claim_id = {SETTLED}"),
    "one_current_claim_per_task": ("23505", f"insert into engine.task_claims select {NEW}, run_id, step_slug, "
                                   "task_index, attempt, queue_name, message_id, claimed_at, lease_expires_at, timeout, "
                                   "max_attempts, start_delay, state, revoked_at, replaced_by from engine.task_claims "
                                   f"where claim_id = {CURRENT}"),
    "settlements_are_identified_by_claim": ("23505", "insert into engine.task_settlements select * from "
                                            "engine.task_settlements order by claim_id limit 1"),
    "settlement_outcome_is_completed_or_failed": ("23514", "update engine.task_settlements set outcome = 'x' where "
                                                  f"claim_id = {SETTLED}"),
    "engine_errors_are_identified_by_error_id": ("23505", "insert into engine.engine_errors overriding system value "
                                                 "select * from engine.engine_errors order by error_id limit 1"),
    "schema_migrations_are_identified_by_file_name": ("23505", "insert into engine.schema_migrations select * from "
                                                      "engine.schema_migrations order by file_name limit 1"),
    "migration_sha256_is_64_hex_digits": ("23514", "update engine.schema_migrations set sha256 = 'x' where file_name = "
                                          "(select min(file_name) from engine.schema_migrations)"),
}  # fmt: skip
FOREIGN_KEYS: dict[str, str] = {
    "step_belongs_to_a_flow": "insert into engine.steps (flow_slug, step_slug, step_index, queue_name) values "
                              "('nope', 'a', 0, 'nope')",
    "dependency_is_a_step_of_the_flow": "insert into engine.deps (flow_slug, dep_slug, step_slug) select flow_slug, "
                                        "'nope', step_slug from engine.steps order by 1, 2 limit 1",
    "dependent_is_a_step_of_the_flow": "insert into engine.deps (flow_slug, dep_slug, step_slug) select flow_slug, "
                                       "step_slug, 'nope' from engine.steps order by 1, 2 limit 1",
    "run_belongs_to_a_flow": "insert into engine.runs (flow_slug, input, remaining_steps) values ('nope', '{}', 0)",
    "step_state_belongs_to_a_run": "insert into engine.step_states (run_id, step_slug, flow_slug, remaining_deps) "
                                   f"select {NEW}, step_slug, flow_slug, 0 from engine.steps order by 1, 2 limit 1",
    "step_state_belongs_to_a_step": "insert into engine.step_states (run_id, step_slug, flow_slug, remaining_deps) "
                                    f"select run_id, 'zz', flow_slug, 0 from engine.runs where run_id = {RUN}",
    "step_task_belongs_to_a_step_state": "insert into engine.step_tasks (run_id, step_slug, flow_slug) select run_id, "
                                         f"'zz', flow_slug from engine.runs where run_id = {RUN}",
    "run_work_belongs_to_a_run": f"insert into engine.run_work (run_id) values ({NEW})",
    "claim_belongs_to_a_task": f"insert into engine.task_claims select {NEW}, {NEW}, step_slug, task_index, attempt, "
                               "queue_name, message_id, claimed_at, lease_expires_at, timeout, max_attempts, "
                               f"start_delay, 'settled', null, null from engine.task_claims where claim_id = {SETTLED}",
    "claim_is_replaced_by_a_claim": "alter table engine.task_claims disable trigger task_claims_are_history; "
                                    f"update engine.task_claims set replaced_by = {NEW} where claim_id = {REVOKED}",
    "settlement_settles_a_claim": f"insert into engine.task_settlements select {NEW}, run_id, outcome, result, "
                                  "settled_at, requested_generation from engine.task_settlements order by claim_id "
                                  "limit 1",
    "settlement_belongs_to_a_run": f"insert into engine.task_settlements select claim_id, {NEW}, 'completed', "
                                   "'{}', now(), 1 from engine.task_claims where claim_id = " + CURRENT,
    "engine_error_belongs_to_a_run": "insert into engine.engine_errors (run_id, generation, action, sqlstate, message, "
                                     f"occurred_at) values ({NEW}, 0, 'x', 'x', 'x', now())",
}  # fmt: skip
TRIGGERS: dict[str, str] = {  # a trigger's refusal names no constraint
    # any run asked for at least once: whether a reconcile has caught it up by now depends on the
    # clock (a run in backoff becomes due), so the probe must not need a run still dirty
    "run_work_generations_are_monotonic (decrease)": "update engine.run_work set requested_generation = "
                                                     "requested_generation - 1 where run_id = (select run_id from "
                                                     "engine.run_work where requested_generation > 0 order by "
                                                     "processed_generation = 0 desc, run_id limit 1)",
    "run_work_generations_are_monotonic (processed past requested)": "update engine.run_work set processed_generation"
                                                                     f" = requested_generation + 1 where run_id = {CLEAN}",
    "task_claims_are_history (rewrite)": f"update engine.task_claims set attempt = attempt + 1 where claim_id = {CURRENT}",
    "task_claims_are_history (a settled claim moves)": f"update engine.task_claims set state = 'current' where "
                                                       f"claim_id = {SETTLED}",
    "task_claims_are_history (a settled claim gains a revocation time)": "update engine.task_claims set revoked_at "
                                                                         f"= now() where claim_id = {SETTLED}",
    "run_work_generations_are_monotonic (processed decreases)": "update engine.run_work set processed_generation = "
                                                                "processed_generation - 1 where run_id = (select run_id "
                                                                "from engine.run_work where processed_generation > 0 "
                                                                "order by run_id limit 1)",
}  # fmt: skip
# every column a claim keeps: rewriting any one of them alone is refused by task_claims_are_history
CLAIM_COLUMNS = {
    "claim_id": NEW, "run_id": NEW, "step_slug": "step_slug || 'x'", "task_index": "task_index + 1",
    "queue_name": "queue_name || 'x'", "message_id": "message_id + 1", "claimed_at": "claimed_at - interval '1 s'",
    "lease_expires_at": "lease_expires_at + interval '1 s'", "timeout": "timeout + 1",
    "max_attempts": "max_attempts + 1", "start_delay": "start_delay + 1",
}  # fmt: skip
TRIGGERS.update({f"task_claims_are_history (rewrite {column})": f"update engine.task_claims set {column} = {value} "
                 f"where claim_id = {CURRENT}" for column, value in CLAIM_COLUMNS.items()})  # fmt: skip
# a run made dirty twice by hand (as a settlement would): the generations trigger allows it
BUMP = ("update engine.run_work set requested_generation = requested_generation + 1 where run_id = (select w.run_id "
        "from engine.run_work as w join engine.runs as r using (run_id) where r.protocol = 'v2' and r.status = "
        "'started' and w.health = 'clean' order by w.run_id limit 1) returning run_id")  # fmt: skip


def refused_write(label: str, statement: str, expected: str, replica: bool) -> Op:
    """A superuser write that the schema must refuse with `expected` ("sqlstate:constraint")."""

    def real(conn: Conn) -> tuple[Outcome, Any]:
        try:
            with conn.transaction():
                conn.execute("set constraints all immediate")
                if replica:
                    conn.execute("set local session_replication_role = replica")
                rows = conn.execute(statement.encode()).rowcount
                conn.execute("set local session_replication_role = origin")
            return Outcome("value", f"written ({rows} rows)"), None
        except psycopg.Error as exc:  # a trigger's refusal reaches its function: the reach oracle must hear it
            note_raised(exc)
            return Outcome.error(f"{exc.sqlstate}:{exc.diag.constraint_name or ''}"), None
        finally:
            if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
                conn.execute("set constraints all deferred")  # the engine's own default (take_over relies on it)

    def model(m: Model, ids: Any, now: Window) -> Outcome:
        return Outcome.error(expected)

    return Op("refused_write", f"(superuser) {label}: {statement[:90]}", real, model)


def allowed_bump() -> Op:
    """A superuser write the schema must allow: one more requested generation on a clean started
    v2 run (twice in a row, the second on a run already dirty); the model's run is bumped too."""

    def real(conn: Conn) -> tuple[Outcome, Any]:
        try:
            with conn.transaction():
                row = conn.execute(BUMP.encode()).fetchone()
        except psycopg.Error as exc:
            note_raised(exc)
            return Outcome.error(f"{exc.sqlstate}:{exc.diag.constraint_name or ''}"), None
        return Outcome("value", "bumped" if row else "no such run"), None if row is None else str(row[0])

    def model(m: Model, ids: Any, now: Window) -> Outcome:
        if ids is None:
            return Outcome("value", "no such run")
        m.runs[ids].requested += 1
        return Outcome("value", "bumped")

    return Op("allowed_write", f"(superuser) a run made dirty by hand: {BUMP[:80]}", real, model)


def probes() -> list[Op]:
    out = [allowed_bump(), allowed_bump()]
    out += [refused_write(name, stmt, f"{code}:{name}", True) for name, (code, stmt) in CHECKS.items()]
    out += [refused_write(name, stmt, f"23503:{name}", False) for name, stmt in FOREIGN_KEYS.items()]
    out += [refused_write(name, stmt, "23514:", False) for name, stmt in TRIGGERS.items()]
    return out
