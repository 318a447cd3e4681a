"""The processes that do the work: the worker loop shared by v1 and v2 (`base`) and its settings
(`config`), the v1 worker (`v1`), the v2 worker with its deadline-bounded settlement (`v2`), the
reconciler driver (`reconciler`) and per-call timing (`timing`)."""
