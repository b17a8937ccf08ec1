"""Which wheel downloads first: the largest, whatever the index states.

A cold realise is as long as its longest download and extraction (torch: 0.9 GB
in, 11,780 files and 1.8 GB out), so that one must start at once and the rest
fill the slots around it; in lock order torch starts last (8.85 s late on a
loopback index whose pages state no sizes). A file's size comes from, in order:
1. the lock (`lock.file.SIZES_KEY`, which `fdlenv lock` and lock on demand write),
   so a realise from an fdlenv-written lock asks nothing more;
2. the index (PEP 700 `size` in a JSON page) or the file itself, when local
   (`wheelfetch.where_served`, which reads the pages anyway);
3. a HEAD, only for the files neither states, all side by side and bounded
   (`simpleapi.sizes_of`); one that fails leaves the size unknown, never an error;
4. the known-largest rule for what is still unknown: `torch` is the largest
   wheel of every variant (cu128's shipped lock: torch 915 MB, the next,
   nvidia-cudnn-cu12, 707 MB); any other unknown goes after the known ones, in
   lock order.
"""

from __future__ import annotations

from ..index import simpleapi
from ..lock.file import Record

LARGEST = ("torch",)   # projects known to be a variant's largest wheel (rule 4)


def largest_first(records: list[Record], sources: dict[str, tuple[str, int | None]]
                  ) -> tuple[list[Record], dict[str, int], Record | None]:
    """(`records` largest first, sha256 -> size where known, the one known to be the largest or
    None); `sources`: sha256 -> (URL or path, size the index states), from `where_served`."""
    sizes = {r.sha256: n for r in records if (n := r.size if r.size is not None else sources[r.sha256][1])
             is not None}
    # One wheel needs no order; an unsized `torch` is ranked by rule 4, not asked.
    unsized = [r for r in records if r.sha256 not in sizes and r.name not in LARGEST] if len(records) > 1 else []
    asked = simpleapi.sizes_of([sources[r.sha256][0] for r in unsized])
    sizes.update({r.sha256: n for r, n in zip(unsized, asked, strict=True) if n is not None})
    known = max(sizes.values(), default=0)

    def rank(r: Record) -> int:
        if r.sha256 in sizes:
            return sizes[r.sha256]
        return known + 1 if r.name in LARGEST else -1

    ordered = sorted(records, key=lambda r: -rank(r))   # stable: ties and unknowns keep lock order
    first = ordered[0] if len(ordered) > 1 and rank(ordered[0]) >= 0 else None
    return ordered, sizes, first
