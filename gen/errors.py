"""One error family. Every subclass is something the user can fix; its message says how."""


class GenError(Exception):
    """Base of errors the CLI reports in one line with exit code 2."""

    exit_code = 2


class ConfigError(GenError, ValueError):
    """An override or config value is unknown or out of range."""


class InputError(GenError, ValueError):
    """An input file exists but does not parse; the message names file and line."""


class MissingInputError(GenError, FileNotFoundError):
    """An input file or folder does not exist."""


class BackendError(GenError, RuntimeError):
    """An LLM or embedding backend cannot be set up (missing model file, server down)."""


class LLMOutputError(Exception):
    """One structured call produced nothing usable. Generators turn it into a Reject.

    Attributes:
        reason: a short typed reason: ``truncated``, ``invalid_output`` or ``backend_error``.
        raw: the last raw text the model produced, if any.
    """

    def __init__(self, reason: str, detail: str, raw: str | None = None):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.raw = raw


def not_utf8(path: object) -> InputError:
    """The InputError for a text file that failed to decode: it names the file, and the line and
    column of its first byte that is not UTF-8 (a decoder's own position counts from its chunk)."""
    from pathlib import Path

    try:
        data = Path(str(path)).read_bytes()
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        return InputError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x} at column {column}; "
            "save the file as UTF-8)"
        )
    except OSError as e:
        return InputError(f"{path}: cannot read ({e.strerror or e})")
    return InputError(f"{path}: not UTF-8 text (save the file as UTF-8)")
