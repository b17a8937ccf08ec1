"""The session token from a file: `--token-file`, `fdlenv: token_file:` and systemd's credential.

The end-to-end tests run the real CLI join against a small agent that records the
spec, its own command line and its parent's (fdlenv's) command line and environment
from /proc; the token must reach the spec's `salt_hex` and nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fdlenv.front import cli
from fdlenv.config.model import FdlenvBlock, JoinBlock, JoinFlags, Project
from fdlenv.app.joinsettings import resolve
from fdlenv.config.token import CREDENTIAL_FIELD, read_chosen_file, read_token_file
from fdlenv.base.errors import Fail
from fdlenv.join.spec import decode

TOKEN = "f00dfeed-5ecret-tok"
ONE_GPU = '[{"vendor": "nvidia", "arch": "8.6"}]'
AGENT = """\
import json, os, sys
def proc(pid, what):
    with open(f"/proc/{pid}/{what}", "rb") as f:
        return f.read().decode("utf-8", "replace")
json.dump({"spec": os.environ["FLODL_INTERNAL_AGENT_JSON"], "cmdline": proc("self", "cmdline"),
           "parent_cmdline": proc(os.getppid(), "cmdline"),
           "parent_environ": proc(os.getppid(), "environ")},
          open(sys.argv[1], "w"))
"""


@pytest.fixture
def box(tmp_path, _own_home):
    (tmp_path / "work").mkdir()
    (tmp_path / "agent.py").write_text(AGENT)
    env = {**os.environ, "FLODL_HOME": str(tmp_path / "home"), "FLODL_TESTING_GPU_JSON": ONE_GPU}
    env.pop("CREDENTIALS_DIRECTORY", None)
    return tmp_path, env, Path(_own_home)


def join(tmp_path, env, *flags):
    out = tmp_path / "agent.json"
    res = subprocess.run([sys.executable, "-m", "fdlenv", "join", "127.0.0.1:9", "--bin",
                          sys.executable, "--no-sig-probe", *flags, "--", str(tmp_path / "agent.py"),
                          str(out)], capture_output=True, text=True, env=env, cwd=tmp_path / "work")
    return res, (json.loads(out.read_text()) if out.exists() else None)


def files_holding(text: str, *roots: Path) -> list[str]:
    hits = []
    for root in roots:
        for p in root.rglob("*"):
            if p.is_file() and not p.is_symlink() and text.encode() in p.read_bytes():
                hits.append(str(p))
    return hits


def test_a_join_with_token_file_hands_the_agent_the_token_and_shows_it_nowhere(box):
    tmp_path, env, user_home = box
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "token").write_text(TOKEN + "\n")
    res, got = join(tmp_path, env, "--token-file", str(secret / "token"))
    assert res.returncode == 0, res.stderr
    assert decode(got["spec"])["salt_hex"] == TOKEN          # one trailing newline dropped
    for where in ("cmdline", "parent_cmdline", "parent_environ"):   # the agent's and fdlenv's
        assert TOKEN not in got[where], where
    assert "--token-file" in got["parent_cmdline"]            # it was fdlenv's command line
    assert TOKEN not in res.stdout + res.stderr
    assert (user_home / ".flodl" / "data").is_dir()            # join wrote under these roots
    assert files_holding(TOKEN, tmp_path / "home", tmp_path / "work", user_home) == []
    assert files_holding(TOKEN, secret) == [str(secret / "token")]   # and the search does find it


def test_the_systemd_credential_is_read_and_beats_join_token(box):
    tmp_path, env, _ = box
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "fdlenv-token").write_text(TOKEN)
    (tmp_path / "work" / "fdl.yml").write_text("join:\n  token: inline-in-yml\n")
    res, got = join(tmp_path, {**env, "CREDENTIALS_DIRECTORY": str(creds)})
    assert res.returncode == 0, res.stderr
    assert decode(got["spec"])["salt_hex"] == TOKEN
    (creds / "fdlenv-token").unlink()             # a directory without it: join.token stays
    res, got = join(tmp_path, {**env, "CREDENTIALS_DIRECTORY": str(creds)})
    assert res.returncode == 0 and decode(got["spec"])["salt_hex"] == "inline-in-yml"


def test_a_bad_token_file_stops_the_real_join_with_exit_2_before_the_agent(box):
    tmp_path, env, _ = box
    (tmp_path / "empty").write_text("\n")
    res, got = join(tmp_path, env, "--token-file", str(tmp_path / "empty"))
    errs = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert res.returncode == 2 and got is None and len(errs) == 1, res.stderr
    assert errs[0].startswith(f"error: --token-file {tmp_path / 'empty'}: the file is empty")
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("content, why", [
    (None, "cannot read it"),          # not join's read: a file that may not arrive (--embed-token)
    (b"", "the file is empty"),
    (b"\n", "the file is empty"),
    (b"two\nlines\n", "control character"),
    (b"tok\r\n", "control character"),
    (b"t\tok", "control character"),
    (b"\xff\xfe", "not UTF-8"),
    (b"x" * 5000, "longer than 4096 bytes"),
    ("dir", "cannot read it"),
])
def test_a_token_file_is_one_line_of_printable_text_or_an_error_naming_the_flag(tmp_path, content,
                                                                                  why):
    p = tmp_path / "tok"
    if content == "dir":
        p.mkdir()
    elif content is not None:
        p.write_bytes(content)
    with pytest.raises(Fail) as e:
        read_token_file(str(p), "--token-file")
    assert e.value.exit_code == 2 and why in e.value.message
    assert e.value.message.startswith(f"--token-file {p}: ") and "accepted: " in e.value.message


def test_one_trailing_newline_is_dropped_and_nothing_else(tmp_path):
    p = tmp_path / "tok"
    for raw, want in ((b"abc\n", "abc"), (b"abc", "abc"), (b" abc ", " abc "), (b"\xc3\xa9t\xc3\xa9\n", "été")):
        p.write_bytes(raw)
        assert read_token_file(str(p), "--token-file") == want


def test_cli_join_refuses_an_unreadable_token_file_with_exit_2_before_preparing(tmp_path, monkeypatch,
                                                                                capsys):
    prepared = []
    monkeypatch.setattr("fdlenv.front.commands.join.real_prepare", lambda *a, **k: prepared.append(a))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tokdir").mkdir()
    rc = cli.main(["join", "--bin", "/bin/true", "--persist", "--token-file", str(tmp_path / "tokdir")])
    err = capsys.readouterr().err
    assert rc == 2 and not prepared
    assert [ln for ln in err.splitlines() if ln.startswith("error: ")] == [
        f"error: --token-file {tmp_path / 'tokdir'}: cannot read it (Is a directory); "
        "accepted: a readable file holding the token on one line of printable characters "
        "(one trailing newline is dropped)"]


def test_a_token_file_not_there_yet_is_transient_exit_1_like_a_missing_identity(tmp_path, monkeypatch,
                                                                                  capsys):
    prepared = []
    monkeypatch.setattr("fdlenv.front.commands.join.real_prepare", lambda *a, **k: prepared.append(a))
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["join", "--bin", "/bin/true", "--token-file", str(tmp_path / "missing")])
    errs = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error: ")]
    assert rc == 1 and not prepared and len(errs) == 1
    assert errs[0].startswith(f"error: --token-file {tmp_path / 'missing'}: not there yet "
                              "(No such file or directory); a token provisioned after boot is read "
                              "by the next attempt (--persist re-dials)")


def test_under_persist_a_token_file_provisioned_later_heals_the_join(box):
    """The real CLI under --persist: the first attempt fails (transient) on the missing file;
    once that failure is seen on stderr the file is written, and the re-dial reads it and
    hands the agent the token. The stop is sent on fdlenv's own line that the agent exited and
    a re-dial waits (a barrier: the agent's own print comes before its exit), so it always
    lands in the re-dial wait: 130, the stop the last error."""
    tmp_path, env, _ = box
    token, out = tmp_path / "later" / "token", tmp_path / "agent.json"
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    proc = subprocess.Popen([sys.executable, "-m", "fdlenv", "join", "127.0.0.1:9", "--bin", sys.executable,
                             "--no-sig-probe", "--persist", "--token-file", str(token), "--", str(agent),
                             str(out)], stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path / "work")
    seen = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("error: ") and "not there yet" in line:
                assert not out.exists()
                token.parent.mkdir()
                token.write_text(TOKEN + "\n")
                token.chmod(0o600)
            if "agent exited with code 0 after" in line and "re-dialing in" in line:
                break
        proc.terminate()          # SIGTERM during the backoff after the agent's clean exit
        rest = proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(seen) + rest
    assert decode(json.loads(out.read_text())["spec"])["salt_hex"] == TOKEN, text
    errors = [ln for ln in text.splitlines() if ln.startswith("error: ")]
    # The missing file, once, or again by an attempt that began before the write (a loaded box
    # reads stderr late); the attempt after the write heals the join; then the stop, last.
    assert errors[-1] == "error: stopped by SIGTERM while waiting to re-dial; not re-dialing", text
    assert errors[:-1] and all("not there yet" in ln for ln in errors[:-1]), text
    assert "attempt failed after" in text and "re-dialing in" in text
    assert proc.returncode == 130 and "Traceback" not in text


# ------------------------------------------------------------------ precedence (pure + read_chosen_file)

def settled(tmp_path, flags: JoinFlags, *, block_token=None, fdl_file=None, creds=None):
    project = Project(path=tmp_path / "fdl.yml", root=tmp_path,
                      join=JoinBlock(token=block_token, bin="/b"),
                      fdlenv=FdlenvBlock(token_file=fdl_file))
    environ = {"CREDENTIALS_DIRECTORY": str(creds)} if creds else {}
    s = resolve(flags, project, hostname=lambda: "h", environ=environ)
    return read_chosen_file(s)


def test_the_token_sources_take_turns_in_order(tmp_path):
    for name in ("flagfile", "fdlfile"):
        (tmp_path / name).write_text(name + "\n")
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "fdlenv-token").write_text("credential")
    every = dict(block_token="block", fdl_file=str(tmp_path / "fdlfile"), creds=creds)
    assert settled(tmp_path, JoinFlags(token="flag", token_file=str(tmp_path / "flagfile")),
                   **every).token == "flag"
    assert settled(tmp_path, JoinFlags(token_file=str(tmp_path / "flagfile")), **every).token == \
        "flagfile"
    assert settled(tmp_path, JoinFlags(), **every).token == "fdlfile"
    assert settled(tmp_path, JoinFlags(), block_token="block", creds=creds).token == "credential"
    assert settled(tmp_path, JoinFlags(), block_token="block").token == "block"
    s = settled(tmp_path, JoinFlags(), block_token="block", creds=tmp_path / "nocreds")
    assert (s.token, s.token_file, s.token_file_field) == ("block", None, None)


def test_resolve_only_names_the_file_and_errors_name_where_it_came_from(tmp_path):
    project = Project(path=tmp_path / "fdl.yml", root=tmp_path, join=JoinBlock(bin="/b"),
                      fdlenv=FdlenvBlock(token_file=str(tmp_path / "absent")))
    s = resolve(JoinFlags(), project, hostname=lambda: "h", environ={})
    assert (s.token, s.token_file, s.token_file_field) == \
        (None, str(tmp_path / "absent"), "fdlenv.token_file")          # nothing read yet
    with pytest.raises(Fail, match=r"^fdlenv.token_file .*absent: not there yet") as e:
        read_chosen_file(s)
    assert e.value.transient
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "fdlenv-token").write_text("")
    s = resolve(JoinFlags(bin="/b"), None, hostname=lambda: "h",
                environ={"CREDENTIALS_DIRECTORY": str(tmp_path / "c")})
    with pytest.raises(Fail, match=r"^\$CREDENTIALS_DIRECTORY/fdlenv-token: the file is empty"):
        read_chosen_file(s)
    assert s.token_file_field == CREDENTIAL_FIELD


def test_fdl_yml_names_the_token_file_under_fdlenv_anchored_at_its_directory(tmp_path):
    from fdlenv.config.load import load_project
    (tmp_path / "fdl.yml").write_text("fdlenv:\n  token_file: secrets/token\n")
    assert load_project(tmp_path).fdlenv.token_file == str(tmp_path / "secrets" / "token")
    for body, why in (("fdlenv: {token_file: ''}\n", "fdlenv.token_file: expected the path"),
                      ("fdlenv: {token_file: 3}\n", "fdlenv.token_file: expected a string"),
                      ("join: {token_file: /t}\n", "join: unknown key 'token_file'")):
        (tmp_path / "fdl.yml").write_text(body)
        with pytest.raises(Fail, match="cannot load") as e:
            load_project(tmp_path)
        assert why in e.value.message
