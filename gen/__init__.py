"""gen: generate, filter and audit data for benchmarks of egocentric assistants.

The Python API (the command line ``gen`` is a thin layer over it)::

    import gen

    folder = gen.run("personas", n=6)                # a RunFolder
    folder = gen.open("outputs/personas/...")       # any run folder
    folder.records(), folder.rejects(), folder.manifest, folder.to_polars(), folder.to_hf()

A generator of your own is a function decorated with :func:`gen.generator` and named in your
distribution's ``gen.generators`` entry points; a record kind of your own is a :class:`gen.Kind`
(or :class:`gen.MCQKind`) named in its ``gen.kinds`` entry points (see the plugin guide).
"""

from typing import Any

from gen.engine.api import open, run
from gen.engine.manifest import TOOLKIT_VERSION as __version__
from gen.engine.registry import generator
from gen.engine.runfolder import RunFolder

_LAZY = {
    "CommonConfig": "gen.engine.runner",
    "RunContext": "gen.engine.runner",
    "Plan": "gen.engine.runner",
    "Reject": "gen.schemas",
    "Kind": "gen.kinds",
    "MCQKind": "gen.kinds",
    "MCQ": "gen.schemas.mcq",
    "compare": "gen.engine.compare",
}


def __getattr__(name: str) -> Any:
    """What a plugin's generator needs (``gen.CommonConfig``, ``gen.RunContext``, ``gen.Reject``),
    imported when first named."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gen' has no attribute {name!r}")


__all__ = [
    "__version__",
    "MCQ",
    "CommonConfig",
    "Kind",
    "MCQKind",
    "Plan",
    "Reject",
    "RunContext",
    "RunFolder",
    "compare",
    "generator",
    "open",
    "run",
]
