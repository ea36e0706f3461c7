from workstation.cli import main

raise SystemExit(main())
