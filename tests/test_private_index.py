"""A private index as a company runs one, reached the way pip and uv reach it, and no secret ever shown.

The index is the suite's PEP 503 tree of real wheels (helpers_wheels), served over HTTPS on
127.0.0.1 under a CA this test makes with openssl, answering 401 without Basic auth; the
torch page links its wheel on another host (localhost, another port: another origin), which
must never see the index's credentials. Each scenario realises cu128 from a lock made
offline, in a fresh home, with the machine's own TLS, proxy and index settings cleared
(`clean_env`), one source of credentials and one CA setting at a time; after each, every
output (stdout, stderr, --json) and every file under HOME and the home is searched for the
password and the token in all their forms (`leaks`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from helpers_private_index import PrivateIndex, Tinyproxy, clean_env, leaks, make_ca
from helpers_wheels import make_index, make_wheels, write_wheel_env

from fdlenv.lock import lock_envs
from fdlenv.names.home import Home

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

USER, PASSWORD, TOKEN = "fleet", "Fl33t:p@ss/w%rd", "tok-3f9a7c1e5b"
PROXY_USER, PROXY_PASSWORD = "pxuser", "Pr0xyPass42"
SECRETS = [PASSWORD, TOKEN, PROXY_PASSWORD]


class World:
    def __init__(self, root: Path):
        self.root = root
        self.certs = make_ca(root / "ca")
        tree = root / "simple"
        make_index(tree, make_wheels(root / "built"))
        envs = root / "envs"
        write_wheel_env(envs, "cu128")
        self.lock = root / "conda-lock.yml"
        lock_envs(envs, self.lock, mirrors={"pypi": tree.resolve().as_uri()}, home=Home(root / "lockhome"))
        self.files = PrivateIndex(tree, self.certs, host="localhost")   # another origin, no auth
        page = tree / "torch" / "index.html"
        page.write_text(page.read_text().replace('href="../files/', f'href="{self.files.url}/files/'))
        self.index = PrivateIndex(tree, self.certs, accepted=((USER, PASSWORD), (TOKEN, "")))
        self.host = f"127.0.0.1:{self.index.port}"

    def url(self, userinfo: str = "") -> str:
        return f"https://{userinfo + '@' if userinfo else ''}{self.host}/"

    def close(self) -> None:
        self.index.close()
        self.files.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("private"))
    yield w
    w.close()


def realise(world: World, tmp_path: Path, *flags: str, allowed: tuple[Path, ...] = (), **env: str):
    """`env realize --json` in a fresh home under `env`; then no secret anywhere it could show."""
    import os

    home = tmp_path / "home"
    world.index.seen.clear()
    world.files.seen.clear()
    res = subprocess.run([sys.executable, "-m", "fdlenv", "env", "realize", "--libtorch", "cu128", "--lock",
                          str(world.lock), "--home", str(home), "--json", *flags],
                         capture_output=True, text=True, env=clean_env(**env), timeout=300)
    assert "Traceback" not in res.stderr, res.stderr
    found = leaks(SECRETS, {"stdout": res.stdout, "stderr": res.stderr}, [home, Path(os.environ["HOME"])], allowed)
    assert not found, f"a secret shows in {found}:\n{res.stderr}"
    return res


def ok(res) -> dict:
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def last_error(res) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, res.stderr
    return lines[0]


def carried(world: World) -> set[str | None]:
    """The Authorization headers the index saw; the other host must have seen none."""
    assert world.files.seen and all(auth is None for _, auth in world.files.seen), world.files.seen
    return {auth for _, auth in world.index.seen}


def quoted(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def test_a_user_and_percent_encoded_password_in_the_mirror_url_reach_the_index_and_only_it(world, tmp_path):
    res = realise(world, tmp_path, "--mirror", f"pypi={world.url(f'{USER}:{quoted(PASSWORD)}')}",
                  PIP_CERT=str(world.certs["ca.pem"]))
    assert ok(res)["created"] is True
    assert None not in carried(world)        # every request to the index carried it, the wheel host none


def test_a_token_alone_in_the_url_is_sent_as_the_user_with_requests_ca_bundle(world, tmp_path):
    res = realise(world, tmp_path, "--mirror", f"pypi={world.url(TOKEN)}",
                  REQUESTS_CA_BUNDLE=str(world.certs["ca.pem"]))
    ok(res)
    assert None not in carried(world)


def test_netrc_gives_the_password_for_a_host_without_userinfo_under_ssl_cert_file(world, tmp_path):
    import os

    netrc = Path(os.environ["HOME"]) / ".netrc"
    netrc.write_text(f"machine 127.0.0.1 login {USER} password {PASSWORD}\n")
    netrc.chmod(0o600)
    res = realise(world, tmp_path, "--mirror", f"pypi={world.url()}", allowed=(netrc,),
                  SSL_CERT_FILE=str(world.certs["ca.pem"]))
    ok(res)
    assert None not in carried(world)


def test_the_netrc_variable_names_another_file(world, tmp_path):
    other = tmp_path / "fleet-netrc"
    other.write_text(f"default login {USER} password {PASSWORD}\n")
    res = realise(world, tmp_path, "--mirror", f"pypi={world.url()}", NETRC=str(other),
                  SSL_CERT_DIR=str(tmp_path / "nothing"), PIP_CERT=str(world.certs["ca.pem"]))
    ok(res)


def test_pip_conf_with_index_url_and_cert_is_all_a_box_needs(world, tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {world.url(f'{USER}:{quoted(PASSWORD)}')}\n"
                    f"cert = {world.certs['ca.pem']}\n")
    res = realise(world, tmp_path, PIP_CONFIG_FILE=str(conf))
    ok(res)
    assert None not in carried(world)


def test_a_wrong_password_in_pip_conf_is_named_by_its_file(world, tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {world.url(f'{USER}:wrong{quoted(PASSWORD)}')}\n"
                    f"cert = {world.certs['ca.pem']}\n")
    res = realise(world, tmp_path, PIP_CONFIG_FILE=str(conf))
    assert res.returncode == 2
    assert f"{conf} [global]" in last_error(res)
    assert not leaks(["wrong" + PASSWORD], {"stderr": res.stderr, "stdout": res.stdout}, [])


def test_uvs_named_index_takes_its_password_from_uv_index_name_variables(world, tmp_path):
    conf = tmp_path / "uv.toml"
    conf.write_text(f'[[index]]\nname = "corp-cache"\nurl = "{world.url()}"\ndefault = true\n')
    res = realise(world, tmp_path, UV_NO_CONFIG="", UV_CONFIG_FILE=str(conf), UV_INDEX_CORP_CACHE_USERNAME=USER,
                  UV_INDEX_CORP_CACHE_PASSWORD=PASSWORD, SSL_CERT_FILE=str(world.certs["ca.pem"]))
    ok(res)
    assert None not in carried(world)


def test_pips_client_cert_is_shown_to_a_server_that_asks_for_one(world, tmp_path):
    strict = PrivateIndex(world.root / "simple", world.certs, accepted=((USER, PASSWORD),), client_cert=True)
    try:
        url = f"pypi=https://{USER}:{quoted(PASSWORD)}@127.0.0.1:{strict.port}/"
        without = realise(world, tmp_path / "a", "--mirror", url, PIP_CERT=str(world.certs["ca.pem"]))
        assert without.returncode != 0
        res = realise(world, tmp_path / "b", "--mirror", url, PIP_CERT=str(world.certs["ca.pem"]),
                      PIP_CLIENT_CERT=str(world.certs["client.pem"]))
        ok(res)
    finally:
        strict.close()


def test_a_wrong_password_is_permanent_names_the_index_and_the_source_and_never_the_secret(world, tmp_path):
    wrong = "Wr0ng-" + PASSWORD
    res = realise(world, tmp_path, "--mirror", f"pypi={world.url(f'{USER}:{quoted(wrong)}')}",
                  PIP_CERT=str(world.certs["ca.pem"]))
    assert res.returncode == 2, res.stderr
    line = last_error(res)
    assert "401" in line and world.host in line and "the URL's user:password" in line, line
    assert not leaks([wrong], {"stderr": res.stderr, "stdout": res.stdout}, [])
    assert json.loads(res.stdout)["exit"] == 2


def test_no_credentials_at_all_is_permanent_and_says_none_were_found(world, tmp_path):
    res = realise(world, tmp_path, "--mirror", f"pypi={world.url()}", PIP_CERT=str(world.certs["ca.pem"]))
    assert res.returncode == 2
    assert "no credentials" in last_error(res)


def test_a_certificate_the_ca_setting_does_not_trust_is_permanent_naming_the_host_and_the_setting(world, tmp_path):
    other = make_ca(tmp_path / "other-ca")
    res = realise(world, tmp_path, "--mirror", f"pypi={world.url(f'{USER}:{quoted(PASSWORD)}')}",
                  PIP_CERT=str(other["ca.pem"]))
    assert res.returncode == 2
    line = last_error(res)
    assert world.host in line and "not trusted" in line and "PIP_CERT" in line, line


def test_a_refused_connection_stays_transient(world, tmp_path):
    from helpers_private_index import free_port

    res = realise(world, tmp_path, "--mirror", f"pypi=https://{USER}:{quoted(PASSWORD)}@127.0.0.1:{free_port()}/",
                  PIP_CERT=str(world.certs["ca.pem"]))
    assert res.returncode == 1, res.stderr
    assert "trying again" in res.stderr      # retried inside the attempt first


@pytest.fixture
def proxy(tmp_path):
    p = Tinyproxy(tmp_path / "proxy", PROXY_USER, PROXY_PASSWORD)
    yield p
    p.close()


def _through(proxy: Tinyproxy, world: World) -> bool:
    return any("CONNECT" in ln and f"127.0.0.1:{world.index.port}" in ln for ln in proxy.lines)


@pytest.mark.parametrize("var", ["HTTPS_PROXY", "https_proxy", "ALL_PROXY"])
def test_every_request_goes_through_a_real_proxy_with_its_credentials(world, tmp_path, proxy, var):
    creds = f"{PROXY_USER}:{PROXY_PASSWORD}@"
    res = realise(world, tmp_path, "--mirror", f"pypi={world.url(f'{USER}:{quoted(PASSWORD)}')}",
                  PIP_CERT=str(world.certs["ca.pem"]), **{var: proxy.url.replace("://", f"://{creds}")})
    ok(res)
    assert _through(proxy, world), "".join(proxy.lines[-20:])
    assert None not in carried(world)


def test_pips_proxy_setting_is_used_and_no_proxy_bypasses_it(world, tmp_path, proxy):
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nproxy = {proxy.url.replace('://', f'://{PROXY_USER}:{PROXY_PASSWORD}@')}\n"
                    f"cert = {world.certs['ca.pem']}\n")
    mirror = f"pypi={world.url(f'{USER}:{quoted(PASSWORD)}')}"
    ok(realise(world, tmp_path / "a", "--mirror", mirror, PIP_CONFIG_FILE=str(conf)))
    assert _through(proxy, world)
    proxy.lines.clear()
    ok(realise(world, tmp_path / "b", "--mirror", mirror, PIP_CONFIG_FILE=str(conf), NO_PROXY="127.0.0.1,localhost"))
    assert not _through(proxy, world)


def test_a_proxy_refusing_its_credentials_is_permanent_and_names_the_proxy_setting(world, tmp_path, proxy):
    res = realise(world, tmp_path, "--mirror", f"pypi={world.url(f'{USER}:{quoted(PASSWORD)}')}",
                  PIP_CERT=str(world.certs["ca.pem"]),
                  HTTPS_PROXY=proxy.url.replace("://", f"://{PROXY_USER}:wrong{PROXY_PASSWORD}@"))
    assert res.returncode == 2, res.stderr
    line = last_error(res)
    assert "the proxy refused" in line and "HTTPS_PROXY" in line, line
    assert not leaks(["wrong" + PROXY_PASSWORD], {"stderr": res.stderr}, [])


def test_a_secret_given_on_the_command_line_never_reaches_a_hot_commands_memo(world, tmp_path):
    mirror = f"pypi={world.url(f'{USER}:{quoted(PASSWORD)}')}"
    ok(realise(world, tmp_path, "--mirror", mirror, PIP_CERT=str(world.certs["ca.pem"])))
    home = tmp_path / "home"
    for words in (("env", "realize"), ("env", "realize"), ("shell-hook",)):   # answered from the memos
        res = subprocess.run([sys.executable, "-m", "fdlenv", *words, "--libtorch", "cu128", "--lock",
                              str(world.lock), "--home", str(home), "--mirror", mirror],
                             capture_output=True, text=True, env=clean_env(PIP_CERT=str(world.certs["ca.pem"])))
        assert res.returncode == 0, res.stderr
    assert list(home.rglob("cache/hot/*")), "no memo was written: the test would prove nothing"
    assert not leaks(SECRETS, {"stdout": res.stdout, "stderr": res.stderr}, [home])


def test_an_error_line_echoing_a_bad_mirror_value_shows_no_secret(tmp_path):
    res = subprocess.run([sys.executable, "-m", "fdlenv", "env", "realize", "--libtorch", "cu128", "--home",
                          str(tmp_path / "h"), "--json", "--mirror", f"https://{USER}:{PASSWORD}@host.invalid/x?token={TOKEN}"],
                         capture_output=True, text=True, env=clean_env())
    assert res.returncode == 2 and "error:" in res.stderr
    assert not leaks(SECRETS, {"stdout": res.stdout, "stderr": res.stderr}, [tmp_path / "h"])


def test_a_ca_setting_naming_no_bundle_is_permanent_and_names_the_setting(world, tmp_path):
    res = realise(world, tmp_path, "--mirror", f"pypi={world.url(f'{USER}:{quoted(PASSWORD)}')}",
                  PIP_CERT=str(tmp_path / "no-such-ca.pem"))
    assert res.returncode == 2
    line = last_error(res)
    assert "PIP_CERT" in line and "not a readable CA bundle" in line, line


@pytest.fixture
def devpi_fleet(world, tmp_path):
    """devpi-server as the fleet's cache: a user `fleet` with a password (`devpi user -c`), an
    index `fleet/wheels` holding the suite's wheels (`devpi upload`), behind a front that lets
    only devpi's own users read (`AuthFront`). Yields the front's URL of the index."""
    import threading

    from helpers_private_index import AuthFront, free_port

    here = Path(sys.executable).parent    # the test extra's, else the PATH's
    init, server, client = ((here / n).as_posix() if (here / n).is_file() else shutil.which(n)
                            for n in ("devpi-init", "devpi-server", "devpi"))
    if not (init and server and client):
        pytest.skip("needs devpi-server and devpi-client (the test extra installs them)")
    front = AuthFront(world.certs)
    srv, port = tmp_path / "devpi", free_port()
    subprocess.run([init, "--serverdir", str(srv), "--root-passwd", "", "--no-root-pypi"], check=True,
                   capture_output=True)
    proc = subprocess.Popen([server, "--serverdir", str(srv), "--host", "127.0.0.1", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        guard = threading.Timer(180, proc.kill)   # a devpi that never says so ends the wait, not the run
        guard.start()
        for line in proc.stdout:             # the barrier: devpi says when it serves
            lines.append(line)
            if "Serving on" in line:
                break
        guard.cancel()
        if not lines or "Serving on" not in lines[-1]:
            pytest.fail("devpi-server did not start:\n" + "".join(lines[-20:]))
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
        backend = f"http://127.0.0.1:{port}"
        front.start(backend)

        def devpi(*args: str) -> None:
            res = subprocess.run([client, "--clientdir", str(tmp_path / "client"), *args], capture_output=True,
                                 text=True, env=clean_env())
            assert res.returncode == 0, f"devpi {args[0]}: {res.stdout}{res.stderr}"

        devpi("use", backend)
        devpi("user", "-c", USER, f"password={PASSWORD}")
        devpi("login", USER, "--password", PASSWORD)
        devpi("index", "-c", "wheels", "bases=")
        devpi("use", f"{USER}/wheels")
        devpi("upload", "--from-dir", str(world.root / "built"))
        yield front, f"{front.url}/{USER}/wheels/+simple/"
    finally:
        proc.terminate()
        proc.wait()
        front.close()


def test_a_fleet_realises_through_devpi_whose_reads_need_its_users_password(world, tmp_path, devpi_fleet):
    front, url = devpi_fleet
    netloc = urllib.parse.urlsplit(url).netloc
    without = realise(world, tmp_path / "a", "--mirror", f"pypi={url}", PIP_CERT=str(world.certs["ca.pem"]))
    assert without.returncode == 2 and "no credentials" in last_error(without)
    with_url = url.replace("://", f"://{USER}:{quoted(PASSWORD)}@")
    ok(realise(world, tmp_path / "b", "--mirror", f"pypi={with_url}", PIP_CERT=str(world.certs["ca.pem"])))
    import os

    netrc = Path(os.environ["HOME"]) / ".netrc"
    netrc.write_text(f"machine {netloc.partition(':')[0]} login {USER} password {PASSWORD}\n")
    front.seen.clear()
    ok(realise(world, tmp_path / "c", "--mirror", f"pypi={url}", allowed=(netrc,),
               SSL_CERT_FILE=str(world.certs["ca.pem"])))
    assert any(p.endswith(".whl") for p, _ in front.seen) and all(passed for _, passed in front.seen)


def test_locking_on_demand_through_the_private_index_writes_no_secret_in_the_lock(world, tmp_path):
    from helpers_pytorch_index import build, lay_out

    root = tmp_path / "pytorch-index"
    lay_out(root, build(root))
    index = PrivateIndex(root, world.certs, accepted=((USER, PASSWORD),))
    try:
        creds = f"{USER}:{quoted(PASSWORD)}@127.0.0.1:{index.port}"
        home = tmp_path / "home"
        res = subprocess.run([sys.executable, "-m", "fdlenv", "env", "realize", "--libtorch", "cu126", "--home",
                              str(home), "--json", "--mirror", f"pytorch=https://{creds}/whl",
                              "--mirror", f"pypi=https://{creds}/simple"],
                             capture_output=True, text=True, env=clean_env(PIP_CERT=str(world.certs["ca.pem"])))
        ok(res)
        assert list(home.rglob("*.conda-lock.yml")), "no lock was written: the test would prove nothing"
        assert {auth for _, auth in index.seen} and None not in {auth for _, auth in index.seen}
        assert not leaks(SECRETS, {"stdout": res.stdout, "stderr": res.stderr}, [home])
    finally:
        index.close()


def test_a_recipe_refuses_an_index_url_carrying_a_password_rather_than_write_it_in_the_unit(tmp_path):
    from test_recipes import recipe

    secret_url = f"https://{USER}:{quoted(PASSWORD)}@cache.invalid/simple"
    fdl = tmp_path / "fdl.yml"
    fdl.write_text(f"fdlenv:\n  mirrors:\n    pypi: {secret_url}\n")
    for args in (("systemd", "--workdir", str(tmp_path / "empty"), "--", "--mirror", f"pypi={secret_url}"),
                 ("cloud-init", "--fdl-yml", str(fdl), "--install", "fdlenv==0.1.0")):
        res = recipe(*args)
        assert res.returncode == 2, res.stdout
        assert "netrc" in last_error(res) and "cache.invalid" in last_error(res)
        assert not leaks(SECRETS, {"stdout": res.stdout, "stderr": res.stderr}, [])
