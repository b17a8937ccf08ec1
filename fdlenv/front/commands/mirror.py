"""`fdlenv mirror export DIR`: a static mirror of exactly the files the locks name."""

from __future__ import annotations

from ...base.output import emit

import argparse

from ..options import home_option, mirror_option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..options import Args, Subparsers


EPILOG = """examples:
  fdlenv mirror export /srv/fdlenv-mirror                      # every variant of every lock in view
  fdlenv mirror export --libtorch cu128 --libtorch rocm7.1 /srv/fdlenv-mirror
  fdlenv mirror export --lock fleet.conda-lock.yml --platform linux-64 /srv/fdlenv-mirror
  python -m http.server -d /srv/fdlenv-mirror 8080              # or nginx, an object store, file://
  fdlenv join ... --mirror pypi=http://mirror:8080/pypi --mirror pytorch=http://mirror:8080/pytorch

DIR gets a PEP 503 index per index name (`pypi/<project>/`, `pytorch/<variant>/<project>/`,
with sha256 fragments and PEP 658 metadata) and a conda channel per channel
(`conda/<name>/<subdir>/`, repodata.json), and prints the --mirror values that point
at it. Incremental: a file already exported with its sha256 is kept, so exporting an
unchanged lock copies nothing; every file copied is checked against the lock first.
Locks: --lock (repeatable), else every lock the command sees (beside fdl.yml, the
source tree's, the home's on-demand ones, the shipped one; docs/LOCK.md).
"""


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("mirror", help="export the locked files as a static mirror",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_subparsers(dest="what", metavar="WHAT")
    what.required = True
    ex = what.add_parser("export", help="write the files the locks name into DIR, as indexes and channels",
                         description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ex.add_argument("dir", metavar="DIR", help="the mirror's root (made when missing)")
    ex.add_argument("--lock", metavar="FILE", action="append", help="a conda-lock file (repeatable)")
    ex.add_argument("--libtorch", metavar="V", action="append",
                    help="only this variant (repeatable): cpu, cu126, cu128, cu130, rocm7.0, rocm7.1")
    ex.add_argument("--platform", metavar="P", action="append", help="only this platform (repeatable)")
    mirror_option(ex, "where the files are fetched from, as for realise (repeatable)")
    ex.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    home_option(ex)
    ex.set_defaults(func=run)


def run(args: Args) -> int:
    from pathlib import Path

    from ...names import variants
    from ...app.export import export
    from ...lock.paths import split_path
    from ...base.progress import say
    from ...app.settings import resolve

    st = resolve(args.home, args.mirror)
    if args.lock:
        locks = [Path(f).expanduser().absolute() for f in args.lock]
    else:
        view = st.view()
        locks = [f for base in view.near + view.far
                 for f in (base, *(split_path(base, v) for v in variants.VARIANTS)) if f.is_file()]
    wanted = [variants.parse_token(v, allow_auto=False) for v in args.libtorch or []] or None
    out = export(st.home, locks, wanted, args.platform, st.mirrors, Path(args.dir))
    if args.json:
        emit(out)
    else:
        say(f"exported {out['copied']} file(s), {out['bytes'] / 1e6:.1f} MB; kept {out['kept']}")
        print(" ".join(f"--mirror {n}={u}" for n, u in out["mirrors"].items()))
    return 0
