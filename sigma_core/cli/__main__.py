"""``python -m sigma_core.cli``: the same as the ``sigma`` command."""

import sys

from . import main

sys.exit(main())
