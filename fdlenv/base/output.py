"""What a command prints for a reader: one JSON object, or one failure, always the same way.

Why one module: a machine reading stdout under `--json` must get exactly one
object whatever happened, and a person reading stderr one `error:` line. So:
- `emit(obj)`: the command's answer under `--json`, with `"schema": SCHEMA`
  first, so a reader can tell the shape it parses (docs/JSON.md lists every
  command's keys; SCHEMA changes when a key changes meaning or goes);
- `fail(message, code)`: the `error: <message>` line on stderr and, under
  `--json`, `{"schema", "error", "exit"}` on stdout; returns `code`;
- `error_line(message)`: the line alone, for a failure that is not the end
  (a join attempt the loop retries);
- a message is always one line (`one_line`: newlines and runs of whitespace become one
  space), whatever built it: a reader greps `error:` and gets the whole failure;
- nothing printed carries a secret (`scrub`): a URL's userinfo and query string, and every
  password fdlenv was given, are taken out of each line and each `--json` object.
The CLI sets `--json` once (`set_json`), before any command runs.
"""

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

SCHEMA = 1
_JSON = False
_ENDED = False   # set by `fail`: the command's last word is said; a thread's line after it is dropped
_OWNED = False   # fdlenv is the program (cli.main), not a library a host calls: only then is a fail the end


def set_json(on: bool) -> None:
    global _JSON
    _JSON = on


def emit(obj: "Mapping[str, object]") -> None:
    print(scrub(dumps({"schema": SCHEMA, **obj})))


def scrub(text: str) -> str:
    """`text` with no secret in it (`netauth.scrub`: userinfo and query strings of URLs, every
    password seen). netauth is imported only where a URL could carry one or it holds secrets,
    so a hot command's answer pays nothing for it."""
    held = sys.modules.get("fdlenv.base.netauth")
    if held is not None and not hasattr(held, "has_secrets"):   # another thread is importing it:
        from . import netauth as held                            # wait for it to be whole
    if ("://" in text and ("@" in text or "?" in text)) or (held is not None and held.has_secrets()):
        from .netauth import scrub as scrubbed
        return scrubbed(text)
    return text


def dumps(obj: object) -> str:
    """json.dumps(obj), byte for byte, without importing json (its decoder imports re, which a
    hot command's answer would pay for): dicts with str keys, lists, tuples, str, int, float,
    bool and None. Anything else goes to json itself."""
    try:
        return _encode(obj)
    except TypeError:
        import json
        return json.dumps(obj)


def _encode(obj: object) -> str:
    from _json import encode_basestring_ascii

    if isinstance(obj, str):
        return encode_basestring_ascii(obj)
    if obj is None or obj is True or obj is False:
        return {None: "null", True: "true", False: "false"}[obj]
    if type(obj) is int:
        return repr(obj)
    if type(obj) is float and obj == obj and obj not in (float("inf"), float("-inf")):
        return repr(obj)
    if type(obj) is dict and all(type(k) is str for k in obj):
        return "{" + ", ".join(f"{encode_basestring_ascii(k)}: {_encode(v)}" for k, v in obj.items()) + "}"
    if type(obj) is list or type(obj) is tuple:
        return "[" + ", ".join(_encode(v) for v in obj) + "]"
    raise TypeError(type(obj).__name__)


def one_line(message: str) -> str:
    return scrub(" ".join(message.split()))


def stderr_line(text: str) -> None:
    """`text` and its newline on stderr in one write(2) where stderr is the process's own (a line
    under the pipe's atomic size never runs into a line another thread writes at the same
    moment: a download thread's retry beside the main thread's stop)."""
    if _ENDED:
        return
    err = sys.stderr
    if err is sys.__stderr__ and err is not None:
        try:
            err.flush()
            fd = err.fileno()
        except (AttributeError, OSError, ValueError):
            fd = -1
        if fd >= 0:
            import os

            data = (text + "\n").encode("utf-8", "replace")
            while data:
                try:
                    data = data[os.write(fd, data):]
                except InterruptedError:
                    continue
                except OSError:
                    return
            return
    err.write(text + "\n")
    err.flush()


def error_line(message: str) -> None:
    stderr_line(f"error: {one_line(message)}")


def fail(message: str, code: int) -> int:
    """The command's failure, its last word: a download or page thread still unwinding says
    nothing after it (`stderr_line` drops what comes later)."""
    global _ENDED
    message = one_line(message)
    error_line(message)
    _ENDED = _OWNED
    if _JSON:
        emit({"error": message, "exit": code})
    return code
