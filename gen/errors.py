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
