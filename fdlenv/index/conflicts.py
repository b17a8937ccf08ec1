"""Conflicts every version shares, found without walking the versions; and the walk's bounds.

Why: resolvelib learns nothing across versions. Where every version of a root `p0` needs
`zz==1` and every version of a root `p11` needs `zz==2`, it tries `p11`'s versions one by one,
backjumps into `p10`, and so on: 12 projects of 300 versions took minutes before the round
limit ended it, where uv (PubGrub) says in seconds "all versions of p0 depend on zz==1 and all
versions of p11 depend on zz==2". `Learner` is the resolver's reporter and, at each conflict
resolvelib reports, in this order:
1. groups the causes by the project they clash on (`X`), and keeps the parents that are roots
   (a root must be installed, in one of the versions its own requirements admit);
2. for each such root `P` (once per `P`, `X`), reads the metadata of every candidate version of
   `P` (at most `MOST` of them) side by side (the same selection `provider.candidates` makes, Requires-Python checked)
   and, where every one of them requires `X` on the target, learns the set of `X`'s versions
   some version of `P` admits (`X`'s versions from its page, yanked and pre-releases included:
   a superset, so what is proved from it holds);
3. the env file's own requirement on `X` is one more such set; where two of them (or all of
   them) share no version of `X`, no choice of versions can work: one permanent line naming
   the projects and what their versions need, as uv does, instead of the walk.
A fact that cannot be learnt (a version without the requirement, metadata that cannot be read)
is no fact: the walk goes on as before, bounded by its round limit and its deadline (`base.deadlines`:
FDLENV_RESOLVE_ROUNDS and FDLENV_RESOLVE_DEADLINE, read when a lock starts; `starting_round`
ends the walk at the deadline).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence

from resolvelib import BaseReporter

from ..base.deadlines import RESOLVE_VAR, resolve_deadline
from ..base.errors import Fail
from .provider import Cand, Index, Req, candidates, requirements_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from packaging.version import Version

    from .provider import Info

SHOWN = 4   # versions named where the versions of a project admit different sets
MOST = 2000   # candidate versions of one root whose metadata a fact may read (uv reads them too)


class Learner(BaseReporter[Req, Cand, str]):
    """resolvelib's reporter: the deadline at each round, shared conflicts at each backtrack."""

    def __init__(self, index: Index, env: dict[str, str], roots: Sequence[Req], what: str):
        self.index, self.env, self.what = index, env, what
        self.roots: dict[str, list[Req]] = {}
        for r in roots:
            self.roots.setdefault(r.name, []).append(r)
        self.seconds = resolve_deadline()
        self.ends = time.monotonic() + self.seconds
        self.facts: dict[tuple[str, str], tuple[frozenset[Version], list[str], int] | None] = {}
        self.parties: dict[str, set[str]] = {}

    def starting_round(self, index: int) -> None:
        if time.monotonic() > self.ends:
            raise Fail.permanent(f"wheel index {self.index.base}: no versions of {self.what} found together within "
                                 f"{self.seconds:g} s ({index} resolution rounds; {RESOLVE_VAR} widens it)")

    def resolving_conflicts(self, causes: Collection[Info]) -> None:
        for x in sorted({c.requirement.name for c in causes}):
            parties = self.parties.setdefault(x, set())
            new = {c.parent.name for c in causes
                   if c.requirement.name == x and c.parent is not None and c.parent.name in self.roots} - parties
            if new:
                parties |= new
                self._check(x, sorted(parties))

    def _check(self, x: str, parties: list[str]) -> None:
        """Fail where the roots `parties` (and the env file's own requirement) admit no common version of `x`."""
        try:
            wheels = self.index.wheels(x, x in self.roots)
        except Fail:
            return
        if wheels is None:
            return                  # no wheel for the target at all: the empty candidate satisfies everyone
        every = frozenset(v for v, _ in wheels)
        sets: list[tuple[str, frozenset[Version]]] = []
        walked = True   # every party has one version: the walk's own message names them, with it
        if x in self.roots:
            specs = [r.specifier for r in self.roots[x]]
            said = ",".join(str(s) for s in specs if str(s))
            sets.append((f"the env file requires {x}{said or ' (any version)'}",
                         frozenset(v for v in every if all(s.contains(v, prereleases=True) for s in specs))))
        for p in parties:
            fact = self._learn(p, x, every)
            if fact is not None:
                admitted, specs_said, tried = fact
                walked = walked and tried == 1
                need = (f"{x}{specs_said[0]}" if len(specs_said) == 1 else
                        f"{x} in ({', '.join(str(v) for v in sorted(admitted, reverse=True)[:SHOWN])}"
                        f"{', ...' if len(admitted) > SHOWN else ''})" if admitted else f"a {x} the index lacks")
                sets.append((f"all versions of {p}{self._asked(p)} depend on {need}", admitted))
        if walked:
            return
        for i, (a, sa) in enumerate(sets):
            for b, sb in sets[i + 1:]:
                if not sa & sb:
                    self._fail(x, [a, b])
        if len(sets) > 2 and not frozenset.intersection(*(s for _, s in sets)):
            self._fail(x, [s for s, _ in sets])

    def _asked(self, p: str) -> str:
        return ",".join(str(r.specifier) for r in self.roots[p] if str(r.specifier))

    def _fail(self, x: str, said: list[str]) -> None:
        raise Fail.permanent(f"wheel index {self.index.base}: no versions satisfy every requirement together: "
                             + " and ".join(said) + f", and no version of {x} satisfies "
                             + ("both" if len(said) == 2 else "all of them"))

    def _learn(self, p: str, x: str, every: frozenset[Version]) -> tuple[frozenset[Version], list[str], int] | None:
        """(the versions of `x` some candidate of root `p` admits, the distinct specifiers they state,
        how many candidates), where every candidate of `p` requires `x`; else None. Learnt once per (`p`, `x`)."""
        if (p, x) in self.facts:
            return self.facts[p, x]
        self.facts[p, x] = None
        reqs = self.roots[p]
        extras = frozenset(e for r in reqs for e in r.extras)
        try:
            wheels = self.index.wheels(p, True) or []
            picked = candidates(wheels, reqs, set())
            if len(picked) > MOST:
                return None
            metas = [self.index.meta(f) for _, f in picked]   # all asked at once: fetched side by side
            admitted: set[Version] = set()
            stated: list[str] = []
            tried = 0
            for (_, f), meta in zip(picked, metas, strict=True):
                if not self.index.python_ok(f):
                    continue
                tried += 1
                specs = [req.specifier for dep, req in requirements_of(meta.result(), extras, self.env) if dep == x]
                if not specs:
                    return None
                admitted |= {v for v in every if all(s.contains(v, prereleases=True) for s in specs)}
                said = ",".join(str(s) for s in specs)
                if said not in stated:
                    stated.append(said)
        except (Fail, RuntimeError, ValueError):   # the walk reports it where it needs that version
            return None
        if not tried:
            return None
        self.facts[p, x] = (frozenset(admitted), stated, tried)
        return self.facts[p, x]
