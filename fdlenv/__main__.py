"""`python -m fdlenv`: the same front as the installed `fdlenv` command (scripts/fdlenv, fdlenv.front.cli)."""

import sys

from .front.cli import main

sys.exit(main())
