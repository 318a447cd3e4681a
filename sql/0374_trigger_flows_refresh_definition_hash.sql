-- flows_refresh_definition_hash: a new flow, or new options or mode, refresh the cached hash.
create trigger flows_refresh_definition_hash
  after insert or update of flow_slug, max_attempts, base_delay, timeout, queue_mode on engine.flows
  for each row execute function engine._refresh_definition_hash();
