"""gen from Python: ``gen.run(...)`` makes a run folder, ``gen.open(...)`` reads one.

The command line is a thin layer over this module: both validate a generator's options with its
pydantic config (:func:`configure`), size the run with its plan hook, and run it with
:func:`gen.engine.runner.run_config`. Only the option syntax differs (``key=value`` there, keyword
arguments here)::

    import gen

    pool = gen.run("personas", n=6, out="runs/pool")
    bundles = gen.run("digital", persona_file=str(pool.path), n=5, out="runs/digital")
    df = bundles.to_polars()
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gen.engine.config import validate_options
from gen.engine.registry import REGISTRY
from gen.engine.runfolder import RunFolder
from gen.errors import ConfigError
from gen.llm.secrets import refuse_in_config

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
    from gen.engine.runner import check_out_dir, run_config

    folder = path_of(out, "out") if out is not None else default_folder(generator)
    refuse_in_config({**options, "out": str(folder)})  # a key in a folder's name is written
    cfg = configure(generator, options)
    plan = REGISTRY[generator].make_plan(
        cfg
    )  # reads the input once; its errors come before any write
    check_out_dir(folder, cfg)  # a bank's folder, an input's, a file: refused before gen.log
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file on the way, a read-only place
        raise ConfigError(f"out: cannot make the run folder {folder}: {e.strerror or e}") from None
    with run_log(folder):
        run_config(generator, cfg, folder, plan=plan)
    return RunFolder.open(folder)


def open(path: str | Path) -> RunFolder:  # noqa: A001 - gen.open, as the public name reads
    """The run folder at ``path`` (any generator's), with its records typed."""
    return RunFolder.open(path_of(path, "gen.open"))


def path_of(value: Any, what: str) -> Path:
    """A path argument of the API as a Path; anything else (None, a number) is a ConfigError."""
    if isinstance(value, str | os.PathLike) and not isinstance(value, bytes):
        text = os.fspath(value)
        if isinstance(text, str) and text.strip() and "\x00" not in text:
            return Path(text).expanduser()
    raise ConfigError(
        f"{what}: expected a folder's path (a str or pathlib.Path), got {type(value).__name__} "
        f"{str(value)[:80]!r}"
    )


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
