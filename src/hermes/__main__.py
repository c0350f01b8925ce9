from hermes.cli import main

raise SystemExit(main())
