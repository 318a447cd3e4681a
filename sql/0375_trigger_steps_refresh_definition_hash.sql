-- steps_refresh_definition_hash: any change to a flow's steps refreshes its cached hash.
create trigger steps_refresh_definition_hash
  after insert or update or delete on engine.steps
  for each row execute function engine._refresh_definition_hash();
