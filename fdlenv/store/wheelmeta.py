"""A wheel's own METADATA against the lock, before its package-cache entry is published.

The lock was made from what the index said of a wheel (its PEP 658 file, else a
range read of the wheel), not from the wheel itself; only its sha256 ties the
two. An index whose metadata differs from the wheel's (broken or hostile) makes
a lock that names the wrong version or misses a requirement, and the sha256
still matches. So once a wheel is extracted (`store.wheels` and `store.wheelfile`
call `Against` beside `wheelfile.check_record`), in this order:
1. its `*.dist-info/METADATA` (a small member, refused over
   `lazywheel.INFLATE_LIMIT`) is read as headers (`lock.provider.Meta`);
2. Name and Version must be the lock entry's;
3. every Requires-Dist that applies to the target (the lock's own marker
   environment for the entry's platform and its rules for extras:
   `lock.provider.target_environment` and `requirements_of`) that
   names a project the lock holds for this env must be met by the locked
   version, and one naming a held native wheel must be an edge the lock
   records for this entry (`dependencies`). A project the lock does not hold
   is a Python package the closure walks through and is not kept; the lock
   says nothing of it to check against.
A mismatch is permanent (exit 2): one line naming the wheel, the index it came
from (its URL without credentials: `pipindex.shown`) and what differs; the
caller publishes nothing. packaging and the lock's modules are imported here
only, when a wheel is extracted, never on a link-only realise.
"""

from __future__ import annotations

from pathlib import Path

from ..index import pipindex
from ..base.errors import Fail
from ..lock.file import Record

TYPE_CHECKING = False   # packaging and the index's modules only when a wheel is extracted
if TYPE_CHECKING:
    from ..index.provider import Meta


class Against:
    """The check of each extracted wheel of `records` (one env's, one platform) against them."""

    def __init__(self, records: list[Record], mirrors: dict[str, str]):
        self.held = {r.name: r for r in records if r.manager == "pip"}
        self.mirrors = mirrors

    def __call__(self, r: Record, root: Path, sizes: dict[str, int]) -> None:
        """`root`: the extracted entry (wheel members under `site/`); `sizes`: member -> bytes."""
        from ..index.provider import Meta
        from . import wheelfile
        from ..index.lazywheel import INFLATE_LIMIT

        member = next((n for n in sizes if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
        if member is None:
            raise self._refuse(r, "it has no .dist-info/METADATA")
        if sizes[member] > INFLATE_LIMIT:
            raise self._refuse(r, f"its METADATA is {sizes[member]} bytes, over the {INFLATE_LIMIT >> 20} MiB "
                                  "limit for core metadata")
        rel = wheelfile.place(member)
        assert rel is not None   # a top-level dist-info member always lands under site/
        try:
            meta = Meta((root / rel).read_bytes(), r.filename)
            differs = self.differences(r, meta)
        except Fail as e:   # no Name/Version, a malformed requirement: the wheel is not what was locked
            raise self._refuse(r, e.message.removeprefix("wheel index: ")) from None
        if differs:
            raise self._refuse(r, "; ".join(differs))

    def differences(self, r: Record, meta: Meta) -> list[str]:
        """What `meta` (the wheel's own) says that the lock's entry `r` and its env do not."""
        from packaging.version import InvalidVersion, Version

        from ..index.provider import is_native, requirements_of, target_environment

        out = []
        if pipindex.normalize(meta.name) != r.name:
            out.append(f"its METADATA names {meta.name}, the lock {r.name}")
        try:
            same = Version(meta.version) == Version(r.version)
        except InvalidVersion:
            same = False
        if not same:
            out.append(f"its METADATA states version {meta.version}, the lock {r.version}")
        for dep, req in requirements_of(meta, (), target_environment(r.platform)):
            held = self.held.get(dep)
            if held is None:
                continue
            wanted = f"{dep}{req.specifier}" if str(req.specifier) else f"{dep} (any version)"
            if not req.specifier.contains(held.version, prereleases=True):
                out.append(f"it requires {wanted}, the lock holds {dep} {held.version}")
            elif dep not in r.dependencies and is_native(held.filename):
                out.append(f"it requires {wanted}, which the lock does not record as its dependency")
        return out

    def _refuse(self, r: Record, why: str) -> Fail:
        return Fail.permanent(f"wheel {r.filename} from {self.source(r)}: {why}; its own METADATA differs from "
                              "what the index said of it when it was locked (broken or hostile metadata): "
                              "nothing was realised; fix the index, then re-lock")

    def source(self, r: Record) -> str:
        """The index an entry came from, as a message names it: its name and URL, no credentials."""
        if not pipindex.is_entry_url(r.url):
            return pipindex.shown(r.url)
        index = pipindex.parse_entry_url(r.url)[0]
        try:
            return f"the index {index} ({pipindex.shown(pipindex.base_url(index, self.mirrors))})"
        except Fail:
            return f"the index {index}"
