from examples.moderation.run import main

raise SystemExit(main())
