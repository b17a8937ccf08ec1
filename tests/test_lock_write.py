"""fdlenv.lock.lock_envs: real solves on local channels -> conda-lock v1 files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from conda_lock.lockfile import parse_conda_lock_file
from helpers_conda import Pkg, channel_url, make_channel, make_wheel, write_env

from fdlenv.base.errors import Fail
from fdlenv.names.home import Home
from fdlenv.lock import lock_envs
from fdlenv.lock.file import read_variant


def _pkgs():
    return [
        Pkg("libtorch-cpu", "2.10.0", depends=["zlib >=1.2", "__glibc >=2.17"],
            files={"libtorch/lib/libtorch.so": b"cpu"}),
        Pkg("libtorch-cu126", "2.10.0", depends=["zlib", "__cuda >=12.6"],
            files={"libtorch/lib/libtorch.so": b"cu126"}),
        Pkg("zlib", "1.2", files={"lib/libz.so": b"old"}),
        Pkg("zlib", "1.3", files={"lib/libz.so": b"new"}),
        Pkg("cmake", "3.30", noarch="generic", files={"share/cmake.txt": "cmake"}),
    ]


@pytest.fixture
def home(tmp_path) -> Home:
    h = Home(tmp_path / "home")
    make_channel(h.channel, _pkgs())
    return h


def _envs(tmp_path: Path) -> Path:
    envs = tmp_path / "envs"
    write_env(envs, "cpu", ["flodl"], ["flodl::libtorch-cpu 2.10.0", "cmake"])
    write_env(envs, "cu126", ["flodl"], ["libtorch-cu126 >=2.10", "cmake"])
    return envs


def _digests(path: Path) -> tuple[str, str]:
    data = path.read_bytes()
    return hashlib.md5(data).hexdigest(), hashlib.sha256(data).hexdigest()


def test_lock_two_variants_categories_and_real_hashes(tmp_path, home):
    out = tmp_path / "conda-lock.yml"
    assert lock_envs(_envs(tmp_path), out, home=home) == [out]
    lf = parse_conda_lock_file(out)
    by_name = {p.name: p for p in lf.package}
    assert set(by_name) == {"libtorch-cpu", "libtorch-cu126", "zlib", "cmake"}
    assert by_name["zlib"].categories == {"main"}          # both variants need it
    assert by_name["cmake"].categories == {"main"}
    assert by_name["libtorch-cpu"].categories == {"cpu"}
    assert by_name["libtorch-cu126"].categories == {"cu126"}
    assert by_name["zlib"].version == "1.3"                 # highest that satisfies
    assert lf.metadata.platforms == ["linux-64"]
    assert lf.metadata.custom_metadata == {"fdlenv.variants": "cpu cu126"}
    for p in lf.package:
        archive = Path(p.url.removeprefix("file://"))
        assert archive.is_file() and archive.parent.parent == home.channel
        assert (p.hash.md5, p.hash.sha256) == _digests(archive)
    assert by_name["cmake"].url.split("/")[-2] == "noarch"
    assert by_name["libtorch-cpu"].dependencies == {"__glibc": ">=2.17", "zlib": ">=1.2"}


def test_lock_is_byte_stable(tmp_path, home):
    envs = _envs(tmp_path)
    a, b = tmp_path / "a" / "conda-lock.yml", tmp_path / "b" / "conda-lock.yml"
    lock_envs(envs, a, home=home)
    lock_envs(envs, b, home=home)
    first = a.read_bytes()
    assert first == b.read_bytes()
    lock_envs(envs, a, home=home)
    assert a.read_bytes() == first
    assert b"created_at" not in first


def test_one_variant_lock_uses_its_own_category(tmp_path, home):
    out = tmp_path / "conda-lock.yml"
    lock_envs(_envs(tmp_path), out, variants=["12.6"], home=home)
    lf = parse_conda_lock_file(out)
    assert {c for p in lf.package for c in p.categories} == {"cu126"}
    assert lf.metadata.sources == ["envs/cu126.yml"]


def test_virtual_packages_are_declared_not_detected(tmp_path, home):
    envs = tmp_path / "envs"
    # cpu declares no __cuda: a package needing it cannot be solved for cpu,
    # whatever GPU the solving machine has (none here).
    write_env(envs, "cpu", ["flodl"], ["libtorch-cu126"])
    with pytest.raises(Fail) as e:
        lock_envs(envs, tmp_path / "x.yml", home=home)
    assert "__cuda" in str(e.value) and not e.value.transient
    make_channel(home.channel, [Pkg("needs-cu128", "1", depends=["__cuda >=12.8"])])
    write_env(envs, "cu126", ["flodl"], ["needs-cu128"])
    with pytest.raises(Fail, match="__cuda"):
        lock_envs(envs, tmp_path / "x.yml", variants=["cu126"], home=home)
    write_env(envs, "cu128", ["flodl"], ["needs-cu128"])
    lock_envs(envs, tmp_path / "y.yml", variants=["cu128"], home=home)
    assert [p.name for p in parse_conda_lock_file(tmp_path / "y.yml").package] == ["needs-cu128"]
    assert not (tmp_path / "x.yml").exists()


def test_platforms_env_file_over_flag(tmp_path, home):
    make_channel(home.channel, [Pkg("zlib", "1.3", subdir="linux-aarch64", files={"lib/libz.so": b"arm"})])
    envs = tmp_path / "envs"
    write_env(envs, "cpu", ["flodl"], ["zlib"], platforms=None)
    out = tmp_path / "conda-lock.yml"
    lock_envs(envs, out, platforms=["linux-aarch64", "linux-64"], home=home)
    lf = parse_conda_lock_file(out)
    assert sorted(p.platform for p in lf.package) == ["linux-64", "linux-aarch64"]
    assert {p.platform: p.url.split("/")[-2] for p in lf.package} == {
        "linux-64": "linux-64", "linux-aarch64": "linux-aarch64"}
    write_env(envs, "cpu", ["flodl"], ["zlib"], platforms=["linux-aarch64"])
    lock_envs(envs, out, platforms=["linux-64"], home=home)
    assert [p.platform for p in parse_conda_lock_file(out).package] == ["linux-aarch64"]


def test_pip_wheel_entry_hashed_from_the_file(tmp_path, home):
    wheel = make_wheel(tmp_path / "envs" / "wheels", "tiny-thing", "0.3.1")
    envs = tmp_path / "envs"
    write_env(envs, "cpu", ["flodl"], ["zlib", {"pip": ["./wheels/" + wheel.name]}])
    out = tmp_path / "conda-lock.yml"
    lock_envs(envs, out, home=home)
    pip = [p for p in parse_conda_lock_file(out).package if p.manager == "pip"]
    assert len(pip) == 1
    md5, sha = _digests(wheel)
    assert (pip[0].name, pip[0].version, pip[0].url) == ("tiny-thing", "0.3.1", wheel.resolve().as_uri())
    assert (pip[0].hash.md5, pip[0].hash.sha256) == (md5, sha)
    assert pip[0].categories == {"cpu"}


def test_mirror_maps_the_flodl_alias(tmp_path, home):
    other = make_channel(tmp_path / "mirror" / "flodl", [Pkg("zlib", "9.9", files={"lib/z": b"m"})])
    envs = tmp_path / "envs"
    write_env(envs, "cpu", ["flodl"], ["zlib"])
    out = tmp_path / "conda-lock.yml"
    lock_envs(envs, out, mirrors={"flodl": channel_url(other)}, home=home)
    (p,) = parse_conda_lock_file(out).package
    assert p.version == "9.9" and p.url.startswith(channel_url(other) + "/linux-64/")


@pytest.mark.parametrize("body, field", [
    ("channels: []\ndependencies: [zlib]\n", "channels"),
    ("channels: [flodl]\ndependencies: [{pip: ['numpy >>= 2']}]\n", "pip"),
    ("channels: [flodl]\ndependencies: [{pip: ['numpy[extra] ==2']}]\n", "pip"),
    ("pip-index: 'https://x'\ndependencies: [{pip: ['numpy ==2']}]\n", "pip-index"),
    ("channels: [flodl]\ndependencies: [[zlib]]\n", "dependencies"),
    ("channels: [flodl]\ndependencies: ['zlib >>>= 1']\n", "dependencies"),
    (": [\n", "not YAML"),
])
def test_bad_env_files_fail_permanently(tmp_path, home, body, field):
    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / "cpu.yml").write_text(body)
    with pytest.raises(Fail) as e:
        lock_envs(envs, tmp_path / "out.yml", home=home)
    assert field in str(e.value) and e.value.exit_code == 2
    assert not (tmp_path / "out.yml").exists()


def test_unknown_variant_and_empty_envs_dir(tmp_path, home):
    (tmp_path / "envs").mkdir()
    with pytest.raises(Fail, match="holds no env file"):
        lock_envs(tmp_path / "envs", tmp_path / "o.yml", home=home)
    with pytest.raises(Fail, match="unknown variant"):
        lock_envs(tmp_path / "envs", tmp_path / "o.yml", variants=["cu999"], home=home)
    with pytest.raises(Fail, match="no env file"):
        lock_envs(tmp_path / "envs", tmp_path / "o.yml", variants=["cu128"], home=home)


def test_the_local_channel_is_recorded_by_its_url_never_the_bare_alias(tmp_path, home):
    out = tmp_path / "conda-lock.yml"
    lock_envs(_envs(tmp_path), out, home=home)
    channels = [c.url for c in parse_conda_lock_file(out).metadata.channels]
    assert channels == [channel_url(home.channel)] and "flodl" != channels[0]


def test_a_layer_adds_its_conda_specs_to_every_variant_and_check_keeps_it(tmp_path, home):
    from fdlenv.lock import check_locks

    envs = tmp_path / "envs"
    write_env(envs, "cpu", ["flodl"], ["libtorch-cpu 2.10.0"])
    write_env(envs, "cu126", ["flodl"], ["libtorch-cu126 >=2.10"])
    (envs / "toolchain.yml").write_text("channels: [flodl]\ndependencies: [cmake]\n")
    out = tmp_path / "conda-lock.yml"
    lock_envs(envs, out, home=home, layers=["toolchain"])
    lf = parse_conda_lock_file(out)
    assert {p.name: p.categories for p in lf.package}["cmake"] == {"main"}
    assert lf.metadata.custom_metadata["fdlenv.layers"] == "toolchain"
    assert check_locks(envs, out, home=home) == []
    (envs / "toolchain.yml").write_text("channels: [flodl]\ndependencies: [cmake, zlib 1.2.*]\n")
    assert any("zlib" in p for p in check_locks(envs, out, home=home))


def test_an_unknown_layer_is_refused_naming_the_flag(tmp_path, home):
    with pytest.raises(Fail) as e:
        lock_envs(_envs(tmp_path), tmp_path / "l.yml", home=home, layers=["nope"])
    assert "--layer" in str(e.value) and not (tmp_path / "l.yml").exists()


@pytest.mark.slow
def test_lock_as_a_program_exits_0_every_time(tmp_path, home):
    """py-rattler 0.28 may crash at interpreter exit after a successful solve (134/139)."""
    import subprocess
    import sys

    envs = _envs(tmp_path)
    for i in range(5):
        res = subprocess.run([sys.executable, "-m", "fdlenv", "lock", "--envs", str(envs), "--out",
                              str(tmp_path / f"l{i}.yml"), "--home", str(home.root)], capture_output=True, text=True)
        assert res.returncode == 0, (res.returncode, res.stderr[-500:])


def _conda_lock_bytes(solved, out: Path) -> str:
    """The same entries through conda-lock's own models and writer: the oracle of the bytes."""
    from conda_lock.lockfile import write_conda_lock_file
    from conda_lock.lockfile.v1.models import HashModel, LockMeta
    from conda_lock.lockfile.v2prelim.models import LockedDependency, Lockfile

    from fdlenv.lock.write import VARIANTS_KEY, _relative, content_hash
    from fdlenv.lock.file import SIZES_KEY

    platforms = sorted({p for s in solved for p in s.entries})
    by_key: dict = {}
    for s in solved:
        for entries in s.entries.values():
            for e in entries:
                by_key.setdefault(e.key, (e, set()))[1].add(s.variant)
    covering = {p: {s.variant for s in solved if p in s.entries} for p in platforms}
    packages = [LockedDependency(
        name=e.name, version=e.version, manager=e.manager, platform=e.platform, dependencies=dict(e.depends),
        url=e.url, hash=HashModel(md5=e.md5, sha256=e.sha256), build=e.build or None,
        categories={"main"} if len(covering[e.platform]) > 1 and vs == covering[e.platform] else vs)
        for e, vs in by_key.values()]
    channels: list[str] = []
    for s in solved:
        channels += [c for c in s.channel_urls if c not in channels]
    meta = LockMeta(content_hash={p: content_hash(solved, p) for p in platforms}, channels=channels,
                    platforms=platforms, sources=[_relative(s.env.path, out) for s in solved],
                    custom_metadata={VARIANTS_KEY: " ".join(s.variant for s in solved), **({SIZES_KEY: " ".join(
                        f"{e.sha256}={e.size}" for e, _ in sorted(by_key.values(), key=lambda v: v[0].sha256)
                        if e.size is not None)} if any(e.size is not None for e, _ in by_key.values()) else {})})
    oracle = out.with_name("oracle.yml")
    write_conda_lock_file(Lockfile(package=packages, metadata=meta), oracle, metadata_choices=None,
                          include_help_text=False)
    return oracle.read_text()


def test_the_writer_gives_conda_locks_own_bytes_for_conda_and_pip_entries_on_two_platforms(tmp_path, home):
    from fdlenv.lock.envfile import load
    from fdlenv.lock.file import Record
    from fdlenv.lock.write import Solved, render

    envs = _envs(tmp_path)
    lock_envs(envs, tmp_path / "conda-lock.yml", home=home)
    from fdlenv.lock.make import _carried
    solved = _carried(tmp_path / "conda-lock.yml", envs, set())
    wheel = Record("pip", "torch", "2.10.0+cpu", "", "pip+index://pypi/torch/torch-2.10.0+cpu-x.whl", "ab" * 32,
                   None, "linux-aarch64", (("nvidia-x", "==1"),), 915622781)
    native = Record("pip", "nvidia-x", "1", "", "pip+index://pypi/nvidia-x/nvidia_x-1-x.whl", "cd" * 32,
                    None, "linux-aarch64", (), 706758467)   # sizes: the long line conda-lock's writer folds
    sized = {p: [e._replace(size=1000 + i) for i, e in enumerate(es)] for p, es in solved[0].entries.items()}
    solved[0] = Solved(env=load(envs / "cpu.yml"), channel_urls=solved[0].channel_urls,
                       virtual={**solved[0].virtual, "linux-aarch64": []},
                       entries={**sized, "linux-aarch64": [wheel, native]})
    out = tmp_path / "mixed.yml"
    assert render(solved, out) == _conda_lock_bytes(solved, out)
    out.write_text(render(solved, out))
    assert {(r.name, r.size) for r in read_variant(out, "cpu", "linux-aarch64")} == {
        ("torch", 915622781), ("nvidia-x", 706758467)}
    parsed = parse_conda_lock_file(tmp_path / "oracle.yml")
    assert {(p.name, p.platform) for p in parsed.package} >= {("torch", "linux-aarch64"), ("zlib", "linux-64")}
