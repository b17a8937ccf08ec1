"""Failure as a type.

Every fatal condition is a `Fail` that knows whether retrying may help.
`fdlenv join --persist` and systemd's RestartPreventExitStatus=2 both key on
that distinction, so it travels as data, never as a substring of a message.
Exit codes: 0 ok, 1 transient (retrying may help), 2 permanent (it cannot).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_TRANSIENT = 1
EXIT_PERMANENT = 2


class Fail(Exception):
    """A failure the CLI prints as one `error:` line and maps to an exit code."""

    def __init__(self, message: str, transient: bool = False, notes: tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.transient = transient
        # What the failing step had already found (prepare's notes): printed before the error.
        self.notes = tuple(notes)

    @classmethod
    def permanent(cls, message: str) -> "Fail":
        return cls(message, transient=False)

    @classmethod
    def retry(cls, message: str) -> "Fail":
        return cls(message, transient=True)

    def with_notes(self, notes) -> "Fail":
        """The same failure carrying `notes` (raise it `from` the original)."""
        return Fail(self.message, self.transient, tuple(notes))

    @property
    def exit_code(self) -> int:
        return EXIT_TRANSIENT if self.transient else EXIT_PERMANENT

    def __str__(self) -> str:
        return self.message
