-- run_work_generations_are_monotonic: no update may move a generation backwards.
create trigger run_work_generations_are_monotonic
  before update of requested_generation, processed_generation on engine.run_work
  for each row execute function engine._run_work_generations_are_monotonic();
