"""The longitudinal history bank: sampling invariants, shortfalls, determinism, the CLI's bad
rows, and WAGIBench's own loader reading the output."""

from __future__ import annotations

import datetime as dt
import io
import json
import random
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from conftest import WAGIBENCH_LOADER as LOADER
from conftest import WAGIBENCH_MIXIN, read_jsonl, wagibench_loader, wagibench_prompt

from gen.engine.runner import run_config
from gen.generators.history import HistoryConfig, plan, read_table
from gen.schemas.history import Observation

NAME = "history"
GOAL = {"type": "shop", "content": "hand soap"}


def table(rows: int = 300, seed: int = 1) -> list[dict[str, Any]]:
    """A random observation table: 6 participants, 2 environments, 10 scripts (3 longitudinal),
    recordings on random days."""
    r = random.Random(seed)
    out = []
    for i in range(rows):
        script = f"s{r.randrange(10)}"
        out.append(
            {
                "client_tag": f"rec{i:04d}",
                "scenario": script,
                "participant": f"p{r.randrange(6)}",
                "environment": r.choice(["kitchen", "garage"]),
                "script": script,
                "longitudinal": script in ("s0", "s1", "s2"),
                "recorded_at": (
                    dt.datetime(2025, 1, 1) + dt.timedelta(hours=r.randrange(24 * 90))
                ).isoformat(),
                "world_state": f"caption {i}",
                "structured_goal": GOAL,
                "context_window": {"start_s": 0.0, "end_s": 10.0},
            }
        )
    return out


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in rows), encoding="utf-8")
    return path


def run_history(tmp_path: Path, rows: list[dict[str, Any]], out: str = "run", **cfg: Any):
    src = write(tmp_path / "obs.jsonl", rows)
    settings = HistoryConfig(input=str(src), cache_dir=None, progress="off", **cfg)
    return run_config(NAME, settings, tmp_path / out, quiet=True)


def test_sampling_invariants(tmp_path: Path) -> None:
    rows = table()
    result = run_history(tmp_path, rows)
    by_key = {(r["client_tag"], r["scenario"]): r for r in rows}
    records = read_jsonl(tmp_path / "run" / "history.jsonl")
    assert len(records) == len(rows) == result.accepted
    for rec in records:
        obs = by_key[(rec["client_tag"], rec["scenario"])]
        sups = [by_key[(s["client_tag"], s["scenario"])] for s in rec["supports"]]
        assert len(rec["supports"]) <= 5
        assert all(s is not obs for s in sups)  # never the observation itself
        assert all(
            (s["participant"], s["environment"]) == (obs["participant"], obs["environment"])
            for s in sups
        )
        assert all(s["recorded_at"] < obs["recorded_at"] for s in sups)  # strictly earlier
        setup = [s for s in rec["supports"] if s["history_type"] == "setup"]
        same = [s for s in sups if s["script"] == obs["script"]]
        if obs["longitudinal"]:
            assert len(setup) == min(
                1, rec["eligible"]["same_script"]
            )  # one positive iff it exists
            assert len(same) == len(setup)
        else:
            assert not setup and not same  # only other scripts
        assert len({(s["client_tag"], s["scenario"]) for s in rec["supports"]}) == len(
            rec["supports"]
        )
        full = rec["eligible"]["other_script"] + min(
            rec["eligible"]["same_script"], int(obs["longitudinal"])
        )
        assert len(rec["supports"]) == min(5, full)


def test_shortfalls_are_counted_and_can_reject(tmp_path: Path) -> None:
    rows = table()
    result = run_history(tmp_path, rows)
    records = read_jsonl(tmp_path / "run" / "history.jsonl")
    fewer = sum("fewer_supports" in r["shortfalls"] for r in records)
    nopos = sum("no_positive" in r["shortfalls"] for r in records)
    assert fewer and nopos  # the first recordings of a participant cannot have a full bank
    assert result.manifest["validators"] == {
        "shortfall.fewer_supports": fewer,
        "shortfall.no_positive": nopos,
    }
    assert result.manifest["history"]["shortfalls"] == {
        "fewer_supports": fewer,
        "no_positive": nopos,
    }
    strict = run_history(tmp_path, rows, out="strict", require_full=True)
    short = sum(bool(r["shortfalls"]) for r in records)
    assert (strict.accepted, strict.rejected) == (len(rows) - short, short)
    reasons = {r["reason"] for r in read_jsonl(tmp_path / "strict" / "rejects.jsonl")}
    assert reasons <= {"fewer_supports", "no_positive"}


def test_order_and_choice_are_seeded_per_observation(tmp_path: Path) -> None:
    rows = table()
    run_history(tmp_path, rows, out="a")
    run_history(tmp_path, rows, out="b")
    run_history(tmp_path, rows, out="c", seed=5)
    a, b, c = ((tmp_path / x / "history.jsonl").read_bytes() for x in "abc")
    assert a == b and a != c
    # the table's order does not matter: each observation's bank depends on (seed, observation)
    shuffled = rows[:]
    random.Random(0).shuffle(shuffled)
    run_history(tmp_path, shuffled, out="d")
    by = {(r["client_tag"]): r["supports"] for r in read_jsonl(tmp_path / "a" / "history.jsonl")}
    assert all(
        r["supports"] == by[r["client_tag"]] for r in read_jsonl(tmp_path / "d" / "history.jsonl")
    )


def test_positives_and_supports_are_options(tmp_path: Path) -> None:
    run_history(tmp_path, table(), supports=3, positives=2, test="longitudinal")
    for rec in read_jsonl(tmp_path / "run" / "history.jsonl"):
        assert rec["longitudinal"] and len(rec["supports"]) <= 3
        assert sum(s["history_type"] == "setup" for s in rec["supports"]) == min(
            2, rec["eligible"]["same_script"]
        )
    with pytest.raises(ValueError, match="positives=6 cannot exceed supports=5"):
        HistoryConfig(input="x", positives=6)


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"recorded_at": "yesterday"}, "obs.jsonl:2: recorded_at:"),
        ({"structured_goal": {"type": "shop"}}, "obs.jsonl:2: structured_goal.shop.content:"),
        ({"longitudinal": "maybe"}, "obs.jsonl:2: longitudinal:"),
        ({"client_tag": "rec0000"}, "obs.jsonl:2: client_tag: 'rec0000' with scenario"),
        ({"participant": None}, "obs.jsonl:2: participant:"),
    ],
)
def test_a_bad_row_names_file_line_and_field(tmp_path: Path, run_gen, patch, needle) -> None:
    rows = table(3)
    rows[1] = {
        **rows[1],
        **patch,
        **({"scenario": rows[0]["scenario"]} if "client_tag" in patch else {}),
    }
    src = write(tmp_path / "obs.jsonl", rows)
    with pytest.raises(ValueError, match=needle.replace(".", r"\.")):
        read_table(src)
    proc = run_gen(NAME, f"input={src}", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_synthesized_table_runs_the_chain(tmp_path: Path) -> None:
    settings = HistoryConfig(
        synthesize=True,
        participants=4,
        scripts_per_participant=5,
        repeats=3,
        longitudinal_share=0.5,
        cache_dir=None,
        progress="off",
    )
    p = plan(settings)
    rows: list[Observation] = p.data.rows
    assert len(rows) == 4 * 5 * 3 == p.n
    assert {r.environment for r in rows} <= set(settings.environments)
    assert any(r.longitudinal for r in rows) and not all(r.longitudinal for r in rows)
    result = run_config(NAME, settings, tmp_path / "run", quiet=True)
    assert result.accepted == p.n
    again = read_table(tmp_path / "run" / "observations.jsonl")  # the table it wrote reads back
    assert [o.model_dump() for o in again] == [o.model_dump() for o in rows]
    assert result.manifest["history"]["with_positive"] > 0


@pytest.mark.skipif(
    not LOADER.is_file(), reason="WAGIBench's loader (../shared/data/wagibench) is absent"
)
def test_wagibench_loader_joins_every_row(tmp_path: Path) -> None:
    rows = table(120)
    run_history(tmp_path, rows)
    mcq = [
        {
            "meta": {"client_tag": r["client_tag"], "scenario": {"shortname": r["scenario"]}},
            "x": {"client_tag": r["client_tag"], "context_window": {"start_s": 0.0, "end_s": 10.0}},
            "y": {},
        }
        for r in rows
    ]
    (tmp_path / "mcq.json").write_text(json.dumps(mcq))
    load = wagibench_loader()
    for positive_only in ("0", "1"):
        out = io.StringIO()
        with redirect_stdout(out):
            data = load(
                str(tmp_path / "mcq.json"),
                str(tmp_path),
                longitudinal_history_path=str(tmp_path / "run" / "longitudinal_history.json"),
                longitudinal_positive_only=positive_only,
            )
        assert f"Success counter (Longitudinal) = {len(rows)}/{len(rows)}" in out.getvalue()
        records = {r["client_tag"]: r for r in read_jsonl(tmp_path / "run" / "history.jsonl")}
        for row in data:
            rec = records[row["meta"]["client_tag"]]
            shown = row["x"]["longitudinal_history"]
            expect = [
                s for s in rec["supports"] if positive_only == "0" or s["history_type"] == "setup"
            ]
            assert [h["client_tag"] for h in shown] == [s["client_tag"] for s in expect]
            assert row["x"]["world_state_ctx"][0].startswith("caption")
        setups = sum(
            any(s["history_type"] == "setup" for s in r["supports"]) for r in records.values()
        )
        assert f"Setup counter (Longitudinal) = {setups}/{len(rows)}" in out.getvalue()


@pytest.mark.skipif(
    not (LOADER.is_file() and WAGIBENCH_MIXIN.is_file()),
    reason="WAGIBench's loader and prompt builder (../shared/data/wagibench) are absent",
)
def test_wagibench_prompt_shows_each_support_as_a_dict(tmp_path: Path) -> None:
    """Their build_prompt prints ``json.dumps(hist["world_state"])`` of each support: a dict with
    the context, the past action (appendix I.1's form) and the transcription; a support with a
    transcription no longer reaches their utterance filter (a text there was a TypeError)."""
    rows = table(60)
    for i, r in enumerate(rows):
        r["structured_goal"] = {
            "type": "search",
            "source": "world",
            "query": f"how to fix {i}",
            "query_item": "a bike",
        }
        if i % 2:
            r["transcription"] = f"Speaker 0: words of recording {i}"
    run_history(tmp_path, rows)
    mcq = [
        {
            "meta": {"client_tag": r["client_tag"], "scenario": {"shortname": r["scenario"]}},
            "x": {
                "client_tag": r["client_tag"],
                "context_window": {"start_s": 0.0, "end_s": 10.0},
                "mcq_set": ["a", "b", "c", "d"],
            },
            "y": 0,
        }
        for r in rows
    ]
    (tmp_path / "mcq.json").write_text(json.dumps(mcq))
    with redirect_stdout(io.StringIO()):
        data = wagibench_loader()(
            str(tmp_path / "mcq.json"),
            str(tmp_path),
            longitudinal_history_path=str(tmp_path / "run" / "longitudinal_history.json"),
        )
    build = wagibench_prompt()
    by_tag = {r["client_tag"]: i for i, r in enumerate(rows)}
    seen = 0
    for row in data:
        prompt = build(row, "mcq")
        for h in row["x"]["longitudinal_history"]:
            i = by_tag[h["client_tag"]]
            state = h["world_state"]
            assert state["context"] == [f"caption {i}"]
            assert state["action"] == [
                "{ 'type': 'search', 'source': 'world', 'query_item': 'a bike', 'query': 'how to "
                f"fix {i}' }}"
            ]
            assert state["transcription"] == rows[i].get("transcription", "")
            assert state["action"][0] in prompt and f"caption {i}" in prompt
            assert rows[i].get("transcription", "caption") in prompt
            seen += 1
    assert seen > 50


def test_audit_checks_a_history_bank(tmp_path: Path) -> None:
    """audit input=<history run> runs the history check: a bank made here is clean; planted
    breaks (self-support, another participant, a later support, a second positive) are errors."""
    from gen.generators.audit import AuditConfig

    rows = table(200)
    run_history(tmp_path, rows)
    folder = tmp_path / "run"
    clean = run_config(
        "audit",
        AuditConfig(input=str(folder), checks=["history"], cache_dir=None, progress="off"),
        tmp_path / "audit_clean",
        quiet=True,
    )
    assert clean.exit_code == 0 and clean.accepted == 0
    (check,) = json.loads((tmp_path / "audit_clean" / "audit.json").read_text())["checks"]
    stats = check["stats"]
    assert stats["banks"] == 200 and stats["findings_by_kind"] == {}
    records = read_jsonl(folder / "history.jsonl")
    full = [
        r
        for r in records
        if r["longitudinal"]
        and len(r["supports"]) >= 2
        and any(s["history_type"] == "setup" for s in r["supports"])
    ]
    target = full[0]
    s0, s1 = target["supports"][0], target["supports"][1]
    s0.update(client_tag=target["client_tag"], scenario=target["scenario"])  # self-support
    s1.update(participant="someone else", recorded_at="2099-01-01 00:00:00")
    for s in target["supports"]:
        if s["history_type"] == "negative":
            s["history_type"] = "setup"  # a second positive, of another script
            break
    (folder / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    planted = run_config(
        "audit",
        AuditConfig(input=str(folder), checks=["history"], cache_dir=None, progress="off"),
        tmp_path / "audit_planted",
        quiet=True,
    )
    kinds = {f["kind"] for f in read_jsonl(tmp_path / "audit_planted" / "audit.jsonl")}
    assert {
        "self_support",
        "wrong_participant",
        "later_support",
        "extra_positive",
        "positive_other_script",
    } <= kinds
    assert planted.exit_code == 1


def test_the_current_context_is_the_caption_and_digital_is_refused() -> None:
    """world_state_ctx is a recording's caption (a context dict's ``context``), never its past
    action; history no longer takes a digital run (issue 42.4)."""
    from gen.generators.history import current_context

    row = table(1)[0]
    assert current_context(Observation.model_validate(row)) == ["caption 0"]
    ctx = {"context": ["a garage"], "action": ["{ 'type': 'shop' }"], "transcription": "hi"}
    assert current_context(Observation.model_validate({**row, "world_state": ctx})) == ["a garage"]
    with pytest.raises(ValueError, match="history no longer takes a digital run"):
        HistoryConfig(input="x", digital="y")
