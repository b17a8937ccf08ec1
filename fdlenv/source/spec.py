"""The training-source spec grammar (`--source`, `join: source: from:`).

Pure: a string in, a typed spec or a permanent `Fail` out, so that a typo
stops the box before anything is fetched. The scheme names the tool, not a
wire protocol (`rsync://` is rsync over ssh, never the port-873 daemon).
git specs split at the FIRST `#`: refs contain `/` and ssh URLs contain `@`.
Paths are carried as data (argv, never a shell line), so shell
metacharacters in them are legal; control characters and a leading `-`
(which a tool would read as an option) are not.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..base import hashing
from ..config.grammar import bracketed, split_host_port
from ..base.errors import Fail

ACCEPTED = (
    "file:///abs/path, rsync://[user@]host[:port]:/abs/path "
    "(also host:port/abs/path; an IPv6 host in brackets: [::1]), git+https://host/owner/repo#<ref>, "
    "git+ssh://git@host/owner/repo#<ref>, git+file:///abs/repo#<ref>"
)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SHA = re.compile(r"[0-9a-f]{40}")
# git check-ref-format's forbidden shapes, checked here so a bad ref is a
# permanent parse error rather than a fetch failure retried forever.
_BAD_REF = re.compile(r"[\s~^:?*\[\\]|\.\.|@\{|//|^[-/.]|[/.]$|\.lock$|/\.")


class LocalSpec(NamedTuple):
    """`file:///abs` (a NamedTuple: it is on the re-dial path, see variants)."""

    raw: str
    path: str          # absolute, no trailing slash

    @property
    def origin(self) -> str:
        return f"file://{self.path}"


class RsyncSpec(NamedTuple):
    """`rsync://[user@]host[:port]:/abs` (a NamedTuple: it is on the re-dial path, see variants)."""

    raw: str
    host: str
    user: str | None
    port: int | None
    path: str          # absolute, no trailing slash

    @property
    def remote(self) -> str:
        """rsync's own spelling of the far side: `[user@]host:/abs`."""
        return f"{self.user + '@' if self.user else ''}{bracketed(self.host)}:{self.path}"

    @property
    def origin(self) -> str:
        return f"rsync://{self.remote}" + (f" port {self.port}" if self.port else "")


class GitSpec(NamedTuple):
    """`git+<transport>://…#<ref>` (a NamedTuple: it is on the re-dial path, see variants)."""

    raw: str
    url: str           # what git fetches: https://…, ssh://…, file:///…
    ref: str

    @property
    def origin(self) -> str:
        # The ref is left out on purpose: a ref move reuses the checkout, so
        # the untracked target/ keeps cargo incremental across it.
        return self.url

    @property
    def pinned_sha(self) -> bool:
        return bool(_SHA.fullmatch(self.ref))


Spec = LocalSpec | RsyncSpec | GitSpec


def _bad(field: str, raw: str, why: str) -> Fail:
    return Fail.permanent(f"{field}: {raw!r} {why}; accepted: {ACCEPTED}")


def parse(raw: str, field: str = "--source") -> Spec:
    """Parse a source spec; every broken shape is permanent and names the forms."""
    if _CONTROL.search(raw):
        raise _bad(field, raw, "contains a control character")
    if "://" not in raw:
        hint = (" (a directory on this box is file:// + its absolute path)"
                if raw.startswith("/") or raw.startswith(".") else "")
        raise _bad(field, raw, f"names no transport{hint}")
    scheme, rest = raw.split("://", 1)
    if scheme == "file":
        return LocalSpec(raw, _abs_path(field, raw, rest, "file://"))
    if scheme == "rsync":
        return _rsync(field, raw, rest)
    if scheme in ("git+https", "git+ssh", "git+file"):
        return _git(field, raw, scheme[4:], rest)
    raise _bad(field, raw, f"uses the unsupported source scheme {scheme + '://'!r}")


def _abs_path(field: str, raw: str, path: str, what: str) -> str:
    if not path.startswith("/"):
        raise _bad(field, raw, f"needs an absolute path after {what} (three slashes: file:///abs)")
    trimmed = path.rstrip("/")
    if not trimmed:
        raise _bad(field, raw, "names `/`: the root is not a source root")
    return trimmed


def _rsync(field: str, raw: str, rest: str) -> RsyncSpec:
    slash = rest.find("/")
    if slash < 0:
        raise _bad(field, raw, "names no path on the remote host")
    authority, path = rest[:slash], rest[slash:]
    user = None
    if "@" in authority:
        user, authority = authority.split("@", 1)
        if not user:
            raise _bad(field, raw, "has an empty user before `@`")
    authority = authority[:-1] if authority.endswith(":") else authority  # scp colon
    try:   # host, host:port, [v6], [v6]:port; a bare IPv6 address is refused
        authority, port = split_host_port(authority)
    except Fail as e:
        raise _bad(field, raw, f"has no usable host[:port]: {e.message}") from None
    if authority.startswith("-") or (user or "").startswith("-"):
        raise _bad(field, raw, "has a host or user starting with `-`")
    return RsyncSpec(raw, authority, user, port, _abs_path(field, raw, path, "the host"))


def _git(field: str, raw: str, transport: str, rest: str) -> GitSpec:
    if "#" not in rest:
        raise _bad(field, raw, (
            "names no ref: a default branch floats, so it is not a pin; "
            "name a tag, branch or commit after `#` (…/repo#v1.2)"))
    repo, ref = rest.split("#", 1)
    if not repo.strip("/"):
        raise _bad(field, raw, "names no repository before `#`")
    if not ref:
        raise _bad(field, raw, "has an empty ref after `#`")
    if _BAD_REF.search(ref):
        raise _bad(field, raw, f"has {ref!r}, which is not a valid git ref")
    if transport == "file":
        repo = _abs_path(field, raw, repo, "git+file://")
    elif repo.startswith("-") or repo.startswith("/"):
        raise _bad(field, raw, "names no host before the repository path")
    return GitSpec(raw, f"{transport}://{repo}", ref)


def spec_hash(spec: Spec) -> str:
    """The name of the spec's own directory under `source/` (its origin, hashed)."""
    kind = type(spec).__name__
    return hashing.of_text(f"{kind}\0{spec.origin}")[:24]
