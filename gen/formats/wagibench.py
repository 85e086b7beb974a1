"""A bundle rendered as WAGIBench's prompt shows it, its sizes, and the layout WAGIBench's
evaluation loader reads."""

from __future__ import annotations

import json
from typing import Any

from gen.formats.bundles import LIST_KEY
from gen.schemas import digital as S
from gen.schemas.digital import App

# --------------------------------------------------------------------------- rendering and export


def app_view(bundle: S.DigitalBundle | dict[str, Any], app: str, key_only: bool) -> Any:
    apps = bundle.apps if isinstance(bundle, S.DigitalBundle) else bundle["apps"]
    state = apps[app]
    name = LIST_KEY[App(app)]
    return state[f"key_{name}"] if key_only else state[name]


def render_bundle(bundle: S.DigitalBundle | dict[str, Any], key_only: bool = False) -> str:
    """The bundle as WAGIBench's prompt shows it; ``key_only`` gives the high-signal D* form
    (only cue-derived sub-states)."""
    b = bundle if isinstance(bundle, dict) else bundle.model_dump(mode="json")
    parts = [f"The current datetime is: {b['current_datetime']}"]
    for app in S.RENDER_ORDER:
        if app.value not in b["apps"]:
            continue
        view = app_view(b, app.value, key_only)
        if key_only and not view:
            continue
        parts.append(
            f"Current state of the user's {app.value} "
            f"app:\n{json.dumps(view, ensure_ascii=False, indent=1)}"
        )
    return "\n\n".join(parts)


def bundle_stats(bundle: S.DigitalBundle) -> dict[str, Any]:
    per_app = {}
    for app in bundle.apps:
        per_app[app] = len(json.dumps(app_view(bundle, app, False), ensure_ascii=False, indent=1))
    return {"chars_per_app": per_app, "chars_total": len(render_bundle(bundle))}


def wagibench_record(b: dict[str, Any]) -> dict[str, Any]:
    """One bundle in the layout WAGIBench's evaluation loader reads."""
    cue = b["cue"]
    app_states: dict[str, Any] = {"datetimings": {"current_datetime": b["current_datetime"]}}
    for app, state in b["apps"].items():
        context = bool(cue and cue["app"] == app)
        if app in ("Maps", "Music"):
            name = LIST_KEY[App(app)]
            app_states[app] = {"state": {name: state[name]}, "context": context}
        else:
            app_states[app] = {"state": state, "context": context}
    goal = b.get("goal")
    if goal:  # goal-conditioned: joined to the goal's MCQs and history by the goal row's keys
        meta = {"client_tag": goal["client_tag"], "scenario": {"shortname": goal["group"]}}
    else:
        meta = {
            "client_tag": b["bundle_id"],
            "scenario": {"shortname": cue["cue_id"] if cue else "uncued"},
        }
    return {"meta": meta, "x": {"cues": wagibench_cues(b), "app_states": app_states}}


def wagibench_cues(b: dict[str, Any]) -> list[dict[str, Any]]:
    """The bundle's cue as WAGIBench's ``x.cues`` list (an uncued bundle: ``[]``)."""
    cue = b.get("cue")
    return (
        [{"modality": ["digital"], "app": cue["app"], "description": [cue["cue"]]}] if cue else []
    )
