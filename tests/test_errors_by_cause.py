"""Errors by cause: a mistake in what fdlenv reads is a `Fail` naming the field; an exception
fdlenv did not expect is a bug, told as one line (what, and where in fdlenv), exit 1 so a
persisting box tries again, the traceback only with `--debug` or FDLENV_DEBUG=1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fdlenv.config.grammar import check_share, split_host_port
from fdlenv.config.schema import validate
from fdlenv.base.errors import Fail, classify

# A real `fdlenv` process whose `detect` command has a bug planted (a KeyError in its body).
_PLANTED = """
import sys
import fdlenv.front.cli as cli
import fdlenv.front.commands.detect as detect

detect.run = lambda args: {}["planted"]      # the command's body, however its argv is read
sys.exit(cli.main())
"""


def _run(*args: str, debug: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "FDLENV_DEBUG"}
    if debug is not None:
        env["FDLENV_DEBUG"] = debug
    return subprocess.run([sys.executable, "-c", _PLANTED, *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_a_bug_is_one_line_naming_the_exception_and_where_and_exits_1():
    res = _run("detect")
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: fdlenv detect: a bug in fdlenv (KeyError: 'planted' at fdlenv/")
    assert "please report it" in lines[0] and "FDLENV_DEBUG=1 or --debug" in lines[0]
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("how", ["FDLENV_DEBUG=1", "--debug"])
def test_the_traceback_of_a_bug_is_printed_only_when_debugging(how):
    res = _run("--debug", "detect") if how == "--debug" else _run("detect", debug="1")
    assert res.returncode == 1
    assert res.stderr.startswith("Traceback (most recent call last):"), res.stderr
    assert "KeyError: 'planted'" in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("error: fdlenv detect: a bug in fdlenv (KeyError")


def test_a_bug_under_json_is_the_failure_object_with_exit_1():
    import json

    res = _run("detect", "--json")
    assert res.returncode == 1
    out = json.loads(res.stdout)
    assert out["exit"] == 1 and "a bug in fdlenv" in out["error"] and out["schema"] == 1


def test_a_value_error_is_a_bug_not_bad_input():
    f = classify(ValueError("odd"), "join (probe)")
    assert f.transient and "a bug in fdlenv (ValueError: odd" in f.message
    assert "unreadable content" not in f.message


@pytest.mark.parametrize("data, field", [
    ({"join": {"ssh": {"port": 0}}}, "join.ssh.port"),
    ({"join": {"devices": ["x"]}}, "join.devices"),
    ({"join": {"unknown": 1}}, "unknown key 'unknown'"),
    ({"fdlenv": {"frozen": "yes"}}, "fdlenv.frozen"),
])
def test_a_mistake_in_fdl_yml_is_a_permanent_fail_naming_the_field(data, field):
    with pytest.raises(Fail) as e:
        validate(data, Path("/project"))
    assert not e.value.transient and field in e.value.message


@pytest.mark.parametrize("call", [lambda: split_host_port("[::1"), lambda: split_host_port("h:0"),
                                  lambda: check_share(-1, "--gpu-ram-share")])
def test_the_config_grammar_raises_fail_never_value_error(call):
    with pytest.raises(Fail):
        call()
