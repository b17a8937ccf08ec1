"""`python -m fdlenv`: the same front as the installed `fdlenv` command (scripts/fdlenv, fdlenv.cli)."""

import sys

from .cli import main

sys.exit(main())
