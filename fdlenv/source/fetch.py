"""Make `source/<spec-hash>/` match its spec, incrementally and mtime-preserving.

cargo fingerprints by mtime, so a fetch that restamps files turns every dial
into a cold build: rsync runs with `-a` and git only rewrites files whose
content changed. `target/` survives both (rsync excludes it from `--delete`;
git leaves untracked files alone), so cargo stays incremental.

The tree is tool-owned and shared by every process using the spec: hold
`claimed()` from the fetch through the build, or another process may move
the tree between its digest and the build that the digest names.

A git re-dial costs no gitpython import (90 ms): when the ref still resolves
(`git ls-remote`, or the ref itself for a full commit id) to the commit that
is checked out and the tree digest equals the one recorded after that
checkout, nothing is fetched. What a git source delivered is its tracked
files (their content as they are now, an in-place edit included): the
digest leaves out the untracked outputs a build writes into the tree. A
copied source (file://, rsync://) is the copy itself: `--delete` removes
outputs the copy does not own at the next sync.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..base import hashing
from ..config.model import SshConfig
from ..base.errors import Fail
from ..base.flocks import exclusive, held
from ..names.home import Home, Living, Sweeper, listing
from ..base.progress import say
from . import digest
from .spec import GitSpec, LocalSpec, RsyncSpec, Spec, spec_hash
from .state import State
from .toolkit import install_hint

if TYPE_CHECKING:
    from collections.abc import Iterator

EXCLUDES = ("--exclude=target/", "--exclude=/libtorch/", "--exclude=.git/")
# Refs a bare name resolves to, in git's own order (refs.c ref_rev_parse_rules).
_DWIM = ("{}", "refs/{}", "refs/tags/{}", "refs/heads/{}", "refs/remotes/{}", "refs/remotes/{}/HEAD")
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0"}   # a credential prompt would wedge a systemd unit


class Fetched(NamedTuple):
    """A fetched, digested tree (a NamedTuple: it is on the re-dial path, see variants)."""

    spec: Spec
    tree: Path
    scan: digest.Scan
    digest: digest.TreeDigest
    state: State
    note: str


def source_dir(home: Home, spec: Spec) -> Path:
    return home.source_tree(spec_hash(spec))


@contextmanager
def claimed(home: Home, spec: Spec) -> Iterator[int]:
    """Exclusive use of the spec's tree; a waiter is told which process holds it. Yields the
    lock's descriptor: the recipe inherits it, so a recipe outliving a killed fdlenv (until
    its group guard ends it) still keeps every other process out of the tree."""
    with exclusive(home.source_lock(spec_hash(spec)), f"source {spec.origin}") as fd:
        yield fd


def _rsh_word(arg: str) -> str:
    """Quote one word for rsync's own `-e` splitter (spaces split; quotes group)."""
    if not any(c in arg for c in " '\""):
        return arg
    if "'" not in arg:
        return f"'{arg}'"
    if '"' not in arg:
        return f'"{arg}"'
    raise Fail.permanent(f"ssh setting {arg!r} holds both quote kinds; rsync's -e cannot carry it")


def rsh_command(spec: RsyncSpec, ssh: SshConfig | None) -> str:
    """`ssh [-p] [-i] -o BatchMode=yes [-o user…] -o StrictHostKeyChecking=accept-new`.

    OpenSSH keeps the first value per key: BatchMode=yes leads so no option
    can bring a passphrase prompt back; user options precede the default.
    """
    ssh = ssh or SshConfig()
    words = ["ssh"]
    if spec.port:
        words += ["-p", str(spec.port)]
    if ssh.identity_file:
        words += ["-i", ssh.identity_file]
    words += ["-o", "BatchMode=yes"]
    for opt in ssh.options:
        key, _, value = opt.partition("=")
        if key.strip().lower() == "batchmode" and value.strip().lower() != "yes":
            say(f"ignoring ssh option {opt!r} for {spec.host}: the pull never prompts")
        words += ["-o", opt]
    words += ["-o", "StrictHostKeyChecking=accept-new"]
    return " ".join(_rsh_word(w) for w in words)


def rsync_argv(spec: LocalSpec | RsyncSpec, dest: Path, ssh: SshConfig | None = None) -> list[str]:
    argv = ["rsync", "-a", "--delete", *EXCLUDES]
    if isinstance(spec, RsyncSpec):
        argv += ["-e", rsh_command(spec, ssh), f"{spec.remote}/"]
    else:
        argv.append(f"{spec.path}/")
    return argv + [f"{dest}/"]


def _rsync(spec: LocalSpec | RsyncSpec, dest: Path, ssh: SshConfig | None) -> str:
    import subprocess  # only when a copy runs: an unchanged local tree is only stat'ed

    local = isinstance(spec, LocalSpec)
    if local and not os.path.isdir(spec.path):
        raise Fail.permanent(f"--source: {spec.path} is not a directory on this box")
    try:
        proc = subprocess.run(rsync_argv(spec, dest, ssh), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except FileNotFoundError:
        raise Fail.permanent(f"rsync is not installed; {install_hint(['rsync'])}") from None
    if proc.returncode != 0:
        err = proc.stderr.strip()[-800:]
        if local:  # an unreadable file: a partial tree is a different program
            raise Fail.permanent(f"copying {spec.path} failed (rsync exit {proc.returncode}): {err}")
        assert isinstance(spec, RsyncSpec)
        raise Fail.retry(f"pulling {spec.remote} failed (rsync exit {proc.returncode}; host down, "
                         f"wrong key or path, or a forced command refusing rsync): {err}")
    return f"source: copied {spec.path}" if isinstance(spec, LocalSpec) else f"source: pulled {spec.remote}"


def _snapshot(root: str) -> str:
    """A digest of what rsync's quick check looks at (type, size, mtime, mode, link target) for
    every entry it would sync, with the same excludes. Equal snapshots on both sides since the
    last sync mean `rsync -a --delete` would change nothing, so the re-dial skips its fixed
    ~50 ms; any difference runs rsync as usual."""
    lines: list[str] = []

    def walk(rel: str) -> None:
        try:
            entries = sorted(os.scandir(os.path.join(root, rel) if rel else root), key=lambda e: e.name)
        except OSError:
            lines.append("?unreadable\n")
            return
        for e in entries:
            if e.name in ("target", ".git") or (not rel and e.name == "libtorch"):
                continue
            r = f"{rel}/{e.name}" if rel else e.name
            st = e.stat(follow_symlinks=False)
            if e.is_symlink():
                lines.append(f"l {r} {os.readlink(e.path)}\n")
            elif e.is_dir(follow_symlinks=False):
                lines.append(f"d {r} {st.st_mode}\n")
                walk(r)
            else:
                lines.append(f"f {r} {st.st_size} {st.st_mtime_ns} {st.st_mode}\n")

    walk("")
    return hashing.of_text("".join(lines))


def _git_env() -> dict[str, str]:
    env = dict(os.environ, **_GIT_ENV)
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    return env


def _remote_commit(spec: GitSpec) -> str | None:
    """The commit the ref names now, when it can be told cheaply and unambiguously."""
    if spec.pinned_sha:
        return spec.ref
    import subprocess

    try:
        proc = subprocess.run(["git", "ls-remote", "--", spec.url, spec.ref, spec.ref + "^{}"],
                              env=_git_env(), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True)
    except OSError:
        return None
    if proc.returncode != 0:
        return None  # let the real fetch say why
    refs = {}
    for line in proc.stdout.splitlines():
        sha, _, name = line.partition("\t")
        refs[name] = sha
    hits = [r for r in (p.format(spec.ref) for p in _DWIM) if r in refs]
    if len(hits) != 1:
        return None  # absent or ambiguous: git decides
    return refs.get(hits[0] + "^{}") or refs[hits[0]]


def _tracked(dest: Path, state: State) -> list[str]:
    """The checkout's tracked files (`git ls-files`), what the build key counts. Cached under
    the index's stat and HEAD: a re-dial with nothing changed runs no git at all."""
    try:
        st = os.stat(dest / ".git" / "index")
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino, _head(dest)]
    except OSError:
        stamp = None
    hit = state.get("tracked")
    if stamp is not None and hit and hit.get("stamp") == stamp:
        cached: list[str] = hit["files"]
        return cached
    import subprocess

    try:
        out = subprocess.run(["git", "-C", str(dest), "ls-files", "-z"], env=_git_env(),
                             stdin=subprocess.DEVNULL, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise Fail.permanent(f"cannot list the tracked files of {dest}: {e}") from None
    files = sorted(p for p in out.decode("utf-8", "surrogateescape").split("\0") if p)
    if stamp is not None:
        state.put("tracked", {"stamp": stamp, "files": files})
    return files


def _head(dest: Path) -> str | None:
    try:
        return (dest / ".git" / "HEAD").read_text().strip()
    except OSError:
        return None


def _git_checkout(spec: GitSpec, dest: Path) -> str:
    """Shallow fetch of the ref and a forced detached checkout; returns the commit."""
    try:
        import git
    except ImportError:
        raise Fail.permanent(f"git is not installed; {install_hint(['git'])}") from None
    try:
        repo = git.Repo(dest) if (dest / ".git").is_dir() else git.Repo.init(dest)
    except (git.GitError, OSError) as e:
        raise Fail.permanent(f"cannot prepare a git checkout in {dest}: {e}") from None
    for stale in ("index.lock", "shallow.lock"):  # a killed run's; we hold the tree
        (dest / ".git" / stale).unlink(missing_ok=True)
    env = _git_env()
    try:
        repo.git.fetch("--quiet", "--depth", "1", "--", spec.url, spec.ref, env=env)
    except git.GitCommandError as e:
        err = (e.stderr or "").strip()
        if "unadvertised object" in err or "allow request for" in err:
            raise Fail.permanent(
                f"{spec.url} refuses a shallow fetch of the commit {spec.ref}: the server needs "
                f"uploadpack.allowReachableSHA1InWant, or name a tag or branch instead ({err})") from None
        raise Fail.retry(f"fetching {spec.ref} from {spec.url} failed: {err}") from None
    try:
        repo.git.checkout("--quiet", "--detach", "--force", "FETCH_HEAD", env=env)
        head: str = repo.git.rev_parse("HEAD")   # gitpython's command methods are untyped
        return head
    except git.GitCommandError as e:
        raise Fail.permanent(f"checking out {spec.ref} in {dest} failed: {(e.stderr or '').strip()}") from None


def fetch(home: Home, spec: Spec, ssh: SshConfig | None = None) -> Fetched:
    """Bring the spec's tree up to date and digest it. Hold `claimed()` around it."""
    dest = source_dir(home, spec)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise Fail.permanent(f"cannot create the source directory {dest}: {e}") from None
    state = State.load(home.source_state(dest.name))
    if isinstance(spec, LocalSpec) and os.path.isdir(spec.path) and \
            state.get("synced") == [_snapshot(spec.path), _snapshot(str(dest))]:
        s = digest.scan(dest, state)
        state.save()
        return Fetched(spec, dest, s, s.digest(), state, f"source: {spec.path} unchanged since the last copy")
    if not isinstance(spec, GitSpec):
        # The source is snapshotted before the copy: a change during it shows up next time.
        before = _snapshot(spec.path) if isinstance(spec, LocalSpec) else None
        note = _rsync(spec, dest, ssh)
        if before:
            state.put("synced", [before, _snapshot(str(dest))])
        s = digest.scan(dest, state)
        state.save()
        return Fetched(spec, dest, s, s.digest(), state, note)
    last = state.get("git") or {}
    commit = last.get("commit")
    if commit and last.get("ref") == spec.ref and _head(dest) == commit == _remote_commit(spec):
        s = digest.scan(dest, state, only=_tracked(dest, state))
        d = s.digest()
        if d.content == last.get("digest"):
            state.save()
            return Fetched(spec, dest, s, d, state, f"source: {spec.url} at {spec.ref} ({commit[:12]}) unchanged")
    commit = _git_checkout(spec, dest)
    s = digest.scan(dest, state, only=_tracked(dest, state))
    d = s.digest()
    state.put("git", {"ref": spec.ref, "commit": commit, "digest": d.content})
    state.save()
    return Fetched(spec, dest, s, d, state, f"source: checked out {spec.url} at {spec.ref} ({commit[:12]}) in {dest}")


def sweep(home: Home, living: Living) -> Iterator[tuple[Path, str]]:
    """`env gc --sources`'s sweep of `source/`, handed in by the command: a fetched tree no join
    holds (its claim free), and the digest cache beside a tree that goes or is gone."""
    if not living.sources:
        return
    for p in listing(home.source):
        if p.is_dir() and not held(home.source_lock(p.name)):
            yield p, "a fetched source tree no join holds (--sources)"
        elif p.is_file() and home.source_state(h := p.name.split(".", 1)[0]) == p and not held(home.source_lock(h)):
            yield p, "the digest cache of a fetched source tree no join holds (--sources)"


SWEEPER = Sweeper(("source_tree", "source_state"), sweep)
