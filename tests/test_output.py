"""Where output goes, in every command: the result on stdout (JSON with --json), progress and
notes on stderr, and a failure under --json as one object on stdout, {"error", "exit"}."""

from __future__ import annotations

import json

import pytest
from helpers_cli import fdlenv

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


@pytest.mark.parametrize("args, code", [
    (["env", "path", "--libtorch", "cu128", "--json"], 2),               # not realised
    (["env", "realize", "--libtorch", "cu999", "--json"], 2),            # bad input
    (["env", "realize", "--json"], 2),                                   # a parse error
    (["prepare", "--source", "git+https://h/r", "--json"], 2),           # a bad spec
    (["detect", "--json", "--dev", "0"], 2),                             # no abbreviations
    (["env", "verify", "--libtorch", "cpu", "--json"], 2),
])
def test_a_failure_under_json_is_one_object_on_stdout_and_one_error_line(args, code, tmp_path):
    res = fdlenv(*args, "--home", str(tmp_path / "home"), cwd=tmp_path)
    assert res.returncode == code
    out = json.loads(res.stdout)
    assert out["exit"] == code and out["error"]
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and errors[0] == f"error: {out['error']}"
    assert "Traceback" not in res.stderr


def test_without_json_a_failure_leaves_stdout_empty(tmp_path):
    res = fdlenv("env", "path", "--libtorch", "cu128", "--home", str(tmp_path / "home"))
    assert res.returncode == 2 and res.stdout == "" and res.stderr.startswith("error: --libtorch:")


def test_the_variant_is_spelled_libtorch_everywhere_and_the_old_spellings_still_work(tmp_path):
    home = ("--home", str(tmp_path / "home"))
    for args in (["env", "path", "cpu"], ["env", "path", "--libtorch", "cpu"], ["env", "remove", "cpu"],
                 ["env", "verify", "--libtorch", "cpu"]):
        res = fdlenv(*args, *home)
        assert res.returncode == 2 and "'cpu' is not realised" in res.stderr, (args, res.stderr)
    both = fdlenv("env", "use", "cpu", "--libtorch", "cu128", *home)
    assert both.returncode == 2 and "given twice" in both.stderr
    for cmd in (["lock"], ["pack", "libtorch"]):
        helptext = fdlenv(*cmd, "--help").stdout
        assert "--libtorch" in helptext and "--variant" in helptext


def _keys(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"{path}.{k}", k
            yield from _keys(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for v in obj:
            yield from _keys(v, path + "[]")


def test_every_json_answer_carries_the_schema_and_identifier_keys(tmp_path):
    from helpers_store import make_world

    w = make_world(tmp_path)
    home = ("--home", str(w.home.root))
    assert fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), *home).returncode == 0
    for args in (["env", "realize", "--libtorch", "cpu", "--lock", str(w.lock)], ["env", "list"],
                 ["env", "path", "cpu"], ["env", "use", "cpu"], ["env", "verify"], ["env", "gc", "--dry-run"],
                 ["env", "remove", "cpu", "--dry-run"], ["shell-hook", "--libtorch", "cpu"], ["detect"]):
        res = fdlenv(*args, "--json", *(home if args[0] != "detect" else ()),
                     env={"FLODL_TESTING_GPU_JSON": '{"devices": []}'})
        assert res.returncode == 0, (args, res.stderr)
        doc = json.loads(res.stdout)
        assert next(iter(doc)) == "schema" and doc["schema"] == 1, args
        bad = [p for p, k in _keys(doc) if not k.isidentifier() and ".environment_variables." not in p]
        assert bad == [], (args, bad)


def test_a_failed_verify_under_json_is_its_report_carrying_the_error(tmp_path):
    import os

    from helpers_store import make_world, realise_json

    w = make_world(tmp_path)
    env = realise_json(w)
    os.unlink(os.path.join(env["path"], "share/common/data.txt"))
    res = fdlenv("env", "verify", "--full", "--json", "--home", str(w.home.root))
    assert res.returncode == 2 and res.stdout.count("\n") == 1
    doc = json.loads(res.stdout)
    assert doc["exit"] == 2 and doc["envs"][0]["problems"] and res.stderr.strip() == f"error: {doc['error']}"


def test_small_things_a_newcomer_trips_on(tmp_path):
    from helpers_store import make_world

    w = make_world(tmp_path)
    home = ("--home", str(w.home.root))
    res = fdlenv("env", "realize", "cpu", "--lock", str(w.lock), *home)       # bare, as `env use cpu`
    assert res.returncode == 0 and res.stdout.startswith("cpu: "), res.stderr
    listed = fdlenv("env", "list", *home).stdout.splitlines()
    assert listed[0].split() == ["VARIANT", "KEY", "SIZE", "CREATED", "STATE", "PATH"] and listed[1].startswith("cpu ")
    for args in (["env", "list"], ["env", "realize", "cpu"]):
        res = fdlenv(*args, "--home", "/etc/passwd")
        assert res.returncode == 2 and res.stderr.strip() == (
            "error: --home: /etc/passwd is not a directory; accepted: a directory fdlenv may write (made when missing)")
    res = fdlenv("env", "list", env={"FLODL_HOME": "/etc/passwd"})
    assert res.returncode == 2 and res.stderr.startswith("error: $FLODL_HOME: /etc/passwd")
    for action in ("realize", "list", "path", "use", "remove", "verify", "gc"):
        text = fdlenv("env", action, "--help").stdout
        assert "examples:\n  fdlenv env " + action in text, action


class _RedirectLoop(__import__("http.server").server.BaseHTTPRequestHandler):
    """Every page answers 302 to itself: urllib gives up, in three lines of its own."""

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(302)
        self.send_header("Location", self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_a_redirect_loop_and_a_malformed_requirement_are_each_one_error_line(tmp_path):
    import http.server
    import threading

    from helpers_wheels import write_wheel_env

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RedirectLoop)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        loop = fdlenv("env", "realize", "--libtorch", "cu126", "--mirror", f"pytorch={url}", "--home",
                      str(tmp_path / "home"), cwd=tmp_path)
    finally:
        srv.shutdown()
    write_wheel_env(tmp_path / "envs", "cu128", requirement="torch ==2.10.0 ; os_name ==")
    bad = fdlenv("lock", "--envs", str(tmp_path / "envs"), "--libtorch", "cu128", "--out", str(tmp_path / "l.yml"),
                 "--home", str(tmp_path / "home"), cwd=tmp_path)
    for res, code, needle in ((loop, 1, "redirects in a loop"), (bad, 2, "at column 28")):
        assert res.returncode == code and "Traceback" not in res.stderr, res.stderr
        tail = res.stderr[res.stderr.index("error: "):]
        assert tail.count("\n") == 1 and tail.endswith("\n") and needle in tail, res.stderr   # one line, the last
