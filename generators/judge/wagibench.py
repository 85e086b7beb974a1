"""``kind=wagibench``: WAGIBench's LLM judge of predicted digital actions (§3.2, appendix H, I.1).

Steps per prediction: (1) a structured prediction that is a valid action of the 10 types is
used as it is; anything else (free text, or a dict that is not a valid action) is reformatted by
an LLM into one (``reformat_tokens``: WAGIBench's code's 1,024, room for a reasoning model's
``<think>`` block), and a reformat that is not a valid action is its own outcome
(``reformat_invalid``, with the problem); a reformat or score reply cut at its budget
(``truncated``), or a reformat whose ``<think>`` block never closed (``unfinished_think``), is a
reject of the row, never a score; (2) every judge scores the action against the
inputs of each ``variant`` (§4.3: the script's cues and the reference, ``cues_reference``, the
paper's best and the default; the reference alone; cues or captions alone or with the reference;
every context with it), shown as text, on 0 / 1 / 2; (3) the score is read as WAGIBench's code
reads it (:func:`~generators.judge.scores.parse_score_lenient`: a ``<think>`` block set apart, then
the score tag's number; ``judge_parse=strict`` wants exactly one tag): a reply without a score
is a judge that did not follow instructions, counted as such, never guessed.

Input rows (JSONL, or a JSON list): ``id``, ``prediction`` (an action dict or free text),
``reference`` (a structured goal), optional ``contexts`` (``cues``, ``captions``,
``digital_state``), ``model``, ``group``; or a WAGIBench-layout row (``x``, ``y``, ``meta``, as
gen's ``wagibench_mcq_*.json``) with a ``prediction`` added. ``references=`` supplies the
reference and cues of rows without one from a layout file, by id; ``digital_state=`` the app
states of each observation from a ``digital_state.json``; ``socratic=`` the captions of rows
without any from a ``socratic`` run: the merged captions of the clips in the row's observation,
one per line in time order (WAGIBench's judge shows one world state per line).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from gen.engine.panel import (
    JudgeModel,
    Panel,
    build_panel,
    candidate_families,
    pairwise_agreement,
    require_candidate_family,
)
from gen.engine.runfolder import RunFolder
from gen.engine.runner import Plan, RunContext
from gen.errors import InputError, LLMOutputError, MissingInputError
from gen.formats.mcq import as_text
from gen.generators.judge.scores import as_action, judgment, parse_reformat
from gen.generators.judge.summary import finish, prompt_sha256
from gen.readers import iter_jsonl, read_json
from gen.schemas import Reject
from gen.schemas.history import Observation
from gen.schemas.judge import (
    VARIANT_CONTEXTS,
    Judgment,
    PredictionRow,
    Reformat,
    WagibenchJudgeRecord,
)
from gen.schemas.socratic import SocraticRecord
from gen.stats import mean_interval, proportion

if TYPE_CHECKING:
    from gen.generators.judge import JudgeConfig

JUDGE_PROMPT_VERSION = "wagibench-judge-2"
"""Bumped whenever ``judge/wagibench.jinja`` or ``judge/reformat.jinja`` changes meaning."""
TEMPLATE = "judge/wagibench.jinja"
REFORMAT = "judge/reformat.jinja"

Row = tuple[str, PredictionRow]
"""(``file:line``, the row)."""


# --------------------------------------------------------------------------- input


def plan(cfg: JudgeConfig) -> Plan:
    path = cfg.input_path()
    assert path is not None
    rows = read_predictions(path, cfg.references, cfg.digital_state, cfg.socratic)
    if not rows:
        raise InputError(f"input: {path} holds no predictions")
    for variant in cfg.variant:
        kinds = VARIANT_CONTEXTS[variant]
        for where, row in rows:
            if kinds and not contexts_text(row, kinds):
                need = " or ".join(k.replace("_", " ") for k in kinds)
                hint = (
                    f"; socratic={cfg.socratic} has no clip of its observation"
                    if cfg.socratic and "captions" in kinds
                    else ""
                )
                raise InputError(
                    f"{where}: contexts: variant {variant} needs {need} for every row "
                    f"(variant=[reference] judges against the reference only){hint}"
                )
    rows = rows[: cfg.n]
    # the benchmark's runner stops on a candidate it cannot place: before a run folder is made
    require_candidate_family(
        cfg,
        candidate_families(cfg.candidate_family, [(r.model, r.model_family) for _, r in rows]),
        f"input: {path}",
    )
    return Plan(len(rows), rows)


def _rows(path: Path) -> Iterator[tuple[str, Any]]:
    if path.suffix == ".jsonl":
        for lineno, row in iter_jsonl(path):
            yield f"{path}:{lineno}", row
    elif path.suffix == ".json":
        data = read_json(path)
        if not isinstance(data, list):
            raise InputError(
                f"{path}: expected a JSON list of rows (WAGIBench's layout), got "
                f"a {type(data).__name__}"
            )
        for i, row in enumerate(data):
            yield f"{path}:row {i + 1}", row
    else:
        raise InputError(f"input: {path}: expected predictions as .jsonl or a .json list")


def _obj(value: Any, where: str, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: {field}: expected an object, got {type(value).__name__}")
    return value


def layout_key(
    row: dict[str, Any], where: str
) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """(x, meta, observation key ``<shortname>_<client_tag>``) of a WAGIBench-layout row."""
    x, meta = _obj(row.get("x"), where, "x"), _obj(row.get("meta"), where, "meta")
    scenario = _obj(meta.get("scenario"), where, "meta.scenario")
    short, tag = scenario.get("shortname"), meta.get("client_tag", x.get("client_tag"))
    for name, v in (("meta.scenario.shortname", short), ("meta.client_tag", tag)):
        if v is not None and not isinstance(v, str):
            raise InputError(f"{where}: {name}: expected a string, got {type(v).__name__}")
    key = f"{short}_{tag}" if short and tag else tag
    return x, meta, key


def from_layout(row: dict[str, Any], where: str) -> dict[str, Any]:
    """A WAGIBench-layout row (with a ``prediction``) as a :class:`PredictionRow`'s fields."""
    x, meta, key = layout_key(row, where)
    contexts = {"cues": x.get("cues") or None, "digital_state": x.get("digital_state") or None}
    out = {
        "id": row.get("id", meta.get("item_id", key)),
        "prediction": row.get("prediction"),
        "reference": meta.get("structured_goal"),
        "model": row.get("model"),
        "group": key,
        "contexts": {k: v for k, v in contexts.items() if v is not None} or None,
    }
    return {k: v for k, v in out.items() if v is not None}


_TYPE_NAMES = {"str", "int", "float", "bool", "dict", "list", "none"}


def field_path(loc: tuple[Any, ...]) -> str:
    """A validation error's field path without pydantic's union branch names (``dict[str,any]``,
    a goal's type tag): ``reference.content``, ``contexts.cues.0``."""
    out: list[str] = []
    for i, part in enumerate(loc):
        text = str(part)
        if isinstance(part, str) and (
            "[" in text or text in _TYPE_NAMES or (i == 1 and loc[0] == "reference")
        ):
            continue
        out.append(text)
    return ".".join(out) or "row"


def _validated(data: dict[str, Any], where: str) -> PredictionRow:
    try:
        return PredictionRow.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        raise InputError(f"{where}: {field_path(err['loc'])}: {err['msg']}") from None


def read_predictions(
    path: Path,
    references: str | None = None,
    digital_state: str | None = None,
    socratic: str | None = None,
) -> list[Row]:
    """The rows to judge, references and contexts joined; a bad row is ``file:line: field:
    reason``."""
    refs = read_layouts(Path(references).expanduser()) if references else {}
    states = read_digital_state(Path(digital_state).expanduser()) if digital_state else {}
    captions = SocraticCaptions(socratic) if socratic else None
    out: list[Row] = []
    for where, raw in _rows(path):
        if not isinstance(raw, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(raw).__name__}")
        data = from_layout(raw, where) if ("x" in raw or "meta" in raw) else raw
        row = _validated(data, where)
        if row.reference is None and row.id in refs:
            ref, cues, group = refs[row.id]
            contexts = row.contexts.model_dump() if row.contexts else {}
            if cues and not contexts.get("cues"):
                contexts["cues"] = cues
            row = _validated(
                {
                    **row.model_dump(exclude_none=True),
                    "reference": ref,
                    "group": row.group or group,
                    "contexts": contexts or None,
                },
                where,
            )
        if row.reference is None:
            raise InputError(
                f"{where}: reference: missing (give it in the row, or references=<a WAGIBench MCQ "
                f"layout> holding id {row.id!r})"
            )
        if states and row.group in states:
            contexts = row.contexts.model_dump() if row.contexts else {}
            contexts["digital_state"] = states[row.group]
            row = row.model_copy(
                update={
                    "contexts": _validated(
                        {**row.model_dump(exclude_none=True), "contexts": contexts}, where
                    ).contexts
                }
            )
        if captions is not None and not (row.contexts and row.contexts.captions):
            found = captions.of(row, raw, where)
            if found:
                contexts = row.contexts.model_dump() if row.contexts else {}
                contexts["captions"] = found
                row = row.model_copy(
                    update={
                        "contexts": _validated(
                            {**row.model_dump(exclude_none=True), "contexts": contexts}, where
                        ).contexts
                    }
                )
        out.append((where, row))
    return out


_CLIP_TAG = re.compile(r"(.+)_(?:w\d+|c\d{3,})")
"""The client tag ``socratic`` gives a context window (``<video>_w<j>``) or a clip
(``<video>_c<NNN>``) of a video; a whole video's tag is its id."""


class SocraticCaptions:
    """The merged captions of a ``socratic`` run (its records, ``SocraticRecord``; its recordings,
    ``observations.jsonl``), found for a row by observation or by video."""

    def __init__(self, path: str):
        run = RunFolder.open(path)
        if run.generator != "socratic":
            raise InputError(
                f"socratic: {run.path} is a {run.generator} run, not a socratic run "
                "(its clips' merged captions are what the socratic variants show)"
            )
        self.clips: dict[str, list[SocraticRecord]] = defaultdict(list)
        for line, value in run.rows():
            try:
                rec = SocraticRecord.model_validate(value)
            except ValidationError as e:
                err = e.errors()[0]
                raise InputError(
                    f"{run.records_path}:{line}: {field_path(err['loc'])}: {err['msg']}"
                ) from None
            self.clips[rec.video_id].append(rec)
        for recs in self.clips.values():
            recs.sort(key=lambda r: r.start)
        self.windows: dict[str, tuple[str, float, float]] = {}
        """observation key (client tag, ``<scenario>_<client tag>``) -> (video, start, end)."""
        if run.has("observations.jsonl"):
            obs_file = run.file("observations.jsonl")
            for line, value in iter_jsonl(obs_file):
                try:
                    o = Observation.model_validate(value)
                except ValidationError as e:
                    err = e.errors()[0]
                    raise InputError(
                        f"{obs_file}:{line}: {field_path(err['loc'])}: {err['msg']}"
                    ) from None
                video = self._video_of(o.client_tag)
                if video is not None:
                    span = (video, o.context_window.start_s or 0.0, o.context_window.end_s or 0.0)
                    for k in (o.client_tag, f"{o.scenario}_{o.client_tag}"):
                        self.windows.setdefault(k, span)

    def _video_of(self, tag: str) -> str | None:
        if tag in self.clips:
            return tag
        m = _CLIP_TAG.fullmatch(tag)
        return m.group(1) if m and m.group(1) in self.clips else None

    def of(self, row: PredictionRow, raw: dict[str, Any], where: str) -> list[str]:
        """The merged captions of the row's observation: a recording of the run (by ``group``,
        ``id`` or a layout row's observation key and client tag), else a video of the run the
        row's ``x.client_tag`` names (WAGIBench's video is ``<client_tag>.mp4``) over its
        ``x.context_window`` (the whole video without one)."""
        x = raw.get("x") if isinstance(raw.get("x"), dict) else {}
        assert isinstance(x, dict)
        tag = x.get("client_tag")
        keys = [k for k in (row.group, row.id, tag) if isinstance(k, str)]
        span = next((self.windows[k] for k in keys if k in self.windows), None)
        if span is None and isinstance(tag, str) and tag in self.clips:
            w = _obj(x.get("context_window"), where, "x.context_window")
            lo, hi = w.get("start_s"), w.get("end_s")
            lo = float(lo) if isinstance(lo, int | float) and lo >= 0 else 0.0
            hi = float(hi) if isinstance(hi, int | float) and hi > lo else float("inf")
            span = (tag, lo, hi)
        if span is None:
            return []
        video, lo, hi = span
        return [c.merged for c in self.clips[video] if c.start < hi and c.end > lo]


def read_layouts(path: Path) -> dict[str, tuple[Any, Any, str | None]]:
    """id -> (structured goal, cues, observation key) of a WAGIBench MCQ layout file (or a folder of
    ``wagibench_mcq_*.json``), by ``meta.item_id`` and by observation key."""
    if not path.exists():
        raise MissingInputError(f"references: no such file or folder: {path}")
    files = sorted(path.glob("wagibench_mcq_*.json")) if path.is_dir() else [path]
    if not files:
        raise InputError(f"references: {path} holds no wagibench_mcq_*.json")
    out: dict[str, tuple[Any, Any, str | None]] = {}
    for x, meta, key in _layout_rows(files):
        entry = (meta.get("structured_goal"), x.get("cues") or None, key)
        for k in (meta.get("item_id"), key):
            if isinstance(k, str):
                out.setdefault(k, entry)
    return out


def layout_options(path: Path) -> dict[str, tuple[Any, Any]]:
    """id -> (structured goal, mcq_set) of a WAGIBench MCQ layout file or folder (``judge meta``'s
    baselines), by ``meta.item_id`` and by observation key."""
    files = sorted(path.glob("wagibench_mcq_*.json")) if path.is_dir() else [path]
    if not path.exists() or not files:
        raise MissingInputError(f"references: no WAGIBench MCQ layout at {path}")
    out: dict[str, tuple[Any, Any]] = {}
    for x, meta, key in _layout_rows(files):
        entry = (meta.get("structured_goal"), x.get("mcq_set"))
        for k in (meta.get("item_id"), key):
            if isinstance(k, str):
                out.setdefault(k, entry)
    return out


def _layout_rows(files: list[Path]) -> Iterator[tuple[Any, Any, str | None]]:
    """(input, meta, observation key) of every row of WAGIBench MCQ layout files, each checked."""
    for file in files:
        data = read_json(file)
        if not isinstance(data, list):
            raise InputError(
                f"{file}: expected a JSON list of WAGIBench MCQ rows, got a {type(data).__name__}"
            )
        for i, row in enumerate(data):
            where = f"{file}:row {i + 1}"
            if not isinstance(row, dict):
                raise InputError(f"{where}: expected a JSON object, got {type(row).__name__}")
            x, meta, key = layout_key(row, where)
            yield x, meta, key


def read_digital_state(path: Path) -> dict[str, Any]:
    """observation key -> app states, from a ``digital_state.json`` (WAGIBench's layout)."""
    if not path.is_file():
        raise MissingInputError(f"digital_state: no such file: {path}")
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(
            f"{path}: expected a JSON object of bundles (WAGIBench's digital_state.json)"
        )
    out = {}
    for name, bundle in data.items():
        where = f"{path}: {name}"
        if not isinstance(bundle, dict):
            raise InputError(f"{where}: expected an object, got {type(bundle).__name__}")
        x, _, key = layout_key(bundle, where)
        if key is not None and x.get("app_states") is not None:
            if not isinstance(
                x["app_states"], dict
            ):  # else a prediction row's error named the wrong file
                raise InputError(
                    f"{where}: x.app_states: expected an object of app states, "
                    f"got {type(x['app_states']).__name__}"
                )
            out[key] = x["app_states"]
    return out


# --------------------------------------------------------------------------- one row


def cue_lines(cues: Any) -> list[str]:
    """The cues as WAGIBench's judge shows them: each cue's description (a cue object's
    ``description`` lines), one per line."""
    out: list[str] = []
    for c in [cues] if isinstance(cues, str | dict) else cues or []:
        if isinstance(c, dict):
            d = c.get("description", "")
            out += [as_text(x) for x in d] if isinstance(d, list) else [as_text(d)]
        else:
            out.append(as_text(c))
    return [x for x in out if x.strip()]


def digital_text(state: Any) -> str:
    """A digital state as WAGIBench's prompt shows it: per app, ``Current state of the user's <app>
    app:`` and its state (a ``digital_state.json``'s ``app_states``); a text as it is."""
    if isinstance(state, str):
        return state
    parts = (
        [f"The current datetime is: {state['datetimings'].get('current_datetime')}"]
        if isinstance(state.get("datetimings"), dict)
        else []
    )
    for app, v in state.items():
        if app == "datetimings" or app == "digital_key_only":
            continue
        body = v.get("state", v) if isinstance(v, dict) else v
        parts.append(
            f"Current state of the user's {app} app:\n{json.dumps(body, ensure_ascii=False)}"
        )
    return "\n".join(parts)


def contexts_text(row: PredictionRow, kinds: tuple[str, ...]) -> str | None:
    """The contexts a variant shows (``kinds``: cues, captions, digital_state) as the judge prompt's
    text, never a Python dict: cue descriptions and captions one per line, the digital state as the
    benchmark renders it; several kinds under a heading each. None when the variant shows none."""
    if not kinds:
        return None
    c = row.contexts
    parts: list[tuple[str, str]] = []
    if c is not None:
        if "cues" in kinds and (lines := cue_lines(c.cues)):
            parts.append(("Cues", "\n".join(lines)))
        if "captions" in kinds and c.captions:
            caps = [c.captions] if isinstance(c.captions, str) else c.captions
            parts.append(("What the video shows", "\n".join(as_text(x) for x in caps)))
        if "digital_state" in kinds and c.digital_state:
            parts.append(("The phone's state", digital_text(c.digital_state)))
    if len(kinds) == 1:
        return parts[0][1] if parts else ""
    return "\n\n".join(f"{title}:\n{text}" for title, text in parts)


def dumps(action: Any) -> str:
    return json.dumps(action, ensure_ascii=False)


def judge_row(
    cfg: JudgeConfig,
    ctx: RunContext,
    panel: Panel,
    reformatter: Any,
    index: int,
    row: PredictionRow,
) -> WagibenchJudgeRecord | Reject:
    """Reformat if needed, then every variant x judge; a backend failure rejects the row."""
    action = as_action(row.prediction) if isinstance(row.prediction, dict) else None
    structured = action is not None
    reformat: Reformat | None = None
    assert row.reference is not None  # read_predictions refuses a row without one
    reference = row.reference

    def record(
        reformat: Reformat | None,
        outcome: Literal["judged", "reformat_invalid"],
        judgments: dict[str, dict[str, Judgment]],
    ) -> WagibenchJudgeRecord:
        return WagibenchJudgeRecord(
            id=row.id,
            group=row.group,
            model=row.model,
            action_type=reference.type,
            prediction=row.prediction,
            structured=structured,
            reformat=reformat,
            outcome=outcome,
            judgments=judgments,
        )

    if action is None:
        text = row.prediction if isinstance(row.prediction, str) else dumps(row.prediction)
        try:
            raw = reformatter.complete(
                ctx.prompts.render(REFORMAT, prediction=text),
                seed=ctx.seed(index, "reformat"),
                max_tokens=cfg.reformat_tokens,
                temperature=cfg.judge_temperature,
                whole=True,
            )
        except LLMOutputError as e:  # a reply cut at the budget too: never judged as it stands
            return Reject.from_failure(e, record_id=row.id, index=index, stage="reformat")
        action, problem, detail = parse_reformat(raw)
        if problem == "unfinished_think":  # the reasoning never closed: no answer was written
            return Reject(
                record_id=row.id,
                index=index,
                stage="reformat",
                reason="unfinished_think",
                detail="the reply's <think> block never closed (no answer after the reasoning)",
                raw=raw,
            )
        reformat = Reformat(raw=raw, action=action, problem=problem, detail=detail)
        if action is None:
            ctx.count(f"reformat.{problem}")
            return record(reformat, "reformat_invalid", {})
    jobs = [(v, j) for v in cfg.variant for j in panel.judges]

    def one(job: tuple[str, JudgeModel]) -> Judgment:
        variant, j = job
        messages = ctx.prompts.render(
            TEMPLATE,
            reference=dumps(reference.model_dump()) if "reference" in variant else None,
            prediction=dumps(action),
            contexts=contexts_text(row, VARIANT_CONTEXTS[variant]),
        )
        return judgment(
            j.llm.complete(
                messages,
                seed=ctx.seed(index, "judge", variant),
                max_tokens=cfg.judge_tokens,
                temperature=cfg.judge_temperature,
                whole=True,
            ),
            lenient=cfg.judge_parse == "lenient",
        )

    try:
        results = ctx.map(one, jobs, workers=min(j.llm.concurrency for j in panel.judges))
    except LLMOutputError as e:
        return Reject.from_failure(e, record_id=row.id, index=index, stage="judge")
    judgments: dict[str, dict[str, Judgment]] = defaultdict(dict)
    for (variant, j), res in zip(jobs, results, strict=True):
        judgments[variant][j.label] = res
        if not res.followed:
            ctx.count(f"not_followed.{j.label}.{res.problem}")
    return record(reformat, "judged", dict(judgments))


# --------------------------------------------------------------------------- summary


def summarise(
    cfg: JudgeConfig, records: list[WagibenchJudgeRecord], panel: Panel, rejected: int, seed: int
) -> dict[str, Any]:
    """Per judge and variant: the mean normalised score with a bootstrap 95 % interval (over the
    scored rows, and WAGIBench's convention of counting a failure as 0 over every row), per action
    type and per candidate model, the share that did not follow instructions; the reformat
    outcomes; the judges' agreement."""
    judged = [r for r in records if r.outcome == "judged"]
    judges: dict[str, Any] = {}
    for j in panel.judges:
        per_variant = {}
        for v in cfg.variant:
            js = [r.judgments[v][j.label] for r in judged]
            scored = [x.normalised for x in js if x.normalised is not None]
            as_zero = [x.normalised or 0.0 for x in js] + [0.0] * (len(records) - len(judged))

            def groups(key: str, v: str = v, j: JudgeModel = j) -> dict[str, Any]:
                by: dict[str, list[float]] = defaultdict(list)
                for r in judged:
                    g = getattr(r, key)
                    if g is not None and (x := r.judgments[v][j.label].normalised) is not None:
                        by[g].append(x)
                return {
                    g: mean_interval(xs, seed=seed, resamples=cfg.bootstrap)
                    for g, xs in sorted(by.items())
                }

            per_variant[v] = {
                "mean": mean_interval(scored, seed=seed, resamples=cfg.bootstrap),
                "mean_failures_as_zero": mean_interval(as_zero, seed=seed, resamples=cfg.bootstrap),
                "not_followed": proportion(sum(not x.followed for x in js), len(js)),
                "not_followed_by_problem": dict(
                    sorted(Counter(x.problem for x in js if x.problem).items())
                ),
                "scores": {str(k): sum(x.score == k for x in js) for k in (0, 1, 2)},
                "by_action_type": groups("action_type"),
                "by_model": groups("model"),
            }
        judges[j.label] = per_variant
    reformatted = [r for r in records if r.reformat is not None]
    return {
        "kind": "wagibench",
        "variants": cfg.variant,
        "primary": panel.primary.label,
        "rows": {
            "total": len(records) + rejected,
            "structured": sum(r.structured for r in records),
            "reformatted": len(reformatted),
            "reformat_invalid": sum(r.outcome == "reformat_invalid" for r in records),
            "judged": len(judged),
            "rejected": rejected,
        },
        "reformat_problems": dict(
            sorted(
                Counter(
                    r.reformat.problem for r in reformatted if r.reformat and r.reformat.problem
                ).items()
            )
        ),
        "judges": judges,
        "agreement": {
            v: pairwise_agreement(
                {j.label: [r.judgments[v][j.label].score for r in judged] for j in panel.judges}
            )
            for v in cfg.variant
        },
        "note": "mean: over the rows the judge scored; mean_failures_as_zero: every row, a "
        "reformat that is not "
        "an action or a judge that did not follow the format counting 0 (WAGIBench's code's "
        "convention); a rejected row (a reply cut at its budget, a backend failure) is in "
        "neither.",
    }


# --------------------------------------------------------------------------- the run


def run(cfg: JudgeConfig, ctx: RunContext) -> Iterator[WagibenchJudgeRecord | Reject]:
    rows: list[Row] = ctx.plan.data
    for p in (cfg.input, cfg.references, cfg.digital_state):
        if p is not None and Path(p).expanduser().is_file():
            ctx.record_input(Path(p).expanduser())
    if cfg.socratic is not None:
        soc = RunFolder.open(cfg.socratic)
        ctx.record_input(soc.records_path)
        if soc.has("observations.jsonl"):
            ctx.record_input(soc.file("observations.jsonl"))
    panel = build_panel(
        cfg,
        ctx,
        candidate_families(cfg.candidate_family, [(r.model, r.model_family) for _, r in rows]),
        default=cfg.llm,
    )
    reformatter = (
        ctx.llm_for(cfg.reformatter).fork() if cfg.reformatter is not None else panel.primary.llm
    )
    sha = prompt_sha256(ctx, TEMPLATE)
    records: list[WagibenchJudgeRecord] = []
    rejected = 0
    width = max(j.llm.concurrency for j in panel.judges)  # rows many at once, in order
    for out in ctx.imap(
        lambda i: judge_row(cfg, ctx, panel, reformatter, i, rows[i][1]), ctx.indices(), width=width
    ):
        if isinstance(out, Reject):
            rejected += 1
        else:
            records.append(out)
        yield out
    summary = summarise(cfg, records, panel, rejected, ctx.seed(0, "bootstrap"))
    prompt = {
        "judge_prompt_version": JUDGE_PROMPT_VERSION,
        "judge_prompt_sha256": sha,
        "reformat_prompt_sha256": prompt_sha256(ctx, REFORMAT)
        if REFORMAT in ctx.prompts.used
        else None,
        "candidate_model": sorted({r.model for _, r in rows if r.model}) or None,
    }
    finish(cfg, ctx, panel, summary, prompt, headline(summary))


def headline(summary: dict[str, Any]) -> list[str]:
    rows = summary["rows"]
    out = [
        f"judge wagibench: {rows['judged']} judged, {rows['reformat_invalid']} reformats not an "
        "action, "
        f"{rows['rejected']} rejected (of {rows['total']}); primary judge {summary['primary']}"
    ]
    for v, s in summary["judges"][summary["primary"]].items():
        m, nf = s["mean"], s["not_followed"]
        out.append(
            f"  {v}: mean normalised score {m['mean']} {m['ci95']} over {m['n']} scored; "
            f"did not follow instructions {nf['k']}/{nf['n']}"
        )
    return out
