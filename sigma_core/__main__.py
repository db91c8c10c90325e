"""``python -m sigma_core``: the same as the ``sigma`` command."""

import sys

from sigma_core.cli import main

sys.exit(main())
