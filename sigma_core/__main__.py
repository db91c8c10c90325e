"""``python -m sigma_core``: the same as the ``sigma`` command."""

from sigma_core.cli import main

raise SystemExit(main())
