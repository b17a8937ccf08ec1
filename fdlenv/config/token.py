"""The session token read from a file: `--token-file`, `fdlenv: token_file:`, systemd's credential.

Why it exists: a token on a command line is readable by every user (`ps`), and one
written as `join.token` sits in fdl.yml, which the image, the unit's working
directory and every reader of the project share. A file keeps it out of both; under
systemd the file may stay root-only (0600) while the service runs as its own user:
`LoadCredential=fdlenv-token:/etc/fdlenv/token` hands the service a private copy as
`$CREDENTIALS_DIRECTORY/fdlenv-token` (what `fdlenv recipe systemd --token-file` emits).

Which source wins is decided by `app.joinsettings.resolve` (pure): `--token` > `--token-file` >
`fdlenv.token_file` > `$CREDENTIALS_DIRECTORY/fdlenv-token` > `join.token`. A flag
beats the file, as everywhere; a file named on purpose beats the credential the
service manager hands over; and the credential beats a token left in fdl.yml, so a
unit can move a box off an inline token without editing the file. The credential is
used only when that file exists (systemd sets the directory for any credential).

`read_chosen_file` reads the winner once, at the start of the first attempt (join's loop
calls it before preparing anything), so a bad file is exit 2 before anything runs; a
re-dial reuses what was read (a rotated token takes a restart, as a changed fdl.yml
does). A file that is not there yet is transient (exit 1), as a missing `--identity`
is: a token provisioned after boot (a secret agent, a cloud-init write) arrives by
itself, and under `--persist` the next attempt reads it. Every other problem (empty,
unreadable, not one line of text) is permanent: the same bytes fail the same way. The file holds the token on one line; one trailing
newline (what `echo` and editors leave) is dropped, nothing else is trimmed.
"""

from __future__ import annotations

import os

from ..base.errors import Fail
from .model import JoinSettings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

CREDENTIAL = "fdlenv-token"            # the credential's name, `LoadCredential=fdlenv-token:PATH`
CREDENTIAL_FIELD = "$CREDENTIALS_DIRECTORY/" + CREDENTIAL
MAX_BYTES = 4096                       # a token is one short line; never slurp /dev/zero
ACCEPTED = ("accepted: a readable file holding the token on one line of printable characters "
            "(one trailing newline is dropped)")


def read_token_file(path: str, field: str, *, may_arrive: bool = False) -> str:
    """The token in `path`; any problem is one permanent error naming `field` and the path, but
    for a file not there yet when it `may_arrive` (join's: provisioned after boot): transient."""
    where = f"{field} {path}" if field != CREDENTIAL_FIELD else field
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
            mode = os.fstat(f.fileno()).st_mode
    except FileNotFoundError as e:
        if not may_arrive:
            raise Fail.permanent(f"{where}: cannot read it ({e.strerror or e}); {ACCEPTED}") from None
        raise Fail.retry(f"{where}: not there yet ({e.strerror or e}); a token provisioned after "
                         "boot is read by the next attempt (--persist re-dials); "
                         f"{ACCEPTED}") from None
    except OSError as e:
        raise Fail.permanent(f"{where}: cannot read it ({e.strerror or e}); {ACCEPTED}") from None
    if len(data) > MAX_BYTES:
        raise Fail.permanent(f"{where}: longer than {MAX_BYTES} bytes, not a token; {ACCEPTED}")
    if data.endswith(b"\n"):
        data = data[:-1]
    if not data:
        raise Fail.permanent(f"{where}: the file is empty; {ACCEPTED}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Fail.permanent(f"{where}: not UTF-8 text; {ACCEPTED}") from None
    if any(ord(c) < 0x20 or ord(c) == 0x7f for c in text):
        raise Fail.permanent(f"{where}: the token holds a newline or another control character; "
                             f"{ACCEPTED}")
    if field != CREDENTIAL_FIELD and mode & 0o077 and os.path.isfile(path):
        from ..base.progress import say

        say(f"warning: {where} is readable by other users (mode {mode & 0o777:04o}); "
            f"make it root- or owner-only: chmod 600 {path}")
    return text


def credential_path(environ: Mapping[str, str]) -> str | None:
    """`$CREDENTIALS_DIRECTORY/fdlenv-token` when the service manager set the directory."""
    d = (environ.get("CREDENTIALS_DIRECTORY") or "").strip()
    return os.path.join(d, CREDENTIAL) if d else None


def read_chosen_file(settings: JoinSettings) -> JoinSettings:
    """Read the token file `resolve` chose, once; the settings then carry the token only.
    The credential is optional (absent: `join.token`, already in `settings.token`, stays)."""
    path, field = settings.token_file, settings.token_file_field
    if path is None:
        return settings
    if field == CREDENTIAL_FIELD and not os.path.lexists(path):
        return settings._replace(token_file=None, token_file_field=None)
    return settings._replace(token=read_token_file(path, field or "--token-file", may_arrive=True),
                             token_file=None, token_file_field=None)
