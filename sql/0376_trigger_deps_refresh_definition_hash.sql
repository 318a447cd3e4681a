-- deps_refresh_definition_hash: any change to a flow's dependencies refreshes its cached hash.
create trigger deps_refresh_definition_hash
  after insert or update or delete on engine.deps
  for each row execute function engine._refresh_definition_hash();
