from replicate.cli import main

raise SystemExit(main())
