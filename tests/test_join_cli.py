"""`fdlenv join` and `fdlenv recipe` through the command line."""

from __future__ import annotations

import argparse
import os
import sys

import pytest

from fdlenv.names.variants import Libtorch
from fdlenv.front import cli
from fdlenv.front.commands import join as J
from fdlenv.front.commands import recipe as R
from fdlenv.recipes import systemd_quote, systemd_unit


def parse(argv):
    p = argparse.ArgumentParser()
    sub = p.add_subparsers()
    J.add_parser(sub)
    R.add_parser(sub)
    head, tail = cli.split_tail(argv)
    args = p.parse_args(head)
    args.tail = tail
    return args


@pytest.fixture()
def captured(monkeypatch, tmp_path):
    """Run `join` up to the loop; record the settings it would run with."""
    got = {}

    def fake_run_join(settings, prepare, settle=None):   # settle: what the first attempt reads
        got["settings"], got["prepare"] = settle(settings) if settle else settings, prepare
        return 0
    monkeypatch.setattr("fdlenv.join.loop.run_join", fake_run_join)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FDL_ENV", raising=False)
    monkeypatch.delenv("FLODL_HOME", raising=False)
    monkeypatch.setenv("FLODL_HOST_NAME", "cli-box")
    return got


def test_every_flag_parses_into_the_settings(captured, tmp_path):
    exe = tmp_path / "train"
    exe.write_text("")
    args = parse(["join", "ctrl:99", "--token", "tok", "--bin", "train", "--libtorch", "7.1",
                  "--lock", "/l.yml", "--mirror", "cf=file:///m", "--host", "h1",
                  "--devices", "1,2", "--persist", "--data-path", "/d", "--data-source",
                  "sshfs://x:/y", "--gpu-ram-share", "2.5", "--no-sig-probe", "--home", "/hh",
                  "--", "--epochs", "1"])
    assert args.func(args) == 0
    s = captured["settings"]
    assert (s.controller_host, s.controller_port, s.token, s.bin) == ("ctrl", 99, "tok", str(exe))
    assert (s.libtorch, s.lock, dict(s.mirrors), s.host, s.devices) == \
        (Libtorch("rocm7.1"), "/l.yml", {"cf": "file:///m"}, "h1", (1, 2))
    assert (s.persist, s.data_path, s.data_source, s.gpu_ram_share, s.sig_probe, s.home) == \
        (True, "/d", "sshfs://x:/y", 2.5, False, "/hh")
    assert s.args == ("--epochs", "1")
    assert captured["prepare"].func is J.real_prepare


def test_the_join_block_and_overlay_are_read_from_the_cwd(captured, tmp_path, monkeypatch,
                                                          capsys):
    (tmp_path / "fdl.yml").write_text("join:\n  bin: /bin/true\n  args: [a]\n")
    (tmp_path / "fdl.farm.yml").write_text("join:\n  controller: farm:7\n")
    monkeypatch.setenv("FDL_ENV", "farm")
    sub = tmp_path / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    args = parse(["join"])
    assert args.func(args) == 0
    s = captured["settings"]
    assert (s.controller_host, s.controller_port, s.bin, s.args, s.host) == \
        ("farm", 7, "/bin/true", ("a",), "cli-box")
    assert s.project_root == str(tmp_path)
    assert "no controller named" not in capsys.readouterr().err


def test_a_defaulted_controller_gets_a_note(captured, capsys):
    args = parse(["join", "--bin", "/bin/true"])
    assert args.func(args) == 0
    assert "no controller named: dialing the default, 127.0.0.1:1337" in capsys.readouterr().err


def test_authoring_errors_exit_2_before_anything_runs(captured, tmp_path, capsys):
    for argv in (["join"], ["join", "--bin", "missing-binary"],
                 ["join", "--bin", "/bin/true", "--identity", "k"],
                 ["join", "--bin", "/bin/true", "--devices", "x"]):
        captured.clear()
        assert cli_main_rc(argv) == 2, argv
        assert "settings" not in captured
        err = capsys.readouterr().err
        assert any(ln.startswith("error: ") for ln in err.splitlines()), err
    (tmp_path / "fdl.yml").write_text("join: {nope: 1}\n")
    assert cli_main_rc(["join", "--bin", "/bin/true"]) == 2
    assert "cannot load" in capsys.readouterr().err


def cli_main_rc(argv):
    try:
        return cli.main(argv)
    except SystemExit as e:  # argparse
        return e.code


@pytest.mark.parametrize("bad", [["--gpu-ram-share", "nan"], ["--gpu-ram-share=-0.5"],
                                 ["--gpu-ram-share", "inf"], ["--gpu-ram-share", "lots"],
                                 ["--frobnicate"]])
def test_flag_parse_errors_exit_2(captured, bad, capsys):
    assert cli_main_rc(["join", "--bin", "/bin/true", *bad]) == 2
    assert "settings" not in captured


def test_help_has_examples():
    with pytest.raises(SystemExit) as e:
        parse(["join", "--help"])
    assert e.value.code == 0


def test_systemd_unit_restarts_forever_but_not_on_exit_2(tmp_path):
    unit = systemd_unit(user="flodl", workdir=str(tmp_path), command=["/opt/fdlenv"],
                        join_args=["--libtorch", "auto", "--host", "a b$%"])
    lines = unit.splitlines()
    assert "Restart=always" in lines and "RestartPreventExitStatus=2" in lines
    assert "User=flodl" in lines and f"WorkingDirectory={tmp_path}" in lines
    assert 'ExecStart=/opt/fdlenv join --persist --libtorch auto --host "a b$$%%"' in lines
    assert "KillMode=mixed" in lines
    assert not any(ln.startswith("FailureAction") for ln in lines)  # opt-in only
    assert "[Install]" in lines and "WantedBy=multi-user.target" in lines


def test_systemd_quote():
    assert systemd_quote("plain") == "plain"
    assert systemd_quote('a "b"') == '"a \\"b\\""'
    assert systemd_quote("") == '""'


def test_recipe_command_prints_the_unit(capsys, tmp_path):
    args = parse(["recipe", "systemd", "--workdir", str(tmp_path), "--", "--no-sig-probe"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "RestartPreventExitStatus=2" in out
    exec_line = next(ln for ln in out.splitlines() if ln.startswith("ExecStart="))
    assert exec_line.endswith("join --persist --no-sig-probe")
    assert "User=root" in out.splitlines()   # written, so that systemd sets HOME


def test_join_is_registered_in_the_cli():
    assert "join" in cli.COMMANDS and "recipe" in cli.COMMANDS


def test_the_redial_path_does_not_import_paramiko():
    import subprocess
    code = ("import sys; from fdlenv.front.commands import join; from fdlenv.join import loop; "
            "from fdlenv.config import load; from fdlenv.app import joinsettings; print('paramiko' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ}, check=True)
    assert out.stdout.strip() == "False"


def test_recipe_refuses_a_token_that_would_sit_on_argv(capsys, tmp_path):
    from fdlenv.base.errors import Fail

    args = parse(["recipe", "systemd", "--workdir", str(tmp_path), "--", "--token", "abc"])
    with pytest.raises(Fail) as e:
        args.func(args)
    assert e.value.exit_code == 2 and "--token-file" in e.value.message and "abc" not in e.value.message
    assert capsys.readouterr().out == ""
