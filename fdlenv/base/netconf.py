"""How this box reaches an index: the TLS and proxy settings pip and uv would use, read as they read them.

Why here: every request goes through `netread.open_url`, and a fleet behind a private CA or
a proxy has already told pip (pip.conf, PIP_*) and uv (SSL_CERT_FILE, UV_NATIVE_TLS) how
to get out; fdlenv reads the same places (pip's config files are also where `pipindex`
finds the index URL) so one configuration serves all three.

The CAs a server's certificate is checked against, first hit wins (`tls()` names the one
used, and a certificate failure says it):
1. pip's `cert` (PIP_CERT, then pip's config files, `[install]` over `[download]` over
   `[global]`): a bundle (or a directory of hashed CAs) that replaces the system's, as
   `pip --cert` does;
2. REQUESTS_CA_BUNDLE, then CURL_CA_BUNDLE (requests', so pip's where no `cert` is set);
3. SSL_CERT_FILE / SSL_CERT_DIR (OpenSSL's, and uv's);
4. the system's CAs (what uv's UV_NATIVE_TLS asks for: the same store here).
pip's `client-cert` (PIP_CLIENT_CERT, config): one PEM holding a certificate and its key,
shown to a server that asks for one. Hostnames are always checked; nothing loosens it.

Proxies (`proxies()`): pip's `proxy` (PIP_PROXY, config) for http and https, else
HTTPS_PROXY / HTTP_PROXY, else ALL_PROXY (lower case over upper, as curl and urllib read
them); NO_PROXY / no_proxy bypass as urllib reads them. `user:password@` in a proxy URL is
sent as Proxy-Authorization (urllib's own handling), through a CONNECT tunnel for https.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from .errors import Fail

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from collections.abc import Mapping

_SECTIONS = ("install", "download", "global")
RETRY_STATUS = (408, 425, 429, 500, 502, 503, 504)
RETRY_AFTER_CAP = 10.0       # seconds a Retry-After is honoured up to
QUICK_PAUSE = 0.5            # seconds before a request's second try, doubled for each later one


def home_dir(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or os.path.expanduser("~"))


def config_dirs(env: Mapping[str, str]) -> tuple[list[Path], Path]:
    """(XDG system config dirs, XDG user config dir), as pip's and uv's platformdirs read them."""
    system = [Path(d) for d in (env.get("XDG_CONFIG_DIRS", "").strip() or "/etc/xdg").split(os.pathsep) if d]
    user = env.get("XDG_CONFIG_HOME", "").strip()
    return system, Path(user) if user else home_dir(env) / ".config"


def pip_config_files(env: Mapping[str, str]) -> list[Path]:
    """pip's config files, lowest priority first (pip's `Configuration`: global < user < site <
    PIP_CONFIG_FILE; PIP_CONFIG_FILE=os.devnull loads none, an existing one hides the user's)."""
    given = env.get("PIP_CONFIG_FILE")
    if given == os.devnull:
        return []
    system, user = config_dirs(env)
    files = [d / "pip" / "pip.conf" for d in system] + [Path("/etc/pip.conf")]
    if not (given and os.path.exists(given)):
        mac = home_dir(env) / "Library" / "Application Support" / "pip"
        user_dir = mac if sys.platform == "darwin" and mac.is_dir() else user / "pip"
        files += [home_dir(env) / ".pip" / "pip.conf", user_dir / "pip.conf"]
    files.append(Path(sys.prefix) / "pip.conf")
    if given:
        files.append(Path(given))
    return files


def pip_file_option(env: Mapping[str, str], name: str, way_out: str = "") -> tuple[str, str] | None:
    """(value, `<file> [<section>]`) of pip option `name` in pip's config files, or None: later
    files override earlier ones, `[install]` over `[download]` over `[global]`."""
    import configparser

    found: dict[str, tuple[str, Path]] = {}   # section -> (value, file); later files override
    for path in pip_config_files(env):
        parser = configparser.RawConfigParser()
        try:
            with open(path, encoding="utf-8") as f:
                parser.read_file(f)
        except OSError:
            continue   # absent or unreadable: pip skips it as well
        except (configparser.Error, UnicodeDecodeError) as e:
            raise Fail.permanent(f"pip config {path}: cannot parse it ({str(e).splitlines()[0]}); fix it"
                                 + (f", {way_out}" if way_out else "")) from None
        for section in parser.sections():
            for key, value in parser.items(section):
                if key.lower().replace("_", "-").removeprefix("--") == name and value.strip():
                    found[section] = (value.strip(), path)   # sections match case, as pip's
    for section in _SECTIONS:
        if section in found:
            value, path = found[section]
            return value, f"{path} [{section}]"
    return None


def pip_option(name: str, env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """pip option `name` as pip takes it: PIP_<NAME>, then its config files."""
    env = os.environ if env is None else env
    var = "PIP_" + name.upper().replace("-", "_")
    if env.get(var, "").strip():
        return env[var].strip(), var
    return pip_file_option(env, name)


def ca_setting(env: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """(the CA bundle or directory to use, or None for OpenSSL's defaults; the setting that says so)."""
    env = os.environ if env is None else env
    found = pip_option("cert", env)
    if found:
        return os.path.expanduser(found[0]), f"pip's cert from {found[1]}"
    for var in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        if env.get(var, "").strip():
            return os.path.expanduser(env[var].strip()), var
    for var in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        if env.get(var, "").strip():
            return None, f"{var}={env[var].strip()}"
    native = " (UV_NATIVE_TLS)" if env.get("UV_NATIVE_TLS", "").strip() not in ("", "0", "false") else ""
    return None, f"the system's CAs{native}"


def tls() -> tuple[ssl.SSLContext, str]:
    """One verifying context for the process's https requests, and which CA setting it holds."""
    import ssl

    cafile, setting = ca_setting()
    try:
        if cafile is None:
            ctx = ssl.create_default_context()
        elif os.path.isdir(cafile):
            ctx = ssl.create_default_context(capath=cafile)
        else:
            ctx = ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as e:
        raise Fail.permanent(f"{setting} names {cafile}, which is not a readable CA bundle "
                             f"({getattr(e, 'strerror', None) or e}); fix the setting") from None
    client = pip_option("client-cert")
    if client:
        try:
            ctx.load_cert_chain(os.path.expanduser(client[0]))
        except (OSError, ssl.SSLError) as e:
            raise Fail.permanent(f"pip's client-cert from {client[1]} names {client[0]}, which is not a PEM "
                                 f"holding a certificate and its key ({getattr(e, 'strerror', None) or e})") from None
    return ctx, setting


def proxies(env: Mapping[str, str] | None = None) -> tuple[dict[str, str], str]:
    """(scheme -> proxy URL for urllib's ProxyHandler, the setting it came from); see the module's docstring."""
    env = os.environ if env is None else env
    pip = pip_option("proxy", env)
    if pip:
        url = pip[0] if "://" in pip[0] else f"http://{pip[0]}"
        return {"http": url, "https": url}, f"pip's proxy from {pip[1]}"

    def var(name: str) -> tuple[str, str]:
        for n in (name.lower(), name.upper()):
            if env.get(n, "").strip():
                return env[n].strip(), n
        return "", ""

    out, where = {}, []
    for scheme in ("http", "https"):
        url, name = var(f"{scheme}_proxy")
        if not url:
            url, name = var("all_proxy")
        if url:
            out[scheme] = url if "://" in url else f"http://{url}"
            where.append(name)
    return out, "/".join(dict.fromkeys(where))


# ---------------------------------------------------------------- what a failure means

def retry_pause(e: BaseException, attempt: int) -> float | None:
    """Seconds to wait before trying a request again after `e`, or None: not worth another try.
    A status in RETRY_STATUS (its Retry-After honoured up to RETRY_AFTER_CAP) or a connection
    refused, reset or closed before an answer; QUICK_PAUSE doubled per try otherwise."""
    import http.client
    import ssl

    code = getattr(e, "code", None)
    reason = getattr(e, "reason", e)
    if isinstance(code, int):
        if code not in RETRY_STATUS:
            return None
        after = str((getattr(e, "headers", None) or {}).get("Retry-After") or "").strip()
        if after.isdigit():
            return min(float(after), RETRY_AFTER_CAP)
        if after:
            from email.utils import parsedate_to_datetime
            try:
                at: float = parsedate_to_datetime(after).timestamp()
                return min(max(at - time.time(), 0.0), RETRY_AFTER_CAP)
            except (TypeError, ValueError):
                pass
    elif isinstance(reason, ssl.SSLError) or not isinstance(
            reason, (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine)):
        return None
    return QUICK_PAUSE * (1 << (attempt - 1))



def refused(url: str, e: BaseException, ca: str, proxy: str) -> Fail | None:
    """The permanent failure a refusal of these settings is, or None: a 401 or 403 from the index
    (its credentials, and where they came from), a 407 from the proxy (`proxy`: its setting), a
    certificate not trusted (`ca`: the CA setting used). Only a person fixes any of them."""
    import ssl
    import urllib.parse

    from .netauth import credentials, shown

    code = getattr(e, "code", None)
    reason = getattr(e, "reason", None)
    host = urllib.parse.urlsplit(url).netloc
    if code in (401, 403):
        found = credentials(url)
        sent = (f"the credentials from {found[2]} (user {found[0]!r})" if found else
                "no credentials (none in its URL, the netrc file or uv's UV_INDEX_<NAME>_PASSWORD)")
        return Fail.permanent(f"{shown(url)}: the index answered HTTP {code} ({' '.join(str(reason).split())}) "
                              f"to {sent}; give the right user and password (in the index URL, as "
                              "user:password@host, or in ~/.netrc) and retry")
    tunnel = str(reason if isinstance(reason, OSError) else e).partition("Tunnel connection failed: ")[2][:3]
    if code == 407 or tunnel in ("401", "403", "407"):   # tinyproxy refuses a CONNECT with 401
        return Fail.permanent(f"{shown(url)}: the proxy refused to carry it (HTTP {tunnel or code}: its "
                              f"credentials; the proxy is from {proxy or 'no proxy setting'}); give the "
                              "proxy's user:password in its URL and retry")
    if isinstance(reason, ssl.SSLCertVerificationError) or isinstance(e, ssl.SSLCertVerificationError):
        err = reason if isinstance(reason, ssl.SSLCertVerificationError) else e
        assert isinstance(err, ssl.SSLCertVerificationError)
        return Fail.permanent(f"{host}: its TLS certificate is not trusted ({err.verify_message or err.reason}; "
                              f"CAs from {ca}); point pip's cert (PIP_CERT), REQUESTS_CA_BUNDLE or "
                              "SSL_CERT_FILE at the CA that signed it")
    return None
