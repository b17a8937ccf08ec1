"""`fdlenv recipe systemd` and `fdlenv recipe cloud-init`, run as a user runs them.

The unit is checked by the real `systemd-analyze` where the box has it (verify, and
`security --offline=yes` for the exposure score); those tests are optional, the rest
read the printed text. No token may ever reach a unit or a cloud-config unless the
operator embeds it on purpose.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fdlenv.recipes.systemd import present_groups, start_command, systemd_unit

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
TOKEN = "tok-6f1e2d3c4b5a"


def recipe(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "fdlenv", "recipe", *args], capture_output=True,
                          text=True, env=full, cwd=cwd)


def ok(*args: str, **kw) -> str:
    res = recipe(*args, **kw)
    assert res.returncode == 0, res.stderr
    return res.stdout


def directives(unit: str) -> dict[str, list[str]]:
    """KEY -> every value given, comments left out."""
    out: dict[str, list[str]] = {}
    for ln in unit.splitlines():
        if ln and not ln.startswith(("#", "[")) and "=" in ln:
            k, v = ln.split("=", 1)
            out.setdefault(k, []).append(v)
    return out


def me() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def console_script() -> str:
    exe = Path(sys.executable).with_name("fdlenv")
    if not exe.is_file():
        pytest.skip("fdlenv's console script is not installed beside this interpreter")
    return str(exe)


def exposure(unit_file: Path) -> float:
    res = subprocess.run([ANALYZE, "security", "--offline=yes", str(unit_file)],
                         capture_output=True, text=True)
    if res.returncode != 0 and "offline" in res.stderr:
        pytest.skip(f"this systemd-analyze has no --offline: {res.stderr.strip()}")
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", res.stdout)
    assert m, res.stdout + res.stderr
    return float(m.group(1))


# ------------------------------------------------------------------ systemd-analyze

@pytest.mark.optional
@needs_analyze
def test_the_default_unit_and_a_pinned_one_pass_systemd_analyze_verify(tmp_path):
    for name, extra in (("default", ()), ("pinned", ("--exec", console_script()))):
        unit = tmp_path / name / "fdlenv-join.service"
        unit.parent.mkdir()
        unit.write_text(ok("systemd", "--user", me(), "--workdir", str(tmp_path), *extra))
        res = subprocess.run([ANALYZE, "verify", str(unit)], capture_output=True, text=True)
        ours = [ln for ln in res.stderr.splitlines() if str(unit) in ln]
        assert res.returncode == 0 and not ours, res.stderr


@pytest.mark.optional
@needs_analyze
def test_the_default_unit_exposure_is_at_most_5_0_and_sshfs_keeps_it_there(tmp_path):
    for name, extra in (("default", ()), ("sshfs", ("--", "--data-source", "sshfs://u@h:/d"))):
        unit = tmp_path / name / "fdlenv-join.service"
        unit.parent.mkdir()
        unit.write_text(ok("systemd", "--workdir", str(tmp_path), *extra))
        assert exposure(unit) <= 5.0, name


# ------------------------------------------------------------------ the unit's text

def test_the_unit_never_sets_what_breaks_gpus_and_says_why(tmp_path):
    unit = ok("systemd", "--workdir", str(tmp_path))
    d = directives(unit)
    for key in ("PrivateDevices", "MemoryDenyWriteExecute", "ProcSubset", "SystemCallFilter",
                "PrivateUsers", "PrivateNetwork"):
        assert key not in d, key
    comments = " ".join(ln for ln in unit.splitlines() if ln.startswith("#"))
    for why in ("PrivateDevices=yes hides /dev/nvidia*, /dev/kfd and /dev/dri",
                "MemoryDenyWriteExecute=yes breaks CUDA's and ROCm's JIT"):
        assert why in comments


def test_the_unit_is_hardened_and_leaves_writable_exactly_what_join_writes(tmp_path):
    home = tmp_path / "fl home"
    unit = ok("systemd", "--user", "flodl", "--workdir", str(tmp_path), "--home", str(home))
    d = directives(unit)
    for key, want in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                      ("ProtectHome", "read-only"), ("PrivateTmp", "yes"), ("UMask", "0027"),
                      ("ProtectKernelTunables", "yes"), ("ProtectKernelModules", "yes"),
                      ("ProtectKernelLogs", "yes"), ("ProtectControlGroups", "yes"),
                      ("ProtectClock", "yes"), ("ProtectHostname", "yes"),
                      ("RestrictSUIDSGID", "yes"), ("LockPersonality", "yes"),
                      ("RestrictRealtime", "yes"), ("RestrictNamespaces", "yes"),
                      ("SystemCallArchitectures", "native"), ("CapabilityBoundingSet", ""),
                      ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6 AF_NETLINK")):
        assert d.get(key) == [want], key
    uhome = pwd.getpwnam("flodl").pw_dir if "flodl" in {p.pw_name for p in pwd.getpwall()} \
        else "/home/flodl"
    rw = shlex.split(d["ReadWritePaths"][0])
    assert rw[:4] == [f"{uhome}/.flodl", str(home), f"{uhome}/.ssh", str(tmp_path)], rw
    assert f"-{uhome}/.nv" in rw and all(p.startswith("-") for p in rw[4:])   # caches: if present
    assert d["Environment"].count(f'"FLODL_HOME={home}"') == 1
    make = next(v for v in d["ExecStartPre"] if "install -d" in v)   # made before the sandbox
    assert make.startswith("+/bin/sh -c ") and f"flodl {uhome}/.flodl" in make and str(home) in make
    assert d["User"] == ["flodl"] and d["RestartPreventExitStatus"] == ["2"]


def test_flodl_home_set_when_generating_is_carried_into_the_unit(tmp_path):
    unit = ok("systemd", "--workdir", str(tmp_path), env={"FLODL_HOME": str(tmp_path / "fh")})
    d = directives(unit)
    assert f"FLODL_HOME={tmp_path / 'fh'}" in d["Environment"]
    assert str(tmp_path / "fh") in d["ReadWritePaths"][0].split(" ")
    assert "FLODL_HOME" not in " ".join(directives(ok("systemd", "--workdir", str(tmp_path)))
                                        ["Environment"])


def test_a_home_named_by_the_join_or_fdl_yml_is_writable_too(tmp_path):
    (tmp_path / "fdl.yml").write_text("fdlenv:\n  home: state/home\n")
    rw = directives(ok("systemd", "--workdir", str(tmp_path)))["ReadWritePaths"][0].split(" ")
    assert str(tmp_path / "state" / "home") in rw
    rw = directives(ok("systemd", "--workdir", str(tmp_path), "--", "--home", "rel"))[
        "ReadWritePaths"][0].split(" ")
    assert str(tmp_path / "rel") in rw and str(tmp_path / "state" / "home") not in rw


def test_the_unit_starts_the_generating_fdlenv_by_absolute_path_when_its_path_has_none(tmp_path):
    res = recipe("systemd", "--user", "nobody-here", "--workdir", str(tmp_path))   # python -m fdlenv
    assert res.returncode == 0, res.stderr
    d = directives(res.stdout)
    assert d["ExecStart"] == [f"{sys.executable} -m fdlenv join --persist"]
    path = next(v for v in d["Environment"] if v.startswith("PATH="))
    assert path.startswith("PATH=/home/nobody-here/.local/bin:") and ":/usr/bin:" in path
    lines = res.stdout.splitlines()
    why = lines[lines.index(f"ExecStart={sys.executable} -m fdlenv join --persist") - 1]
    assert why.startswith(f"# the fdlenv generating this unit ({sys.executable} -m fdlenv) is not the "
                          "`fdlenv` on the unit's PATH (there is none there)")
    assert f"note: {why[2:]}" in res.stderr
    d = directives(ok("systemd", "--workdir", str(tmp_path), "--exec", "/opt/fx/bin/fdlenv",
                      "--", "--libtorch", "auto"))
    assert d["ExecStart"] == ["/opt/fx/bin/fdlenv join --persist --libtorch auto"]


def test_the_generating_console_script_is_named_when_the_unit_path_finds_another(tmp_path):
    script = console_script()
    res = subprocess.run([script, "recipe", "systemd", "--user", "nobody-here", "--workdir", str(tmp_path)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert directives(res.stdout)["ExecStart"] == [f"{script} join --persist"]
    assert "note: the fdlenv generating this unit" in res.stderr
    other = tmp_path / "u" / ".local" / "bin" / "fdlenv"        # another install on the unit's PATH
    other.parent.mkdir(parents=True)
    other.write_text("#!/usr/bin/python3\n")
    other.chmod(0o755)
    command, why = start_command(str(tmp_path / "u"), argv0=script)
    assert command == [script] and f"(the one there is {other})" in why


def test_the_unit_keeps_env_fdlenv_when_the_one_on_its_path_is_this_one(tmp_path):
    mine = tmp_path / "u" / ".local" / "bin" / "fdlenv"         # a console script running this python
    mine.parent.mkdir(parents=True)
    mine.write_text(f"#!{sys.executable}\nfrom fdlenv.front.cli import main\nmain()\n")
    mine.chmod(0o755)
    assert start_command(str(tmp_path / "u"), argv0="/x/fdlenv/__main__.py") == (["/usr/bin/env", "fdlenv"], None)
    assert start_command(str(tmp_path / "u"), argv0=str(mine)) == (["/usr/bin/env", "fdlenv"], None)
    unit = systemd_unit(workdir=str(tmp_path), uhome=str(tmp_path / "u"), command=["/usr/bin/env", "fdlenv"])
    assert "ExecStart=/usr/bin/env fdlenv join --persist" in unit.splitlines()
    assert "not the `fdlenv` on the unit's PATH" not in unit


def test_an_sshfs_data_source_opens_exactly_what_fuse_needs(tmp_path):
    strict = directives(ok("systemd", "--workdir", str(tmp_path)))
    assert strict["NoNewPrivileges"] == ["yes"] and strict["CapabilityBoundingSet"] == [""]
    (tmp_path / "yml").mkdir()
    (tmp_path / "yml" / "fdl.yml").write_text("join:\n  data_source: sshfs://u@h:/d\n")
    for args in (("--workdir", str(tmp_path), "--", "--data-source=sshfs://u@h:/d"),
                 ("--workdir", str(tmp_path / "yml")),
                 ("--workdir", str(tmp_path), "--sshfs")):
        unit = ok("systemd", *args)
        d = directives(unit)
        assert d["NoNewPrivileges"] == ["no"] and d["CapabilityBoundingSet"] == ["CAP_SYS_ADMIN"]
        assert "setuid fusermount3" in unit
        assert "-/flodl/data" in shlex.split(d["ReadWritePaths"][0])   # fusermount3 wants it writable
        assert {k: v for k, v in d.items() if k not in ("NoNewPrivileges", "CapabilityBoundingSet",
                                                        "WorkingDirectory", "ReadWritePaths",
                                                        "ExecStart")} == \
            {k: v for k, v in strict.items() if k not in ("NoNewPrivileges", "CapabilityBoundingSet",
                                                          "WorkingDirectory", "ReadWritePaths",
                                                          "ExecStart")}


def test_the_sshfs_mountpoint_is_the_data_path_when_one_is_named(tmp_path):
    d = directives(ok("systemd", "--workdir", str(tmp_path), "--", "--data-source",
                      "sshfs://u@h:/d", "--data-path", "ds"))
    rw = shlex.split(d["ReadWritePaths"][0])
    assert f"-{tmp_path / 'ds'}" in rw and "-/flodl/data" not in rw
    assert not any("flodl/data" in p for p in shlex.split(
        directives(ok("systemd", "--workdir", str(tmp_path)))["ReadWritePaths"][0]))


def test_gpu_groups_name_only_groups_this_box_has_unless_told(tmp_path):
    auto = directives(ok("systemd", "--workdir", str(tmp_path))).get("SupplementaryGroups")
    have = present_groups()
    assert auto == ([" ".join(have)] if have else None)
    assert "SupplementaryGroups" not in directives(ok("systemd", "--workdir", str(tmp_path),
                                                      "--gpu-groups", "none"))
    assert directives(ok("systemd", "--workdir", str(tmp_path), "--gpu-groups", "render,video"))[
        "SupplementaryGroups"] == ["render video"]


def test_a_token_file_becomes_a_credential_and_the_unit_holds_no_token(tmp_path):
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    res = recipe("systemd", "--workdir", str(tmp_path), "--token-file", str(tok))
    assert res.returncode == 0 and TOKEN not in res.stdout and TOKEN not in res.stderr
    d = directives(res.stdout)
    assert d["LoadCredential"] == [f"fdlenv-token:{tok}"]
    assert "--token" not in d["ExecStart"][0]
    assert "warning: --token" not in res.stderr and "join.token" not in res.stderr


TOKEN_SPELLINGS = (
    ("--token", TOKEN),
    (f"--token={TOKEN}",),
    ("ctrl.example:1337", "--token", TOKEN),          # after the controller
    ("--", "--token", TOKEN),                         # after a second `--`
    ("--libtorch", "cpu", "--", f"--token={TOKEN}"),
)


@pytest.mark.parametrize("kind", ["systemd", "cloud-init"])
@pytest.mark.parametrize("tail", TOKEN_SPELLINGS, ids=lambda t: " ".join(t).replace(TOKEN, "S"))
def test_a_token_in_the_join_arguments_is_refused_naming_the_token_file_and_its_credential(tmp_path, kind, tail):
    head = ("--workdir", str(tmp_path)) if kind == "systemd" else ("--install", "fdlenv==0.1")
    res = recipe(kind, *head, "--", *tail)
    assert res.returncode == 2, res.stderr
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: -- --token: a recipe never carries the token")
    assert "--token-file FILE" in lines[0] and "LoadCredential=fdlenv-token:FILE" in lines[0]
    assert TOKEN not in res.stderr


def test_fdl_yml_join_token_still_warns_for_a_systemd_unit(tmp_path):
    (tmp_path / "fdl.yml").write_text(f"join:\n  token: {TOKEN}\n")
    res = recipe("systemd", "--workdir", str(tmp_path))
    assert res.returncode == 0 and "warning: fdl.yml's join.token" in res.stderr
    assert TOKEN not in res.stdout


def d_exec(unit: str) -> str:
    return directives(unit)["ExecStart"][0]


@pytest.mark.parametrize("args, field", [
    (("--exec", "bin/fdlenv"), "--exec"),
    (("--token-file", "token"), "--token-file"),
    (("--user", "a b"), "--user"),
    (("--gpu-groups", "render,,video"), "--gpu-groups"),
    (("--home", "/x\nExecStartPre=/bin/evil"), "--home"),
])
def test_bad_systemd_recipe_input_is_one_error_line_exit_2_and_no_unit(tmp_path, args, field):
    res = recipe("systemd", "--workdir", str(tmp_path), *args)
    errs = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert res.returncode == 2 and res.stdout == "" and len(errs) == 1, res.stderr
    assert field in errs[0] and "Traceback" not in res.stderr


def test_a_join_argument_with_a_newline_cannot_add_a_unit_line(tmp_path):
    unit = ok("systemd", "--workdir", str(tmp_path), "--", "--host", "a\nExecStartPre=/bin/evil",
              "--data-source", "sshfs://h:/d", "--data-path", "/m\nExecStartPre=/bin/evil")
    assert not any(ln.startswith("ExecStartPre=/bin/evil") for ln in unit.splitlines())
    assert '--host "a\\nExecStartPre=/bin/evil"' in d_exec(unit)
    assert '"-/m\\x0aExecStartPre=/bin/evil"' in directives(unit)["ReadWritePaths"][0]


# ------------------------------------------------------------------ cloud-init

def cloud(*args: str, **kw) -> tuple[str, dict, subprocess.CompletedProcess]:
    """A cloud-config; `--install fdlenv` unless given (how this checkout is installed, an editable
    local path, is not something a new box can install from)."""
    res = recipe("cloud-init", *(() if "--install" in args else ("--install", "fdlenv")), *args, **kw)
    assert res.returncode == 0, res.stderr
    return res.stdout, yaml.safe_load(res.stdout), res


def test_cloud_init_is_cloud_config_holding_the_unit_and_no_token(tmp_path):
    yml = tmp_path / "worker.yml"
    yml.write_text("join:\n  controller: ctrl.example:1337\n  libtorch: auto\n")
    (tmp_path / "token").write_text(TOKEN)
    text, doc, res = cloud("--fdl-yml", str(yml), "--token-file", str(tmp_path / "token"),
                           "--", "--no-sig-probe")
    assert text.splitlines()[0] == "#cloud-config"
    assert TOKEN not in text and TOKEN not in res.stderr
    files = {f["path"]: f for f in doc["write_files"]}
    unit = files["/etc/systemd/system/fdlenv-join.service"]["content"]
    d = directives(unit)
    assert d["LoadCredential"] == [f"fdlenv-token:{tmp_path / 'token'}"]
    assert d["User"] == ["ubuntu"] and d["WorkingDirectory"] == ["/home/ubuntu/training"]
    assert d["ExecStart"] == ["/home/ubuntu/.local/share/fdlenv/bin/fdlenv join --persist "
                              "--no-sig-probe"]
    assert d["ProtectSystem"] == ["strict"] and "SupplementaryGroups" not in d
    shipped = files["/home/ubuntu/training/fdl.yml"]
    assert shipped["content"] == yml.read_text() and shipped["owner"] == "ubuntu:ubuntu"
    assert shipped["defer"] is True
    cmds = [" ".join(c) for c in doc["runcmd"]]
    assert any("pip install --quiet fdlenv" in c for c in cmds)
    assert any("usermod -aG" in c for c in cmds)                 # AMD groups, where they exist
    assert cmds[-1] == "systemctl enable --now fdlenv-join.service"
    assert doc["packages"] == ["python3-venv"] and "users" not in doc


def test_cloud_init_installs_what_the_shipped_join_needs_and_creates_its_user(tmp_path):
    yml = tmp_path / "worker.yml"
    yml.write_text("join:\n  data_source: sshfs://u@h:/d\n  source:\n    from: git+https://g.example/m#v1\n")
    text, doc, _ = cloud("--user", "flodl", "--fdl-yml", str(yml), "--install", "fdlenv==0.1.0")
    assert doc["packages"] == ["python3-venv", "build-essential", "pkg-config", "curl", "sshfs", "git"]
    rustup = [c for c in doc["runcmd"] if "rustup" in " ".join(c)]
    assert rustup and rustup[0][:3] == ["runuser", "-u", "flodl"] and "HOME=/home/flodl" in rustup[0]
    assert doc["runcmd"].index(rustup[0]) < len(doc["runcmd"]) - 2     # before the unit starts
    assert doc["users"] == ["default", {"name": "flodl", "lock_passwd": True, "shell": "/bin/bash"}]
    unit = next(f["content"] for f in doc["write_files"] if f["path"].endswith(".service"))
    assert directives(unit)["NoNewPrivileges"] == ["no"]
    assert any("fdlenv==0.1.0" in c for c in doc["runcmd"])


def test_cloud_init_embeds_a_token_only_on_request_root_only_and_says_it_is_secret(tmp_path):
    (tmp_path / "tok").write_text(TOKEN + "\n")
    text, doc, res = cloud("--embed-token", str(tmp_path / "tok"))
    entry = next(f for f in doc["write_files"] if f["path"] == "/etc/fdlenv/token")
    assert (entry["owner"], entry["permissions"], entry["content"]) == ("root:root", "0600",
                                                                        TOKEN + "\n")
    assert text.count(TOKEN) == 1 and "# SECRET" in text
    assert "warning: --embed-token" in res.stderr
    unit = next(f["content"] for f in doc["write_files"] if f["path"].endswith(".service"))
    assert directives(unit)["LoadCredential"] == ["fdlenv-token:/etc/fdlenv/token"]


@pytest.mark.parametrize("args, field", [
    (("--install", ""), "--install"),
    (("--embed-token", "/nonexistent/tok"), "--embed-token"),
    (("--user", "no body"), "--user"),
    (("--token-file", "rel/token"), "--token-file"),
])
def test_bad_cloud_init_input_is_one_error_line_exit_2_and_no_output(tmp_path, args, field):
    res = recipe("cloud-init", *args)
    errs = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert res.returncode == 2 and res.stdout == "" and len(errs) == 1, res.stderr
    assert field in errs[0]


def test_cloud_init_refuses_an_fdl_yml_join_would_refuse(tmp_path):
    for body, why in (("join: {token_file: /t}\n", "unknown key 'token_file'"),
                      ("join: [\n", "--fdl-yml")):
        (tmp_path / "w.yml").write_text(body)
        res = recipe("cloud-init", "--install", "fdlenv==0.1", "--fdl-yml", str(tmp_path / "w.yml"))
        assert res.returncode == 2 and res.stdout == "" and why in res.stderr, res.stderr


@pytest.mark.optional
@needs_analyze
def test_the_cloud_init_unit_exposure_is_at_most_5_0(tmp_path):
    _, doc, _ = cloud("--token-file", "/etc/fdlenv/token")
    unit = tmp_path / "fdlenv-join.service"
    unit.write_text(next(f["content"] for f in doc["write_files"] if f["path"].endswith(".service")))
    assert exposure(unit) <= 5.0


def test_cloud_init_never_ships_join_token_and_says_where_the_unit_reads_it(tmp_path):
    yml = tmp_path / "worker.yml"
    yml.write_text(f"# the fleet's worker\njoin:\n  controller: ctrl.example:1337\n  token: {TOKEN}\n"
                   "  # the binary\n  bin: ./train\n")
    text, doc, res = cloud("--fdl-yml", str(yml))
    assert TOKEN not in text and TOKEN not in res.stderr
    shipped = next(f for f in doc["write_files"] if f["path"].endswith("/fdl.yml"))["content"]
    assert shipped == "# the fleet's worker\njoin:\n  controller: ctrl.example:1337\n  # the binary\n  bin: ./train\n"
    unit = next(f["content"] for f in doc["write_files"] if f["path"].endswith(".service"))
    assert directives(unit)["LoadCredential"] == ["fdlenv-token:/etc/fdlenv/token"]
    assert "join.token is left out" in res.stderr and "/etc/fdlenv/token" in res.stderr
    assert "# No secret here" in text
    flow = tmp_path / "flow.yml"
    flow.write_text(f"join: {{token: {TOKEN}, controller: 'c:1'}}\n")
    text, doc, _ = cloud("--fdl-yml", str(flow))
    shipped = next(f for f in doc["write_files"] if f["path"].endswith("/fdl.yml"))["content"]
    assert TOKEN not in text and yaml.safe_load(shipped) == {"join": {"controller": "c:1"}}


def test_a_token_file_others_can_read_is_used_with_a_warning(tmp_path, capsys):
    from fdlenv.config.token import read_token_file

    tok = tmp_path / "tok"
    tok.write_text(TOKEN + "\n")
    os.chmod(tok, 0o600)
    assert read_token_file(str(tok), "--token-file") == TOKEN and "warning" not in capsys.readouterr().err
    os.chmod(tok, 0o644)
    assert read_token_file(str(tok), "--token-file") == TOKEN
    err = capsys.readouterr().err
    assert "warning: --token-file" in err and "0644" in err and "chmod 600" in err and TOKEN not in err


@pytest.mark.parametrize("direct, spec", [
    ({"url": "https://github.com/o/fdlenv", "vcs_info": {"vcs": "git", "commit_id": "abc123"}},
     "fdlenv @ git+https://github.com/o/fdlenv@abc123"),
    ({"url": "https://files.example/fdlenv-0.1.0-py3-none-any.whl", "archive_info": {}},
     "fdlenv @ https://files.example/fdlenv-0.1.0-py3-none-any.whl"),
    (None, None),   # from an index: fdlenv is on no public one yet (plan.ON_PUBLIC_INDEX)
    ({"url": "file:///home/me/fdlenv", "dir_info": {"editable": True}}, None),
])
def test_cloud_init_installs_fdlenv_the_way_this_one_was_installed(monkeypatch, direct, spec):
    import json
    from importlib import metadata

    from fdlenv.base.errors import Fail
    from fdlenv.recipes import plan

    class Dist:
        version = "0.1.0"

        def read_text(self, name):
            return json.dumps(direct) if direct is not None and name == "direct_url.json" else None

    monkeypatch.setattr(metadata, "distribution", lambda name: Dist())
    if spec is not None:
        assert plan.install_spec() == spec
    else:
        with pytest.raises(Fail) as e:
            plan.install_spec()
        assert not e.value.transient and "--install" in e.value.message and "git+https://" in e.value.message
        assert ("file:///home/me/fdlenv" if direct else "on no public index yet") in e.value.message
        monkeypatch.setattr(plan, "ON_PUBLIC_INDEX", True)   # the name kept ready for when it is published
        if direct is None:
            assert plan.install_spec() == "fdlenv==0.1.0"


def test_cloud_init_ships_the_lock_fdl_yml_names_and_refuses_one_that_is_not_there(tmp_path):
    yml = tmp_path / "worker.yml"
    yml.write_text("join:\n  controller: c:1\nfdlenv:\n  lock: locks/fleet.conda-lock.yml\n")
    res = recipe("cloud-init", "--fdl-yml", str(yml), "--install", "fdlenv")
    assert res.returncode == 2 and "fdlenv.lock names 'locks/fleet.conda-lock.yml'" in res.stderr
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "fleet.conda-lock.yml").write_text("version: 1\npackage: []\n")
    _, doc, _ = cloud("--fdl-yml", str(yml))
    shipped = {f["path"]: f for f in doc["write_files"]}
    lock = shipped["/home/ubuntu/training/locks/fleet.conda-lock.yml"]
    assert lock["content"] == "version: 1\npackage: []\n" and lock["owner"] == "ubuntu:ubuntu"


# ------------------------------------------------------------------ first-day traps

def test_without_user_the_unit_runs_as_the_invoking_user_with_a_note_never_root_silently(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SUDO_USER"}
    res = subprocess.run([sys.executable, "-m", "fdlenv", "recipe", "systemd", "--workdir", "/srv/flodl"],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0 and directives(res.stdout)["User"] == [me()]
    assert f"note: User={me()}, the invoking user" in res.stderr and "--user U" in res.stderr
    if me() == "root":
        assert "root: a user of its own is safer" in res.stderr
    res = recipe("systemd", "--workdir", "/srv/flodl", env={"SUDO_USER": "nobody"})   # `sudo fdlenv ...`
    assert directives(res.stdout)["User"] == ["nobody"] and "note: User=nobody, the invoking user" in res.stderr
    res = recipe("systemd", "--workdir", "/srv/flodl", "--user", "flodl")
    assert directives(res.stdout)["User"] == ["flodl"] and "note: User=" not in res.stderr


@pytest.mark.parametrize("args, directive, code", [
    (("--workdir", "/tmp/flodl", "--exec", "/opt/fx/bin/fdlenv"), "WorkingDirectory=", "200/CHDIR"),
    (("--workdir", "/srv/flodl", "--home", "/var/tmp/fh", "--exec", "/opt/fx/bin/fdlenv"), "ReadWritePaths=",
     "226/NAMESPACE"),
    (("--workdir", "/srv/flodl", "--exec", "/tmp/venv/bin/fdlenv"), "ExecStart=", "203/EXEC"),
])
def test_a_path_under_tmp_that_private_tmp_hides_is_warned_naming_the_directive(args, directive, code):
    # --exec pins the fdlenv the unit starts: the one running this test may itself live under /tmp
    res = recipe("systemd", "--user", "flodl", *args)
    warns = [ln for ln in res.stderr.splitlines() if "PrivateTmp=yes" in ln]
    assert res.returncode == 0 and directives(res.stdout)["PrivateTmp"] == ["yes"]
    assert len(warns) == 1 and directive in warns[0] and code in warns[0], res.stderr
    clean = recipe("systemd", "--user", "flodl", "--workdir", "/srv/flodl", "--home", "/srv/fh",
                   "--exec", "/opt/fx/bin/fdlenv")
    assert "PrivateTmp" not in clean.stderr
