-- _task_message: the identity-only body of a task message; handler input never travels in it.
create function engine._task_message(protocol text, run_id uuid, step_slug text, task_index integer)
returns jsonb
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
  select pg_catalog.jsonb_build_object(
    'protocol', protocol,
    'run_id', run_id,
    'step_slug', step_slug,
    'task_index', task_index
  );
$$;
