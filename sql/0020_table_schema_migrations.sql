-- schema_migrations: one row per applied migration file, written by the migration runner.
create table engine.schema_migrations (
  file_name text not null,
  sha256 text not null,
  applied_at timestamptz not null default clock_timestamp(),
  constraint schema_migrations_are_identified_by_file_name primary key (file_name),
  constraint migration_sha256_is_64_hex_digits check (sha256 ~ '^[0-9a-f]{64}$')
);
