from evidence_lib.cli import main

raise SystemExit(main())
