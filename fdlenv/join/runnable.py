"""Why the agent cannot be executed, named from the file itself: what a person must change.

An exec that fails (ENOENT, EACCES, ENOEXEC) fails the same way on every re-dial, so a
spawn failure is permanent (flodl's split): `--persist` stops with 2 and systemd's
RestartPreventExitStatus=2 leaves the box down for a person. The errno says *that* it
failed (the probe's Popen and `groupguard.spawn`'s gate both report the exec's own
errno, never a shell's 126/127); the file says *why*, read in this order: the path
itself (missing, a directory, no execute bit), its `#!` line (an interpreter that is
missing or not executable fails with ENOENT/EACCES although the script is there),
its ELF header (another machine's or word size's program fails with ENOEXEC; a
missing loader, PT_INTERP, with ENOENT), else a format the kernel does not run.
"""

from __future__ import annotations

import errno
import os
import shutil
import struct

from ..base.errors import Fail

# e_machine -> the name `uname -m` gives that machine (the common ones; others by number)
MACHINES = {3: "i386", 8: "mips", 20: "ppc", 21: "ppc64", 22: "s390x", 40: "arm", 62: "x86_64",
            183: "aarch64", 243: "riscv64", 258: "loongarch64"}
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64", "i686": "i386", "i586": "i386", "armv7l": "arm",
            "ppc64le": "ppc64"}
PT_INTERP = 3


def host_machine() -> str:
    m = os.uname().machine
    return _ALIASES.get(m, m)


def resolve(prog: str, cwd: str | None, path_var: str | None) -> str:
    """The file exec would run: a name with a `/` against `cwd`, a bare one through PATH."""
    if "/" in prog:
        return prog if os.path.isabs(prog) or cwd is None else os.path.join(cwd, prog)
    return shutil.which(prog, path=path_var) or prog


def _read(path: str, offset: int, size: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(size)
    except OSError:
        return b""


def shebang(head: bytes) -> str | None:
    """The interpreter a `#!` line names (its first word), or None."""
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].split()
    return words[0].decode("utf-8", "replace") if words else ""


def elf(path: str, head: bytes) -> tuple[str, int, str | None] | None:
    """(machine, bits, loader) of an ELF file, or None when it is not one."""
    if len(head) < 52 or not head.startswith(b"\x7fELF") or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    bits, order = (32 if head[4] == 1 else 64), ("<" if head[5] == 1 else ">")
    (machine,) = struct.unpack_from(order + "H", head, 18)
    name = MACHINES.get(machine, f"machine {machine}")
    try:
        if bits == 64:
            (phoff,) = struct.unpack_from(order + "Q", head, 32)
            phentsize, phnum = struct.unpack_from(order + "HH", head, 54)
        else:
            (phoff,) = struct.unpack_from(order + "I", head, 28)
            phentsize, phnum = struct.unpack_from(order + "HH", head, 42)
        table = _read(path, phoff, phentsize * min(phnum, 64))
        for i in range(min(phnum, 64)):
            entry = table[i * phentsize:(i + 1) * phentsize]
            if len(entry) < (56 if bits == 64 else 32):
                break
            if struct.unpack_from(order + "I", entry, 0)[0] != PT_INTERP:
                continue
            off, size = (struct.unpack_from(order + "Q", entry, 8)[0], struct.unpack_from(order + "Q", entry, 32)[0]) \
                if bits == 64 else (struct.unpack_from(order + "I", entry, 4)[0], struct.unpack_from(order + "I", entry, 16)[0])
            loader = _read(path, off, min(size, 4096)).split(b"\0", 1)[0].decode("utf-8", "replace")
            return name, bits, loader or None
    except struct.error:
        pass
    return name, bits, None


def cause(path: str, err: OSError) -> str:
    """What is wrong with `path`, given the errno its exec failed with, and the way out."""
    code = err.errno
    if not os.path.lexists(path):
        return "no such file (check --bin or join.bin, or the build that should make it)"
    if os.path.isdir(path):
        return "a directory, not a program (--bin names the executable file)"
    head = _read(path, 0, 256)
    interp = shebang(head)
    if interp is not None and code in (errno.ENOENT, errno.EACCES, errno.ENOEXEC):
        if not interp:
            return "an empty #! line: name the interpreter on it"
        if not os.path.exists(interp):
            return f"bad interpreter {interp} (the #! line): no such file; fix the #! line or install it"
        if code != errno.ENOENT and (os.path.isdir(interp) or not os.access(interp, os.X_OK)):
            return f"bad interpreter {interp} (the #! line): not executable; fix the #! line"
    info = elf(path, head)
    if code == errno.ENOEXEC:
        host = host_machine()
        if info is not None and info[0] != host:
            article = "an" if info[0][0] in "aeiou" else "a"
            return (f"wrong architecture: {article} {info[0]} ELF program on this {host} box; build or "
                    f"install it for {host}")
        if info is not None:
            return f"a {info[1]}-bit ELF program this kernel does not run (wrong word size or ELF type)"
        if interp is not None:
            return f"bad interpreter {interp} (the #! line): not a program the kernel runs"
        return "not an executable format (no #! line, not an ELF program): add a #! line or name the program"
    if code == errno.ENOENT and info is not None and info[2] and not os.path.exists(info[2]):
        return (f"its ELF loader {info[2]} is missing: the program was built for another system "
                "(libc or architecture); build it on or for this one")
    if code == errno.EACCES:
        if not os.access(path, os.X_OK):
            mode = os.stat(path).st_mode & 0o777
            return f"not executable (mode {mode:04o}): chmod +x {path}"
        return "permission denied (a noexec mount, or a directory on the way this user may not enter)"
    return err.strerror or str(err)


def not_runnable(prog: str, err: OSError, *, cwd: str | None = None, path_var: str | None = None) -> Fail:
    """The permanent failure of an agent that cannot be executed, naming it and the cause."""
    return Fail.permanent(f"run {prog}: {cause(resolve(prog, cwd, path_var), err)}; no retry can fix it")
