"""Flags over the `join:` block (anchor-join §1.3) and every authoring error (§1.4)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from fdlenv.config.grammar import local_hostname, parse_controller, parse_devices, parse_ssh_spec
from fdlenv.names.variants import parse
from fdlenv.config.model import FdlenvBlock, JoinBlock, JoinFlags, Project, SourceSpec, SshConfig
from fdlenv.names.variants import Libtorch
from fdlenv.app.joinsettings import check_given_bin, resolve, resolve_prepare
from fdlenv.base.errors import Fail


def project(join: JoinBlock | None = None, fdl: FdlenvBlock | None = None) -> Project:
    return Project(path=Path("/p/fdl.yml"), root=Path("/p"), join=join,
                   fdlenv=fdl or FdlenvBlock())


def res(flags: JoinFlags, join: JoinBlock | None = None, **kw):
    kw.setdefault("environ", {})
    return resolve(flags, project(join) if join is not None else None,
                   hostname=lambda: "box-from-hostname", **kw)


FULL_BLOCK = JoinBlock(
    controller="blockctrl:9000",
    ssh=SshConfig(target="blockgw", port=2200, user="blockuser", identity_file="/block/key",
                  options=("ServerAliveInterval=5",)),
    token="blocktoken", bin="/block/bin", libtorch="cu126", host="blockhost",
    devices=(2, 3), persist=True, data_path="/block/data", data_source="sshfs://h:/d",
    gpu_ram_share=0.5, sig_probe=True, args=("--block",))


def test_flags_win_over_the_config_block():
    f = JoinFlags(controller="cli", ssh="cliuser@cligw:2222", identity="/cli/key", token="clitok",
                  bin="/cli/bin", libtorch=parse("12.8"), host="clihost", devices="0,1",
                  data_path="/cli/data", data_source="sshfs://x:/y", gpu_ram_share=0.25,
                  persist=False, tail=["--cli"])
    s = res(f, FULL_BLOCK)
    assert (s.controller_host, s.controller_port, s.controller_defaulted) == ("cli", 1337, False)
    # compact --ssh keeps only the block's options; --identity wins last
    assert (s.ssh.target, s.ssh.user, s.ssh.port) == ("cligw", "cliuser", 2222)
    assert s.ssh.identity_file == "/cli/key"
    assert s.ssh.options == ("ServerAliveInterval=5",)   # no accept-new added: the tunnel's plan decides
    assert (s.token, s.bin, s.libtorch, s.host, s.devices) == \
        ("clitok", "/cli/bin", Libtorch("cu128"), "clihost", (0, 1))
    assert (s.data_path, s.data_source, s.gpu_ram_share) == ("/cli/data", "sshfs://x:/y", 0.25)
    assert s.persist is True          # the block's persist sticks with the flag off
    assert s.args == ("--cli",)       # the tail replaces the block args


def test_block_fills_everything_the_flags_left_unset():
    s = res(JoinFlags(), FULL_BLOCK)
    assert (s.controller_host, s.controller_port) == ("blockctrl", 9000)
    assert s.ssh == SshConfig(target="blockgw", port=2200, user="blockuser",
                              identity_file="/block/key",
                              options=("ServerAliveInterval=5",))
    assert (s.token, s.bin, s.libtorch, s.host, s.devices, s.persist) == \
        ("blocktoken", "/block/bin", Libtorch("cu126"), "blockhost", (2, 3), True)
    assert (s.data_path, s.data_source, s.gpu_ram_share, s.sig_probe, s.args) == \
        ("/block/data", "sshfs://h:/d", 0.5, True, ("--block",))


def test_compact_ssh_drops_block_user_and_port_even_when_the_spec_omits_them():
    s = res(JoinFlags(ssh="othergw"), JoinBlock(ssh=FULL_BLOCK.ssh, bin="/b"))
    assert (s.ssh.target, s.ssh.user, s.ssh.port, s.ssh.identity_file) == \
        ("othergw", None, None, "/block/key")


def test_the_users_strict_host_key_setting_wins_over_accept_new():
    blk = JoinBlock(bin="/b", ssh=SshConfig(target="gw", options=("  StrictHostKeyChecking=yes",)))
    assert res(JoinFlags(), blk).ssh.options == ("  StrictHostKeyChecking=yes",)


def test_a_source_block_becomes_a_source_spec_and_the_tunnel_key_rides_along():
    blk = JoinBlock(source=SourceSpec("rsync://h:/src", cwd="app", bin="target/release/t"),
                    ssh=SshConfig(target="gw", identity_file="/k"))
    s = res(JoinFlags(source_build="make"), blk)
    assert s.source == SourceSpec("rsync://h:/src", cwd="app", build="make",
                                  bin="target/release/t")
    assert s.ssh.identity_file == "/k" and s.bin is None


def test_a_source_flag_keeps_the_blocks_other_source_fields():
    blk = JoinBlock(source=SourceSpec("file:///old", cwd="app", build="make", bin="out"))
    s = res(JoinFlags(source="git+https://h/o/r#main", source_bin="other"), blk)
    assert s.source == SourceSpec("git+https://h/o/r#main", cwd="app", build="make", bin="other")


def test_a_source_with_no_artifact_is_legal_because_a_manifest_may_name_it():
    s = res(JoinFlags(source="file:///src"))
    assert s.source == SourceSpec("file:///src") and s.bin is None


def test_defaults_are_loopback_hostname_and_all_devices():
    s = res(JoinFlags(bin="/b"))
    assert (s.controller_host, s.controller_port, s.controller_defaulted) == \
        ("127.0.0.1", 1337, True)
    assert s.ssh is None and s.token is None and s.host == "box-from-hostname"
    assert s.devices is None and s.persist is False and s.args == ()
    assert s.data_path is None and s.data_source is None and s.gpu_ram_share is None
    assert s.sig_probe is True and s.libtorch is None and s.project_root is None


def test_an_explicit_empty_tail_clears_the_block_args_and_no_tail_keeps_them():
    blk = JoinBlock(bin="/b", args=("--a", "1"))
    assert res(JoinFlags(tail=[]), blk).args == ()
    assert res(JoinFlags(tail=None), blk).args == ("--a", "1")


def test_ssh_implies_the_loopback_controller_without_a_note():
    s = res(JoinFlags(bin="/b", ssh="gw"))
    assert (s.controller_host, s.controller_port, s.controller_defaulted) == \
        ("127.0.0.1", 1337, False)


@pytest.mark.parametrize("flag_persist, block_persist, want", [
    (False, False, False), (True, False, True), (False, True, True), (True, True, True)])
def test_persist_can_only_be_switched_on(flag_persist, block_persist, want):
    assert res(JoinFlags(bin="/b", persist=flag_persist),
               JoinBlock(persist=block_persist)).persist is want


@pytest.mark.parametrize("no_probe, block_probe, want", [
    (False, None, True), (False, True, True), (False, False, False),
    (True, None, False), (True, True, False), (True, False, False)])
def test_the_sig_probe_can_only_be_switched_off(no_probe, block_probe, want):
    assert res(JoinFlags(bin="/b", no_sig_probe=no_probe),
               JoinBlock(sig_probe=block_probe)).sig_probe is want


def test_mirrors_merge_flags_over_the_fdlenv_block_and_lock_flag_wins():
    fdl = FdlenvBlock(lock="/p/block.lock", mirrors={"a": "file:///ma", "b": "file:///mb"})
    s = resolve(JoinFlags(bin="/b", mirrors=["b=file:///cli-b", "c=https://c.example/c"]),
                project(None, fdl), hostname=lambda: "h", environ={})
    assert dict(s.mirrors) == {"a": "file:///ma", "b": "file:///cli-b",
                               "c": "https://c.example/c"}
    assert s.lock == "/p/block.lock" and s.project_root == "/p"
    s2 = resolve(JoinFlags(bin="/b", lock="/cli.lock"), project(None, fdl),
                 hostname=lambda: "h", environ={})
    assert s2.lock == "/cli.lock"


@pytest.mark.parametrize("flag, env, block, want", [
    ("/flag", "/env", "/block", "/flag"), (None, "/env", "/block", "/env"),
    (None, "", "/block", "/block"), (None, "", None, "/user/.flodl")])
def test_home_precedence(flag, env, block, want):
    environ = {"HOME": "/user", **({"FLODL_HOME": env} if env else {})}
    s = resolve(JoinFlags(bin="/b", home=flag), project(None, FdlenvBlock(home=block)),
                hostname=lambda: "h", environ=environ)
    assert s.home == want


def test_blank_host_falls_back_to_the_hostname():
    assert res(JoinFlags(bin="/b", host="  "), JoinBlock(host="blk")).host == "box-from-hostname"


@pytest.mark.parametrize("flags, block, needles", [
    (JoinFlags(bin="/b", identity="/k"), None, ["--identity", "ssh hop"]),
    (JoinFlags(bin="/b", identity="/k"), JoinBlock(), ["ssh hop"]),
    (JoinFlags(bin="/b"), JoinBlock(ssh=SshConfig(user="u")), ["join.ssh", "target"]),
    (JoinFlags(bin="/b", ssh="@ctrl"), None, ["empty user before `@`"]),
    (JoinFlags(bin="/b", ssh="join@"), None, ["--ssh", "empty host"]),
    (JoinFlags(bin="/b", ssh="ctrl:pear"), None, ["--ssh", "pear"]),
    (JoinFlags(bin="/b", ssh="ctrl:70000"), None, ["--ssh", "70000"]),
    (JoinFlags(bin="/b", ssh="fe80::1"), None, ["brackets"]),
    (JoinFlags(bin="/b", controller="ctrl:pear"), None,
     ["invalid controller address", "expected host[:port]"]),
    (JoinFlags(bin="/b", controller=":1337"), None, ["invalid controller address", "empty host"]),
    (JoinFlags(bin="/b", controller="ctrl:0"), None, ["port"]),
    (JoinFlags(bin="/b", controller="fe80::1"), None, ["IPv6", "brackets"]),
    (JoinFlags(bin="/b", controller="[::1"), None, ["unclosed"]),
    (JoinFlags(bin="/b", controller="[::1]x"), None, ["after `]`"]),
    (JoinFlags(bin="/b"), JoinBlock(controller="c:99999"), ["invalid controller address"]),
    (JoinFlags(bin="/b", source_cwd="app"), None, ["--source-cwd", "no source"]),
    (JoinFlags(bin="/b", source_build="make", source_bin="x"), None,
     ["--source-build", "no source"]),
    (JoinFlags(bin="/b", source_bin="x"), None, ["--source-bin", "no source"]),
    (JoinFlags(bin="/b", source="file:///s"), None, ["both name"]),
    (JoinFlags(source="file:///s"), JoinBlock(bin="/blockbin"), ["both name"]),
    (JoinFlags(bin="/b"), JoinBlock(source=SourceSpec("file:///s")), ["both name"]),
    (JoinFlags(), None, ["--bin", "--source", "join.bin", "join.source"]),
    (JoinFlags(), JoinBlock(host="x"), ["join.bin"]),
    (JoinFlags(bin="/b", devices="0,x"), None, ["invalid --devices", "`0,1` or `all`"]),
    (JoinFlags(bin="/b", devices="0,"), None, ["invalid --devices"]),
    (JoinFlags(bin="/b", devices="256"), None, ["invalid --devices"]),
    (JoinFlags(bin="/b", devices="-1"), None, ["invalid --devices"]),
    (JoinFlags(bin="/b"), JoinBlock(libtorch="rocm6"), ["join.libtorch", "rocm6"]),
    (JoinFlags(bin="/b", gpu_ram_share=-0.5), None, ["--gpu-ram-share", ">= 0"]),
    (JoinFlags(bin="/b", gpu_ram_share=float("nan")), None, ["--gpu-ram-share", "finite"]),
    (JoinFlags(bin="/b", gpu_ram_share=float("inf")), None, ["--gpu-ram-share"]),
    (JoinFlags(bin="/b", mirrors=["noequals"]), None, ["--mirror"]),
])
def test_authoring_errors_are_permanent_and_name_what_is_wrong(flags, block, needles):
    with pytest.raises(Fail) as e:
        res(flags, block)
    assert e.value.exit_code == 2 and not e.value.transient
    for n in needles:
        assert n in e.value.message, (n, e.value.message)


def test_a_bad_libtorch_token_is_refused_by_the_one_parse_naming_its_field():
    # --libtorch is parsed by the front (`join_flags`); fdl.yml's join.libtorch by resolve, once
    for where in ("--libtorch", "join.libtorch"):
        with pytest.raises(Fail) as e:
            parse("cu999", where=where)
        assert e.value.exit_code == 2 and e.value.message.startswith(f"{where}: unknown variant 'cu999'; accepted")


def test_the_identity_guard_comes_before_everything_else():
    with pytest.raises(Fail) as e:
        res(JoinFlags(identity="/k", controller="bad:port", devices="x"))
    assert "ssh hop" in e.value.message


@pytest.mark.parametrize("text, want", [
    ("ctrl", ("ctrl", 1337)), ("ctrl:2222", ("ctrl", 2222)), (" ctrl:1 ", ("ctrl", 1)),
    ("10.0.0.5:65535", ("10.0.0.5", 65535)), ("[::1]:1400", ("::1", 1400)),
    ("[fe80::1]", ("fe80::1", 1337))])
def test_controller_shapes(text, want):
    assert parse_controller(text) == want


@pytest.mark.parametrize("text, want", [
    ("join@ctrl:2222", ("ctrl", "join", 2222)), ("ctrl", ("ctrl", None, None)),
    ("u@[::1]:22", ("::1", "u", 22)), ("a@b@c", ("b@c", "a", None))])
def test_ssh_spec_shapes(text, want):
    s = parse_ssh_spec(text)
    assert (s.target, s.user, s.port) == want


@pytest.mark.parametrize("text, want", [
    ("all", None), (" ALL ", None), (" 2 ", (2,)), ("0,1", (0, 1)), ("1, 1", (1, 1)),
    ("255", (255,))])
def test_devices_shapes(text, want):
    assert parse_devices(text) == want


def test_hostname_default_order(monkeypatch):
    assert local_hostname({"FLODL_HOST_NAME": "  named  "}) == "named"
    assert local_hostname({"FLODL_HOST_NAME": "   "}) == socket.gethostname()
    monkeypatch.setattr(os, "uname", lambda: os.uname_result(("Linux", "", "r", "v", "m")))
    assert local_hostname({}) == "unknown-host"


def test_prepare_subset_needs_no_controller_and_no_binary():
    blk = JoinBlock(controller="c:1", token="t", persist=True, args=("--x",), libtorch="cpu",
                    devices=(1,), sig_probe=True)
    s = resolve_prepare(JoinFlags(), project(blk), hostname=lambda: "h", environ={})
    assert s.controller_host is None and s.controller_port is None and s.token is None
    assert s.persist is False and s.sig_probe is False and s.args == ()
    assert s.libtorch == Libtorch("cpu") and s.devices == (1,) and s.bin is None and s.source is None
    # the exclusivity and guard errors still apply
    with pytest.raises(Fail):
        resolve_prepare(JoinFlags(bin="/b", source="file:///s"), None, hostname=lambda: "h")
    with pytest.raises(Fail):
        resolve_prepare(JoinFlags(identity="/k"), None, hostname=lambda: "h")


def test_a_given_bin_must_be_a_regular_file_and_becomes_absolute(tmp_path):
    exe = tmp_path / "train"
    exe.write_text("#!/bin/sh\n")
    s = check_given_bin(res(JoinFlags(bin="train")), cwd=tmp_path)
    assert s.bin == str(exe)
    with pytest.raises(Fail) as e:
        check_given_bin(res(JoinFlags(bin="missing")), cwd=tmp_path)
    assert e.value.exit_code == 2 and "missing" in e.value.message and "--bin" in e.value.message
    with pytest.raises(Fail):
        check_given_bin(res(JoinFlags(bin=str(tmp_path))), cwd=tmp_path)  # a directory
    src = res(JoinFlags(source="file:///s"))
    assert check_given_bin(src, cwd=tmp_path) is src
