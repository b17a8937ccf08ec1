"""Parsing as fdl parses where fdl is right, refusing where it is not, and every failure classified.

- no option may be abbreviated, in any command;
- `--env X`, `--env=X` and `@X` (before the command only) select fdl.X.yml as FDL_ENV does;
- IPv6 hosts in brackets for the controller, `--ssh`, `rsync://` and `sshfs://`;
- the stricter refusals: one `error:` line naming the field and its forms, exit 2;
- the `cluster:` checks fdl makes at load;
- an exception escaping a step of prepare or join becomes a classified failure.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers_cli import fdlenv
from test_join_loop import agent_record, fake_prepare
from test_join_loop import settings as loop_settings

from fdlenv.front import cli
from fdlenv.config.grammar import bracketed, parse_ssh_spec
from fdlenv.config.load import load_project
from fdlenv.app.datasets import SshfsSource, parse_data_source
from fdlenv.base.errors import Fail
from fdlenv.names.home import Home
from fdlenv.join import loop as L
from fdlenv.join.spec import decode
from fdlenv.app.prepare import PrepareRequest, prepare
from fdlenv.source.spec import parse as parse_source


def errors_of(res: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    """Exit `code`, exactly one `error:` line holding every needle, no traceback."""
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert res.returncode == code, res.stderr
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert all(n in lines[0] for n in needles), (needles, lines[0])
    return lines[0]


@pytest.fixture()
def captured(monkeypatch, tmp_path):
    """`cli.main` runs join up to the loop; the settings it would dial with are recorded."""
    got = {}

    def fake_run_join(settings, prepare, settle=None):   # settle: what the first attempt reads
        got["settings"] = settle(settings) if settle else settings
        return 0
    monkeypatch.setattr("fdlenv.join.loop.run_join", fake_run_join)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLODL_HOST_NAME", "box")
    return got


# ------------------------------------------------------------------ no abbreviations

@pytest.mark.parametrize("argv, needles", [
    (["join", "--bin", "/bin/true", "--dev", "0"], ["unrecognized arguments: --dev"]),
    (["prepare", "--dev", "0"], ["unrecognized arguments: --dev"]),
    (["env", "realize", "--libtorch", "cpu", "--js"], ["unrecognized arguments: --js"]),
    (["--vers"], ["required: COMMAND"]),   # not --version
])
def test_an_abbreviated_option_is_refused_in_every_command(tmp_path, argv, needles):
    res = fdlenv(*argv, cwd=tmp_path, env={"FLODL_HOME": str(tmp_path / "home")})
    errors_of(res, 2, *needles)
    assert res.stdout == "" and not (tmp_path / "home").exists()


def test_the_full_option_name_is_still_read(captured):
    assert cli.main(["join", "--bin", "/bin/true", "--devices", "0,1"]) == 0
    assert captured["settings"].devices == (0, 1)


# ------------------------------------------------------------------ env selectors

@pytest.fixture()
def farm(tmp_path):
    """A project whose base and `farm` overlay (which inherits shared.yml) name different data roots."""
    (tmp_path / "fdl.yml").write_text("join:\n  data_path: /nonexistent/base\n")
    (tmp_path / "fdl.farm.yml").write_text("inherit-from: shared.yml\njoin:\n  host: farm-box\n")
    (tmp_path / "shared.yml").write_text("join:\n  data_path: /nonexistent/shared\n")
    return tmp_path


@pytest.mark.parametrize("argv, environ", [
    (["--env", "farm", "prepare"], {}),
    (["--env=farm", "prepare"], {}),
    (["@farm", "prepare"], {}),
    (["prepare", "--env", "farm"], {}),
    (["prepare"], {"FDL_ENV": "farm"}),
    (["@farm", "prepare"], {"FDL_ENV": "other"}),   # the command line wins over the environment
])
def test_every_selector_loads_the_overlay_and_its_inherit_from_chain(farm, argv, environ):
    res = fdlenv(*argv, cwd=farm, env={"FLODL_HOME": str(farm / "home"), **environ})
    errors_of(res, 2, "data_path: /nonexistent/shared")


def test_without_a_selector_the_base_alone_is_loaded(farm):
    errors_of(fdlenv("prepare", cwd=farm, env={"FLODL_HOME": str(farm / "home")}), 2,
              "data_path: /nonexistent/base")


def test_a_selector_exports_fdl_env_and_the_overlay_settles_the_join(farm, captured):
    (farm / "fdl.farm.yml").write_text("join:\n  controller: farm-ctrl:7\n  bin: /bin/true\n")
    assert cli.main(["@farm", "join"]) == 0
    s = captured["settings"]
    assert (s.controller_host, s.controller_port, os.environ["FDL_ENV"]) == ("farm-ctrl", 7, "farm")


def test_at_name_after_the_command_is_no_selector_and_is_refused_as_a_controller(farm):
    (farm / "fdl.farm.yml").write_text("join:\n  controller: farm-ctrl:7\n")
    res = fdlenv("join", "@farm", "--bin", "/bin/true", cwd=farm)
    errors_of(res, 2, "CONTROLLER", "'@farm'", "fdlenv @farm join")


def test_selectors_after_the_double_dash_belong_to_the_binary(farm, captured):
    (farm / "fdl.farm.yml").write_text("join:\n  controller: farm-ctrl:7\n")
    (farm / "fdl.yml").write_text("join:\n  controller: base-ctrl:1\n  bin: /bin/true\n")
    assert cli.main(["join", "--", "@farm", "--env", "farm", "--env=farm"]) == 0
    s = captured["settings"]
    assert (s.controller_host, s.args) == ("base-ctrl", ("@farm", "--env", "farm", "--env=farm"))
    assert "FDL_ENV" not in os.environ


@pytest.mark.parametrize("argv, needles", [
    (["@nope", "prepare"], ["env 'nope'", "fdl.nope.{yml,yaml,json}", "does not exist"]),
    (["--env", "nope", "prepare"], ["FDL_ENV=nope"]),
    (["--env=", "prepare"], ["--env", "not an env name"]),
    (["@", "prepare"], ["@NAME", "not an env name"]),
    (["--env", "a/b", "prepare"], ["no `/`"]),
    (["prepare", "--env"], ["--env requires a value"]),
])
def test_a_bad_or_missing_overlay_is_one_error_line(farm, argv, needles):
    res = fdlenv(*argv, cwd=farm, env={"FLODL_HOME": str(farm / "home")})
    errors_of(res, 2, *needles)
    assert not (farm / "home").exists()


# ------------------------------------------------------------------ IPv6 in brackets

@pytest.mark.parametrize("controller, want", [
    ("[::1]:1400", ("::1", 1400)), ("[fe80::1]", ("fe80::1", 1337)), ("ctrl:9", ("ctrl", 9))])
def test_a_bracketed_ipv6_controller_reaches_the_agent_without_brackets(captured, tmp_path,
                                                                      controller, want):
    assert cli.main(["join", controller, "--bin", "/bin/true"]) == 0
    s = captured["settings"]
    assert (s.controller_host, s.controller_port) == want
    out = tmp_path / "run"
    s2 = loop_settings(out, controller_host=s.controller_host, controller_port=s.controller_port,
                       sig_probe=False)
    assert L.Runner(settings=s2, prepare=fake_prepare(out), say=lambda _: None).run() == 0
    spec = decode(agent_record(out)["env"]["FLODL_INTERNAL_AGENT_JSON"])
    assert (spec["controller_host"], spec["controller_port"]) == want   # a socket connect takes it as is


@pytest.mark.parametrize("argv, yml, needles", [
    (["join", "fe80::1"], None, ["CONTROLLER", "'fe80::1'", "brackets", "[::1]:1337"]),
    (["join"], "join: {controller: 'fe80::1'}", ["join.controller", "brackets"]),
    (["join", "--ssh", "u@fe80::1"], None, ["--ssh", "brackets", "user@[::1]:2222"]),
    (["join", "[::1"], None, ["CONTROLLER", "unclosed `[`"]),
    (["prepare", "--source", "rsync://fe80::1:/srv/t"], None, ["source:", "brackets"]),
    (["prepare"], "join: {data_source: 'sshfs://fe80::1/d'}", ["data_source", "brackets"]),
])
def test_a_bare_ipv6_address_is_refused_naming_the_field_and_the_brackets(tmp_path, argv, yml, needles):
    if yml:
        (tmp_path / "fdl.yml").write_text(yml + "\n")
    res = fdlenv(*argv, *(["--bin", "/bin/true"] if argv[0] == "join" else []), cwd=tmp_path,
                 env={"FLODL_HOME": str(tmp_path / "home")})
    errors_of(res, 2, *needles)
    assert not (tmp_path / "home").exists()


def test_an_ssh_hop_host_is_kept_bare_and_bracketed_where_written():
    s = parse_ssh_spec("join@[fe80::1]:2222")
    assert (s.target, s.user, s.port, s.display()) == ("fe80::1", "join", 2222, "join@[fe80::1]:2222")
    assert parse_ssh_spec("[::1]").target == "::1"
    assert (bracketed("::1"), bracketed("ctrl")) == ("[::1]", "ctrl")


def test_a_bracketed_target_in_the_ssh_block_is_kept_bare(tmp_path):
    (tmp_path / "fdl.yml").write_text("join:\n  ssh: {target: '[::1]', port: 2222}\n")
    assert load_project(tmp_path, environ={}).join.ssh.target == "::1"


def test_rsync_and_sshfs_remotes_put_the_brackets_back():
    r = parse_source("rsync://u@[fe80::1]:2222:/srv/t")
    assert (r.host, r.user, r.port, r.remote) == ("fe80::1", "u", 2222, "u@[fe80::1]:/srv/t")
    assert parse_source("rsync://[::1]:/srv/t").remote == "[::1]:/srv/t"
    assert parse_data_source("sshfs://u@[::1]:2222/d/e") == SshfsSource("u@[::1]:/d/e", 2222)
    assert parse_data_source("sshfs://[::1]:/d") == SshfsSource("[::1]:/d", None)


# ------------------------------------------------------------------ stricter than fdl

@pytest.mark.parametrize("argv, needles", [
    (["join", "ctrl:0"], ["CONTROLLER", "'ctrl:0'", "1-65535", "expected host[:port]"]),
    (["join", ":1337"], ["CONTROLLER", "empty host", "expected host[:port]"]),
    (["join", "--ssh", "u@gw:0"], ["--ssh", "1-65535", "[user@]host[:port]"]),
    (["join", "--ssh", "u@"], ["--ssh", "empty host"]),
    (["join", "--gpu-ram-share", "-0.5"], ["--gpu-ram-share", ">= 0", "e.g. 0.5"]),
    (["join", "--gpu-ram-share=nan"], ["--gpu-ram-share", "finite"]),
    (["join", "--gpu-ram-share", "inf"], ["--gpu-ram-share", "finite"]),
    (["prepare", "--source", "rsync://gw:0/srv"], ["source:", "1-65535", "accepted:"]),
])
def test_each_stricter_refusal_is_one_error_line_before_anything_runs(tmp_path, argv, needles):
    extra = ["--bin", "/bin/true"] if argv[0] == "join" else []
    res = fdlenv(*argv, *extra, cwd=tmp_path, env={"FLODL_HOME": str(tmp_path / "home")})
    errors_of(res, 2, *needles)
    assert "re-dialing" not in res.stderr and not (tmp_path / "home").exists()


# ------------------------------------------------------------------ cluster: at load

@pytest.mark.parametrize("yaml_text, needles", [
    ("cluster: {controller: {join: {start: bogus}}}",
     ["cluster.controller.join.start", "auto, manual, hybrid", "'bogus'"]),
    ("cluster: {controller: {join: {strat: manual}}}",
     ["cluster.controller.join: unknown key 'strat'", "min_rank_start"]),
    ("cluster: {controller: {join: {min_rank_start: -1}}}",
     ["cluster.controller.join.min_rank_start", "whole number >= 0"]),
    ("cluster: {controller: {join: {join_timeout: 1.5}}}", ["cluster.controller.join.join_timeout"]),
    ("cluster: {controller: {join: {discovery: 'yes'}}}",
     ["cluster.controller.join.discovery", "true or false"]),
    ("cluster: {controller: {join: [auto]}}", ["cluster.controller.join: expected a mapping"]),
    ("cluster: {gpu_ram_share: .nan}", ["cluster.gpu_ram_share", "finite number >= 0"]),
    ("cluster: {workers: [{host: a}, {host: b, gpu_ram_share: -0.5}]}",
     ["cluster.workers[1].gpu_ram_share", ">= 0"]),
    ("cluster: {workers: [{host: a, ranks: [0, 1]}]}", ["cluster.workers[0].ranks", "remove the key"]),
    ("cluster: {workers: {host: a}}", ["cluster.workers: expected a list"]),
    ("cluster: [a]", ["cluster: expected a mapping"]),
])
def test_a_bad_cluster_section_fails_the_load_naming_the_key(tmp_path, yaml_text, needles):
    (tmp_path / "fdl.yml").write_text(yaml_text + "\n")
    with pytest.raises(Fail) as e:
        load_project(tmp_path, environ={})
    assert e.value.exit_code == 2 and "cannot load" in e.value.message
    assert all(n in e.value.message for n in needles), e.value.message


@pytest.mark.parametrize("start", ["auto", "manual", "hybrid"])
def test_a_full_controller_join_block_loads(tmp_path, start):
    (tmp_path / "fdl.yml").write_text(f"""
cluster:
  gpu_ram_share: 1.5
  controller:
    host: 127.0.0.1
    join: {{min_rank_start: 2, join_timeout: 600, target_ranks: 4, max_join_timeout: 1200,
            open_admission: false, discovery: true, token: abc, tunnel_only: true, start: {start}}}
  workers: [{{host: a, gpu_ram_share: 0, ranks: []}}]
join: {{bin: /bin/true}}
""")
    assert load_project(tmp_path, environ={}).join.bin == "/bin/true"


def test_a_bad_cluster_section_fails_join_too_because_the_whole_project_is_loaded(tmp_path):
    (tmp_path / "fdl.yml").write_text("join: {bin: /bin/true}\n"
                                      "cluster: {controller: {join: {start: bogus}}}\n")
    errors_of(fdlenv("join", cwd=tmp_path), 2, "cannot load", "cluster.controller.join.start")


# ------------------------------------------------------------------ every failure classified

def test_an_oserror_escaping_a_prepare_step_ends_join_permanently_without_re_dialing(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "locks").write_text("a file where the home's locks should be\n")
    res = fdlenv("join", "--persist", "--no-sig-probe", "--source", f"file://{tmp_path / 'src'}",
                 cwd=tmp_path, env={"FLODL_HOME": str(tmp_path / "home"),
                                    "FLODL_TESTING_GPU_JSON": '[{"vendor": "amd", "arch": "gfx90a"}]'})
    errors_of(res, 2, "prepare (source):", str(tmp_path / "home" / "locks"))
    assert "not re-dialing — retrying cannot fix this (exit 2)" in res.stderr


def test_the_same_oserror_fails_prepare_with_one_line(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "locks").write_text("x\n")
    res = fdlenv("prepare", "--source", f"file://{tmp_path / 'src'}", cwd=tmp_path,
                 env={"FLODL_HOME": str(tmp_path / "home"), "FLODL_TESTING_GPU_JSON": "[]"})
    errors_of(res, 2, "prepare (source):", "locks")


def _raising(exc):
    def step(*_a, **_k):
        raise exc
    return step


CAUSES = [
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), 2, "not UTF-8 text"),
    # fdlenv checks what it reads where it reads it: an escaped ValueError is fdlenv's bug
    (json.JSONDecodeError("Expecting value", "x", 0), 1, "a bug in fdlenv (JSONDecodeError: Expecting value"),
    (subprocess.TimeoutExpired(["rsync", "-a"], 30), 1, "rsync did not finish within 30 s"),
    (subprocess.CalledProcessError(23, ["git", "fetch"]), 1, "git failed (exit 23)"),
    (RuntimeError("boom"), 1, "a bug in fdlenv (RuntimeError: boom at fdlenv/"),
]


@pytest.mark.parametrize("exc, code, needle", CAUSES)
def test_an_exception_in_a_prepare_step_becomes_a_fail_naming_the_step_and_the_cause(tmp_path, exc,
                                                                                    code, needle):
    with pytest.raises(Fail) as e:
        prepare(PrepareRequest(gpu_gate=True), Home(tmp_path / "home"), survey=_raising(exc))
    assert e.value.exit_code == code
    assert e.value.message.startswith("prepare (gpu): ") and needle in e.value.message


def test_yaml_errors_are_unreadable_content(tmp_path):
    import yaml
    with pytest.raises(Fail) as e:
        prepare(PrepareRequest(gpu_gate=True), Home(tmp_path / "home"),
                survey=_raising(yaml.YAMLError("mapping values are not allowed here")))
    assert e.value.exit_code == 2 and "unreadable content (YAMLError" in e.value.message


@pytest.mark.parametrize("exc, code, needle", CAUSES)
def test_join_prints_one_line_per_cause_and_re_dials_only_when_transient(tmp_path, capsys, exc, code,
                                                                        needle):
    notes = []
    s = loop_settings(tmp_path, sig_probe=False, persist=False)
    assert L.run_join(s, _raising(exc), say=notes.append) == code
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith("error: join (prepare): ") and needle in lines[0]
    assert ("not re-dialing — retrying cannot fix this (exit 2)" in notes) == (code == 2)


def test_an_exception_after_preparation_names_the_phase_and_is_told_as_a_bug(tmp_path, capsys):
    def prober(*_a, **_k):
        raise ValueError("probe output is not JSON")
    out = tmp_path / "run"
    notes = []
    s = loop_settings(out, persist=False)
    assert L.run_join(s, fake_prepare(out), prober=prober, say=notes.append) == 1
    err = capsys.readouterr().err
    assert "error: join (probe): a bug in fdlenv (ValueError: probe output is not JSON" in err
    assert "please report it" in err and "Traceback" not in err
    assert "not re-dialing — retrying cannot fix this (exit 2)" not in notes
    assert not Path(out, "agent0.json").exists()
