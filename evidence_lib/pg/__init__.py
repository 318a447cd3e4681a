"""PostgreSQL itself: the server's lifecycle and connections (`db`), the watchdog that removes a
throwaway cluster (`reaper`), PGMQ and the migration runner (`migrate`), the proof that
`migrations/` equals `sql/` (`schema_sync`) and the pgTAP runner (`pgtap`)."""
