"""Every input reader against malformed content.

A table of readers (:data:`READERS`: one line each) drives each generator's ``plan`` hook — where
inputs are read — in process, on a small valid input that Hypothesis corrupts: random bytes, a
truncated file, a byte-order mark, a non-UTF-8 byte, an empty file, deep nesting, wrong JSON
types in each field, huge numbers, NaN, missing and extra fields or columns. The property: a
``GenError`` (exit 2) whose message is one line naming the file, or a valid result; never
another exception, never a write outside the run folder; and a BOM before valid content reads
as valid. A handful of real ``python -m gen`` runs check the same at the process level. The
shared readers' own cases (strict JSON, BOM, non-UTF-8, EgoToM columns, roles) come first.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest
from bad_input_inputs import (
    CHAIN,
    GOAL_ROWS,
    NARRATION,
    _text,
    egotom_rows,
    persona_lines,
    plan_of,
)
from bad_input_readers import READERS, Reader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shards import personas_shards

from gen.engine.runner import RunContext
from gen.errors import GenError, InputError
from gen.formats.mcq import write_egotom_csv
from gen.formats.roles import read_roles
from gen.kinds.mcq import load_banks
from gen.paths import PROMPTS
from gen.readers import iter_jsonl, parse_json, read_json

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BOM = codecs.BOM_UTF8


# --------------------------------------------------------------------------- the shared readers


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": NaN}', "a: NaN is not a JSON number"),
        ('{"a": {"b": [1, -Infinity]}}', "a.b[1]: -Infinity is not a JSON number"),
        ('[{"x": 1e999}]', "[0].x: 1e999 is too large for a number"),
        (
            "9" * 5000,
            "not valid JSON (Exceeds the limit (4300 digits) for integer string conversion: value "
            "has 5000 digits)",
        ),
        ("[" * 100_000 + "]" * 100_000, "not valid JSON (nested too deeply)"),
        ('{"a": 1', "not valid JSON (Expecting ',' delimiter)"),
    ],
    ids=["nan", "infinity", "1e999", "5000_digits", "deep", "cut"],
)
def test_parse_json_is_strict_and_names_where_and_field(text: str, message: str) -> None:
    with pytest.raises(InputError) as e:
        parse_json(text, "f.jsonl:3")
    assert str(e.value) == f"f.jsonl:3: {message}" + (
        " (JSON has no NaN or Infinity)"
        if "JSON number" in message or "too large" in message
        else ""
    )


def test_iter_jsonl_reads_a_bom_and_names_a_bad_byte_and_nan_by_line(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(BOM + b'{"a": 1}\r\n\r\n{"b": "\xc3\xa9"}\n')
    assert list(iter_jsonl(path)) == [(1, {"a": 1}), (3, {"b": "é"})]
    path.write_bytes(b'{"a": 1}\n{"b": "caf\xe9"}\n')  # latin-1, as an old export writes it
    with pytest.raises(
        InputError,
        match=rf"^{path}:2: not UTF-8 text \(byte 0xe9 at column 11; save the file as UTF-8\)$",
    ):
        list(iter_jsonl(path))
    path.write_text('{"a": 1}\n{"w": {"start_s": NaN}}\n', encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{path}:2: w.start_s: NaN is not a JSON number"):
        list(iter_jsonl(path))


def test_read_json_names_the_line_of_a_syntax_error_and_reads_a_bom(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(BOM + b'{\n "a": [1,\n 2]\n}\n')
    assert read_json(path) == {"a": [1, 2]}
    path.write_text('{\n "a": [1,\n ]\n}\n', encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{path}:3: not valid JSON"):
        read_json(path)


def test_the_runner_never_writes_nan(tmp_path: Path) -> None:
    """What gen writes is JSON other tools read: a NaN reaching a manifest or an extra output is
    a bug (exit 1), never a file with a bare NaN in it."""
    from gen.generators.personas import PersonasConfig

    ctx = RunContext("personas", PersonasConfig(cache_dir=None), tmp_path)
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        ctx.write_json("x.json", {"v": float("nan")})
    assert not (tmp_path / "x.json").exists()


def test_an_egotom_csv_without_its_context_column_is_refused(tmp_path: Path) -> None:
    """It loaded with empty contexts: passed ``audit``, went into a bank, was screened blind
    by ``nocontext``. The shared reader now names the file and the missing column."""
    folder = tmp_path / "egotom"
    folder.mkdir()
    path = folder / "egotom_goal_shuffled.csv"
    write_egotom_csv(egotom_rows(), "goal", path)
    assert [q.context for q in load_banks(folder)[0].items] == [
        "    00m:01s | #C C opens the door"
    ] * 2
    pl.read_csv(path, infer_schema_length=0).drop("narrations_in_context").write_csv(path)
    with pytest.raises(
        InputError,
        match=rf"^{path}: missing EgoToM column\(s\) narrations_in_context \(an EgoToM "
        r"goal CSV has vuid, cuid, narrations_in_context, gt_goal",
    ):
        load_banks(folder)
    with pytest.raises(InputError, match="narrations_in_context"):
        plan_of("nocontext", input=str(folder))


def test_egotom_csv_with_a_bom_reads_and_a_non_utf8_one_is_named(tmp_path: Path) -> None:
    path = tmp_path / "egotom_goal_shuffled.csv"
    write_egotom_csv(egotom_rows(), "goal", path)
    plain = load_banks(path)[0].items
    path.write_bytes(BOM + path.read_bytes())
    assert load_banks(path)[0].items == plain
    path.write_bytes(path.read_bytes().replace(b"opens", b"\xf6ffnet"))
    with pytest.raises(InputError, match=rf"^{path}:2: not UTF-8 text \(byte 0xf6 at column"):
        load_banks(path)
    folder = (
        tmp_path / "f"
    )  # found in a folder by its header: a bad byte there fails in the reader too
    folder.mkdir()
    (folder / "egotom_goal_shuffled.csv").write_bytes(b"\xff" + path.read_bytes())
    with pytest.raises(
        InputError, match=r"egotom_goal_shuffled.csv:1: not UTF-8 text \(byte 0xff at column 1"
    ):
        load_banks(folder)


def test_roles_file_with_a_bom_reads_and_a_non_utf8_one_is_named(tmp_path: Path) -> None:
    """A roles file that was not UTF-8 was an ``unexpected UnicodeDecodeError`` (exit 1)."""
    path = tmp_path / "roles.yaml"
    text = (FIXTURES / "audit" / "scenario_roles.yaml").read_bytes()
    path.write_bytes(BOM + text)
    assert read_roles(path) == read_roles(FIXTURES / "audit" / "scenario_roles.yaml")
    path.write_bytes(text.replace(b"authoring notes", b"authoring n\xf6tes"))
    with pytest.raises(InputError, match=rf"^{path}:3: not UTF-8 text \(byte 0xf6"):
        read_roles(path)
    path.write_text("id: [" * 2000 + "x" + "]" * 2000, encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{path}: "):
        read_roles(path)


def test_mcq_jsonl_with_a_bom_nan_or_a_bad_byte(tmp_path: Path) -> None:
    path = tmp_path / "mcq.jsonl"
    clean = (FIXTURES / "audit" / "clean.jsonl").read_bytes()
    path.write_bytes(BOM + clean)
    assert load_banks(path)[0].items == load_banks(FIXTURES / "audit" / "clean.jsonl")[0].items
    first, rest = clean.split(b"\n", 1)
    path.write_bytes(first + b"\n" + rest.replace(b'"group"', b'"extra": NaN, "group"', 1))
    with pytest.raises(InputError, match=rf"^{path}:2: extra: NaN is not a JSON number"):
        load_banks(path)
    path.write_bytes(first + b"\n" + rest.replace(b"C ", b"C \xe9", 1))
    with pytest.raises(InputError, match=rf"^{path}:2: not UTF-8 text"):
        load_banks(path)


# --------------------------------------------------------------------------- corruptions

HUGE = "9" * 5000
RAW_VALUES = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "9" * 400,
    HUGE,
    "-1",
    "0",
    "2.5",
    "true",
    "false",
    "null",
    '""',
    '"x"',
    "[]",
    "{}",
    "[1, 2]",
    '{"a": 1}',
    '"../../escape.json"',
    '"/etc/passwd"',
    '"\\u0000"',
    '"' + "é" * 3 + '"',
    "[" * 3000 + "]" * 3000,
    "[" * 100_000 + "]" * 100_000,
]
"""JSON (and YAML flow) texts a field is replaced by; some are not JSON at all (NaN, 5,000
digits)."""
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=8,
)
raw_value = st.sampled_from(RAW_VALUES) | json_values.map(json.dumps)
cell_text = st.sampled_from(
    [
        "",
        "NaN",
        "inf",
        "-1",
        HUGE,
        "1e999",
        "a,b",
        'x"y',
        "line\nbreak",
        "\x00",
        "99m:99s | #C C x",
        "../../x",
    ]
) | st.text(max_size=30)
SENTINEL = "\u0001SENTINEL\u0001"


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in a parsed JSON/YAML value, containers included."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths_of(v, (*prefix, i))
    return out


def edited(value: Any, path: tuple[Any, ...], how: str) -> Any:
    """``value`` with the position at ``path`` replaced by the sentinel, deleted, or its parent
    given an unknown key."""
    value = json.loads(json.dumps(value))
    *head, last = path
    parent = value
    for k in head:
        parent = parent[k]
    if how == "replace":
        parent[last] = SENTINEL
    elif how == "delete":
        del parent[last]
    elif isinstance(parent, dict):
        parent["unexpected_field"] = 1
    else:
        parent.append(SENTINEL)
    return value


def dumped(value: Any, token: str, yaml_text: bool = False) -> str:
    if yaml_text:
        import yaml

        return (
            yaml.safe_dump(value, sort_keys=False, allow_unicode=True)
            .replace(repr(SENTINEL)[1:-1], token)
            .replace(f"'{SENTINEL}'", token)
            .replace(f'"{SENTINEL}"', token)
            .replace(SENTINEL, token)
        )
    return json.dumps(value, ensure_ascii=False).replace(
        json.dumps(SENTINEL, ensure_ascii=False), token
    )


@st.composite
def corrupted(draw: st.DrawFn, kind: str, valid: bytes) -> tuple[str, bytes]:
    """(what was done, the new content of the file)."""
    common = ["random_bytes", "truncated", "empty"] + (
        [] if kind == "parquet" else ["bom", "not_utf8"]
    )
    how = draw(
        st.sampled_from(
            common
            + {
                "json": ["field"] * 4,
                "jsonl": ["field"] * 4 + ["line"],
                "yaml": ["field"] * 4,
                "csv": ["cell"] * 2 + ["column"] * 2,
                "parquet": ["column"] * 5,
                "text": ["truncated", "random_bytes"],  # a subtitle file: no fields to sweep
            }[kind]
        )
    )
    if how == "random_bytes":
        return how, draw(st.binary(max_size=200))
    if how == "truncated":
        return how, valid[: draw(st.integers(0, max(0, len(valid) - 1)))]
    if how == "bom":
        return how, BOM + valid
    if how == "not_utf8":
        at = draw(st.integers(0, len(valid)))
        return how, valid[:at] + draw(
            st.sampled_from([b"\xff", b"\xe9", b"\xc3", b"\x80\x80"])
        ) + valid[at:]
    if how == "empty":
        return how, b""
    if kind == "parquet":
        return how, draw(parquet_column_edit())
    text = valid.decode("utf-8")
    if kind == "csv":
        rows = list(csv.reader(io.StringIO(text)))
        r = draw(st.integers(0, len(rows) - 1))
        c = draw(st.integers(0, len(rows[0]) - 1))
        if how == "cell":
            rows[r][c] = draw(cell_text)
        elif draw(st.booleans()):
            rows = [row[:c] + row[c + 1 :] for row in rows]  # a column missing
        else:
            rows = [row + [draw(cell_text) if i else "extra_column"] for i, row in enumerate(rows)]
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        return f"{how} {r},{c}", out.getvalue().encode("utf-8")
    if kind == "jsonl":
        lines = [json.loads(x) for x in text.splitlines() if x.strip()]
        k = draw(st.integers(0, len(lines) - 1))
        if how == "line":
            lines[k] = SENTINEL
            token = draw(raw_value)
            return how, "\n".join(dumped(x, token) for x in lines).encode("utf-8") + b"\n"
        doc = lines[k]
    else:
        import yaml

        doc = yaml.safe_load(text) if kind == "yaml" else json.loads(text)
    spots = paths_of(doc)
    path = draw(st.sampled_from(spots)) if spots else ()
    edit = draw(st.sampled_from(["replace", "replace", "delete", "add"])) if path else "replace"
    token = draw(raw_value)
    new = edited(doc, path, edit) if path else SENTINEL
    if kind == "jsonl":
        lines[k] = new
        out = "\n".join(dumped(x, token) for x in lines) + "\n"
    else:
        out = dumped(new, token, yaml_text=kind == "yaml")
    return f"{edit} {'.'.join(map(str, path))} = {token[:30]}", out.encode("utf-8")


@st.composite
def parquet_column_edit(draw: st.DrawFn) -> bytes:
    rows = [dict(r) for r in GOAL_ROWS]
    col = draw(st.sampled_from([*rows[0], "unexpected_column"]))
    choice = draw(
        st.sampled_from(["drop", "ints", "floats", "strings", "bools", "nulls", "lists", "structs"])
    )
    values: list[Any] = {
        "ints": [draw(st.integers(-(2**63), 2**63 - 1)) for _ in rows],
        "floats": [draw(st.sampled_from([float("nan"), float("inf"), -1.0, 1e308])) for _ in rows],
        "strings": [draw(cell_text) for _ in rows],
        "bools": [True, False, True, False],
        "nulls": [None] * len(rows),
        "lists": [[1, 2]] * len(rows),
        "structs": [{"start_s": draw(st.sampled_from([float("nan"), 1.0, -5.0])), "end_s": None}]
        * len(rows),
    }.get(choice, [])
    for r, v in zip(rows, values or [None] * len(rows), strict=True):
        if choice == "drop":
            r.pop(col, None)
        else:
            r[col] = v
    buf = io.BytesIO()
    pl.DataFrame(rows, strict=False).write_parquet(buf)
    return buf.getvalue()


# --------------------------------------------------------------------------- the property


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        p.relative_to(root).as_posix(): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in root.rglob("*")
        if not p.is_dir()
    }


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("assets")
    return SimpleNamespace(root=root, shards=personas_shards(root / "shards"))


EXAMPLES_PER_READER = 20


@pytest.mark.parametrize("reader", READERS, ids=[r.name for r in READERS])
@settings(
    max_examples=EXAMPLES_PER_READER,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
@given(data=st.data())
def test_a_reader_gives_a_one_line_error_naming_the_file_or_a_valid_result(
    assets: SimpleNamespace, reader: Reader, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory(dir=assets.root) as tmp:
        folder = Path(tmp)
        target = reader.make(folder, assets)
        reader.read(folder)  # the valid input reads
        how, content = data.draw(corrupted(reader.kind, target.read_bytes()), label="corruption")
        target.write_bytes(content)
        holds(reader, folder, target, how, run_too=True)


def holds(reader: Reader, folder: Path, target: Path, how: str, *, run_too: bool = False) -> None:
    """The property: a one-line GenError naming the file, or a valid result; no other
    exception; nothing written but the run folder; a BOM before valid content reads."""
    if reader.written is not None:
        reader.written(folder)
    before = tree(folder)
    try:
        reader.read(folder)
        if run_too and reader.then is not None:
            reader.then(folder)
    except GenError as e:
        message = str(e)
        assert how != "bom", f"a BOM before valid content was refused: {message}"
        assert message.strip() and "\n" not in message, f"{how}: not one line: {message!r}"
        named = [str(target)] + ([str(target.parent)] if reader.folder_named else [])
        assert any(n in message for n in named), f"{how}: {message!r} does not name {target}"
    after = tree(folder)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert all(k.startswith("run/") for k in changed), (
        f"{how}: written outside the run folder: {sorted(changed)}"
    )
    shutil.rmtree(folder / "run", ignore_errors=True)


HOSTILE = [
    "NaN",
    "-Infinity",
    "1e999",
    "9" * 400,
    HUGE,
    "[" * 100_000 + "]" * 100_000,
    "true",
    "-7",
    '"x"',
    "[]",
    "{}",
    "null",
]
"""What every field of a JSON-like input is replaced by, in turn (with the field deleted, and an
unknown field added)."""
HOSTILE_CELLS = ["", "NaN", HUGE, "1e999", "-7", "x", "../../x", "9999999m:99s | #C C x", "\x00"]


def field_variants(
    kind: str, valid: bytes, fields: tuple[str, ...] | None = None
) -> list[tuple[str, bytes]]:
    """Every field (every key name, at all its places at once; every CSV or parquet column)
    with each hostile value, deleted, and beside an unknown field."""
    if kind == "text":
        return []
    if kind == "parquet":
        out = []
        for col in [*GOAL_ROWS[0], "unexpected_column"]:
            for label, values in [
                ("ints", [7, -1, 2**62, 0]),
                ("floats", [float("nan"), float("inf"), -1.0, 0.5]),
                ("strings", ["", HUGE, "x", "NaN"]),
                ("nulls", [None] * 4),
                ("drop", None),
            ]:
                rows = [
                    {k: v for k, v in r.items() if not (values is None and k == col)}
                    for r in GOAL_ROWS
                ]
                for r, v in zip(rows, values or [], strict=False):
                    r[col] = v
                buf = io.BytesIO()
                pl.DataFrame(rows, strict=False).write_parquet(buf)
                out.append((f"{col} = {label}", buf.getvalue()))
        return out
    text = valid.decode("utf-8")
    if kind == "csv":
        rows = list(csv.reader(io.StringIO(text)))
        out = []
        for c, name in enumerate(rows[0]):
            for cell in [*HOSTILE_CELLS, None]:
                new = (
                    [r[:c] + r[c + 1 :] for r in rows]
                    if cell is None
                    else [rows[0], *[r[:c] + [cell] + r[c + 1 :] for r in rows[1:]]]
                )
                buf = io.StringIO()
                csv.writer(buf, lineterminator="\n").writerows(new)
                out.append(
                    (
                        f"{name} = {cell!r:.20}" if cell is not None else f"{name} dropped",
                        buf.getvalue().encode(),
                    )
                )
        return out
    import yaml

    docs = (
        [json.loads(x) for x in text.splitlines() if x.strip()]
        if kind == "jsonl"
        else [yaml.safe_load(text) if kind == "yaml" else json.loads(text)]
    )
    keys = sorted(
        {p[-1] for d in docs for p in paths_of(d) if isinstance(p[-1], str)}
        & set(fields or [p[-1] for d in docs for p in paths_of(d)])
    )
    out = []
    for key in keys:
        for how in [*HOSTILE, "delete", "add"]:
            new = [_each(d, key, how) for d in docs]
            token = how if how not in ("delete", "add") else "null"
            if kind == "jsonl":
                body = "\n".join(dumped(d, token) for d in new) + "\n"
            else:
                body = dumped(new[0], token, yaml_text=kind == "yaml")
            out.append((f"{key} = {how[:20]}", body.encode("utf-8")))
    return out


def _each(value: Any, key: str, how: str) -> Any:
    """``value`` with every ``key`` (at any depth) set to the sentinel, deleted, or given an
    unknown sibling."""
    if isinstance(value, list):
        return [_each(v, key, how) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        if k != key:
            out[k] = _each(v, key, how)
        elif how == "add":
            out[k], out["unexpected_field"] = v, 1
        elif how != "delete":
            out[k] = SENTINEL
    return out


@pytest.mark.parametrize("reader", READERS, ids=[r.name for r in READERS])
def test_every_field_of_a_reader_with_each_hostile_value(
    assets: SimpleNamespace, reader: Reader
) -> None:
    """The deterministic half of the property: each field (key name, column) of the valid
    input replaced by each hostile value (NaN, a 400- and a 5,000-digit number, 1e999,
    100,000-deep nesting, each JSON type), deleted, or beside an unknown field."""
    with tempfile.TemporaryDirectory(dir=assets.root) as tmp:
        folder = Path(tmp)
        target = reader.make(folder, assets)
        reader.read(folder)
        variants = field_variants(reader.kind, target.read_bytes(), reader.fields)
        assert len(variants) >= 20 or reader.kind == "text"
        for how, content in variants:
            target.write_bytes(content)
            holds(reader, folder, target, how)


# --------------------------------------------------------------------------- real processes


def _pool_folder(tmp: Path) -> list[str]:
    (tmp / "pool.jsonl").write_text(persona_lines(), encoding="utf-8")
    return [f"persona_file={tmp / 'pool.jsonl'}"]


PROCESS_CASES = [
    (
        "distractors",
        "goals.jsonl",
        b'{"goal_id": "a", "group": "g", "text": "x", "context_window": {"start_s": NaN}}\n',
        lambda t, f: [f"input={f}"],
        ":1: context_window.start_s: NaN is not a JSON number",
    ),
    (
        "tom",
        "narration.json",
        json.dumps(NARRATION).replace("step 1", "st\u00e9p 1").encode("latin-1"),
        lambda t, f: [f"input={f}"],
        ":1: not UTF-8 text (byte 0xe9",
    ),
    (
        "nocontext",
        "egotom_goal_shuffled.csv",
        b"vuid,cuid,gt_goal,goal_choice_a,goal_choice_b,goal_choice_c\nv,v~1,a,a,b,c\n",
        lambda t, f: [f"input={f}"],
        "missing EgoToM column(s) narrations_in_context",
    ),
    (
        "digital",
        "cues.jsonl",
        b'{"cue_id": ' + HUGE.encode() + b', "app": "Notes", "cue": "x"}\n',
        lambda t, f: [f"cue_file={f}", *_pool_folder(t)],
        ":1: not valid JSON (Exceeds the limit (4300 digits)",
    ),
    (
        "merge",
        "manifest.json",
        b"[]",
        lambda t, f: [f"input=[{f.parent}]"],
        "not a run manifest (a JSON object naming its generator), got a JSON list",
    ),
]


@pytest.mark.parametrize(
    ("name", "file", "content", "args", "needle"), PROCESS_CASES, ids=[c[0] for c in PROCESS_CASES]
)
def test_a_real_run_on_bad_input_is_one_line_exit_2_and_writes_nothing(
    run_gen, tmp_path: Path, name: str, file: str, content: bytes, args: Callable, needle: str
) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    path = inputs / file
    path.write_bytes(content)
    argv = args(inputs, path)
    before = tree(tmp_path)
    proc = run_gen(name, *argv, "progress=off", f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert str(path) in lines[0] and needle in lines[0], lines[0]
    after = tree(tmp_path)
    assert {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)} == set()


# -------------------------------------------------------------------------- hostile files and texts


def test_an_input_that_is_not_a_regular_file_or_too_large_is_refused_before_a_byte_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/dev/zero`` was read whole into memory and a FIFO blocked the reader forever."""
    import os

    import gen.paths
    from gen.paths import input_file, read_input
    from gen.readers import read_text

    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=rf"^{fifo}: is a FIFO, not a regular file"):
        read_text(fifo)  # would block without a writer
    with pytest.raises(InputError, match=r"^input: /dev/zero: is a device, not a regular file"):
        read_input(Path("/dev/zero"), "input")
    with pytest.raises(InputError, match="is a folder"):
        input_file(tmp_path)
    big = _text(tmp_path / "big.jsonl", "{}\n" * 100)
    monkeypatch.setattr(gen.paths, "MAX_INPUT_BYTES", 50)
    with pytest.raises(
        InputError,
        match=rf"^{big}: 0 MiB is larger than an input may be \(0 MiB; GEN_MAX_INPUT_BYTES",
    ):
        read_text(big)
    # a JSONL file is streamed: any size, one line in memory, a line beyond the bound refused
    assert len(list(iter_jsonl(big))) == 100
    long = _text(tmp_path / "long.jsonl", "{}\n" + '"' + "x" * 60 + '"\n')
    with pytest.raises(InputError, match=rf"^{long}:2: a line longer than an input may be"):
        list(iter_jsonl(long))


def test_a_lone_surrogate_escape_is_refused_where_it_is_read(tmp_path: Path) -> None:
    """``"\\ud800"`` parsed into a string no UTF-8 file can hold: the run failed when it wrote its
    records or manifest, ``unexpected UnicodeEncodeError`` (exit 1). A surrogate pair is text."""
    from gen.readers import read_yaml_model
    from gen.schemas.review import Rubric

    assert parse_json('"\\ud83d\\ude00"', "f:1") == "\U0001f600"
    assert parse_json('"\\\\ud800"', "f:1") == "\\ud800"  # an escaped backslash: no surrogate
    with pytest.raises(InputError, match=r"^f:1: a\[1\]: holds a lone UTF-16 surrogate escape"):
        parse_json('{"a": ["x", "\\ud800"]}', "f:1")
    with pytest.raises(InputError, match=r"^f:1: b: holds a lone UTF-16 surrogate"):
        parse_json('{"b": "\\udfff tail"}', "f:1")
    path = _text(
        tmp_path / "r.yaml",
        (PROMPTS / "review" / "mcq.yaml")
        .read_text(encoding="utf-8")
        .replace("name: ", 'name: "\\ud800" # ', 1),
    )
    with pytest.raises(InputError, match=rf"^{path}: name: holds a lone UTF-16 surrogate"):
        read_yaml_model(path, Rubric, "rubric")


def test_the_tagger_reads_a_text_longer_than_spacys_limit() -> None:
    """A 5 MB question stopped ``audit`` and ``bank add`` with spaCy's E088 (exit 1)."""
    from gen.text.gates import GateContext, run_gates
    from gen.text.tagging import TAG_MAX_CHARS, tags, warm

    text = "To open the door " + "and walk " * 600_000 + "to the car."
    assert len(text) > 5_000_000 > TAG_MAX_CHARS
    toks = tags(text)
    assert toks[0][0] == "To" and toks[-1][0] == "." and len(toks) < TAG_MAX_CHARS
    warm([text + " Again.", "Short."])
    failure = run_gates(text, GateContext(kind="goal"))
    assert failure is not None and failure.gate == "repetition"


FIXTURE_MCQ = FIXTURES / "audit" / "clean.jsonl"


def _hostile_setup(tmp: Path, case: str) -> list[str]:
    """The files of one hostile case in ``tmp``; the command's arguments."""
    import os

    if case == "dev_zero":
        return ["tom", "input=/dev/zero", "input_format=jsonl"]
    if case == "fifo":
        os.mkfifo(tmp / "rows.jsonl")
        return ["audit", "input=rows.jsonl", "embeddings=false"]
    if case == "fifo_in_a_folder":
        (tmp / "bank").mkdir()
        os.mkfifo(tmp / "bank" / "mcq.jsonl")
        return ["nocontext", "input=bank"]
    if case == "chain_input_climbs":
        _text(tmp / "chain.yaml", CHAIN.replace("rec/goals.jsonl", "rec/../../../etc/passwd"))
        return ["pipeline", "chain=chain.yaml"]
    if case == "lock_not_utf8":
        (tmp / "sc").mkdir()
        (tmp / "sc" / "MANIFEST.lock.json").write_bytes(b'{"schema_revision": "\xff"}\n')
        return ["scenarios", "action=verify", "input=sc"]
    if case == "lone_surrogate":
        _text(
            tmp / "mcq.jsonl",
            FIXTURE_MCQ.read_text(encoding="utf-8").replace("What is", "What\\ud800 is", 1),
        )
        return ["audit", "input=mcq.jsonl", "embeddings=false"]
    if case == "binary_prompt_conditions":
        (tmp / "pc.json").write_bytes(b"\xff\xfe\x00\x01binary")
        return ["scenarios", "n=1", "prompt_conditions=pc.json"]
    raise AssertionError(case)


HOSTILE_CASES = {
    "dev_zero": "input: /dev/zero: is a device, not a regular file",
    "fifo": "input: rows.jsonl: is a FIFO, not a regular file",
    "fifo_in_a_folder": "input: bank holds no MCQ file",  # a FIFO is no file: never opened
    "chain_input_climbs": "chain.yaml: step mcqs (distractors): inputs.input "
    "'rec/../../../etc/passwd' leaves its folder",
    "lock_not_utf8": "MANIFEST.lock.json:1: not UTF-8 text (byte 0xff at column 22",
    "lone_surrogate": "mcq.jsonl:1: question: holds a lone UTF-16 surrogate escape",
    "binary_prompt_conditions": "pc.json:1: not UTF-8 text (byte 0xff at column 1",
}


@pytest.mark.parametrize("case", list(HOSTILE_CASES))
def test_a_hostile_input_is_one_line_exit_2_within_seconds_and_writes_nothing_outside_the_run(
    run_gen, tmp_path: Path, case: str
) -> None:
    """Each was a traceback (the chain's ``..``, a non-UTF-8 lock), ``unexpected`` (exit 1: a lone
    surrogate, binary prompt_conditions, after the run folder was made), a read of /dev/zero into
    memory, or a hang (a FIFO)."""
    argv = _hostile_setup(tmp_path, case)
    before = tree(tmp_path)
    proc = run_gen(*argv, "progress=off", f"hydra.run.dir={tmp_path / 'run'}", timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert HOSTILE_CASES[case] in lines[0], lines[0]
    after = tree(tmp_path)
    changed = {
        k
        for k in before.keys() | after.keys()
        if before.get(k) != after.get(k) and not k.startswith("cache/")
    }
    assert all(k.startswith("run/") for k in changed), changed  # audit reads its input in the run
