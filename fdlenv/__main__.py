"""`python -m fdlenv`: the same front as the `fdlenv` console script (fdlenv.cli)."""

import sys

from .cli import main

sys.exit(main())
