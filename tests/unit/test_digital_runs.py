"""The Digital Context Generator end to end with a scripted LLM: accepted bundles hold every
invariant (bank and inline cues, uncued, narrow windows, rejects), the WAGIBench layout, rendering,
shards and determinism. Cue banks and what reading them refuses, CLI forms and goal-conditioned
bundles are tested in test_digital_cues.py; the validators, the cue merge and the datetime sampler
in test_digital.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from concurrency import Jittered
from conftest import merge_and_compare, read_jsonl
from digital_checks import ORDER, check_bundle, key_list
from digital_runs import (
    NAME,
    NUMBERED,
    digital_script,
    first_shot,
    pool_file_fixture,  # noqa: F401  (pytest fixture pool_file)
    run_digital,
    write_pool,
)

from gen.formats.wagibench import render_bundle, wagibench_record
from gen.llm import OpenAIConfig
from gen.paths import EXAMPLES
from gen.schemas import Reject
from gen.schemas import digital as S
from gen.schemas.digital import App

# --------------------------------------------------------------------------- 5. end to end


@pytest.fixture(scope="module")
def bank_run(tmp_path_factory, pool_file: Path) -> SimpleNamespace:
    out = tmp_path_factory.mktemp("bank_run")
    log: list[str] = []
    result, ctx = run_digital(
        out, pool_file, digital_script(bad_search_every=4, log=log), n=3, cue_rate=1.0
    )
    return SimpleNamespace(
        out=out,
        result=result,
        ctx=ctx,
        log=log,
        bundles=read_jsonl(out / "digital.jsonl"),
        rejects=read_jsonl(out / "rejects.jsonl"),
    )


def pool_names(pool: Path) -> set[str]:
    return {r["name"] for r in read_jsonl(pool)}


def test_end_to_end_bank_cues(bank_run, pool_file: Path, check_run_folder) -> None:
    assert (bank_run.result.accepted, bank_run.result.rejected) == (3, 0), bank_run.rejects
    manifest = check_run_folder(bank_run.out, NAME, 3, hydra=False)
    for b in bank_run.bundles:
        check_bundle(b)
        assert b["cue"] is not None  # cue_rate=1
        names = {b["main_persona"]["name"], *(r["persona"]["name"] for r in b["related_personas"])}
        assert names <= pool_names(pool_file)
        if b["cue"]["person"]:
            assert b["cue"]["person"] in names - {b["main_persona"]["name"]}
            assert "{person}" not in b["cue"]["cue"]
    assert len({b["bundle_id"] for b in bank_run.bundles}) == 3
    state = json.loads((bank_run.out / "digital_state.json").read_text(encoding="utf-8"))
    assert list(state) == [b["bundle_id"] for b in bank_run.bundles]
    # validators' drops reach the manifest, one per planted bad item, each followed by a
    # regeneration
    bad = len(bank_run.log)
    assert bad > 0
    assert manifest["validators"] == {
        "Search.placeholder_text.dropped": bad,
        "Search.no_valid_item.regenerated": bad,
    }
    chars = manifest["characters"]
    assert chars["bundles"] == 3
    assert chars["mean_chars_per_bundle"] == round(
        sum(b["stats"]["chars_total"] for b in bank_run.bundles) / 3, 1
    )
    assert set(chars["mean_chars_per_app"]) == set(ORDER)
    assert manifest["persona_pool"] == {"path": str(pool_file), "size": 8}
    assert str(EXAMPLES / "cues.jsonl") in manifest["inputs"]
    assert set(manifest["prompts"]) >= {f"digital/{a.lower()}.jinja" for a in ORDER} | {
        f"digital/{a.lower()}_cue.jinja" for a in ORDER
    }
    assert manifest["llm_usage"]["calls"] == len(bank_run.ctx.llm.calls)


def test_one_item_per_call_by_default(bank_run) -> None:
    """items_per_call=1: every non-cue prompt lists exactly one numbered line."""
    for call in bank_run.ctx.llm.calls:
        user = call["messages"][-1]["content"]
        lines = NUMBERED.findall(user)
        assert len(lines) <= 1, user


CUE_TEXTS = {
    App.Calendar: "A calendar event for lunch with {person} tomorrow at 12:30",
    App.Messaging: "{person} just asked if you can water the plants",
    App.Notes: "A note with the gate code for {person}'s flat",
    App.Search: "Searched how to descale a kettle",
    App.Videos: "Watched a video on knot tying",
    App.Maps: "Looked up the nearest bike repair shop",
    App.Music: "Playing an upbeat cycling playlist",
}


@pytest.mark.parametrize("app", list(App), ids=lambda a: a.value)
def test_end_to_end_inline_cue_per_app(
    tmp_path: Path, pool_file: Path, app: App, check_run_folder
) -> None:
    result, _ = run_digital(tmp_path, pool_file, n=2, cue=CUE_TEXTS[app], cue_app=app)
    assert (result.accepted, result.rejected) == (2, 0), read_jsonl(tmp_path / "rejects.jsonl")
    manifest = check_run_folder(tmp_path, NAME, 2, hydra=False)
    assert manifest["inputs"] == {}  # an inline cue reads no cue bank
    for b in read_jsonl(tmp_path / "digital.jsonl"):
        check_bundle(b)
        assert (b["cue"]["cue_id"], b["cue"]["app"]) == ("inline", app.value)
        names = {r["persona"]["name"] for r in b["related_personas"]}
        if "{person}" in CUE_TEXTS[app]:
            assert b["cue"]["person"] in names
            assert b["cue"]["person"].split()[0] in b["cue"]["cue"]
        else:
            assert b["cue"]["person"] is None
        if app is App.Calendar and b["cue"]["person"]:  # the person the cue names attends
            (ev,) = key_list(b, "Calendar")
            assert ev["attendees"] == [b["cue"]["person"]]


@pytest.fixture(scope="module")
def uncued_run(tmp_path_factory, pool_file: Path) -> SimpleNamespace:
    out = tmp_path_factory.mktemp("uncued")
    result, ctx = run_digital(out, pool_file, n=2, cue_rate=0.0)
    return SimpleNamespace(
        out=out, result=result, ctx=ctx, bundles=read_jsonl(out / "digital.jsonl")
    )


def test_end_to_end_uncued(uncued_run) -> None:
    assert uncued_run.result.accepted == 2
    for b in uncued_run.bundles:
        check_bundle(b)
        assert b["cue"] is None
    prompts = uncued_run.result.manifest["prompts"]
    assert not any(p.endswith("_cue.jinja") for p in prompts)
    assert uncued_run.result.manifest["inputs"] == {}  # cue_rate=0 reads no cue bank


def test_a_thin_app_rejects_the_bundle(tmp_path: Path, pool_file: Path, check_run_folder) -> None:
    """Notes that always fail validation: too_few_items at stage app.Notes; the drops are
    counted."""
    base = digital_script()

    def script(messages, seed):
        out = json.loads(base(messages, seed))
        if "notes" in out:
            out["notes"] = [{"title": "Title", "content": n["content"]} for n in out["notes"]]
        return json.dumps(out)

    result, ctx = run_digital(tmp_path, pool_file, script, n=2, cue_rate=0.0, attempts=2)
    assert (result.accepted, result.rejected) == (0, 2)
    manifest = check_run_folder(tmp_path, NAME, 2, hydra=False)
    rejects = [Reject.model_validate(r) for r in read_jsonl(tmp_path / "rejects.jsonl")]
    assert [r.index for r in rejects] == [0, 1]
    for r in rejects:
        assert (r.stage, r.reason) == ("app.Notes", "too_few_items")
        assert "no_valid_item" in r.detail and r.raw and "Title" in r.raw
    notes_calls = sum(1 for c in ctx.llm.calls if '"notes"' in first_shot(c["messages"]))
    assert manifest["validators"]["Notes.placeholder_text.dropped"] == notes_calls
    assert manifest["validators"]["Notes.no_valid_item.regenerated"] == notes_calls
    assert json.loads((tmp_path / "digital_state.json").read_text()) == {}
    assert manifest["characters"] == {"bundles": 0}


def test_truncated_cue_rejects_at_the_cue_stage(tmp_path: Path, pool_file: Path) -> None:
    base = digital_script()

    def script(messages, seed):
        text = base(messages, seed)
        return (text[:20], "length") if '"track"' in first_shot(messages) else text

    result, _ = run_digital(tmp_path, pool_file, script, n=1, cue="Playing jazz", cue_app=App.Music)
    assert (result.accepted, result.rejected) == (0, 1)
    (rej,) = read_jsonl(tmp_path / "rejects.jsonl")
    assert (rej["stage"], rej["reason"]) == ("app.Music.cue", "truncated")
    assert result.manifest["validators"] == {"Music.llm_truncated.regenerated": 3}


@pytest.mark.parametrize("past,future", [(1, 1), (1, 30), (2, 3)])
def test_narrow_windows_still_give_bundles(tmp_path: Path, past: int, future: int) -> None:
    """Skeleton times (events, messages, the rest) respect window_past_days/window_future_days,
    so no code-placed item is dropped as out of window."""
    pool = write_pool(tmp_path / "personas.jsonl")
    result, _ = run_digital(
        tmp_path / "run", pool, n=4, cue_rate=0.0, window_past_days=past, window_future_days=future
    )
    assert result.accepted == 4, result.manifest["validators"]
    assert not any("out_of_window" in k for k in result.manifest["validators"])
    for b in read_jsonl(tmp_path / "run" / "digital.jsonl"):
        check_bundle(b, window_past_days=past, window_future_days=future)


# --------------------------------------------------------------------------- 3. WAGIBench layout


def test_wagibench_layout(bank_run) -> None:
    state = json.loads((bank_run.out / "digital_state.json").read_text(encoding="utf-8"))
    for b in bank_run.bundles:
        rec = state[b["bundle_id"]]
        assert rec == wagibench_record(b)
        check_wagibench(rec, b)


def test_wagibench_layout_uncued(uncued_run) -> None:
    for b in uncued_run.bundles:
        rec = wagibench_record(b)
        check_wagibench(rec, b)
        assert rec["meta"]["scenario"]["shortname"] == "uncued"
        assert rec["x"]["cues"] == []


def check_wagibench(rec: dict[str, Any], b: dict[str, Any]) -> None:
    cue = b["cue"]
    assert rec["meta"]["client_tag"] == b["bundle_id"]
    assert rec["meta"]["scenario"]["shortname"] == (cue["cue_id"] if cue else "uncued")
    if cue:
        assert rec["x"]["cues"] == [
            {"modality": ["digital"], "app": cue["app"], "description": [cue["cue"]]}
        ]
    app_states = rec["x"]["app_states"]
    assert list(app_states) == ["datetimings", *ORDER]
    assert app_states["datetimings"] == {"current_datetime": b["current_datetime"]}
    lists = {
        "Calendar": "events",
        "Messaging": "conversations",
        "Search": "searches",
        "Videos": "videos",
        "Notes": "notes",
    }
    for app in ORDER:
        entry = app_states[app]
        assert set(entry) == {"state", "context"}
        assert entry["context"] is (cue is not None and cue["app"] == app)
        if app in lists:
            name = lists[app]
            assert set(entry["state"]) == {name, f"key_{name}"}
            assert entry["state"][name] == b["apps"][app][name]
            assert entry["state"][f"key_{name}"] == b["apps"][app][f"key_{name}"]
        else:
            name = app.lower()
            assert list(entry["state"]) == [name]
            assert entry["state"][name] == b["apps"][app][name]
    assert sum(app_states[a]["context"] for a in ORDER) == (1 if cue else 0)


# --------------------------------------------------------------------------- 4. rendering

HEADER = re.compile(r"^Current state of the user's (\w+) app:$", re.M)


def rendered_blocks(text: str) -> list[tuple[str, Any]]:
    heads = list(HEADER.finditer(text))
    blocks = []
    for h, nxt in zip(heads, [*heads[1:], None], strict=True):
        body = text[h.end() : nxt.start() if nxt else len(text)]
        blocks.append((h.group(1), json.loads(body)))
    return blocks


def test_render_bundle_order_and_content(bank_run) -> None:
    for b in bank_run.bundles:
        text = render_bundle(b)
        assert text.splitlines()[0] == f"The current datetime is: {b['current_datetime']}"
        blocks = rendered_blocks(text)
        assert [a for a, _ in blocks] == [
            "Calendar",
            "Messaging",
            "Search",
            "Videos",
            "Notes",
            "Maps",
            "Music",
        ]
        for app, view in blocks:
            state = b["apps"][app]
            assert (
                view
                == state[
                    {
                        "Calendar": "events",
                        "Messaging": "conversations",
                        "Search": "searches",
                        "Videos": "videos",
                        "Notes": "notes",
                        "Maps": "maps",
                        "Music": "music",
                    }[app]
                ]
            )
        assert render_bundle(S.DigitalBundle.model_validate(b)) == text


def test_render_bundle_key_only(bank_run, uncued_run) -> None:
    for b in bank_run.bundles:
        text = render_bundle(b, key_only=True)
        assert text.splitlines()[0] == f"The current datetime is: {b['current_datetime']}"
        blocks = rendered_blocks(text)
        assert [a for a, _ in blocks] == [b["cue"]["app"]]
        assert blocks[0][1] == key_list(b, b["cue"]["app"])
        assert len(text) < len(render_bundle(b))
    for b in uncued_run.bundles:
        assert (
            render_bundle(b, key_only=True) == f"The current datetime is: {b['current_datetime']}"
        )


def test_render_bundle_skips_missing_apps(tmp_path: Path, pool_file: Path) -> None:
    result, _ = run_digital(tmp_path, pool_file, n=1, apps=["Music", "Calendar"], cue_rate=0.0)
    assert result.accepted == 1
    (b,) = read_jsonl(tmp_path / "digital.jsonl")
    assert list(b["apps"]) == ["Calendar", "Music"]  # render order, not config order
    assert [a for a, _ in rendered_blocks(render_bundle(b))] == ["Calendar", "Music"]


# ------------------------------------------------------------------------ 6. shards, 7. determinism


def test_shards_concatenate_to_the_whole(tmp_path: Path, pool_file: Path) -> None:
    n, seed = 4, 5
    run_digital(tmp_path / "whole", pool_file, n=n, seed=seed, cue_rate=0.5)
    whole = (tmp_path / "whole" / "digital.jsonl").read_bytes()
    parts, state = b"", {}
    for shard in range(2):
        folder = tmp_path / f"s{shard}"
        result, _ = run_digital(
            folder, pool_file, n=n, seed=seed, cue_rate=0.5, shard=shard, num_shards=2
        )
        assert result.requested == 2
        parts += (folder / "digital.jsonl").read_bytes()
        state.update(json.loads((folder / "digital_state.json").read_text(encoding="utf-8")))
    assert len(whole.splitlines()) == n
    assert parts == whole
    assert state == json.loads(
        (tmp_path / "whole" / "digital_state.json").read_text(encoding="utf-8")
    )


def test_concurrent_app_calls_give_the_sequential_bytes(tmp_path: Path, pool_file: Path) -> None:
    """Issue 9: a bundle's app calls in flight at once, answered out of order, give records and
    state byte-identical to one call at a time."""
    outs = {}
    for k in (1, 4):
        script = Jittered(digital_script())
        run_digital(
            tmp_path / str(k),
            pool_file,
            script,
            n=3,
            seed=3,
            cue_rate=0.5,
            llm=OpenAIConfig(concurrency=k),
        )
        assert (script.max_in_flight > 1) == (k > 1)
        outs[k] = [
            (tmp_path / str(k) / f).read_bytes() for f in ("digital.jsonl", "digital_state.json")
        ]
    assert outs[1] == outs[4]


def test_shards_merge_to_the_whole_run(tmp_path: Path, pool_file: Path) -> None:
    run_digital(tmp_path / "whole", pool_file, n=4, seed=5, cue_rate=0.5)
    for shard in range(2):
        run_digital(
            tmp_path / f"s{shard}", pool_file, n=4, seed=5, cue_rate=0.5, shard=shard, num_shards=2
        )
    merged = merge_and_compare(
        tmp_path / "whole", [tmp_path / "s0", tmp_path / "s1"], tmp_path / "m"
    )
    assert merged["characters"]["bundles"] == 4


def test_same_seed_same_bytes_and_prefix_stability(tmp_path: Path, pool_file: Path) -> None:
    for name, n in (("a", 2), ("b", 2), ("c", 4)):
        run_digital(tmp_path / name, pool_file, n=n, seed=11, cue_rate=0.5)
    a, b, c = ((tmp_path / x / "digital.jsonl").read_bytes() for x in "abc")
    assert a == b
    assert (tmp_path / "a" / "digital_state.json").read_bytes() == (
        tmp_path / "b" / "digital_state.json"
    ).read_bytes()
    assert len(a.splitlines()) == 2 and len(c.splitlines()) == 4
    assert c.startswith(a)
    run_digital(tmp_path / "d", pool_file, n=2, seed=12, cue_rate=0.5)
    other = read_jsonl(tmp_path / "d" / "digital.jsonl")
    assert {x["bundle_id"] for x in other}.isdisjoint(
        x["bundle_id"] for x in read_jsonl(tmp_path / "a" / "digital.jsonl")
    )
