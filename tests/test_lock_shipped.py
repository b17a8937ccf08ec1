"""The shipped ./conda-lock.yml (when present): structure and the one-build invariant.

The file can only be regenerated where conda channels are reachable
(docs/LOCK.md), so the test skips when the repository ships none.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from fdlenv.variants import VARIANTS

SHIPPED = Path(__file__).resolve().parent.parent / "conda-lock.yml"

pytestmark = pytest.mark.skipif(not SHIPPED.is_file(), reason="no conda-lock.yml shipped (see docs/LOCK.md)")


def test_shipped_lock_parses_with_conda_lock():
    from conda_lock.lockfile import parse_conda_lock_file

    lf = parse_conda_lock_file(SHIPPED)
    assert lf.package and lf.metadata.platforms


def test_shipped_lock_structure_and_invariant():
    doc = yaml.safe_load(SHIPPED.read_text())
    assert doc["version"] == 1
    assert set(doc["metadata"]["content_hash"]) == set(doc["metadata"]["platforms"])
    builds: dict[tuple[str, str, str], set[tuple[str, str]]] = defaultdict(set)
    categories = set()
    for e in doc["package"]:
        assert e["manager"] in ("conda", "pip")
        assert e["platform"] in doc["metadata"]["platforms"]
        assert e["hash"].get("sha256"), e["name"]
        if e["manager"] == "conda":
            assert e["hash"].get("md5"), e["name"]
        categories.add(e.get("category", "main"))
        builds[(e["manager"], e["name"], e["platform"])].add((e["url"], str(e["hash"]["sha256"])))
    assert {k: v for k, v in builds.items() if len(v) > 1} == {}
    assert categories <= {"main", *VARIANTS}
    for variant in categories - {"main"}:
        names = {e["name"] for e in doc["package"] if e.get("category") in ("main", variant)}
        assert VARIANTS[variant].package in names
