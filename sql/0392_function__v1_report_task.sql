-- _v1_report_task: the task a v1 report names, locked (after its run and step states).
-- Locks: the task (for update).
-- Refuses: DR014 unknown task.
create function engine._v1_report_task(run_id uuid, step_slug text, task_index integer)
returns engine.step_tasks
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_task engine.step_tasks;
begin
  select t.* into v_task
    from engine.step_tasks as t
   where t.run_id = _v1_report_task.run_id and t.step_slug = _v1_report_task.step_slug
     and t.task_index = _v1_report_task.task_index
     for update;
  if not found then
    raise exception 'run %: unknown task %[%]', _v1_report_task.run_id, _v1_report_task.step_slug,
      _v1_report_task.task_index
      using errcode = 'DR014';
  end if;
  return v_task;
end;
$$;
