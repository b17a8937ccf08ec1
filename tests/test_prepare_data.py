"""Prepare steps 2 and 3 (fdlenv.app.datasets): the dataset root, sshfs, /proc/mounts, node-local dirs.

The reference's prepare tests (anchor-join §7.2) for these steps, plus the
sshfs invocation through a fake `sshfs` on PATH that records its argv and
adds its mount to a fake /proc/mounts.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from fdlenv.app import datasets as data
from fdlenv.app.datasets import Mount, SshfsSource, dataset_root, node_local_dirs, parse_data_source, sshfs_argv
from fdlenv.base.errors import Fail
from helpers_user import unprivileged, world_dir

FAKE_SSHFS = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_SSHFS_LOG"
case "$FAKE_SSHFS_MODE" in
  fail) echo "read: Connection reset by peer" >&2; exit 1 ;;
  nomount) exit 0 ;;
esac
# Like the ssh child a real sshfs leaves running: it keeps our stderr open.
sleep 5 &
echo "$1 $2 fuse.sshfs ro,nosuid,nodev 0 0" >> "$FAKE_SSHFS_MOUNTS"
exit 0
"""


@pytest.fixture
def sshfs(tmp_path, monkeypatch):
    """A fake sshfs on PATH; returns (argv log, mounts file)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "sshfs"
    exe.write_text(FAKE_SSHFS)
    exe.chmod(0o755)
    log, mounts = tmp_path / "sshfs.argv", tmp_path / "mounts"
    mounts.write_text("proc /proc proc rw 0 0\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSHFS_LOG", str(log))
    monkeypatch.setenv("FAKE_SSHFS_MOUNTS", str(mounts))
    return log, mounts


def fail_of(fn, *args, **kw) -> Fail:
    with pytest.raises(Fail) as e:
        fn(*args, **kw)
    return e.value


# ------------------------------------------------------------------ grammar

@pytest.mark.parametrize("spec,remote,port", [
    ("sshfs://flodl@exa:2222/flodl/data", "flodl@exa:/flodl/data", 2222),
    ("sshfs://exa/flodl/data", "exa:/flodl/data", None),
    ("sshfs://flodl@exa:/flodl/data", "flodl@exa:/flodl/data", None),      # scp spelling
    ("sshfs://exa:2222:/flodl/data", "exa:/flodl/data", 2222),              # port + scp colon
    ("  sshfs://exa/d/e  ", "exa:/d/e", None),
])
def test_the_sshfs_scheme_reaches_the_shared_grammar(spec, remote, port):
    assert parse_data_source(spec) == SshfsSource(remote, port)


@pytest.mark.parametrize("spec,why", [
    ("smb://nas/share", "not supported"),
    ("sshfs://exa", "names no path"),
    ("sshfs://exa:banana/data", "'banana'"),
    ("sshfs://:/flodl/data", "empty host"),
    ("sshfs://exa:/", "root is not a source root"),
    ("sshfs://@exa/flodl/data", "empty user"),
    ("sshfs://exa:70000/flodl/data", "'70000'"),
])
def test_a_source_spec_rejects_every_broken_shape_permanently(spec, why):
    f = fail_of(parse_data_source, spec)
    assert not f.transient and f.message.startswith("data_source:") and why in f.message


def test_a_bare_path_names_the_field_it_belongs_in():
    f = fail_of(parse_data_source, "/flodl/data")
    assert not f.transient and "data_path:" in f.message and "no scheme" in f.message


def test_sshfs_argv_puts_user_options_before_the_defaults():
    argv = sshfs_argv(parse_data_source("sshfs://flodl@exa:2222/flodl/data"), Path("/mnt/d"),
                      ["Compression=yes", "StrictHostKeyChecking=accept-new"], "/k/id_ed25519")
    assert argv[:3] == ["sshfs", "flodl@exa:/flodl/data", "/mnt/d"]
    opts = [argv[i + 1] for i in range(3, len(argv), 2)]
    assert all(argv[i] == "-o" for i in range(3, len(argv), 2))
    assert opts == ["Compression=yes", "StrictHostKeyChecking=accept-new", "IdentityFile=/k/id_ed25519",
                    "port=2222", "ro", "reconnect", "ServerAliveInterval=15", "ServerAliveCountMax=3",
                    "BatchMode=yes"]


def test_sshfs_argv_without_an_ssh_block_still_carries_the_defaults():
    argv = sshfs_argv(parse_data_source("sshfs://exa/d"), Path("/mnt/d"), [], None)
    assert argv == ["sshfs", "exa:/d", "/mnt/d", "-o", "ro", "-o", "reconnect", "-o", "ServerAliveInterval=15",
                    "-o", "ServerAliveCountMax=3", "-o", "BatchMode=yes"]


# ------------------------------------------------------------------ /proc/mounts

def test_proc_mounts_parsing_unescapes_and_keeps_the_order(tmp_path):
    f = tmp_path / "mounts"
    f.write_text("sysfs /sys sysfs rw 0 0\n"
                 "nas:/a\\040b /mnt/with\\040space fuse.sshfs ro 0 0\n"
                 "garbage\n"
                 "tmpfs /mnt/with\\040space tmpfs rw 0 0\n")
    ms = data.read_mounts(f)
    assert ms[1] == Mount("nas:/a b", "/mnt/with space", "fuse.sshfs")
    assert len(ms) == 3
    assert data.mounted_at(ms, Path("/mnt/with space")).fstype == "tmpfs"   # stacked: the last wins
    assert data.mounted_at(ms, Path("/mnt")) is None
    assert data.read_mounts(tmp_path / "absent") == []


def test_the_filesystem_type_is_the_longest_mountpoint_prefix():
    ms = [Mount("/dev/sda1", "/", "ext4"), Mount("tmpfs", "/tmp", "tmpfs"), Mount("x", "/tmpx", "xfs"),
          Mount("ramfs", "/tmp/r", "ramfs")]
    assert data._fs_type(Path("/tmp/a/b"), ms) == "tmpfs"
    assert data._fs_type(Path("/tmpx/a"), ms) == "xfs"          # a name prefix is not a path prefix
    assert data._fs_type(Path("/tmp/r"), ms) == "ramfs"
    assert data._fs_type(Path("/srv"), ms) == "ext4"


# ------------------------------------------------------------------ step 2

def test_no_data_fields_prepares_nothing(tmp_path):
    notes = []
    assert dataset_root(None, None, notes, proc_mounts=tmp_path / "m") is None
    assert dataset_root("", "", notes) is None
    assert notes == []


def test_a_relative_declared_path_is_shipped_absolute(tmp_path):
    (tmp_path / "corpus").mkdir()
    root = dataset_root("./x/../corpus", None, [], cwd=tmp_path)
    assert root == tmp_path / "corpus" and root.is_absolute()


def test_a_declared_path_is_verified_and_returned_without_resolving_symlinks(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    notes = []
    assert dataset_root(str(tmp_path / "link"), None, notes) == tmp_path / "link"
    assert notes == []


def test_a_declared_path_that_is_not_there_is_permanent(tmp_path):
    f = fail_of(dataset_root, str(tmp_path / "nope"), None, [])
    assert not f.transient and "data_path" in f.message and "data_source:" in f.message
    (tmp_path / "file").write_text("x")
    assert not fail_of(dataset_root, str(tmp_path / "file"), None, []).transient


def test_a_readable_source_root_needs_no_write_permission(tmp_path):
    root = tmp_path / "ro"
    root.mkdir()
    (root / "shard-0").write_text("x")
    root.chmod(0o555)
    try:
        assert dataset_root(str(root), None, []) == root
    finally:
        root.chmod(0o755)


def test_a_root_that_cannot_be_listed_is_permanent():
    # as an unprivileged user (root lists any directory): `nobody` when the suite runs as root
    root = world_dir() / "closed"
    root.mkdir()
    root.chmod(0o311)
    try:
        f = fail_of(unprivileged, dataset_root, str(root), None, [])
        assert not f.transient and "cannot be listed" in f.message
    finally:
        root.chmod(0o755)
        shutil.rmtree(root.parent)


def test_a_data_source_is_mounted_read_only_with_the_ssh_block(tmp_path, sshfs):
    log, mounts = sshfs
    notes = []
    t0 = time.monotonic()
    root = dataset_root(str(tmp_path / "mnt"), "sshfs://flodl@nas:2222/srv/data", notes,
                        ssh_options=["Compression=yes"], identity="/keys/id", proc_mounts=mounts)
    assert time.monotonic() - t0 < 4, "waited for the daemon's stderr instead of sshfs's exit"
    assert root == tmp_path / "mnt" and root.is_dir()
    argv = log.read_text().splitlines()
    assert argv[:2] == ["flodl@nas:/srv/data", str(tmp_path / "mnt")]
    assert argv[2:] == ["-o", "Compression=yes", "-o", "IdentityFile=/keys/id", "-o", "port=2222", "-o", "ro",
                        "-o", "reconnect", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3",
                        "-o", "BatchMode=yes"]
    assert notes == [f"mounted flodl@nas:/srv/data read-only at {tmp_path / 'mnt'}"]


def test_a_data_source_without_an_ssh_block_carries_only_the_defaults(tmp_path, sshfs):
    log, mounts = sshfs
    dataset_root(str(tmp_path / "mnt"), "sshfs://nas/srv/data", [], proc_mounts=mounts)
    assert log.read_text().splitlines() == ["nas:/srv/data", str(tmp_path / "mnt"), "-o", "ro", "-o", "reconnect",
                                            "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3",
                                            "-o", "BatchMode=yes"]


def test_the_mountpoint_defaults_to_flodl_data(tmp_path, sshfs, monkeypatch):
    assert data.DEFAULT_MOUNTPOINT == "/flodl/data"
    monkeypatch.setattr(data, "DEFAULT_MOUNTPOINT", str(tmp_path / "flodl" / "data"))
    log, mounts = sshfs
    assert dataset_root(None, "sshfs://nas/srv", [], proc_mounts=mounts) == tmp_path / "flodl" / "data"
    assert log.read_text().splitlines()[1] == str(tmp_path / "flodl" / "data")


def test_an_existing_mount_of_the_same_source_is_reused(tmp_path, sshfs):
    log, mounts = sshfs
    mp = tmp_path / "mnt"
    mp.mkdir()
    mounts.write_text(f"nas:/srv/data {mp} fuse.sshfs ro 0 0\n")
    notes = []
    assert dataset_root(str(mp), "sshfs://nas/srv/data", notes, proc_mounts=mounts) == mp
    assert not log.exists()                                   # sshfs never ran
    assert notes == [f"source root {mp} already mounted from nas:/srv/data (fuse.sshfs)"]


def test_a_mount_from_another_source_is_left_alone_with_a_note(tmp_path, sshfs):
    log, mounts = sshfs
    mp = tmp_path / "mnt"
    mp.mkdir()
    mounts.write_text(f"other:/x {mp} fuse.sshfs ro 0 0\n")
    notes = []
    assert dataset_root(str(mp), "sshfs://nas/srv/data", notes, proc_mounts=mounts) == mp
    assert not log.exists()
    assert "mounted from other:/x, not nas:/srv/data" in notes[0] and f"fusermount -u {mp}" in notes[0]


@pytest.mark.parametrize("top,same", [("nas:/srv/data", True), ("other:/x", False)])
def test_stacked_mounts_are_judged_by_the_top_one(tmp_path, sshfs, top, same):
    log, mounts = sshfs
    mp = tmp_path / "mnt"
    mp.mkdir()
    below = "other:/x" if same else "nas:/srv/data"
    mounts.write_text(f"{below} {mp} fuse.sshfs ro 0 0\n{top} {mp} fuse.sshfs ro 0 0\n")
    notes = []
    dataset_root(str(mp), "sshfs://nas/srv/data", notes, proc_mounts=mounts)
    assert ("already mounted" in notes[0]) is same and not log.exists()


def test_the_mounts_table_is_matched_on_the_canonical_mountpoint(tmp_path, sshfs):
    log, mounts = sshfs
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    mounts.write_text(f"nas:/srv {tmp_path / 'real'} fuse.sshfs ro 0 0\n")
    notes = []
    assert dataset_root(str(tmp_path / "alias"), "sshfs://nas/srv", notes, proc_mounts=mounts) == tmp_path / "alias"
    assert "already mounted" in notes[0] and not log.exists()


def test_a_failed_sshfs_is_transient_and_quotes_its_stderr(tmp_path, sshfs, monkeypatch):
    monkeypatch.setenv("FAKE_SSHFS_MODE", "fail")
    f = fail_of(dataset_root, str(tmp_path / "mnt"), "sshfs://nas/srv", [], proc_mounts=sshfs[1])
    assert f.transient and "Connection reset by peer" in f.message and "exit 1" in f.message


def test_sshfs_exiting_zero_without_a_mount_is_transient(tmp_path, sshfs, monkeypatch):
    monkeypatch.setenv("FAKE_SSHFS_MODE", "nomount")
    f = fail_of(dataset_root, str(tmp_path / "mnt"), "sshfs://nas/srv", [], proc_mounts=sshfs[1])
    assert f.transient and "not mounted" in f.message


def test_a_missing_sshfs_is_permanent_and_offers_a_bare_data_path(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    f = fail_of(dataset_root, str(tmp_path / "mnt"), "sshfs://nas/srv", [], proc_mounts=tmp_path / "m")
    assert not f.transient and "sshfs is not installed" in f.message and "data_path" in f.message


def test_a_missing_mountpoint_we_may_not_create_is_permanent(tmp_path, sshfs):
    (tmp_path / "file").write_text("not a dir")
    f = fail_of(dataset_root, str(tmp_path / "file" / "mnt"), "sshfs://nas/srv", [], proc_mounts=sshfs[1])
    assert not f.transient and "cannot be created" in f.message and "sudo mkdir -p" in f.message
    assert not sshfs[0].exists()


def test_a_broken_data_source_fails_before_any_mountpoint_is_made(tmp_path):
    f = fail_of(dataset_root, str(tmp_path / "mnt"), "smb://nas/x", [])
    assert not f.transient and not (tmp_path / "mnt").exists()


# ------------------------------------------------------------------ step 3

def mounts_file(tmp_path: Path, *lines: str) -> Path:
    f = tmp_path / "node-mounts"
    f.write_text("".join(line + "\n" for line in lines))
    return f


def test_a_writable_directory_passes_and_leaves_no_probe_file_behind(tmp_path):
    stage = tmp_path / "stage"
    stage.mkdir()
    notes = []
    node_local_dirs(notes, home=str(tmp_path / "h"), stage=stage, proc_mounts=mounts_file(tmp_path))
    cache = tmp_path / "h" / ".flodl" / "data"
    assert cache.is_dir() and list(cache.iterdir()) == [] and list(stage.iterdir()) == []
    assert notes == [] or all("MiB free" in n for n in notes)


def test_a_missing_stage_we_must_not_create_is_permanent(tmp_path):
    f = fail_of(node_local_dirs, [], home=str(tmp_path), stage=tmp_path / "gone",
                proc_mounts=mounts_file(tmp_path))
    assert not f.transient and "does not exist" in f.message and not (tmp_path / "gone").exists()


def test_an_unwritable_stage_is_permanent(tmp_path):
    # /proc refuses new files even to root, which chmod cannot arrange.
    f = fail_of(node_local_dirs, [], home=str(tmp_path), stage=Path("/proc"), proc_mounts=mounts_file(tmp_path))
    assert not f.transient and "disk stage /proc is not writable" in f.message and "stages data" in f.message


def test_a_read_only_stage_dir_is_permanent():
    # as an unprivileged user (root writes through any mode): `nobody` when the suite runs as root
    top = world_dir()
    stage = top / "ro"
    stage.mkdir()
    stage.chmod(0o555)
    (top / "home").mkdir(mode=0o777)
    (top / "home").chmod(0o777)
    try:
        f = fail_of(unprivileged, node_local_dirs, [], home=str(top / "home"), stage=stage,
                    proc_mounts=mounts_file(top))
        assert not f.transient and "not writable" in f.message
    finally:
        stage.chmod(0o755)
        shutil.rmtree(top)


def test_a_dataset_cache_that_cannot_be_created_is_permanent(tmp_path):
    (tmp_path / "h").write_text("HOME is a file")
    f = fail_of(node_local_dirs, [], home=str(tmp_path / "h"), stage=tmp_path, proc_mounts=mounts_file(tmp_path))
    assert not f.transient and "dataset cache" in f.message and "cannot be created" in f.message


def test_an_unset_home_is_a_note_not_a_failure(tmp_path):
    notes = []
    node_local_dirs(notes, home="", stage=tmp_path, proc_mounts=mounts_file(tmp_path))
    assert any("HOME is unset" in n for n in notes)


def test_ram_backed_dirs_get_a_note(tmp_path):
    notes = []
    stage = tmp_path / "stage"
    stage.mkdir()
    real = os.path.realpath(stage)
    node_local_dirs(notes, home=str(tmp_path / "h"), stage=stage,
                    proc_mounts=mounts_file(tmp_path, "/dev/sda1 / ext4 rw 0 0", f"tmpfs {real} tmpfs rw 0 0"))
    ram = [n for n in notes if "RAM-backed" in n]
    assert len(ram) == 1 and str(stage) in ram[0] and "disk stage" in ram[0]   # the cache is on ext4


def test_low_free_space_gets_a_note(tmp_path, monkeypatch):
    real = data.free_bytes
    monkeypatch.setattr(data, "free_bytes", lambda p: 300 << 20 if p == tmp_path else real(p))
    notes = []
    node_local_dirs(notes, home=str(tmp_path / "h"), stage=tmp_path, proc_mounts=mounts_file(tmp_path))
    assert f"disk stage {tmp_path} has 300 MiB free, smaller than any real corpus" in notes



def test_free_space_reads_back_for_a_directory_that_exists(tmp_path):
    import shutil

    assert abs(data.free_bytes(tmp_path) - shutil.disk_usage(tmp_path).free) < 64 << 20


def test_the_stage_is_tmpdir_even_when_it_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "gone"))
    f = fail_of(node_local_dirs, [], home=str(tmp_path), proc_mounts=mounts_file(tmp_path))
    assert f"disk stage {tmp_path / 'gone'} does not exist" in f.message
    monkeypatch.delenv("TMPDIR")
    node_local_dirs([], home=str(tmp_path), proc_mounts=mounts_file(tmp_path))   # /tmp
