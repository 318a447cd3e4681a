-- engine: the one schema that holds every object of ours. PUBLIC gets nothing here.
create schema engine;
revoke all on schema engine from public;
comment on schema engine is 'Workflow engine core: definitions, runs, tasks, Dirty Runs v2 protocol';
