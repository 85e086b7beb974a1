"""gen from Python: ``gen.run(...)`` makes a run folder, ``gen.open(...)`` reads one.

The command line is a thin layer over this module: both validate a generator's options with its
pydantic config (:func:`configure`), size the run with its plan hook, and run it with
:func:`gen.runner.run_config`. Only the option syntax differs (``key=value`` there, keyword
arguments here)::

    import gen

    pool = gen.run("personas", n=6, out="runs/pool")
    bundles = gen.run("digital", persona_file=str(pool.path), n=5, out="runs/digital")
    df = bundles.to_polars()
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gen.config import validate_options
from gen.llm.secrets import refuse_in_config
from gen.registry import REGISTRY
from gen.runfolder import RunFolder

LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
"""The run log's line format (the command line's comes from ``conf/hydra/job_logging``)."""


def configure(generator: str, options: dict[str, Any], *, check_input: bool = True) -> Any:
    """A generator's validated config from option values (``llm`` / ``embedder`` as a preset
    name, a dict or a config object); every mistake is one :class:`ConfigError` naming the
    option. An ``input=`` that does not exist fails here too (``check_input``)."""
    spec = REGISTRY.get_or_fail(generator)
    return validate_options(generator, spec.config, options, check_input=check_input)


def run(generator: str, *, out: str | Path | None = None, **options: Any) -> RunFolder:
    """Run ``generator`` with these options (as ``gen <generator> key=value ...`` would) and
    return its run folder.

    Args:
        generator: a generator's name (``gen --help`` lists them).
        out: the run folder to write (default ``outputs/<generator>/<date_time>`` under the
            current directory, as on the command line).
        **options: the generator's options (``gen <generator> --help``), e.g. ``n=5``,
            ``llm="openai"`` or ``llm={"backend": "openai", "base_url": ..., "model": ...}``.

    Raises:
        ConfigError, InputError, MissingInputError: bad options or input, before anything runs.

    A run that ends with a non-zero exit code (an audit with findings, a pool smaller than
    asked for) still returns its folder: ``folder.ok`` is False and ``folder.manifest.error``
    says why.
    """
    refuse_in_config({**options, "out": str(out)})  # a key in a folder's name is written
    cfg = configure(generator, options)
    plan = REGISTRY[generator].make_plan(
        cfg
    )  # reads the input once; its errors come before any write
    folder = Path(out) if out is not None else default_folder(generator)
    folder.mkdir(parents=True, exist_ok=True)
    from gen.runner import run_config

    with run_log(folder):
        run_config(generator, cfg, folder, plan=plan)
    return RunFolder.open(folder)


def open(path: str | Path) -> RunFolder:  # noqa: A001 - gen.open, as the public name reads
    """The run folder at ``path`` (any generator's), with its records typed."""
    return RunFolder.open(path)


def default_folder(generator: str) -> Path:
    """``outputs/<generator>/<date_time>``, as the command line names a run folder."""
    return Path("outputs") / generator / dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")


@contextmanager
def run_log(folder: Path) -> Iterator[None]:
    """Everything logged during the run goes to the folder's ``gen.log`` too (as on the
    command line, where Hydra's job logging does it)."""
    handler = logging.FileHandler(folder / "gen.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(min(old_level, logging.INFO) if old_level else logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        handler.close()


__all__ = ["configure", "open", "run"]
