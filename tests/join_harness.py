"""Runs the real join loop with a fake prepare pointing at join_standin.py.

argv: OUTDIR CODE MODE [persist] [thread]. Used by the signal test, which needs the loop
in its own process to SIGTERM it; `thread` starts an idle thread first, as a real join has
its tunnel's, for a signal the kernel hands to a thread that is not the main one.
"""

import os
import sys
import threading
from pathlib import Path

from fdlenv.config.model import JoinSettings
from fdlenv.join.loop import run_join
from fdlenv.app.prepare import Prepared
from fdlenv.store.env import Env

out, code, mode = sys.argv[1], sys.argv[2], sys.argv[3]
persist = "persist" in sys.argv[4:]
if "thread" in sys.argv[4:]:
    threading.Thread(target=threading.Event().wait, name="tunnel-standin", daemon=True).start()
standin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "join_standin.py")


ENV_DIR = Path(out) / "home" / "envs" / "cpu-k"   # a realised env as the store leaves it
(ENV_DIR / ".fdlenv").mkdir(parents=True, exist_ok=True)
(ENV_DIR / ".fdlenv" / "manifest.json").write_text("{}")


def prepare(settings):
    return Prepared(variant="cpu", env=Env("cpu", "k", ENV_DIR, Path("/env/lib/libtorch")),
                    bin=sys.executable, args=[standin, out, code, mode],
                    environ={"PATH": os.environ["PATH"], "LIBTORCH_PATH": "/env/lib/libtorch"})


settings = JoinSettings(host="harness", controller_host="127.0.0.1", controller_port=1,
                        bin=sys.executable, persist=persist, sig_probe=False)
print("harness-ready", flush=True)
sys.exit(run_join(settings, prepare))
