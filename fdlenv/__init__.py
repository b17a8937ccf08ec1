"""fdlenv: locked, content-addressed libtorch environments and the flodl dial-in worker.

`PACKAGE_DIR` is where the package lies: its `data/` (the shipped lock, env files and the
example agent) is found from it, and a source checkout's root is its parent.
"""

import os

__version__ = "0.1.0"
PACKAGE_DIR = os.path.dirname(os.path.realpath(__file__))
