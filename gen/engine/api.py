"""gen from Python: ``gen.run(...)`` makes a run folder, ``gen.open(...)`` reads one.

The command line is a thin layer over this module: both validate a generator's options with its
pydantic config (:func:`configure`), size the run with its plan hook, and run it with
:func:`gen.engine.runner.run_config`. Only the option syntax differs (``key=value`` there, keyword
arguments here)::

    import gen

    pool = gen.run("personas", n=6, out="runs/pool")
    bundles = gen.run("digital", persona_file=pool, n=5, out="runs/digital")
    df = bundles.to_polars()
    screened = gen.run("nocontext", input=df_of_mcqs, out="runs/screen")  # rows in memory

An option that takes a file (any option whose type is a ``str``: ``input=``, ``persona_file=``,
``goals=``…) also takes what a notebook holds: a :class:`RunFolder` (read as its path), or a table
of rows (a list of dicts, a polars DataFrame, a pandas DataFrame when pandas is installed), which
:func:`in_memory_inputs` writes as JSONL into the run folder before the run reads it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import shutil
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gen.engine.config import validate_options
from gen.engine.manifest import atomic_write, sha256_file
from gen.engine.registry import REGISTRY
from gen.engine.runconfig import CommonConfig
from gen.engine.runfolder import RunFolder
from gen.errors import ConfigError, InputError
from gen.llm.secrets import refuse_in_config
from gen.paths import inside

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
    from gen.engine.preflight import check_out_dir
    from gen.engine.runner import RunContext, run_config

    folder = path_of(out, "out") if out is not None else default_folder(generator)
    existed = folder.exists()
    options, written = in_memory_inputs(generator, options, folder)
    try:
        refuse_in_config({**options, "out": str(folder)})  # a key in a folder's name is written
        cfg = configure(generator, options)
        plan = REGISTRY[generator].make_plan(
            cfg
        )  # reads the input once; its errors come before any write
        check_out_dir(folder, cfg)  # a bank's folder, an input's, a file: refused before gen.log
    except BaseException:
        unwrite(folder, written, existed)  # a run refused before it starts leaves nothing behind
        raise
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file on the way, a read-only place
        raise ConfigError(f"out: cannot make the run folder {folder}: {e.strerror or e}") from None
    ctx = RunContext(generator, cfg, folder)
    for path in written:  # hashed into the manifest's inputs, as a generator notes a file it read
        ctx.inputs[str(path)] = sha256_file(path)
    with run_log(folder):
        run_config(generator, cfg, folder, plan=plan, ctx=ctx)
    return RunFolder.open(folder)


# --------------------------------------------------------------------------- in-memory inputs

INPUTS_DIR = "inputs"
"""The run folder's subfolder that holds the in-memory inputs a run was given, as JSONL."""


def in_memory_inputs(
    generator: str, options: dict[str, Any], folder: Path
) -> tuple[dict[str, Any], list[Path]]:
    """``options`` with each in-memory input made a path, and the files written for them.

    A :class:`RunFolder` (anywhere, also in a list: ``merge input=[a, b]``) becomes its path.
    A table (a list of dicts, a polars or pandas DataFrame) given for an option whose type takes
    a ``str`` (a file's path: ``input=``, ``persona_file=``, ``goals=``…; the options every
    generator shares other than ``input=`` aside) is written to ``<folder>/inputs/<option>.jsonl``,
    one JSON object per row, and the option names that file: the generator reads it with the
    reader it reads a JSONL file with, so a rerun into the same folder reads the same bytes, and
    the manifest hashes them (``inputs`` and ``outputs``). Dates become ISO 8601 strings; a table
    with no rows, a row that is not a mapping, a key that is not a string, NaN or infinity, or a
    value JSON cannot hold is one :class:`InputError` naming the option and the row.
    """
    fields = REGISTRY.get_or_fail(generator).config.model_fields
    out: dict[str, Any] = {}
    tables: dict[str, list[dict[str, Any]]] = {}
    for key, value in options.items():
        if isinstance(value, RunFolder):
            out[key] = str(value.path)
        elif isinstance(value, list | tuple) and any(isinstance(v, RunFolder) for v in value):
            out[key] = [str(v.path) if isinstance(v, RunFolder) else v for v in value]
        elif key in fields and takes_a_path(key, fields[key].annotation) and is_table(value):
            file = inside(folder, f"{INPUTS_DIR}/{key}.jsonl", what="option")
            tables[key] = table_rows(value, f"{key}= (in memory, for {file})")
            out[key] = str(file)
        else:
            out[key] = value
    written: list[Path] = []
    if tables:
        existed = folder.exists()
        try:
            (folder / INPUTS_DIR).mkdir(parents=True, exist_ok=True)
            for key, rows in tables.items():
                file = inside(folder, f"{INPUTS_DIR}/{key}.jsonl", what="option")
                text = "".join(
                    json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in rows
                )
                atomic_write(file, text)
                written.append(file)
        except OSError as e:  # a file on the way, a read-only place
            unwrite(folder, written, existed)
            raise ConfigError(
                f"out: cannot write the in-memory inputs into {folder}: {e.strerror or e}"
            ) from None
    return out, written


def takes_a_path(name: str, annotation: Any) -> bool:
    """An option whose type takes a ``str`` but no list: where a file's path goes."""
    if name in CommonConfig.model_fields and name != "input":
        return False
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    members = set(typing.get_args(annotation)) if union else {annotation}
    return str in members and not any(typing.get_origin(a) in (list, tuple) for a in members)


def is_table(value: Any) -> bool:
    """A list of rows or a DataFrame (polars', or pandas' when pandas is imported)."""
    if isinstance(value, list | tuple):
        return True
    for module, name in (("polars", "DataFrame"), ("pandas", "DataFrame")):
        lib = sys.modules.get(module)  # a DataFrame's library is imported; never import one
        if lib is not None and isinstance(value, getattr(lib, name)):
            return True
    return False


def table_rows(value: Any, what: str) -> list[dict[str, Any]]:
    """A table's rows as JSON objects; every problem one InputError starting with ``what``."""
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(value, pd.DataFrame):
        if any(not isinstance(c, str) for c in value.columns):
            raise InputError(f"{what}: column names must be strings, got {list(value.columns)!r}")
        if value.columns.has_duplicates:
            raise InputError(f"{what}: duplicate column names {list(value.columns)!r}")
        # pandas marks a missing value NaN (or NaT, None): a missing field, null in JSON
        rows: list[Any] = value.astype(object).where(value.notna(), None).to_dict("records")
    elif isinstance(value, list | tuple):
        rows = list(value)
    else:  # a polars DataFrame: nested structs and lists come out as dicts and lists
        rows = value.to_dicts()
    if not rows:
        raise InputError(f"{what}: no rows (an empty table)")
    out = []
    for i, row in enumerate(rows, 1):
        if not isinstance(row, Mapping):
            raise InputError(
                f"{what}: row {i}: expected a mapping (a dict), got {type(row).__name__}"
            )
        try:
            out.append(json_value(row, ""))
        except _NotJSON as e:
            raise InputError(f"{what}: row {i}: {e}") from None
        except RecursionError:
            raise InputError(f"{what}: row {i}: nested too deeply") from None
    return out


class _NotJSON(ValueError):
    """A value of an in-memory row that JSON cannot hold (its message names the field)."""


def json_value(value: Any, where: str) -> Any:
    """``value`` as JSON data (a dict's keys strings, tuples as lists, dates as ISO 8601, numpy
    scalars as Python's), or :class:`_NotJSON` naming the field (``a.b[2]``)."""
    field = where or "value"
    if value is None or isinstance(value, bool | int | str):
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise _NotJSON(
                    f"{field}: holds a lone UTF-16 surrogate, which is not text"
                ) from None
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotJSON(f"{field}: {value} is not a JSON number (JSON has no NaN or Infinity)")
        return value
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise _NotJSON(f"{field}: a key {k!r} is not a string")
            out[json_value(k, f"{where}.{k}" if where else k)] = json_value(
                v, f"{where}.{k}" if where else k
            )
        return out
    if isinstance(value, list | tuple):
        return [json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic | numpy.ndarray):
        return json_value(value.tolist(), where)  # a numpy scalar or array: Python values
    raise _NotJSON(f"{field}: a {type(value).__name__} is not JSON data (text, number, list, dict)")


def unwrite(folder: Path, written: list[Path], existed: bool) -> None:
    """Undo :func:`in_memory_inputs`' files (and the folder, when it made it)."""
    if not written:
        return
    if not existed:
        shutil.rmtree(folder, ignore_errors=True)
        return
    for path in written:
        path.unlink(missing_ok=True)
    try:
        (folder / INPUTS_DIR).rmdir()
    except OSError:  # not empty (an earlier run's inputs), or gone
        pass


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


__all__ = ["configure", "in_memory_inputs", "open", "run"]
