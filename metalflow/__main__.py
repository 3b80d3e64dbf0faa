"""`python -m metalflow`: the same as the `metalflow` command."""

from metalflow.cli import main

raise SystemExit(main())
