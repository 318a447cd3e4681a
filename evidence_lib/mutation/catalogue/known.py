"""The known defects of the engine this is modelled on (CONTRACT section 2), as mutants."""

from __future__ import annotations

from evidence_lib.mutation.controls import CONSISTENCY, Control, Edit, Target

KNOWN_DEFECTS: tuple[Control, ...] = (
    # -- the known defects of the engine this is modelled on (CONTRACT section 2) --------------
    Control(
        "start_tasks_grants_from_a_pre_update_snapshot",
        "CONTRACT 2: claims return only rows the guarded UPDATE ... RETURNING changed (known defect)",
        (Target("admission", "v1_one_winner", ("two_sessions_claiming_one_v1_message_get_one_winner",)),),
        edits=(
            Edit(
                "0510_function_start_tasks.sql",
                """  for v_task in
    update engine.step_tasks as t
       set status = 'started',
           attempts_count = t.attempts_count + 1,
           started_at = v_now
      from (select c.run_id, c.step_slug, c.task_index
              from engine.step_tasks as c
              join engine.runs as r on r.run_id = c.run_id
             where c.queue_name = pg_catalog.lower(start_tasks.queue_name)
               and c.message_id = any (start_tasks.message_ids)
               and c.status = 'queued'
               and r.status = 'started'
               and r.protocol = 'v1'
             order by c.run_id, c.step_slug, c.task_index
               for update of c) as candidate,
           engine.steps as s,
           engine.flows as f
     where t.run_id = candidate.run_id
       and t.step_slug = candidate.step_slug
       and t.task_index = candidate.task_index
       and t.status = 'queued'
       and s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
       and f.flow_slug = t.flow_slug
    returning t.run_id, t.step_slug, t.task_index, t.queue_name, t.message_id,
              coalesce(s.timeout, f.timeout) as timeout
  loop
""",
                """  for v_task in
    select c.run_id, c.step_slug, c.task_index, c.queue_name, c.message_id,
           coalesce(s.timeout, f.timeout) as timeout
      from engine.step_tasks as c
      join engine.runs as r on r.run_id = c.run_id
      join engine.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
      join engine.flows as f on f.flow_slug = c.flow_slug
     where c.queue_name = pg_catalog.lower(start_tasks.queue_name)
       and c.message_id = any (start_tasks.message_ids)
       and c.status = 'queued' and r.status = 'started' and r.protocol = 'v1'
  loop
    update engine.step_tasks as t
       set status = 'started', attempts_count = t.attempts_count + 1, started_at = v_now
     where t.run_id = v_task.run_id and t.step_slug = v_task.step_slug
       and t.task_index = v_task.task_index and t.status = 'queued';
""",
            ),
        ),
    ),
    Control(
        "fail_task_retry_delay_in_an_unreferenced_cte",
        "CONTRACT 2: every side-effect statement is consumed; a CTE nothing references never runs (known defect)",
        (Target("admission", "v1_retry_delay", ("v1_retry_is_delayed_by_base_delay",)),),
        edits=(
            Edit(
                "0530_function_fail_task.sql",
                """    perform pgmq.set_vt(
      v_task.queue_name, v_task.message_id,
      v_now + pg_catalog.make_interval(
        secs => v_base_delay * pg_catalog.power(2, v_task.attempts_count - 1)));""",
                """    execute 'with delayed as (select * from pgmq.set_vt($1, $2, $3)) select 1'
      using v_task.queue_name, v_task.message_id,
            v_now + pg_catalog.make_interval(
              secs => v_base_delay * pg_catalog.power(2, v_task.attempts_count - 1));""",
            ),
        ),
    ),
    Control(
        "worker_stores_falsy_results_as_null",
        'CONTRACT 2: results are stored exactly as returned (0, false, "", [], {}) (known defect)',
        (Target("ab_proof", "falsy_results", ("falsy_results_are_settled_exactly",)),),
        seam="falsy_results_as_null",
    ),
    Control(
        "worker_treats_a_transport_error_as_a_handler_failure",
        "CONTRACT 2: a transport error while reporting success is not a handler failure (known defect)",
        (Target("ab_proof", "proof", ("same_settlement_replayed_handler_ran_once",)),),
        seam="transport_error_as_handler_failure",
    ),
    Control(
        "failed_run_leaves_its_siblings",
        "CONTRACT 2: a failed run terminalizes its unfinished tasks (known defect)",
        (Target("admission", "v1_siblings", ("a_failed_v1_run_terminalizes_its_siblings", CONSISTENCY)),),
        edits=(
            Edit(
                "0350_function__fail_run.sql",
                """  update engine.step_tasks as t
     set status = 'cancelled', failed_at = _fail_run.now
   where t.run_id = _fail_run.run_id and t.status in ('queued', 'started');""",
                "",
            ),
            Edit(
                "0350_function__fail_run.sql",
                """    perform pgmq.archive(v_task.queue_name, v_task.message_id);""",
                "    null;",
            ),
        ),
    ),
    Control(
        "worker_settles_without_waiting_between_attempts",
        "issue 20: a settlement's tries are spread over the lease's time left and a connect that never "
        "reached the server is not a submitted attempt (three back-to-back tries gave up during a restart)",
        (Target("response_loss", "server_restart", ("restart_no_settlement_gave_up_with_lease_left",)),),
        seam="settle_without_waiting",
        needs_owned_server=True,
    ),
    Control(
        "worker_pool_waits_past_the_horizon",
        "issue 20: reconnects back off with a cap of seconds and a settlement waits for a connection "
        "at most its lease's time left (a pool's defaults: 1 s doubling, a 30 s wait)",
        (Target("response_loss", "server_restart", ("restart_reconnect_waits_capped",)),),
        seam="pool_waits_past_the_horizon",
        needs_owned_server=True,
    ),
)
