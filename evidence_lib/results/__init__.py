"""What a scenario records (gates, tables, charts, transcripts) for its notebook, the bundle and the
mutation sweep: below all three, importing nothing of evidence_lib."""
