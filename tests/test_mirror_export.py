"""A fleet downloads once: `fdlenv mirror export` served by a real `python -m http.server`.

The upstream is the loopback index laid out like PyTorch's (and the default
index's stand-in beside it), recording every request; the export is served by
a child `python -m http.server`; five fresh homes realise through it with
`--frozen`. The upstream's log shows each locked file fetched once, by the
export, and never by a box.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_pytorch_index import serve
from helpers_cli import fdlenv
from helpers_store import make_world

from fdlenv.lock.file import holds, read_variant

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("upstream")) as idx:
        yield idx


@pytest.fixture
def static(tmp_path):
    """`python -m http.server` over tmp/mirror; its URL, read from the line it prints when ready."""
    root = tmp_path / "mirror"
    root.mkdir()
    proc = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
                             "--directory", str(root)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()          # "Serving HTTP on 127.0.0.1 port N (...)": the barrier
    port = int(line.split(" port ")[1].split()[0])
    yield root, f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait()


def upstream_flags(idx) -> list[str]:
    return ["--mirror", f"pytorch={idx.url}", "--mirror", f"pypi={idx.simple}"]


def wheel_fetches(idx) -> list[str]:
    return [r for r in idx.requests if r.endswith(".whl")]


def test_five_homes_realise_through_a_static_export_and_upstream_serves_each_file_once(tmp_path, upstream, static):
    root, url = static
    locks = []
    for variant in ("rocm7.1", "cu126"):   # locked on demand, as a first box of the fleet does
        res = fdlenv("env", "realize", "--libtorch", variant, *upstream_flags(upstream), "--home", str(tmp_path / "h0"),
                     "--json", check=True)
        locks.append((variant, tmp_path / "h0" / "lockfiles" / f"{variant}.conda-lock.yml", json.loads(res.stdout)["key"]))
    before = len(wheel_fetches(upstream))
    exported = fdlenv("mirror", "export", *sum((["--lock", str(f)] for _, f, _ in locks), []), *upstream_flags(upstream),
                      "--home", str(tmp_path / "h0"), "--json", str(root), check=True)
    out = json.loads(exported.stdout)
    fetched = wheel_fetches(upstream)[before:]
    assert len(fetched) == len(set(fetched)) == out["copied"] > 0          # each file once, by the export
    assert (root / "pytorch/rocm7.1/torch/index.html").is_file() and (root / "pypi/nvidia-cuda-nvcc-cu12").is_dir()
    assert set(out["mirrors"]) == {"pypi", "pytorch"}
    marker = len(upstream.requests)
    for n in range(5):
        home = tmp_path / f"box{n}"
        for variant, lock, key in locks:
            res = fdlenv("env", "realize", "--libtorch", variant, "--lock", str(lock), "--frozen", "--home", str(home),
                         "--mirror", f"pytorch={url}/pytorch", "--mirror", f"pypi={url}/pypi", "--json")
            assert res.returncode == 0, res.stderr
            assert json.loads(res.stdout)["key"] == key
    assert len(upstream.requests) == marker                                   # the boxes never asked upstream
    again = fdlenv("mirror", "export", *sum((["--lock", str(f)] for _, f, _ in locks), []), *upstream_flags(upstream),
                   "--home", str(tmp_path / "h0"), "--json", str(root), check=True)
    assert json.loads(again.stdout)["copied"] == 0 and len(upstream.requests) == marker   # unchanged: nothing


def test_a_grown_lock_exports_only_what_is_new_and_a_file_not_matching_the_lock_is_refused(tmp_path, upstream):
    root = tmp_path / "mirror"
    lock_of = {}
    for variant in ("cpu", "rocm7.0"):
        fdlenv("env", "realize", "--libtorch", variant, *upstream_flags(upstream), "--home", str(tmp_path / "h"),
               check=True)
        lock_of[variant] = str(tmp_path / "h" / "lockfiles" / f"{variant}.conda-lock.yml")
    first = json.loads(fdlenv("mirror", "export", "--lock", lock_of["cpu"], *upstream_flags(upstream), "--home",
                              str(tmp_path / "h"), "--json", str(root), check=True).stdout)
    grown = json.loads(fdlenv("mirror", "export", "--lock", lock_of["cpu"], "--lock", lock_of["rocm7.0"],
                              *upstream_flags(upstream), "--home", str(tmp_path / "h"), "--json", str(root),
                              check=True).stdout)
    assert first["copied"] == 1 and grown["copied"] == 1 and grown["kept"] == 1
    page = (root / "pytorch/cpu/torch/index.html").read_text()
    assert "torch-2.10.0%2Bcpu-cp312-cp312-manylinux_2_28_x86_64.whl#sha256=" in page and "data-core-metadata" in page
    # a mirror of the upstream that serves other bytes than were locked: refused, nothing written
    bad = tmp_path / "bad"
    (bad / "cpu" / "torch").mkdir(parents=True)
    wheel = "torch-2.10.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl"
    (bad / "cpu" / wheel).write_bytes(b"not the locked wheel")
    (bad / "cpu" / "torch" / "index.html").write_text(f'<a href="../{wheel.replace("+", "%2B")}">{wheel}</a>')
    res = fdlenv("mirror", "export", "--lock", lock_of["cpu"], "--mirror", f"pytorch={bad.as_uri()}",
                 "--home", str(tmp_path / "h"), str(tmp_path / "other"))
    assert res.returncode == 2 and res.stderr.count("error:") == 1 and "does not match the lock" in res.stderr
    assert not list((tmp_path / "other").rglob("*.whl"))


def test_export_pages_state_each_files_size_as_pep_700_json_that_fdlenvs_reader_reads(tmp_path, upstream):
    from helpers_pytorch_index import Index

    from fdlenv.index import simpleapi

    lock = tmp_path / "cu126.yml"
    fdlenv("lock", "--libtorch", "cu126", "--platform", "linux-64", "--envs", str(ROOT / "envs"), "--out", str(lock),
           *upstream_flags(upstream), "--home", str(tmp_path / "h"), check=True)
    root = tmp_path / "mirror"
    fdlenv("mirror", "export", "--lock", str(lock), *upstream_flags(upstream), "--home", str(tmp_path / "h"),
           str(root), check=True)
    pages = sorted(root.rglob("*/index.json"))
    wheels = sorted(root.rglob("*.whl"))
    assert len(wheels) == len(read_variant(lock, "cu126", "linux-64")) > 2
    assert {p.parent for p in wheels} <= {p.parent for p in pages}
    served = Index(root, json_pages=True)   # a server answering PEP 691 JSON where asked
    try:
        base = served.url.removesuffix("/whl")
        for wheel in wheels:
            index, project = wheel.parent.relative_to(root).parent.as_posix(), wheel.parent.name
            doc = json.loads((wheel.parent / "index.json").read_text())
            assert doc["meta"]["api-version"] == "1.1" and doc["name"] == project
            url, sha, size = simpleapi.find_file(f"{base}/{index}", project, wheel.name)
            assert size == wheel.stat().st_size and url.endswith(wheel.name.replace("+", "%2B"))
            assert sha == hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert not [c for c in served.calls if not c[1].endswith("/")]   # pages only: sizes read, no HEAD
    finally:
        served.close()


def test_conda_packages_are_exported_as_a_channel_a_box_realises_from(tmp_path, static):
    root, url = static
    w = make_world(tmp_path / "world", variants=("cpu",))
    res = fdlenv("mirror", "export", "--lock", str(w.lock), "--home", str(w.home.root), "--json", str(root), check=True)
    out = json.loads(res.stdout)
    assert "flodl" in out["mirrors"] and (root / "conda/flodl/linux-64/repodata.json").is_file()
    box = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(tmp_path / "box"),
                 "--mirror", f"flodl={url}/conda/flodl", "--json")
    assert box.returncode == 0, box.stderr
    assert Path(json.loads(box.stdout)["path"]).is_dir()


def test_nothing_to_export_is_one_error_naming_the_locks(tmp_path):
    w = make_world(tmp_path / "world", variants=("cpu",))
    res = fdlenv("mirror", "export", "--lock", str(w.lock), "--libtorch", "rocm7.1", "--home", str(w.home.root),
                 str(tmp_path / "m"), env={**os.environ})
    assert res.returncode == 2 and res.stderr.count("error:") == 1 and str(w.lock) in res.stderr


# ------------------------------------------------------------------ a pull-through cache: devpi

@pytest.fixture
def devpi(tmp_path, upstream):
    """A real devpi-server on 127.0.0.1, with one mirror index per upstream index name."""
    import base64
    import shutil
    import socket
    import threading
    import urllib.request

    init, server = shutil.which("devpi-init"), shutil.which("devpi-server")
    if not (init and server):
        pytest.skip("needs devpi-server (the test extra installs it)")
    srv = tmp_path / "devpi"
    subprocess.run([init, "--serverdir", str(srv), "--root-passwd", "", "--no-root-pypi"], check=True,
                   capture_output=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([server, "--serverdir", str(srv), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:             # the barrier: devpi says when it serves
        lines.append(line)
        if "Serving on" in line:
            break
    else:
        pytest.fail("devpi-server did not start:\n" + "".join(lines[-20:]))
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()   # keep the pipe drained
    base = f"http://127.0.0.1:{port}"

    def call(method, path, body, auth=None):
        req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method=method, headers={
            "Content-Type": "application/json", "Accept": "application/json", **({"X-Devpi-Auth": auth} if auth else {})})
        with urllib.request.urlopen(req) as r:
            return json.loads(r.read() or b"{}")

    token = call("POST", "/+login", {"user": "root", "password": ""})["result"]["password"]
    auth = base64.b64encode(f"root:{token}".encode()).decode()
    mirrors = {"pypi": f"{upstream.simple}/"}
    mirrors.update({f"pytorch/{v}": f"{upstream.url}/{v}/" for v in ("cpu", "cu126", "rocm7.0", "rocm7.1")})
    flags = []
    for name, url in mirrors.items():
        index = "up-" + name.replace("/", "-").replace(".", "")
        call("PUT", f"/root/{index}", {"type": "mirror", "mirror_url": url}, auth)
        flags += ["--mirror", f"{name}={base}/root/{index}/+simple"]
    yield flags
    proc.terminate()
    proc.wait()


def test_five_homes_realise_through_devpi_and_upstream_serves_each_file_once(tmp_path, upstream, devpi):
    locks = []
    for variant in ("rocm7.1", "cu126"):
        res = fdlenv("env", "realize", "--libtorch", variant, *upstream_flags(upstream), "--home", str(tmp_path / "h0"),
                     "--json", check=True)
        locks.append((variant, tmp_path / "h0" / "lockfiles" / f"{variant}.conda-lock.yml", json.loads(res.stdout)["key"]))
    before = len(wheel_fetches(upstream))
    for n in range(5):
        for variant, lock, key in locks:
            res = fdlenv("env", "realize", "--libtorch", variant, "--lock", str(lock), "--frozen", *devpi,
                         "--home", str(tmp_path / f"box{n}"), "--json")
            assert res.returncode == 0, res.stderr
            assert json.loads(res.stdout)["key"] == key
    fetched = wheel_fetches(upstream)[before:]
    locked = {r.sha256 for _, lock, _ in locks for v in ("rocm7.1", "cu126") if holds(lock, v, "linux-64")
              for r in read_variant(lock, v, "linux-64")}
    assert fetched and len(fetched) == len(set(fetched)) == len(locked)   # each locked file once, by devpi


def test_a_mirror_that_is_down_is_transient_and_named(tmp_path, upstream):
    import socket

    fdlenv("env", "realize", "--libtorch", "cpu", *upstream_flags(upstream), "--home", str(tmp_path / "h0"), check=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}/pytorch"
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(tmp_path / "h0/lockfiles/cpu.conda-lock.yml"),
                 "--frozen", "--mirror", f"pytorch={down}", "--home", str(tmp_path / "box"))
    assert res.returncode == 1 and res.stderr.count("error:") == 1 and down in res.stderr   # --persist re-dials


def realise_together(cmds: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Start every command as its own process, each held at a barrier (a line on its stdin) until
    all are started, then let them go at once; their results, in order."""
    procs = [subprocess.Popen(["bash", "-c", 'read -r _ && exec "$@"', "barrier", *c], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds]
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        p.stdin.close()
    return [subprocess.CompletedProcess(p.args, p.wait(), p.stdout.read(), p.stderr.read()) for p in procs]


def test_three_fresh_homes_at_once_through_a_cold_devpi_exit_0_or_1_then_0_never_2(tmp_path, upstream, devpi):
    res = fdlenv("env", "realize", "--libtorch", "cu126", *upstream_flags(upstream), "--home", str(tmp_path / "h0"),
                 "--json", check=True)
    lock, key = tmp_path / "h0/lockfiles/cu126.conda-lock.yml", json.loads(res.stdout)["key"]

    def box(n: int) -> list[str]:
        return [sys.executable, "-m", "fdlenv", "env", "realize", "--libtorch", "cu126", "--lock", str(lock),
                "--frozen", *devpi, "--home", str(tmp_path / f"box{n}"), "--json"]

    first = realise_together([box(n) for n in range(3)])
    print("first attempt exits:", [r.returncode for r in first], "pages tried again:",
          [r.stderr.count("page: ") for r in first],
          *[r.stderr.strip().splitlines()[-1] for r in first if r.returncode])
    for n, res in enumerate(first):
        assert res.returncode in (0, 1), res.stderr          # never 2: a cold cache is not a person's job
        if res.returncode == 1:                               # the re-dial, once
            res = subprocess.run(box(n), capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["key"] == key


def fleet_devpi_blocks() -> tuple[str, str]:
    """docs/FLEET.md's devpi steps (the sh block) and the boxes' mirrors (the yaml block after it)."""
    import re

    doc = (Path(__file__).resolve().parent.parent / "docs" / "FLEET.md").read_text()
    part = doc.split("## Pull-through cache: devpi-server", 1)[1].split("\n## ", 1)[0]
    sh, yml = re.findall(r"```sh\n(.*?)```", part, re.S)[0], re.findall(r"```yaml\n(.*?)```", part, re.S)[0]
    return sh, yml


def test_fleets_devpi_steps_run_as_written_wait_for_the_server_and_serve_the_boxes(tmp_path, upstream):
    import shutil
    import signal
    import socket

    if not (shutil.which("devpi-server") and shutil.which("devpi")):
        pytest.skip("needs devpi-server and devpi-client (the test extra installs them)")
    sh, yml = fleet_devpi_blocks()
    assert "+api" in sh                                       # the steps wait for the server
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])

    def placed(text: str) -> str:                             # the doc's placeholders, for this test
        for a, b in (("cache.internal:3141", f"127.0.0.1:{port}"), ("--port 3141", f"--port {port}"),
                     ("0.0.0.0", "127.0.0.1"), ("/srv/devpi", str(tmp_path / "devpi")),
                     ("<your PyPI or its mirror>/simple/", f"{upstream.simple}/"),
                     ("https://download.pytorch.org/whl", upstream.url)):
            text = text.replace(a, b)
        return text

    steps = "set -e\n" + "".join(line + "\n" for line in placed(sh).splitlines() if not line.startswith("pip install"))
    log = (tmp_path / "devpi.log").open("w")
    proc = subprocess.Popen(["bash", "-c", steps], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert proc.wait(timeout=300) == 0, (tmp_path / "devpi.log").read_text()
        project = tmp_path / "project"
        project.mkdir()
        (project / "fdl.yml").write_text(placed(yml))
        for variant in ("cu126", "rocm7.1"):
            made = fdlenv("env", "realize", "--libtorch", variant, *upstream_flags(upstream), "--home",
                          str(tmp_path / "h0"), "--json", check=True)
            res = fdlenv("env", "realize", "--libtorch", variant, "--lock",
                         str(tmp_path / f"h0/lockfiles/{variant}.conda-lock.yml"), "--frozen", "--home",
                         str(tmp_path / "box"), "--json", cwd=project)
            assert res.returncode == 0, res.stderr
            assert json.loads(res.stdout)["key"] == json.loads(made.stdout)["key"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)               # the server the steps left running
        log.close()


# ------------------------------------------------------------------ a hostile index: no write outside DIR

def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _hostile_torch_page(root: Path, climb: str = "%2F..") -> None:
    """PyTorch's cpu index with torch's page replaced: its wheel listed under a build tag of
    quoted climbing slashes (`1%2F..` five times, `%2Fbashrc`: a name packaging parses; `climb`
    spells each step), and once more, yanked, by the unquoted name its href ends in, where the
    server serves the bytes."""
    import hashlib
    import html

    from helpers_pytorch_index import build, lay_out

    whl = lay_out(root, build(root))
    name = "torch-2.10.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl"
    quoted = name.replace("+cpu-", "+cpu-1" + climb * 5 + climb[:-2] + "bashrc-")
    data = (whl / "cpu" / name).read_bytes()
    served = whl.parent / "bashrc-cp312-cp312-manylinux_2_28_x86_64.whl"
    served.write_bytes(data)     # where the server's path rules (unquote, normpath) put the href
    Path(str(served) + ".metadata").write_bytes((whl / "cpu" / (name + ".metadata")).read_bytes())
    meta = hashlib.sha256(Path(str(served) + ".metadata").read_bytes()).hexdigest()
    href = f"/whl/cpu/{quoted.replace('+', '%2B')}#sha256={hashlib.sha256(data).hexdigest()}"
    (whl / "cpu" / "torch" / "index.html").write_text(
        f'<a href="{href}" data-core-metadata="sha256={meta}">{html.escape(quoted)}</a><br/>\n'
        f'<a href="{href}" data-yanked="">mirror</a><br/>\n')


@pytest.mark.parametrize("climb", ["%2F..", "%252F..", "/..", "%5C..", "\\.."])
def test_an_index_naming_a_wheel_with_climbing_slashes_is_refused_and_nothing_is_locked(tmp_path, climb):
    """A page listing torch's wheel under a name that climbs (slashes plain, quoted once or twice,
    backslashes): the realise that would lock it on demand is exit 2 with one line naming the
    index, the project and the name, and the home holds no lock and no env (it used to save the
    climbing name into the on-demand lock, then fail realise as a lagging mirror, exit 1)."""
    from helpers_pytorch_index import Index

    root = tmp_path / "hostile"
    _hostile_torch_page(root, climb)
    with Index(root) as idx:
        home = tmp_path / "h"
        res = fdlenv("env", "realize", "--libtorch", "cpu", "--mirror", f"pytorch={idx.url}", "--home", str(home))
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    print(errors[0])
    assert f"wheel index {idx.url}/cpu: the page of 'torch' lists a file name" in errors[0]
    assert "bashrc" in errors[0] and "nothing was locked" in errors[0]
    assert not (home / "lockfiles").exists() or not list((home / "lockfiles").iterdir())
    assert not (home / "envs").exists() or not list((home / "envs").iterdir())


def test_what_a_killed_export_left_in_dir_is_swept_by_the_next_and_a_live_exports_files_are_kept(tmp_path, upstream):
    """An export killed by SIGKILL leaves its temporary files in the served tree (`.index.html.PID`,
    `.X.whl.metadata.PID`, `.X.whl.PID.part`, `.fdlenv-export.json.PID`); the next export removes
    those of a PID that is gone and keeps those of one still running."""
    home, root = tmp_path / "h", tmp_path / "mirror"
    fdlenv("env", "realize", "--libtorch", "cpu", *upstream_flags(upstream), "--home", str(home), check=True)
    lock = str(home / "lockfiles" / "cpu.conda-lock.yml")
    export = ["mirror", "export", "--lock", lock, *upstream_flags(upstream), "--home", str(home), str(root)]
    fdlenv(*export, check=True)
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(child.stdout)                      # reaped: no process has it now (a later one may)
    wheel = next(root.rglob("*.whl"))
    left = [wheel.parent / "torch" / f".index.html.{dead}", wheel.parent / f".{wheel.name}.metadata.{dead}",
            wheel.parent / f".{wheel.name}.{dead}.part", root / f".fdlenv-export.json.{dead}"]
    live = wheel.parent / "torch" / f".index.json.{os.getpid()}"      # this test's process: alive
    for f in [*left, live]:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("half\n")
    fdlenv(*export, check=True)
    assert [f for f in left if f.exists()] == [] and live.exists()


def test_export_takes_the_homes_own_downloads_when_they_hash_to_the_lock_and_prints_no_line_per_file(tmp_path, static,
                                                                                                   monkeypatch):
    import shutil

    from test_home_permission import run as run_cli

    from fdlenv.base import progress

    root, url = static
    w = make_world(tmp_path / "world", variants=("cpu",))
    shutil.copytree(w.home.channel, root / "ch")
    box = tmp_path / "box"       # a home that downloaded the archives over http (kept in archives/)
    fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(box),
           "--mirror", f"flodl={url}/ch", check=True)
    kept = sorted((box / "archives").iterdir())
    assert kept
    good = kept[0].read_bytes()
    kept[0].write_bytes(b"damaged")   # one that does not hash to the lock: fetched after all
    dead = "http://127.0.0.1:9/nothing-here"
    res = fdlenv("mirror", "export", "--lock", str(w.lock), "--home", str(box), "--mirror", f"flodl={url}/ch",
                 "--json", str(tmp_path / "m1"), check=True)
    out = json.loads(res.stdout)
    assert out["copied"] == len(kept) and out["from_home"] == len(kept) - 1
    res = fdlenv("mirror", "export", "--lock", str(w.lock), "--home", str(box), "--mirror", f"flodl={dead}",
                 str(tmp_path / "m2"))
    assert res.returncode == 1 and "127.0.0.1:9" in res.stderr     # the damaged one cannot be fetched
    kept[0].write_bytes(good)
    res = fdlenv("mirror", "export", "--lock", str(w.lock), "--home", str(box), "--mirror", f"flodl={dead}",
                 str(tmp_path / "m3"))
    assert res.returncode == 0, res.stderr
    assert "exported" not in res.stderr.replace("fdlenv: exported ", "", 1)   # one summary, no line per file
    assert (tmp_path / "m3/conda/flodl/linux-64/repodata.json").is_file()
    monkeypatch.setattr(progress.Tally, "SHOW_AFTER", 0.0)   # as a long export shows it: one line, a summary
    rc, _, err = run_cli(["mirror", "export", "--lock", str(w.lock), "--home", str(box), "--mirror", f"flodl={dead}",
                          str(tmp_path / "m4")], tmp_path, {})
    n = len(kept)
    assert rc == 0 and err.splitlines()[0] == f"fdlenv: exporting {n} file(s), {n} from the home's archives ...", err
    assert f"fdlenv: exporting {n} file(s), {n} from the home's archives: {n} files, " in err
    assert len(err.splitlines()) == 3, err   # start, summary, the command's own result line
