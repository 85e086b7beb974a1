"""The digital generator end to end with the real embedded GGUF, through ``python -m gen``.

Asserts structure, counts and invariants, never the prose. With a model this small some bundles
may be rejected; then the rejects themselves must be well formed, and every requested index is
accounted for exactly once.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gen.run import derive_id
from generators.digital import FMT_M, FMT_S, render_bundle, wagibench_record
from schemas import Reject
from schemas import digital as S
from schemas.digital import RENDER_ORDER

pytestmark = pytest.mark.integration

N, POOL, SEED = 2, 8, 0
TIMEOUT = 900  # about 5 minutes on an idle 2-core machine; headroom for a loaded one
HEX32 = re.compile(r"^[0-9a-f]{32}$")
ORDER = [a.value for a in RENDER_ORDER]
REASONS = {"too_few_items", "no_valid_item", "truncated", "invalid_output", "backend_error"}
ARGS = ["digital", f"n={N}", f"persona_pool={POOL}", "cue_rate=1", f"seed={SEED}", "progress=plain"]


@pytest.fixture(scope="module")
def real(tmp_path_factory, runner_for):
    base = tmp_path_factory.mktemp("digital_real")
    cache = base / "cache"
    run = runner_for(base, cache)
    folder = base / "run"
    t0 = time.monotonic()
    proc = run(*ARGS, f"pool_dir={base / 'pools'}", f"hydra.run.dir={folder}", timeout=TIMEOUT)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    bundles = read_jsonl(folder / "digital.jsonl")
    rejects = [Reject.model_validate(r) for r in read_jsonl(folder / "rejects.jsonl")]
    print(f"\n[digital real] {len(bundles)} accepted, {len(rejects)} rejected in {wall:.0f}s; rejects: "
          + "; ".join(f"#{r.index} {r.stage}/{r.reason}: {r.detail[:160]}" for r in rejects))
    return SimpleNamespace(base=base, cache=cache, run=run, folder=folder, proc=proc, wall=wall,
                           bundles=bundles, rejects=rejects)


def test_every_index_is_a_bundle_or_a_reject(real, check_run_folder) -> None:
    manifest = check_run_folder(real.folder, "digital", N)
    assert len(real.bundles) + len(real.rejects) == N
    ids = {derive_id(SEED, "digital", i): i for i in range(N)}
    indices = [ids[b["bundle_id"]] for b in real.bundles]
    for r in real.rejects:
        assert ids[r.record_id] == r.index
        assert r.stage.startswith("app.") and r.stage.split(".")[1] in ORDER, r.stage
        assert r.reason in REASONS, r.reason
        assert r.detail
        indices.append(r.index)
    assert sorted(indices) == list(range(N))
    assert [ids[b["bundle_id"]] for b in real.bundles] == sorted(ids[b["bundle_id"]] for b in real.bundles)
    assert manifest["counts"]["rejects_by_reason"] == {
        k: sum(r.reason == k for r in real.rejects) for k in {r.reason for r in real.rejects}}

    assert manifest["llm"]["backend"] == "llama_cpp"
    assert manifest["llm_usage"]["calls"] > 0 and manifest["llm_usage"]["completion_tokens"] > 0
    assert isinstance(manifest["validators"], dict)
    assert all(re.match(r"^(Calendar|Messaging|Notes|Search|Videos|Maps|Music)\.\w+\.(dropped|corrected|regenerated)$", k)
               and v > 0 for k, v in manifest["validators"].items())
    assert manifest["characters"]["bundles"] == len(real.bundles)
    assert manifest["persona_pool"]["size"] == POOL
    assert (Path(manifest["persona_pool"]["path"]) / "personas.jsonl").is_file()
    state = json.loads((real.folder / "digital_state.json").read_text(encoding="utf-8"))
    assert list(state) == [b["bundle_id"] for b in real.bundles]
    for b in real.bundles:
        assert state[b["bundle_id"]] == wagibench_record(b)
    assert "[digital] done in" in real.proc.stdout


def test_bundles_hold_the_invariants(real) -> None:
    pool_path = Path(json.loads((real.folder / "manifest.json").read_text())["persona_pool"]["path"])
    pool = {r["name"] for r in read_jsonl(pool_path / "personas.jsonl")}
    for b in real.bundles:
        names = {b["main_persona"]["name"], *(r["persona"]["name"] for r in b["related_personas"])}
        assert names <= pool
        check_bundle(b, names)


def test_cued_bundles_have_their_cue_item(real) -> None:
    for b in real.bundles:
        assert b["cue"] is not None  # cue_rate=1
        check_cue(b)


def test_rerun_is_served_from_the_cache(real, check_run_folder) -> None:
    second = real.base / "second"
    proc = real.run(*ARGS, f"pool_dir={real.base / 'pools'}", f"hydra.run.dir={second}", timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = check_run_folder(second, "digital", N)
    usage = manifest["llm_usage"]
    assert usage["calls"] > 0 and usage["cache_hits"] == usage["calls"]
    for name in ("digital.jsonl", "rejects.jsonl", "digital_state.json"):
        assert (second / name).read_bytes() == (real.folder / name).read_bytes(), name
    assert "[personas]" not in proc.stdout  # the pool is reused, not made again


# --------------------------------------------------------------------------- invariants


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _t(value: str, fmt: str) -> dt.datetime:
    return dt.datetime.strptime(value, fmt)  # raises on a wrong format


def _past_times(app: str, state: dict[str, Any]) -> list[dt.datetime]:
    if app == "Messaging":
        return [_t(m["timestamp"], FMT_S) for c in state["conversations"] for m in c["messages"]]
    if app == "Notes":
        return [_t(n["last_updated"], FMT_M) for n in state["notes"]]
    if app == "Search":
        return [_t(s["timestamp"], FMT_S) for s in state["searches"]]
    if app == "Videos":
        return [_t(v["watch_timestamp"], FMT_S) for v in state["videos"]]
    if app == "Maps":
        return [_t(p["last_viewed"], FMT_S) for p in state["maps"]["recent_places"]]
    music = state["music"]
    return [_t(x["played_at"], FMT_S) for x in [*music["recent_tracks"], music["currently_playing"]]]


def _ids(obj: Any, out: list[str]) -> list[str]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k.endswith("_id") and isinstance(v, str):
                out.append(v)
            else:
                _ids(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _ids(v, out)
    return out


def check_bundle(b: dict[str, Any], names: set[str], window_days: int = 30) -> None:
    S.DigitalBundle.model_validate(b)
    assert HEX32.match(b["bundle_id"])
    assert list(b["apps"]) == ORDER
    assert len(b["related_personas"]) == 5 and len(names) == 6
    now = _t(b["current_datetime"], FMT_M)
    lo = now - dt.timedelta(days=window_days)
    main = b["main_persona"]["name"]
    apps = b["apps"]
    full = _ids({a: {k: v for k, v in s.items() if not k.startswith("key_")} for a, s in apps.items()}, [])
    keys = _ids({a: {k: v for k, v in s.items() if k.startswith("key_")} for a, s in apps.items()}, [])
    assert full and all(HEX32.match(x) for x in full + keys)
    assert len(full) == len(set(full))
    for app in ORDER[1:]:
        times = _past_times(app, apps[app])
        assert times, app
        assert all(lo <= t <= now for t in times), (app, b["current_datetime"])  # no future-dated past item
    for e in apps["Calendar"]["events"]:
        start, end = _t(e["start_datetime"], FMT_M), _t(e["end_datetime"], FMT_M)
        assert lo <= start < end <= now + dt.timedelta(days=window_days)
        assert set(e["attendees"]) <= names - {main}
    for c in apps["Messaging"]["conversations"]:
        assert main in c["participants"] and set(c["participants"]) <= names
        assert {m["sender"] for m in c["messages"]} <= set(c["participants"])
        stamps = [m["timestamp"] for m in c["messages"]]
        assert stamps == sorted(stamps)
        assert all(m["content"].strip() for m in c["messages"])
    maps, music = apps["Maps"]["maps"], apps["Music"]["music"]
    assert set(maps) == {"home_location", "current_location", "recent_places"}
    assert maps["home_location"]["address"] == b["main_persona"]["home_address"]
    assert set(music) == {"currently_playing", "recent_tracks"}
    assert b["stats"]["chars_total"] == len(render_bundle(b))


def _key(b: dict[str, Any], app: str) -> Any:
    state = b["apps"][app]
    return state[next(k for k in state if k.startswith("key_"))]


def check_cue(b: dict[str, Any]) -> None:
    """Only the cued app has a key list; the cue item is in its full list, and (apps of past
    items) is the latest item, 1-10 minutes before now; a Calendar cue event is upcoming."""
    cue = b["cue"]
    now = _t(b["current_datetime"], FMT_M)
    for app in ORDER:
        assert bool(_key(b, app)) == (cue["app"] == app), app
    app, state, keys = cue["app"], b["apps"][cue["app"]], _key(b, cue["app"])
    if app == "Calendar":
        (ev,) = keys
        assert ev in state["events"] and _t(ev["start_datetime"], FMT_M) > now
        return
    if app == "Messaging":
        (conv,) = keys
        last = state["conversations"][-1]
        assert last["messages"][-len(conv["messages"]):] == conv["messages"]
        newest = _t(conv["messages"][-1]["timestamp"], FMT_S)
        assert conv["messages"][-1]["sender"] != b["main_persona"]["name"]
        if cue["person"]:
            assert conv["messages"][-1]["sender"] == cue["person"]
    else:
        if app == "Maps":
            keys, full = keys["recent_places"], state["maps"]["recent_places"]
        elif app == "Music":
            keys = [keys["currently_playing"]]
            full = [*state["music"]["recent_tracks"], state["music"]["currently_playing"]]
        else:
            full = state[{"Notes": "notes", "Search": "searches", "Videos": "videos"}[app]]
        assert keys and full[-len(keys):] == keys
        newest = max(_past_times(app, state))
    assert now - dt.timedelta(minutes=11) <= newest <= now - dt.timedelta(minutes=1)
