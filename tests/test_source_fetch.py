"""Fetching: rsync argv, mtime preservation, git ref moves, rsync over a real sshd."""

import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fdlenv.config.model import SshConfig
from fdlenv.base.errors import Fail
from fdlenv.names.home import Home
from fdlenv.source import fetch
from fdlenv.source.spec import parse

from helpers_source import OLD, git, make_remote, needs_git, needs_rsync, write_tree

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


def do_fetch(home: Home, raw: str, ssh=None) -> fetch.Fetched:
    spec = parse(raw)
    with fetch.claimed(home, spec):
        return fetch.fetch(home, spec, ssh)


def test_rsync_argv_preserves_times_and_protects_the_target_dir(tmp_path):
    argv = fetch.rsync_argv(parse("file:///srv/train/"), tmp_path / "dest")
    assert argv[:3] == ["rsync", "-a", "--delete"]
    assert {"--exclude=target/", "--exclude=/libtorch/", "--exclude=.git/"} <= set(argv)
    assert argv[-2:] == ["/srv/train/", f"{tmp_path}/dest/"]
    assert "-e" not in argv


def test_rsync_argv_carries_the_ssh_hops_port_key_and_options(tmp_path):
    ssh = SshConfig(identity_file="/keys/my key", options=("ConnectTimeout=5", "BatchMode=no"))
    argv = fetch.rsync_argv(parse("rsync://flodl@ctrl:2222:/srv/t"), tmp_path, ssh)
    rsh = argv[argv.index("-e") + 1]
    words = shlex.split(rsh)  # rsync's splitter groups quotes like the shell does here
    assert words[:5] == ["ssh", "-p", "2222", "-i", "/keys/my key"]
    opts = [words[i + 1] for i, w in enumerate(words) if w == "-o"]
    # BatchMode=yes leads: OpenSSH keeps the first value, so no option brings a prompt back.
    assert opts == ["BatchMode=yes", "ConnectTimeout=5", "BatchMode=no", "StrictHostKeyChecking=accept-new"]
    assert argv[-2] == "flodl@ctrl:/srv/t/"


def test_an_ssh_setting_with_both_quote_kinds_is_refused():
    with pytest.raises(Fail) as e:
        fetch.rsh_command(parse("rsync://c:/s"), SshConfig(identity_file="/k/it's \"odd\""))
    assert not e.value.transient


@needs_rsync
def test_a_refetch_keeps_an_old_mtime_and_a_nested_build(tmp_path):
    home = Home(tmp_path / "home")
    src = write_tree(tmp_path / "src", {"Cargo.toml": "[package]\n", "src/main.rs": "fn main(){}\n",
                                        "app/src/lib.rs": "x\n", "gone.txt": "bye\n",
                                        "vendor/libtorch/keep.h": "user source\n"})
    got = do_fetch(home, f"file://{src}")
    main_rs = got.tree / "src/main.rs"
    assert main_rs.stat().st_mtime == OLD
    assert (got.tree / "vendor/libtorch/keep.h").is_file()  # only /libtorch/ at the root is excluded
    inode = main_rs.stat().st_ino
    for built in ("target/release/train", "app/target/debug/app", "libtorch/lib/libtorch.so"):
        write_tree(got.tree, {built: "artifact"})
    (src / "gone.txt").unlink()
    write_tree(src, {"src/new.rs": "new\n"}, mtime=None)
    again = do_fetch(home, f"file://{src}")
    assert again.tree == got.tree
    assert abs(main_rs.stat().st_mtime - OLD) < 2 and main_rs.stat().st_ino == inode  # not rewritten
    assert not (got.tree / "gone.txt").exists() and (got.tree / "src/new.rs").is_file()
    for built in ("target/release/train", "app/target/debug/app", "libtorch/lib/libtorch.so"):
        assert (got.tree / built).read_text() == "artifact"
    assert again.digest.files == 5 and again.digest != got.digest


@needs_rsync
def test_an_unchanged_local_source_skips_rsync_and_any_change_brings_it_back(tmp_path):
    home = Home(tmp_path / "home")
    src = write_tree(tmp_path / "src", {"main.rs": "one\n", "sub/lib.rs": "lib\n"})
    first = do_fetch(home, f"file://{src}")
    assert first.note.startswith("source: copied")
    assert do_fetch(home, f"file://{src}").note.endswith("unchanged since the last copy")
    write_tree(first.tree, {"target/release/app": "built"})          # build output: still unchanged
    assert do_fetch(home, f"file://{src}").note.endswith("unchanged since the last copy")
    (src / "main.rs").write_text("two\n")                              # same size, new mtime
    assert do_fetch(home, f"file://{src}").note.startswith("source: copied")
    assert (first.tree / "main.rs").read_text() == "two\n"
    (first.tree / "sub/lib.rs").write_text("tampered in the tool-owned copy\n")
    again = do_fetch(home, f"file://{src}")
    assert again.note.startswith("source: copied") and (first.tree / "sub/lib.rs").read_text() == "lib\n"
    (src / "sub").rename(src / "moved")                                 # a directory appears/vanishes
    do_fetch(home, f"file://{src}")
    assert not (first.tree / "sub").exists() and (first.tree / "moved/lib.rs").is_file()


@needs_rsync
def test_a_path_with_shell_metacharacters_is_copied_as_data(tmp_path):
    src = tmp_path / "a b;$(touch PWNED)`touch PWNED2`'q'\"d\"&x"
    write_tree(src, {"main.rs": "fn main(){}\n"})
    got = do_fetch(Home(tmp_path / "home"), f"file://{src}")
    assert (got.tree / "main.rs").read_text() == "fn main(){}\n"
    assert not list(tmp_path.rglob("PWNED*")) and not list(Path.cwd().glob("PWNED*"))


def test_a_local_source_that_is_not_a_directory_is_permanent(tmp_path):
    with pytest.raises(Fail) as e:
        do_fetch(Home(tmp_path / "home"), f"file://{tmp_path}/absent")
    assert not e.value.transient and "not a directory" in e.value.message


@needs_git
def test_the_git_resolver_fetches_a_ref_and_then_moves_to_another(tmp_path):
    remote = make_remote(tmp_path)
    c1 = remote.commit({"train.rs": "v1\n", "same.rs": "unchanged\n"}, tag="v1")
    c2 = remote.commit({"train.rs": "v2\n"}, tag="v2")
    home = Home(tmp_path / "home")
    got = do_fetch(home, f"{remote.url}#v1")
    assert (got.tree / "train.rs").read_text() == "v1\n"
    assert git("rev-parse", "HEAD", cwd=got.tree) == c1 and "checked out" in got.note
    write_tree(got.tree, {"target/release/train": "built from v1"})
    same = got.tree / "same.rs"
    before = same.stat()
    moved = do_fetch(home, f"{remote.url}#v2")
    assert moved.tree == got.tree and (moved.tree / "train.rs").read_text() == "v2\n"
    assert git("rev-parse", "HEAD", cwd=moved.tree) == c2
    assert (moved.tree / "target/release/train").read_text() == "built from v1"
    assert same.stat().st_mtime_ns == before.st_mtime_ns and same.stat().st_ino == before.st_ino
    assert moved.digest != got.digest
    with pytest.raises(Fail) as e:
        do_fetch(home, f"{remote.url}#no-such-ref")
    assert e.value.transient and "no-such-ref" in e.value.message
    assert git("rev-parse", "HEAD", cwd=moved.tree) == c2  # never lands on a default branch


@needs_git
def test_a_full_commit_id_is_a_pin(tmp_path):
    remote = make_remote(tmp_path)
    c1 = remote.commit({"train.rs": "v1\n"})
    remote.commit({"train.rs": "v2\n"})
    got = do_fetch(Home(tmp_path / "home"), f"{remote.url}#{c1}")
    assert (got.tree / "train.rs").read_text() == "v1\n"


REDIAL = textwrap.dedent("""
    import sys
    from pathlib import Path
    from fdlenv.names.home import Home
    from fdlenv.source import fetch
    from fdlenv.source.spec import parse
    home, spec = Home(Path(sys.argv[1])), parse(sys.argv[2])
    with fetch.claimed(home, spec):
        got = fetch.fetch(home, spec)
    print(got.note)
    print("gitpython imported" if "git" in sys.modules else "gitpython not imported")
""")


def redial(home: Home, raw: str) -> str:
    return subprocess.run([sys.executable, "-c", REDIAL, str(home.root), raw], check=True,
                          capture_output=True, text=True).stdout


@needs_git
def test_a_git_redial_with_nothing_changed_imports_no_gitpython(tmp_path):
    remote = make_remote(tmp_path)
    remote.commit({"train.rs": "v1\n"})
    home = Home(tmp_path / "home")
    first = redial(home, f"{remote.url}#main")
    assert "checked out" in first and "gitpython imported" in first
    second = redial(home, f"{remote.url}#main")
    assert "unchanged" in second and "gitpython not imported" in second
    c2 = remote.commit({"train.rs": "v2\n"})  # the branch moves: ls-remote sees it
    third = redial(home, f"{remote.url}#main")
    assert "checked out" in third and c2[:12] in third
    tree = fetch.source_dir(home, parse(f"{remote.url}#main"))
    assert (tree / "train.rs").read_text() == "v2\n"


@needs_git
def test_a_local_edit_in_the_tool_owned_checkout_is_undone(tmp_path):
    remote = make_remote(tmp_path)
    remote.commit({"train.rs": "v1\n"}, tag="v1")
    home = Home(tmp_path / "home")
    got = do_fetch(home, f"{remote.url}#v1")
    (got.tree / "train.rs").write_text("local hack\n")
    again = do_fetch(home, f"{remote.url}#v1")
    assert (again.tree / "train.rs").read_text() == "v1\n" and again.digest == got.digest


@needs_git
def test_an_annotated_tag_resolves_to_its_commit_on_the_cheap_path(tmp_path):
    remote = make_remote(tmp_path)
    remote.commit({"train.rs": "v1\n"})
    git("tag", "-a", "-m", "release", "r1", cwd=remote.work)
    git("push", "-q", "origin", "--tags", cwd=remote.work)
    home = Home(tmp_path / "home")
    assert "checked out" in redial(home, f"{remote.url}#r1")
    assert "unchanged" in redial(home, f"{remote.url}#r1")


@needs_rsync
def test_rsync_over_ssh_pulls_with_times_and_a_failure_is_transient(tmp_path, sshd_server):
    s = sshd_server
    src = write_tree(tmp_path / "remote src $x;y", {"main.rs": "fn main(){}\n", "data/a.bin": "a" * 1000})
    ssh = SshConfig(identity_file=str(s.identity), options=(f"UserKnownHostsFile={s.known_hosts}", "IdentitiesOnly=yes"))
    home = Home(tmp_path / "home")
    got = do_fetch(home, f"rsync://{s.user}@{s.host}:{s.port}:{src}", ssh)
    assert (got.tree / "main.rs").read_text() == "fn main(){}\n"
    assert (got.tree / "data/a.bin").stat().st_mtime == OLD
    assert "pulled" in got.note
    with pytest.raises(Fail) as e:
        do_fetch(home, f"rsync://{s.user}@{s.host}:{s.port}:{tmp_path}/nowhere", ssh)
    assert e.value.transient and "rsync exit" in e.value.message
    with pytest.raises(Fail) as e:  # wrong key: BatchMode means a failure, never a prompt
        do_fetch(home, f"rsync://{s.user}@{s.host}:{s.port}:{src}",
                 SshConfig(identity_file=str(tmp_path / "no-key"), options=(f"UserKnownHostsFile={s.known_hosts}",
                                                          "IdentitiesOnly=yes")))
    assert e.value.transient
