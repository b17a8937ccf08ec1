"""fdl.yml discovery, overlays, and the strict `join:` / `fdlenv:` schemas."""

from __future__ import annotations

import json
import math

import pytest

from fdlenv.config.load import load_project
from fdlenv.config.fdlfile import find_config
from fdlenv.base.errors import Fail


def write(p, text):
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_discovery_walks_up_and_prefers_yaml_then_yml_then_json(tmp_path):
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    assert find_config(deep) is None or not str(find_config(deep)).startswith(str(tmp_path))
    write(tmp_path / "a" / "fdl.json", "{}")
    assert find_config(deep) == tmp_path / "a" / "fdl.json"
    write(tmp_path / "a" / "fdl.yml", "join: {}\n")
    assert find_config(deep) == tmp_path / "a" / "fdl.yml"
    write(tmp_path / "a" / "fdl.yaml", "join: {}\n")
    assert find_config(deep) == tmp_path / "a" / "fdl.yaml"


def test_command_level_configs_are_skipped(tmp_path):
    write(tmp_path / "fdl.yml", "join:\n  bin: /x\n")
    for key in ("entry", "compile", "docker", "run", "append"):
        sub = tmp_path / key
        write(sub / "fdl.yml", f"{key}: something\n")
        assert find_config(sub) == tmp_path / "fdl.yml"


def test_an_unparseable_file_is_returned_and_reported_loudly(tmp_path):
    write(tmp_path / "fdl.yml", "join: [unclosed\n")
    assert find_config(tmp_path) == tmp_path / "fdl.yml"
    with pytest.raises(Fail) as e:
        load_project(tmp_path, environ={})
    assert not e.value.transient
    assert e.value.message.startswith(f"cannot load {tmp_path / 'fdl.yml'}:")


def test_empty_or_comment_only_file_means_all_defaults(tmp_path):
    write(tmp_path / "fdl.yml", "# nothing here\n")
    p = load_project(tmp_path, environ={})
    assert p is not None and p.join is None and p.root == tmp_path
    assert p.fdlenv.lock is None and dict(p.fdlenv.mirrors) == {}


def test_full_join_block_parses(tmp_path):
    write(tmp_path / "fdl.yml", """
join:
  controller: ctrl:4000
  ssh: {target: gw, port: 2222, user: join, identity_file: k, options: [ServerAliveInterval=5]}
  token: abcd
  source: {from: "file:///src", cwd: app, build: make, bin: out/train}
  libtorch: cu128
  host: box1
  devices: [0, 3]
  persist: true
  data_path: /data
  data_source: sshfs://u@h:/d
  gpu_ram_share: 1.5
  sig_probe: false
  args: [--epochs, "3"]
""")
    j = load_project(tmp_path, environ={}).join
    assert j.controller == "ctrl:4000"
    assert (j.ssh.target, j.ssh.port, j.ssh.user, j.ssh.identity_file, j.ssh.options) == \
        ("gw", 2222, "join", "k", ("ServerAliveInterval=5",))
    assert (j.source.from_, j.source.cwd, j.source.build, j.source.bin) == \
        ("file:///src", "app", "make", "out/train")
    assert j.devices == (0, 3) and j.persist is True and j.sig_probe is False
    assert j.gpu_ram_share == 1.5 and j.args == ("--epochs", "3")


@pytest.mark.parametrize("yaml_text, needle", [
    ("join: {bogus: 1}", "join: unknown key 'bogus'"),
    ("join: {ssh: {target: a, jump: b}}", "join.ssh: unknown key 'jump'"),
    ("join: {source: {from: x, branch: y}}", "join.source: unknown key 'branch'"),
    ("join: {source: {cwd: x}}", "join.source: missing required key 'from'"),
    ("join: {devices: all}", "join.devices"),
    ("join: {devices: [0, 256]}", "join.devices"),
    ("join: {devices: [true]}", "join.devices"),
    ("join: {gpu_ram_share: -0.1}", "join.gpu_ram_share: must be a finite number >= 0"),
    ("join: {gpu_ram_share: .nan}", "join.gpu_ram_share"),
    ("join: {gpu_ram_share: .inf}", "join.gpu_ram_share"),
    ("join: {gpu_ram_share: lots}", "join.gpu_ram_share: expected a number"),
    ("join: {persist: yes-please}", "join.persist"),
    ("join: {args: --epochs}", "join.args"),
    ("join: {ssh: {target: a, port: 70000}}", "join.ssh.port"),
    ("join: {ssh: {target: a, options: ServerAliveInterval=5}}", "join.ssh.options"),
    ("join: {token: 123}", "join.token: expected a string"),
    ("join: [1, 2]", "join: expected a mapping"),
    ("fdlenv: {lock: a, extra: b}", "fdlenv: unknown key 'extra'"),
    ("fdlenv: {mirrors: [a]}", "fdlenv.mirrors"),
    ("cluster: {gpu_ram_share: -1}", "cluster.gpu_ram_share"),
    ("cluster: {workers: [{host: a, ranks: 2}]}", "cluster.workers[0].ranks"),
    ("- a list", "expected a mapping at the top level"),
])
def test_authoring_errors_in_the_file_name_the_key(tmp_path, yaml_text, needle):
    write(tmp_path / "fdl.yml", yaml_text + "\n")
    with pytest.raises(Fail) as e:
        load_project(tmp_path, environ={})
    assert not e.value.transient and e.value.exit_code == 2
    assert "cannot load" in e.value.message and needle in e.value.message


def test_gpu_ram_share_over_one_is_legal_and_zero_too(tmp_path):
    write(tmp_path / "fdl.yml", "join: {gpu_ram_share: 0}\n")
    assert load_project(tmp_path, environ={}).join.gpu_ram_share == 0.0
    write(tmp_path / "fdl.yml", "join: {gpu_ram_share: 3}\n")
    assert load_project(tmp_path, environ={}).join.gpu_ram_share == 3.0


def test_fdl_env_overlay_deep_merges_over_the_base(tmp_path):
    write(tmp_path / "fdl.yml", "join:\n  controller: a:1\n  ssh: {target: gw, user: u}\n"
                                 "  args: [x, y]\n")
    write(tmp_path / "fdl.farm.yaml", "join:\n  ssh: {port: 2200}\n  args: [z]\n")
    base = load_project(tmp_path, environ={})
    assert base.join.ssh.port is None and base.overlay is None
    p = load_project(tmp_path, environ={"FDL_ENV": "  farm "})
    assert p.overlay == tmp_path / "fdl.farm.yaml"
    assert (p.join.controller, p.join.ssh.target, p.join.ssh.user, p.join.ssh.port) == \
        ("a:1", "gw", "u", 2200)
    assert p.join.args == ("z",)  # lists are replaced, not appended


def test_a_blank_fdl_env_selects_nothing(tmp_path):
    write(tmp_path / "fdl.yml", "join: {host: base}\n")
    assert load_project(tmp_path, environ={"FDL_ENV": "  "}).join.host == "base"


def test_a_missing_overlay_is_an_error(tmp_path):
    write(tmp_path / "fdl.yml", "join: {}\n")
    with pytest.raises(Fail) as e:
        load_project(tmp_path, environ={"FDL_ENV": "nope"})
    assert "FDL_ENV=nope" in e.value.message and "fdl.nope." in e.value.message


def test_an_overlay_can_fix_what_the_base_gets_wrong_and_break_what_it_gets_right(tmp_path):
    write(tmp_path / "fdl.yml", "join: {host: a}\n")
    write(tmp_path / "fdl.bad.json", json.dumps({"join": {"nope": 1}}))
    with pytest.raises(Fail) as e:
        load_project(tmp_path, environ={"FDL_ENV": "bad"})
    assert str(tmp_path / "fdl.bad.json") in e.value.message


def test_inherit_from_chains_are_expanded_and_deduplicated(tmp_path):
    write(tmp_path / "shared" / "common.yml", "join: {host: common, token: t0}\n"
                                               "inherit-from: ../fdl.yml\n")
    write(tmp_path / "fdl.yml", "inherit-from: shared/common.yml\njoin: {token: t1}\n")
    p = load_project(tmp_path, environ={})
    assert p.join.host == "common" and p.join.token == "t1"


def test_inherit_from_a_missing_file_is_an_error(tmp_path):
    write(tmp_path / "fdl.yml", "inherit-from: gone.yml\n")
    with pytest.raises(Fail) as e:
        load_project(tmp_path, environ={})
    assert "gone.yml" in e.value.message


def test_fdlenv_block_paths_anchor_at_the_project_root(tmp_path):
    write(tmp_path / "fdl.yml", "fdlenv:\n  lock: locks/conda-lock.yml\n  home: h\n"
                                 "  mirrors: {conda-forge: 'file:///m/cf'}\n")
    sub = tmp_path / "deeper"
    sub.mkdir()
    p = load_project(sub, environ={})
    assert p.fdlenv.lock == str(tmp_path / "locks" / "conda-lock.yml")
    assert p.fdlenv.home == str(tmp_path / "h")
    assert dict(p.fdlenv.mirrors) == {"conda-forge": "file:///m/cf"}
    assert p.join is None


def test_json_config_is_read(tmp_path):
    write(tmp_path / "fdl.json", json.dumps({"join": {"gpu_ram_share": 0.25, "devices": [1]}}))
    j = load_project(tmp_path, environ={}).join
    assert j.devices == (1,) and math.isclose(j.gpu_ram_share, 0.25)
