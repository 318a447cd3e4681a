-- task_claims_are_history: a claim row is never rewritten except its state.
create trigger task_claims_are_history
  before update on engine.task_claims
  for each row execute function engine._task_claims_are_history();
