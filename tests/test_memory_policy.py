"""malloc's policy is the program's: `fdlenv` run as a command tunes it, a host importing fdlenv keeps its own.

fdlenv.base.memory holds glibc's two settings a wheel stream wants (arenas keep the steps' pages,
trimmed every so often); `cli.main` owns the process only when it runs as the program. Each
test runs in a fresh interpreter, so what one sets is not seen by another.
"""

from __future__ import annotations

import subprocess
import sys

_STEPS = """
import resource, sys, threading
from fdlenv.base import memory
if sys.argv[1] == "held":
    memory.own_process()
    memory.hold()
def steps():   # a stream's shape: a read, a step copied out of it, an inflated step, freed in turn
    for i in range(200):
        a = bytearray(1 << 20); b = bytes(a[: (1 << 20) - i * 1000]); c = bytearray(3 << 19)
        del a; d = bytes(c); del b, c, d
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
t = threading.Thread(target=steps); t.start(); t.join()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""

# A host program streaming a wheel through fdlenv's library, then saying what malloc was told.
_HOST = """
import io, sys, tempfile, zipfile
from pathlib import Path
from fdlenv.base import memory
from fdlenv.store import streamzip
if sys.argv[1] == "owner":
    memory.own_process()
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("pkg/a.py", b"x" * (3 << 20))
streamzip.TRIM_EVERY = 1 << 20
with tempfile.TemporaryDirectory() as d:
    unzip = streamzip.StreamUnzip(Path(d) / "out", lambda name: name)
    unzip.feed(buf.getvalue())
    unzip.finish()
    assert (Path(d) / "out" / "pkg" / "a.py").stat().st_size == 3 << 20
print("ctypes" in sys.modules, bool(memory._HELD))
"""


def run(code: str, mode: str) -> str:
    return subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, check=True).stdout


def test_a_host_that_streams_a_wheel_through_the_library_keeps_its_own_malloc():
    assert run(_HOST, "host").split() == ["False", "False"]


def test_the_program_that_owns_its_process_tunes_malloc_for_the_stream():
    assert run(_HOST, "owner").split() == ["True", "True"]


def test_the_fdlenv_command_owns_its_process_and_a_caller_of_main_does_not(tmp_path):
    args = f"['env', 'list', '--home', {str(tmp_path / 'home')!r}, '--json']"
    code = ("import sys; from fdlenv.front import cli; from fdlenv.base import memory\n"
            f"if sys.argv[1] == 'host':\n    cli.main({args})\n"
            f"else:\n    sys.argv = ['fdlenv', *{args}]; cli.main()\n"
            "print(bool(memory._OWNED))")
    assert run(code, "host").split()[-1] == "False"
    assert run(code, "program").split()[-1] == "True"


def test_held_memory_takes_a_streams_freed_steps_again_instead_of_faulting_fresh_pages_in():
    default, held = int(run(_STEPS, "default")), int(run(_STEPS, "held"))
    assert default > 50_000            # glibc maps most of these 600 MiB of steps afresh
    assert held * 10 < default
