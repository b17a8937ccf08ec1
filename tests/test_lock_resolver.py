"""The lock's resolver picks what pip and uv pick from the same index, for the 3.12 target.

One test per case where it did not (issue 35): pre-releases over finals,
Requires-Python only in the metadata, a conflict that needs backtracking
(and one every version shares, named without the walk; the walk's bounds),
a yanked release under `==`, the host's implementation_version in markers,
metadata that names another file, a `#sha256=` that is not a hash, and a
range read's METADATA stated as 1 GiB. Each runs against a real loopback
index (tests/helpers_simple_index.py); tests/test_lock_vs_uv.py compares
with uv itself on generated indexes.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile

import pytest
from helpers_simple_index import Release, serve
from helpers_cli import fdlenv

from fdlenv.base.errors import Fail
from fdlenv.lock.closure import NoWheel, resolve_versions


def lock(tmp_path, projects, *requirements) -> dict[str, str]:
    with serve(tmp_path, projects) as index:
        return {n: m.version for n, (_, m) in resolve_versions(list(requirements), index.simple, "linux-64").items()}


def test_a_final_release_is_picked_over_a_newer_pre_release(tmp_path):
    assert lock(tmp_path, {"c": [Release("1.0"), Release("1.1rc1")]}, "c") == {"c": "1.0"}


def test_a_pre_release_is_picked_when_the_specifier_names_one_or_nothing_else_satisfies(tmp_path):
    projects = {"c": [Release("1.0"), Release("1.1rc1")], "d": [Release("1.0"), Release("2.0b1")]}
    assert lock(tmp_path, projects, "c>=1.1rc1", "d>1.5") == {"c": "1.1rc1", "d": "2.0b1"}


def test_requires_python_stated_only_in_the_metadata_keeps_a_release_off_the_312_target(tmp_path):
    projects = {"c": [Release("1.0"), Release("2.0", python=">=3.13", on_page=False)]}
    assert lock(tmp_path, projects, "c") == {"c": "1.0"}


def test_a_conflict_backtracks_to_the_older_release_that_fits(tmp_path):
    projects = {"a": [Release("1.0", ("c",)), Release("2.0", ("c<2",))], "b": [Release("1.0", ("c>=2",))],
                "c": [Release("1.0"), Release("2.0")]}
    assert lock(tmp_path, projects, "a", "b") == {"a": "1.0", "b": "1.0", "c": "2.0"}


def test_requirements_that_clash_fail_permanently_naming_both_sides(tmp_path):
    projects = {"a": [Release("1.0", ("c<2",))], "b": [Release("1.0", ("c>=2",))],
                "c": [Release("1.0"), Release("2.0")]}
    with pytest.raises(Fail) as e:
        lock(tmp_path, projects, "a", "b")
    assert not e.value.transient and not isinstance(e.value, NoWheel)
    assert "c<2 (from a 1.0)" in e.value.message and "c>=2 (from b 1.0)" in e.value.message


def test_a_yanked_release_is_picked_under_an_exact_pin_and_never_otherwise(tmp_path):
    projects = {"c": [Release("0.9"), Release("1.0", yanked=True)]}
    assert lock(tmp_path / "pin", projects, "c==1.0") == {"c": "1.0"}
    assert lock(tmp_path / "range", projects, "c>=0.9") == {"c": "0.9"}


def test_markers_see_the_targets_implementation_version_not_this_hosts(tmp_path):
    projects = {"a": [Release("1.0", ('new; implementation_version >= "3.12"',
                                      'old; implementation_version < "3.12"',
                                      'full; python_full_version >= "3.12"'))],
                "new": [Release("1.0")], "old": [Release("1.0")], "full": [Release("1.0")]}
    assert lock(tmp_path, projects, "a") == {"a": "1.0", "new": "1.0", "full": "1.0"}


def test_metadata_naming_another_version_than_its_file_is_refused(tmp_path):
    lying = b"Metadata-Version: 2.1\nName: torch\nVersion: 9.9.9\n"
    with pytest.raises(Fail) as e:
        lock(tmp_path, {"torch": [Release("2.10.0", metadata=lying)]}, "torch")
    assert not e.value.transient and "9.9.9" in e.value.message and "2.10.0" in e.value.message


def test_metadata_naming_another_project_than_its_file_is_refused(tmp_path):
    lying = b"Metadata-Version: 2.1\nName: other\nVersion: 1.0\n"
    with pytest.raises(Fail) as e:
        lock(tmp_path, {"c": [Release("1.0", metadata=lying)]}, "c")
    assert not e.value.transient and "other 1.0" in e.value.message


def test_a_sha256_fragment_not_64_hex_digits_is_skipped_with_a_note(tmp_path, capsys):
    projects = {"c": [Release("1.0"), Release("2.0", sha256="../../etc/passwd")]}
    assert lock(tmp_path, projects, "c") == {"c": "1.0"}
    err = capsys.readouterr().err
    assert "skipped c-2.0-py3-none-any.whl" in err and "not 64 hex digits" in err


@pytest.mark.slow   # writing the 1 GiB member takes seconds
def test_a_metadata_member_stated_as_1_gib_is_refused_transient_and_never_inflated(tmp_path):
    """A range read (no PEP 658 file) of a wheel whose METADATA member inflates to 1 GiB of zeros:
    refused before it is read, in a child whose peak RSS stays far below the member's size."""
    wheel = tmp_path / "c-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("c-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    # Append the bomb as a real deflated member: 1 GiB of zeros, about 1 MiB on disk.
    chunk = bytes(1 << 20)
    with zipfile.ZipFile(wheel, "a") as z:
        info = zipfile.ZipInfo("c-1.0.dist-info/METADATA", (1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as out:
            for _ in range(1024):
                out.write(chunk)
    child = textwrap.dedent(f"""
        import sys
        from fdlenv.index import simpleapi
        from fdlenv.base.errors import Fail
        f = simpleapi.IndexFile({wheel.name!r}, {wheel.as_uri()!r}, None, None, None, False, None)
        try:
            simpleapi.core_metadata(f)
        except Fail as e:
            print("transient" if e.transient else "permanent", e.message)
        # VmHWM: this process's own peak (ru_maxrss would start at the peak of the pytest worker
        # that made it by vfork).
        print("rss_kib", [ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("VmHWM:")][0])
    """)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, rss = out.stdout.splitlines()
    assert first.startswith("transient") and "over fdlenv's 4 MiB limit" in first, out.stdout
    assert int(rss.split()[1]) < 200 * 1024, out.stdout      # KiB: the member is 1 GiB inflated


def test_a_requirement_with_a_20000_digit_version_is_one_permanent_error_naming_the_field(tmp_path):
    """packaging turns the version into an int past Python's 4300-digit limit: it was a
    "bug in fdlenv (ValueError ...)", exit 1. Bounded before it is parsed: exit 2, the field named."""
    projects = {"a": [Release("1.0", ("c==1." + "9" * 20_000,))], "c": [Release("1.0")]}
    with pytest.raises(Fail) as e:
        lock(tmp_path, projects, "a")
    assert not e.value.transient and "Requires-Dist" in e.value.message and "a-1.0" in e.value.message
    assert "at most 1024 characters" in e.value.message and len(e.value.message) < 600


@pytest.mark.parametrize("name, why", [
    ("other-1.0-py3-none-any.whl", "a wheel of another project"),
    ("c-1." + "1" * 5000 + "-py3-none-any.whl", "a file name of more than 255 bytes"),
    ("c-1." + "1" * 100 + "-py3-none-any.whl", "version is out of bounds"),
    ("c-1.0-py3-none-any.whl%00", "control character"),
    ("..", "climbs"),
], ids=["another-project", "long-name", "long-version", "nul", "dotdot"])
def test_a_page_listing_a_name_that_is_not_the_projects_wheel_is_refused(tmp_path, name, why):
    from helpers_simple_index import lay_out
    from helpers_pytorch_index import Index

    root = lay_out(tmp_path, {"c": [Release("1.0")]})
    page = root / "simple" / "c" / "index.html"
    page.write_text(page.read_text().replace("</body>", f'<a href="../../files/{name}">{name}</a></body>'))
    with Index(root) as index, pytest.raises(Fail) as e:
        resolve_versions(["c"], index.simple, "linux-64")
    assert not e.value.transient and why in e.value.message and "the page of 'c'" in e.value.message


def test_a_page_listing_more_files_than_the_cap_is_refused_before_it_is_parsed(tmp_path):
    from helpers_simple_index import lay_out
    from helpers_pytorch_index import Index
    from fdlenv.index.checked import MAX_FILES

    root = lay_out(tmp_path, {"c": [Release("1.0")]})
    links = "".join(f'<a href="../../files/c-1.0.{i}-py3-none-any.whl">c-1.0.{i}-py3-none-any.whl</a>\n'
                    for i in range(2 * MAX_FILES))
    (root / "simple" / "c" / "index.html").write_text(f"<html><body>{links}</body></html>")
    with Index(root) as index, pytest.raises(Fail) as e:
        resolve_versions(["c"], index.simple, "linux-64")
    assert not e.value.transient and f"more than the {MAX_FILES} fdlenv reads" in e.value.message
def shared_conflict(versions: int, loose: bool = False) -> dict[str, list[Release]]:
    """12 roots of `versions` versions each; every version of p0 needs zz==1 and every version
    of p11 zz==2 (issue 48's shape); `loose`: the oldest p0 needs nothing, so no shared fact."""
    def needs(i: int, v: int) -> tuple[str, ...]:
        return ("zz==1",) if i == 0 and not (loose and v == 0) else ("zz==2",) if i == 11 else ()
    projects = {f"p{i}": [Release(f"1.{v}", needs(i, v)) for v in range(versions)] for i in range(12)}
    return dict(projects, zz=[Release("1"), Release("2")])


def lock_cli(tmp_path, projects, roots, env=None):
    """`fdlenv lock` of an env file requiring `roots` from a loopback index of `projects`."""
    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / "cpu.yml").write_text("platforms: [linux-64]\npip-index: pytorch/simple\ndependencies:\n  - pip:\n"
                                  + "".join(f"      - {r}\n" for r in roots))
    with serve(tmp_path / "index", projects) as index:
        res = fdlenv("lock", "--libtorch", "cpu", "--envs", str(envs), "--platform", "linux-64", "-q",
                     "--out", str(tmp_path / "out.yml"), "--mirror", f"pytorch={index.simple.removesuffix('/simple')}",
                     "--home", str(tmp_path / "home"), env=env, timeout=120)
    assert not (tmp_path / "out.yml").exists()
    return res


def test_a_conflict_every_version_shares_is_named_at_the_first_backtrack_not_after_walking_the_versions(tmp_path):
    # 40 rounds cannot walk 12 x 30 versions: only a conflict found without the walk fits in them.
    res = lock_cli(tmp_path, shared_conflict(30), [f"p{i}" for i in range(12)], {"FDLENV_RESOLVE_ROUNDS": "40"})
    assert res.returncode == 2, res.stderr
    [line] = res.stderr.splitlines()
    assert line.startswith("error: wheel index http://127.0.0.1:") and line.endswith(
        "/simple: no versions satisfy every requirement together: all versions of p0 depend on zz==1 and all "
        "versions of p11 depend on zz==2, and no version of zz satisfies both"), line


def test_the_env_files_own_requirement_is_one_side_of_a_shared_conflict(tmp_path, monkeypatch):
    projects = {"a": [Release(f"1.{v}", ("c<2",)) for v in range(20)], "c": [Release("1.0"), Release("2.0")]}
    monkeypatch.setenv("FDLENV_RESOLVE_ROUNDS", "10")
    with pytest.raises(Fail) as e:
        lock(tmp_path, projects, "c>=2", "a")
    assert not e.value.transient and "the env file requires c>=2 and all versions of a depend on c<2" in e.value.message


def test_a_walk_no_shared_fact_shortens_ends_at_the_round_limit_naming_its_setting(tmp_path):
    res = lock_cli(tmp_path, shared_conflict(8, loose=True), [f"p{i}" for i in range(12)],
                   {"FDLENV_RESOLVE_ROUNDS": "50"})
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "within 50 resolution rounds (FDLENV_RESOLVE_ROUNDS widens it)" in res.stderr


def test_a_walk_ends_at_the_resolution_deadline_naming_its_setting(tmp_path):
    res = lock_cli(tmp_path, shared_conflict(8, loose=True), [f"p{i}" for i in range(12)],
                   {"FDLENV_RESOLVE_DEADLINE": "0.000001"})
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "within 1e-06 s" in res.stderr and "FDLENV_RESOLVE_DEADLINE widens it" in res.stderr


@pytest.mark.parametrize("var, value", [("FDLENV_RESOLVE_ROUNDS", "many"), ("FDLENV_RESOLVE_ROUNDS", "0"),
                                        ("FDLENV_RESOLVE_DEADLINE", "-1"), ("FDLENV_RESOLVE_DEADLINE", "soon")])
def test_a_resolution_bound_that_is_not_a_positive_number_is_one_error_line_naming_it(tmp_path, var, value):
    res = lock_cli(tmp_path, {"c": [Release("1.0")]}, ["c"], {var: value})
    assert res.returncode == 2 and res.stderr.startswith(f"error: {var}={value!r}: accepted: "), res.stderr
    assert res.stderr.count("\n") == 1
