"""fdlenv: locked, content-addressed libtorch environments and the flodl dial-in worker.

`PACKAGE_DIR` is where the package lies: its `data/` (the shipped lock, env files and the
example agent) is found from it, and a source checkout's root is its parent. It is worked
out when first asked for (`__getattr__`): a hot command answered from its memo never asks,
and resolving this file's symlinks is no part of its cost.
"""

import os

__version__ = "0.1.0"
PACKAGE_DIR: str   # (set by `__getattr__`, hidden from the type checker: any other name stays an error)

TYPE_CHECKING = False
if not TYPE_CHECKING:
    def __getattr__(name: str) -> str:
        if name == "PACKAGE_DIR":
            global PACKAGE_DIR
            PACKAGE_DIR = os.path.dirname(os.path.realpath(__file__))
            return PACKAGE_DIR
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
