"""What `make evidence` produces: a scenario's result (`result`: gates, tables, charts), the
papermill runner (`runner`), the bundle's manifest, index and zip (`writer`), and the command
line (`cli`)."""
