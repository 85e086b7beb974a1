"""What a reviewer looks at: the items of a run folder, their audit findings, the rubrics, and
each item rendered as HTML the way the candidate sees it (privileged side apart).

Items: an MCQ run folder (``tom``, ``distractors``, a ``nocontext`` run's kept items, ``mcq.jsonl``,
EgoToM CSVs), a ``digital`` run folder (bundles) or a ``scenarios`` run folder (or any scenario bank
in the context benchmark's released schema), or a run folder of any other kind (a plugin's), shown
in the generic ``record`` layout (its fields as the kind declares them:
:meth:`gen.kinds.Kind.review_fields`), read as ``bank add`` reads them, or a bank's version
(:func:`load_bank_items`). An item's id
is its content hash, the bank's (:mod:`generators.bank.identity`), so labels follow an item into a
bank (``bank add require_review=k``) and survive a rerun that writes the same item. Rendering goes
through Jinja with autoescaping on: every text from an item is escaped, a ``<script>`` in a
narration is text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gen.errors import ConfigError, InputError, MissingInputError
from gen.formats.labels import REVIEWS
from gen.paths import PROMPTS, UnsafePathError, inside
from gen.readers import iter_jsonl, read_yaml_model, validated
from gen.schemas.audit import FindingRecord
from gen.schemas.judge import ValidityRecord
from gen.schemas.mcq import LETTERS, MCQ
from gen.schemas.nocontext import NocontextRecord
from gen.schemas.review import Rubric

TEMPLATES = PROMPTS / "review"
AUDIT_FILES = ("audit.jsonl", "audit/audit.jsonl")
"""Where a run folder may hold the audit of its items (an audit run's folder, a bank version's
``audit/``); ``findings=`` names another."""
_HEX32 = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class ReviewItem:
    index: int
    item_id: str
    """Content hash (the bank's item id)."""
    record_id: str | None
    """The record's own id (``item_id`` of an MCQ record, ``bundle_id``)."""
    kind: str
    """``mcq``, ``digital``, ``scenarios``, or the kind's name for a record-layout item: which
    rubric rates it."""
    question_type: str | None
    mcq: MCQ | None = None
    bundle: dict[str, Any] | None = None
    scenario: dict[str, Any] | None = None
    """A scenario record (the released schema: :class:`schemas.scenarios.ScenarioRecord`)."""
    record: dict[str, Any] | None = None
    """A record shown in the generic ``record`` layout (its kind is :attr:`kind`)."""
    findings: list[FindingRecord] = field(default_factory=list)
    blind: list[NocontextRecord] = field(default_factory=list)
    """A nocontext run's screening of this item (:mod:`.results`)."""
    judged: list[ValidityRecord] = field(default_factory=list)
    """A distractor_validity judge run's option scores of this item (:mod:`.results`)."""
    judge_primary: str | None = None
    """That judge run's primary judge (whose flag counts)."""

    def flags(self) -> int:
        """Audit findings naming the item, plus 1 when the primary judge flagged it (a wrong option
        scored at least the answer): what the page's "flagged" filter counts."""
        judged = any(r.flagged.get(self.judge_primary or "") for r in self.judged)
        return len(self.findings) + int(judged)

    def names(self) -> set[str]:
        """The ids other runs name this item by: its record id and, for an MCQ, the id gen's MCQ
        readers give it (an EgoToM row's ``goal:<cuid>``, which nocontext, judge and audit use)."""
        return {n for n in (self.record_id, self.mcq.item_id if self.mcq else None) if n}

    @property
    def layout(self) -> str:
        """The page's layout for it: ``mcq``, ``digital``, ``scenarios`` or ``record``."""
        return "record" if self.record is not None else self.kind


def make_item(
    index: int,
    kind: str,
    record: dict[str, Any],
    item_id: str,
    source_item_id: str | None,
    question_type: str | None,
) -> ReviewItem:
    """A reviewed item from a record as ``bank add`` reads it, shown in its kind's layout
    (:attr:`gen.kinds.Kind.view`: an MCQ-shaped kind as an MCQ, any other kind's record field by
    field unless it names gen's digital or scenarios layout)."""
    from gen import kinds

    k = kinds.require(kind)
    if (q := k.mcq(record)) is not None:
        return ReviewItem(
            index, item_id, source_item_id or q.item_id, "mcq", q.question_type, mcq=q
        )
    if k.view == "digital":
        return ReviewItem(index, item_id, source_item_id, "digital", question_type, bundle=record)
    if k.view == "scenarios":
        return ReviewItem(
            index, item_id, source_item_id, "scenarios", question_type, scenario=record
        )
    if k.view == "record":
        return ReviewItem(
            index, item_id, source_item_id or None, kind, question_type, record=record
        )
    raise InputError(
        f"kind {kind}: the review page has no layout {k.view!r} for its records (record, mcq, "
        "digital, scenarios)"
    )


def load_items(folder: Path, version: int | None = None) -> tuple[list[ReviewItem], list[Path]]:
    """The items of a run folder and the files they came from, read as ``bank add`` reads a
    batch (:func:`generators.bank.batch.load_batch`), so an item's id here is its id in a bank; or
    the items of a bank's version (:func:`load_bank_items`)."""
    from gen.banks.batch import batch_files, load_batch
    from gen.banks.store import LOCK, VERSIONS

    if not folder.is_dir():
        raise ConfigError(
            f"input: {folder} is not a folder; review reads a run folder or a bank (labels go to "
            "its reviews/)"
        )
    if is_bank(folder):
        return load_bank_items(folder, version)
    if version is not None:
        raise ConfigError(f"version={version} is for input=<bank folder>; {folder} is not a bank")
    if (folder / LOCK).is_file() and folder.parent.name == VERSIONS:
        raise ConfigError(
            f"input: {folder} is a version folder of the bank {folder.parent.parent}; review it as "
            f"input={folder.parent.parent} version=N (labels go to the bank's {REVIEWS}/)"
        )
    try:
        files = batch_files(folder)
    except InputError:
        # a judge's results (its run folder, or its judge.jsonl alone): say what to review
        if (folder / "judge.jsonl").is_file():
            raise InputError(
                f"input: {folder} holds judge results, not items: review the bank the judge read, "
                f"with judge={folder} to show its scores"
            ) from None
        raise
    items = [
        make_item(i, it.kind, it.record, it.item_id, it.source_item_id, it.question_type)
        for i, it in enumerate(load_batch(files))
    ]
    return items, [f for f, _, _ in files]


def is_bank(folder: Path) -> bool:
    """Whether ``folder`` is a bank (``bank add`` made it: a ``current`` pointer or
    ``versions/``)."""
    from gen.banks.store import CURRENT, VERSIONS

    return (
        (folder / CURRENT).is_symlink()
        or (folder / CURRENT).exists()
        or (folder / VERSIONS).is_dir()
    )


def load_bank_items(root: Path, version: int | None) -> tuple[list[ReviewItem], list[Path]]:
    """The items of a bank's version (``version``, else the current one), in the bank's order
    (kinds as :func:`gen.kinds.bank_kinds`, rows as stored), and the files read (the
    version's lock first). The bank is verified first, as ``bank export`` does: labels are given
    to content ids, and a bank that does not verify may hold rows whose id is not their content's
    (:class:`~generators.bank.verify.DriftError`, exit code 1, naming the first problem's file)."""
    from gen import kinds
    from gen.banks.store import LOCK, label, read_kind, read_pointer, version_dir
    from gen.banks.verify import DriftError, verify_bank

    current = read_pointer(root)
    if current is None:
        raise MissingInputError(
            f"input: the bank {root} has no released version yet "
            f"(python -m gen bank add bank={root} input=<run folder> makes one)"
        )
    target = version or current
    if target > current:
        raise ConfigError(f"version={target}, but the bank {root} is at {label(current)}")
    _, checks, _ = verify_bank(root, target)
    problems = [p for c in checks for p in c.problems]
    if problems:
        p = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise DriftError(
            f"input: bank {root} {label(target)} does not verify, nothing to "
            f"review: {root}/{p.path}: "
            f"{p.reason}: {p.detail}{more}; python -m gen bank verify bank={root} lists every "
            "problem"
        )
    folder = version_dir(root, target)
    items: list[ReviewItem] = []
    files = [folder / LOCK]
    for kind in kinds.bank_names():
        path = folder / f"{kind}.parquet"
        if not path.is_file():
            continue
        files.append(path)
        rows = read_kind(path).select("item_id", "source_item_id", "question_type", "record")
        for item_id, source_item_id, question_type, record in rows.iter_rows():
            items.append(
                make_item(
                    len(items),
                    kind,
                    json.loads(record),
                    item_id,
                    source_item_id or None,
                    question_type,
                )
            )
    return items, files


def find_findings(folder: Path, given: str | None, version: int | None = None) -> list[Path]:
    """The audit findings to show: ``findings=`` (an audit run folder or its audit.jsonl), else
    the run folder's own audit.jsonl if it has one; for a bank, the audit of the batch each version
    up to the reviewed one added (``versions/vNNNN/audit/audit.jsonl``)."""
    if given is not None:
        path = Path(given).expanduser()
        if path.is_dir():
            path = path / "audit.jsonl"
        if not path.is_file():
            raise InputError(f"findings: {path} not found (an audit run folder or its audit.jsonl)")
        return [path]
    if is_bank(folder):
        from gen.banks.store import read_pointer, version_dir

        target = version or read_pointer(folder) or 0
        return [
            p
            for v in range(1, target + 1)
            if (p := version_dir(folder, v) / "audit" / "audit.jsonl").is_file()
        ]
    for name in AUDIT_FILES:
        try:
            path = inside(folder, name, what="audit file")
        except UnsafePathError:
            continue
        if path.is_file():
            return [path]
    return []


def read_findings(path: Path) -> list[FindingRecord]:
    out = []
    for lineno, row in iter_jsonl(path):
        out.append(
            validated(FindingRecord, row, f"{path}:{lineno}", what="line", objects_only=False)
        )
    return out


def by_name(items: list[ReviewItem]) -> dict[str, list[ReviewItem]]:
    """Every id other runs may name an item by (:meth:`ReviewItem.names`) -> those items."""
    out: dict[str, list[ReviewItem]] = {}
    for it in items:
        for name in sorted(it.names()):
            out.setdefault(name, []).append(it)
    return out


def attach_findings(items: list[ReviewItem], findings: list[FindingRecord]) -> None:
    """Give each item the findings that name it (by its record id)."""
    named = by_name(items)
    for f in findings:
        hit: dict[int, ReviewItem] = {}
        for rid in f.items:
            hit.update((id(it), it) for it in named.get(rid, []))
        for it in hit.values():
            it.findings.append(f)


# --------------------------------------------------------------------------- rubrics


def read_rubric(path: Path) -> Rubric:
    """A rubric file (YAML or JSON); problems are InputErrors naming the file and field."""
    return read_yaml_model(path, Rubric, "rubric")


def default_rubric(kind: str, layout: str | None = None) -> Rubric:
    """The rubric of a kind: ``prompts/review/<kind>.yaml``; for a kind in the ``record`` layout,
    the rubric file the kind names (:attr:`gen.kinds.Kind.rubric`, read through the kind: a
    plugin ships it in its package), else ``prompts/review/record.yaml``."""
    if (layout or kind) != "record":
        return read_rubric(inside(TEMPLATES, f"{kind}.yaml", what="rubric"))
    from gen import kinds

    own = kinds.require(kind).rubric
    if own is None:
        return read_rubric(TEMPLATES / "record.yaml")
    rubric = read_rubric(Path(own))
    if not {kind, "record"} & set(rubric.kinds):
        raise InputError(
            f"rubric: {own}, the rubric of kind {kind}, rates {', '.join(rubric.kinds)} items; "
            f"list {kind} (or record) in its kinds"
        )
    return rubric


def rubrics_for(items: list[ReviewItem], given: str | None) -> dict[str, Rubric]:
    """Kind -> rubric for every kind among ``items``: ``rubric=`` for the kinds it lists (a
    rubric listing ``record`` rates every kind in the record layout), the default
    (:func:`default_rubric`) for the others."""
    layouts = {it.kind: it.layout for it in items}
    kinds = sorted(layouts)
    custom = read_rubric(Path(given).expanduser()) if given is not None else None

    def rates(rubric: Rubric, kind: str) -> bool:
        return kind in rubric.kinds or (layouts[kind] == "record" and "record" in rubric.kinds)

    if custom is not None and not any(rates(custom, k) for k in kinds):
        raise ConfigError(
            f"rubric: {given} rates {', '.join(custom.kinds)} items; this folder "
            f"holds {', '.join(kinds)}"
        )
    return {
        k: custom if custom is not None and rates(custom, k) else default_rubric(k, layouts[k])
        for k in kinds
    }


# --------------------------------------------------------------------------- rendering


def _environment() -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


_ENV: Any = None


def render(item: ReviewItem) -> str:
    """The item as an HTML fragment (autoescaped): the candidate's view and the privileged side."""
    global _ENV
    if _ENV is None:
        _ENV = _environment()
    views = {
        "mcq": mcq_view,
        "digital": digital_view,
        "scenarios": scenario_view,
        "record": record_view,
    }
    view = views[item.layout](item)
    from gen.generators.review.results import blind_view, validity_view

    findings = [
        {"severity": f.severity, "check": f.check, "what": f.what, "fields": ", ".join(f.fields)}
        for f in item.findings
    ]
    return _ENV.get_template("item.html.jinja").render(
        item=view, findings=findings, blind=blind_view(item), validity=validity_view(item)
    )


def mcq_view(item: ReviewItem) -> dict[str, Any]:
    q = item.mcq
    assert q is not None
    shown = {k.removeprefix("visible."): v for k, v in q.visible.items()}
    # the timeline: a record's visible.context, an EgoToM row's narrations_in_context
    context = (
        shown.pop("context", None)
        or shown.pop("narrations_in_context", None)
        or (q.context if not q.visible else "")
    )
    origins: Sequence[str | None] = q.origins or [None] * len(q.options)
    return {
        "kind": "mcq",
        "record_id": q.item_id,
        "question_type": q.question_type,
        "context": [line for line in context.splitlines() if line.strip()],
        "visible": sorted(shown.items()),
        "question": q.question,
        "options": [
            {"letter": LETTERS[i].upper(), "text": o, "answer": i == q.answer, "origin": origins[i]}
            for i, o in enumerate(q.options)
        ],
        "answer": None if q.answer is None else LETTERS[q.answer].upper(),
        "privileged": sorted((k.removeprefix("privileged."), v) for k, v in q.privileged.items()),
        "group": q.group,
    }


def _ids(obj: Any) -> set[str]:
    """Every 32-hex ``*_id`` value in ``obj``."""
    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k.endswith("_id") and isinstance(v, str) and _HEX32.match(v):
                out.add(v)
            else:
                out |= _ids(v)
    elif isinstance(obj, list):
        for v in obj:
            out |= _ids(v)
    return out


def _scalar(v: Any) -> str:
    if isinstance(v, list):
        return ", ".join(_scalar(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(v, ensure_ascii=False)
    return "" if v is None else str(v)


def _entry(obj: dict[str, Any], key_ids: set[str], key_objs: list[Any]) -> dict[str, Any]:
    """One app entry (an event, a conversation, a place) as lines ``{text, key}``; ``key``: the
    cue gave rise to it (its id, or a nested message's id, is among the app's ``key_*`` items)."""
    own = {v for k, v in obj.items() if k.endswith("_id") and isinstance(v, str)}
    lines: list[dict[str, Any]] = []
    for k, v in obj.items():
        if k.endswith("_id"):
            continue
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for x in v:
                ids = {y for kk, y in x.items() if kk.endswith("_id") and isinstance(y, str)}
                lines.append(
                    {
                        "text": " · ".join(
                            _scalar(y) for kk, y in x.items() if not kk.endswith("_id")
                        ),
                        "key": bool(ids & key_ids),
                    }
                )
        elif v not in (None, "", [], {}):
            lines.append({"text": f"{k.replace('_', ' ')}: {_scalar(v)}", "key": False})
    return {
        "lines": lines,
        "key": bool(own & key_ids) or obj in key_objs or any(x["key"] for x in lines),
    }


def _sections(
    state: dict[str, Any], key_ids: set[str], key_objs: list[Any]
) -> list[dict[str, Any]]:
    out = []
    for name, value in state.items():
        if name.startswith("key_"):
            continue
        if isinstance(value, list):
            out.append(
                {
                    "title": name.replace("_", " "),
                    "entries": [
                        _entry(v, key_ids, key_objs)
                        if isinstance(v, dict)
                        else {"lines": [{"text": _scalar(v), "key": False}], "key": False}
                        for v in value
                    ],
                }
            )
        elif isinstance(value, dict):
            flat = [v for v in value.values() if isinstance(v, list)]
            if flat:
                out += _sections(value, key_ids, key_objs)
            else:
                out.append(
                    {"title": name.replace("_", " "), "entries": [_entry(value, key_ids, key_objs)]}
                )
    return out


def _key_objects(state: dict[str, Any]) -> list[Any]:
    objs: list[Any] = []
    for name, value in state.items():
        if name.startswith("key_"):
            if isinstance(value, list):
                objs += value
            elif isinstance(value, dict):
                for v in value.values():
                    objs += v if isinstance(v, list) else [v]
    return [o for o in objs if o]


def digital_view(item: ReviewItem) -> dict[str, Any]:
    b = item.bundle
    assert b is not None
    apps = []
    keys: list[dict[str, Any]] = []
    for app, state in (b.get("apps") or {}).items():
        key_objs = _key_objects(state)
        key_ids = _ids([v for k, v in state.items() if k.startswith("key_")])
        apps.append({"name": app, "sections": _sections(state, key_ids, key_objs)})
        if key_objs:
            keys.append(
                {
                    "app": app,
                    "entries": [
                        _entry(o, set(), [])
                        if isinstance(o, dict)
                        else {"lines": [{"text": _scalar(o), "key": False}], "key": True}
                        for o in key_objs
                    ],
                }
            )
    p = b.get("main_persona") or {}
    cue = b.get("cue")
    return {
        "kind": "digital",
        "record_id": b.get("bundle_id"),
        "question_type": None,
        "now": b.get("current_datetime"),
        "persona": f"{p.get('name', '')}, {p.get('age', '')}, "
        f"{p.get('occupation') or p.get('status', '')}, {p.get('home_city', '')}",
        "cue": None
        if cue is None
        else {"text": cue.get("cue"), "app": cue.get("app"), "person": cue.get("person")},
        "apps": apps,
        "cue_items": keys,
        "related": [
            f"{r.get('relation')}: {(r.get('persona') or {}).get('name')}"
            for r in b.get("related_personas") or []
        ],
        "bio": p.get("bio"),
    }


def scenario_view(item: ReviewItem) -> dict[str, Any]:
    """A scenario as the candidate gets it (the runner's injection: a ``[Camera: …]`` block, then
    the user's words; the context image alone before turn 1), and the judge's side apart."""
    from gen.schemas.scenarios import GOLD_FIELDS

    s = item.scenario
    assert s is not None
    turns = []
    if s.get("context_image"):
        turns.append(
            {"title": "Before the conversation", "camera": s["context_image"], "user": None}
        )
    for k in (1, 2):
        turns.append(
            {
                "title": f"Turn {k}",
                "camera": s.get(f"turn_{k}_image"),
                "user": s.get(f"turn_{k}_user"),
            }
        )
    gold = s.get("gold") or {}
    facts = [
        ("subset", s.get("subset")),
        ("pair", s.get("pair_id")),
        ("activity domain", s.get("activity_domain")),
        ("referent complexity", s.get("referent_complexity")),
        ("difficulty", s.get("difficulty_tier")),
        ("time gap", s.get("time_gap_bucket")),
    ]
    return {
        "kind": "scenarios",
        "record_id": s.get("scenario_id"),
        "question_type": None,
        "turns": turns,
        "target_context": s.get("target_context"),
        "change_type": s.get("change_type"),
        "gold": [(name.replace("_", " "), list(gold.get(name) or [])) for name in GOLD_FIELDS],
        "notes": s.get("notes"),
        "repair": [
            (name, text)
            for name, text in (
                ("named", s.get("turn_3_repair_prompt")),
                ("deictic", s.get("turn_3_repair_prompt_deictic")),
            )
            if text
        ],
        "facts": [(k, v) for k, v in facts if v not in (None, "")],
    }


def record_view(item: ReviewItem) -> dict[str, Any]:
    """A record of any kind, field by field as its kind declares them
    (:meth:`gen.kinds.Kind.review_fields`): the candidate's side, and the privileged fields
    apart."""
    from gen import kinds

    assert item.record is not None
    fields = kinds.require(item.kind).review_fields(item.record)
    return {
        "kind": "record",
        "name": item.kind,
        "record_id": item.record_id,
        "question_type": item.question_type,
        "fields": [f for f in fields if not f.privileged],
        "privileged": [f for f in fields if f.privileged],
    }
