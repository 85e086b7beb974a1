"""What the checks read, loaded once: :class:`AuditData` and :func:`load_inputs`.

Inputs: our ``tom``/``distractors``/``nocontext`` run folders, a folder of EgoToM CSVs, any JSONL
bank with a roles file, a ``digital`` or ``history`` run folder, a scenario bank in the Wearable
Assistant Context Bench's released schema (a ``scenarios`` run folder or any JSONL of such
records, known by their fields: no roles file); ``against=`` a second bank, ``nocontext=`` a
nocontext run. Bad input raises a GenError (exit 2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from gen import kinds
from gen.contextbench import CHECKS_FILE, scenario_file
from gen.engine.runfolder import load_run_records
from gen.engine.runfolder import read_manifest as run_manifest
from gen.engine.runner import RunContext
from gen.errors import ConfigError, InputError, MissingInputError
from gen.formats.mcq import Bank, bank_format
from gen.formats.roles import iter_roles_bank, read_roles
from gen.generators.audit.items import Items, Subset
from gen.generators.audit.text import Grams
from gen.kinds.mcq import find_mcq_files, iter_items, mcq_files
from gen.readers import iter_jsonl, validated

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig


@dataclass
class AuditData:
    """Everything the checks read, loaded once. The items are streamed into :class:`Items` (a
    spill file and a few columns), never held as objects: checks walk them (``for i, it in
    enumerate(data.items)``, :attr:`mcq`, :meth:`by_type`) and index the columns."""

    items: Items = field(default_factory=Items)
    """The items (a list given here becomes :class:`Items`)."""
    banks: list[Bank] = field(default_factory=list)
    """The bank files read; each one's ``items`` is a view of :attr:`items`."""
    against: Items = field(default_factory=Items)
    against_name: str | None = None
    bundles: list[dict[str, Any]] | None = None
    """``digital`` bundles when the input is a digital run (then ``items`` is empty)."""
    histories: list[dict[str, Any]] | None = None
    """``history`` records when the input is a history run (then ``items`` is empty)."""
    scenarios: list[dict[str, Any]] | None = None
    """Context-tracking scenarios (released schema) when the input is a scenario bank (then
    ``items`` is empty: the scenarios check applies the benchmark's rules to them)."""
    scenarios_file: Path | None = None
    scenario_categories: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """A ``scenarios`` run's gold vocabulary by category per accepted scenario id (its
    ``scenario_checks.jsonl``): the rules then check as the generator did (each gold list's
    object name in camera text and in the named repair, the three-category rule)."""
    history_config: dict[str, Any] = field(default_factory=dict)
    """The history run's config (supports, positives) from its manifest."""
    digital_config: dict[str, Any] = field(default_factory=dict)
    """The digital run's config (windows, cue recency) from its manifest."""
    nocontext: list[dict[str, Any]] | None = None
    judge: list[dict[str, Any]] | None = None
    """Per-item records of a distractor_validity judge run (``judge=``)."""
    judge_primary: str | None = None
    """That run's primary judge (whose flags count)."""
    folders: list[Path] = field(default_factory=list)
    """Run folders whose manifest.json the integrity check verifies."""
    manifests: dict[Path, dict[str, Any]] = field(default_factory=dict)
    """Each run folder's manifest.json, read and checked once (:func:`read_manifest`)."""
    embed: Callable[[list[str]], np.ndarray] | None = None
    workers: int = 1
    """Processes a check may work in (the audit's ``workers=``: an execution setting, not a
    threshold; the findings do not depend on it)."""
    embedded: int = 0
    """Texts the checks gave :attr:`embed` (the embedder computes each distinct one once: its
    cache is keyed by the text)."""
    seed: int = 0
    grams: Grams = field(default_factory=Grams, repr=False)
    """Word n-gram keys of normalised texts, for the duplicates check (the leakage check keeps
    its own, freed when it ends)."""

    def __post_init__(self) -> None:
        if not isinstance(self.items, Items):
            self.items = Items(self.items)
        if not isinstance(self.against, Items):
            self.against = Items(self.against)

    def visible(self, i: int) -> list[tuple[str, str]]:
        """Item i's visible fields, normalised (computed once, when the item was read)."""
        return self.items.visible(i)

    @property
    def bank_of(self) -> list[str]:
        """Per item, the name of the file it came from."""
        names = [b.path.name for b in self.banks]
        return [names[b] for b in self.items.bank.tolist()] if names else []

    @property
    def mcq(self) -> Subset:
        """Items with at least two options and a known answer (what the statistics use), as
        ``(index, item)`` read when iterated."""
        items = self.items
        return items.subset(np.nonzero((items.n_options >= 2) & (items.answer >= 0))[0])

    def by_type(self) -> dict[str, Subset]:
        """:attr:`mcq` grouped by question type, types sorted."""
        items = self.items
        idx = self.mcq.indices
        codes = items.qtype[idx]
        return {
            items.types[c]: items.subset(idx[codes == c])
            for c in sorted(set(codes.tolist()), key=lambda c: items.types[c])
        }

    def bank_name(self, i: int) -> str | None:
        """The file item i came from, when the audit read several (else None)."""
        return (
            self.banks[self.items.bank[i]].path.name
            if len(self.banks) > 1 and i < len(self.items)
            else None
        )


def _read_banks(path: Path, roles: str | None, what: str, into: Items) -> list[Bank]:
    """Stream the bank files at ``path`` into ``into`` (one Bank each, its items a view)."""
    if roles is not None:
        if not path.is_file():
            raise InputError(
                f"{what}: with roles= the bank must be a JSONL file, got the folder {path}"
            )
        spec = read_roles(Path(roles).expanduser())
        problems: list[dict[str, Any]] = []
        sources = [(path, "roles_jsonl", lambda p: iter_roles_bank(p, spec, problems))]
    else:
        problems = []
        sources = [(p, bank_format(p), iter_items) for p in mcq_files(path)]
    spans = []
    for b, (file, _, read) in enumerate(
        sources
    ):  # each file read when its turn comes, as load_banks does
        start = len(into.ids)
        for it in read(file):
            into.append(it, b)
        spans.append(range(start, len(into.ids)))
    into.seal()
    return [
        Bank(file, fmt, into.view(span), problems if fmt == "roles_jsonl" else [])
        for (file, fmt, _), span in zip(sources, spans, strict=True)
    ]


def _run_folder(path: Path) -> Path | None:
    folder = path if path.is_dir() else path.parent
    return folder if (folder / "manifest.json").is_file() else None


def read_manifest(folder: Path) -> dict[str, Any]:
    """A run folder's manifest.json as read (checked by
    :func:`gen.engine.runfolder.read_manifest`)."""
    return run_manifest(folder)[1]


def load_inputs(cfg: AuditConfig, ctx: RunContext, items: Items | None = None) -> AuditData:
    """Read input=, against=, nocontext= once; bad input raises a GenError (exit 2). ``items``:
    where the input's items go (one made here by default; the audit's is followed by the checks
    it started before reading, :meth:`Items.feed`)."""
    if cfg.input is None:
        raise ConfigError(
            "input= is required (a bank file, a run folder, or a folder of EgoToM CSVs)"
        )
    path = cfg.input_path()
    assert path is not None
    data = AuditData(seed=ctx.seed(0, "folds"), workers=cfg.workers)
    if items is not None:
        data.items = items
    folders: list[Path] = []
    kind = None if cfg.roles is not None else kinds.of_path(path)
    view = kind.view if kind is not None else None
    if kind is not None and view == "history":
        data.histories, file = load_run_records(path, Path(kind.files[0]).stem)
        ctx.record_input(file)
        if (run_dir := _run_folder(file)) is not None:
            m = data.manifests[run_dir] = read_manifest(run_dir)
            config = m.get("config")
            data.history_config = config if isinstance(config, dict) else {}
    elif kind is not None and view == "digital":
        data.bundles, file = load_run_records(path, Path(kind.files[0]).stem)
        ctx.record_input(file)
        if (run_dir := _run_folder(file)) is not None:
            m = data.manifests[run_dir] = read_manifest(run_dir)
            merged = m.get("merged")
            config = (merged.get("source_config") if isinstance(merged, dict) else None) or m.get(
                "config"
            )
            data.digital_config = config if isinstance(config, dict) else {}
    elif kind is not None and view == "scenarios":
        from gen.contextbench import read_rows as read_scenarios

        data.scenarios = read_scenarios(path)
        data.scenarios_file = scenario_file(path)
        ctx.record_input(data.scenarios_file)
        checks = data.scenarios_file.parent / CHECKS_FILE
        if data.scenarios_file.name in kind.files and checks.is_file():  # a scenarios run's sidecar
            data.scenario_categories = read_scenario_categories(checks)
            ctx.record_input(checks)
    elif cfg.roles is not None or path.is_file() or find_mcq_files(path):
        data.banks = _read_banks(path, cfg.roles, "input", data.items)
        if cfg.roles is not None:
            ctx.record_input(Path(cfg.roles).expanduser())
        for bank in data.banks:
            ctx.record_input(bank.path)
    elif not (path / "manifest.json").is_file():
        raise InputError(
            f"input: {path} holds no records of any kind "
            f"({', '.join(f for k in kinds.every() for f in k.files)}, EgoToM CSVs) and no "
            "manifest.json"
        )
    if (f := _run_folder(path)) is not None:
        folders.append(f)
    if cfg.against is not None:
        apath = Path(cfg.against).expanduser()
        if not apath.exists():
            raise MissingInputError(f"against: no such file or folder: {apath}")
        for bank in _read_banks(apath, cfg.against_roles or cfg.roles, "against", data.against):
            ctx.record_input(bank.path)
        data.against_name = apath.name
    nocontext = cfg.nocontext
    if nocontext is None and path.is_dir() and view == "screening":
        nocontext = str(path)  # a nocontext run audited as a bank: its own blind results
    if nocontext is not None:
        npath = Path(nocontext).expanduser()
        data.nocontext = read_nocontext(npath)
        if (f := _run_folder(npath)) is not None and f not in folders:
            folders.append(f)
    if cfg.judge is not None:
        jpath = Path(cfg.judge).expanduser()
        data.judge, data.judge_primary = read_judge(jpath)
        if (f := _run_folder(jpath)) is not None and f not in folders:
            folders.append(f)
    data.folders = folders
    for f in folders:
        if f not in data.manifests:
            data.manifests[f] = read_manifest(f)
    if not cfg.allow_empty:
        _refuse_empty(data, path, cfg.roles)
    if cfg.embeddings:

        def embed(texts: list[str]) -> np.ndarray:
            data.embedded += len(texts)
            return np.asarray(ctx.embedder.encode(texts))

        data.embed = embed
    return data


def _refuse_empty(data: AuditData, path: Path, roles: str | None) -> None:
    """Zero items (or bundles) is an input error: an audit of nothing passes any CI gate."""
    empty = (
        (data.bundles is not None and not data.bundles)
        or (data.histories is not None and not data.histories)
        or (data.scenarios is not None and not data.scenarios)
        or (data.banks and not data.items)
    )
    if empty:
        what = (
            "digital bundles"
            if data.bundles is not None
            else "history banks"
            if data.histories is not None
            else "scenarios"
            if data.scenarios is not None
            else "items"
        )
        names = ", ".join(str(b.path) for b in data.banks) or str(path)
        raise InputError(
            f"input: {names} holds 0 {what}{' (read with roles=' + roles + ')' if roles else ''}; "
            "allow_empty=true audits an empty bank"
        )


NOCONTEXT_KEYS = ("item_id", "question_type", "correct")


def read_nocontext(path: Path) -> list[dict[str, Any]]:
    """Per-item results of a nocontext run (``nocontext.jsonl``)."""
    file = path / "nocontext.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise MissingInputError(
            f"nocontext: {file} not found (expected a nocontext run folder or its nocontext.jsonl)"
        )
    rows = []
    for lineno, row in iter_jsonl(file):
        missing = [k for k in NOCONTEXT_KEYS if not isinstance(row, dict) or k not in row]
        if missing or not isinstance(row.get("correct"), dict):
            raise InputError(
                f"{file}:{lineno}: a nocontext result needs {', '.join(NOCONTEXT_KEYS)} "
                f"(correct: {{model: shuffles right}})"
            )
        rows.append(row)
    return rows


JUDGE_KEYS = ("item_id", "question_type", "answer", "scores", "flagged", "flagged_options")


def read_judge(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    """Per-item records of a ``judge kind=distractor_validity`` run and its primary judge (from its
    manifest; without one, the records' only judge)."""
    file = path / "judge.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise MissingInputError(
            f"judge: {file} not found (expected a judge run folder or its judge.jsonl)"
        )
    folder = file.parent
    primary = None
    if (folder / "manifest.json").is_file():
        info = read_manifest(folder).get("judge")
        if not isinstance(info, dict) or info.get("kind") != "distractor_validity":
            raise InputError(
                f"{folder}/manifest.json: judge: not a judge run of kind distractor_validity"
            )
        primary = info.get("judge_label")
    rows = []
    for lineno, row in iter_jsonl(file):
        missing = [k for k in JUDGE_KEYS if not isinstance(row, dict) or k not in row]
        if (
            missing
            or not isinstance(row.get("flagged"), dict)
            or not isinstance(row.get("flagged_options"), dict)
        ):
            raise InputError(
                f"{file}:{lineno}: a distractor_validity record needs {', '.join(JUDGE_KEYS)} "
                "(flagged: {judge: bool or null})"
            )
        if primary is not None and primary not in row["flagged"]:
            raise InputError(
                f"{file}:{lineno}: flagged: no verdict of the run's primary judge {primary!r}"
            )
        rows.append(row)
    if primary is None:
        judges = sorted({k for r in rows for k in r["flagged"]})
        if len(judges) > 1:
            raise InputError(
                f"{file}: records of several judges ({', '.join(judges)}) and no manifest naming "
                "the primary one"
            )
        primary = judges[0] if judges else None
    return rows, primary


class _GoldCategories(BaseModel):
    """One gold list's vocabulary by category, as ``gen scenarios`` records it."""

    model_config = ConfigDict(extra="ignore")

    name: str
    technique: list[str] = Field(default_factory=list)
    state: list[str] = Field(default_factory=list)
    also: list[str] = Field(default_factory=list)


class _ScenarioChecksRow(BaseModel):
    model_config = ConfigDict(extra="ignore")

    scenario_id: str
    status: str
    categories: dict[str, _GoldCategories] = Field(default_factory=dict)


def read_scenario_categories(file: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """Gold categories per accepted scenario id from a ``scenario_checks.jsonl``; a row of
    another shape is an InputError naming file, line and field."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for lineno, row in iter_jsonl(file):
        r = validated(_ScenarioChecksRow, row, f"{file}:{lineno}", objects_only=False)
        if r.status == "accepted":
            out[r.scenario_id] = {k: v.model_dump() for k, v in r.categories.items()}
    return out
