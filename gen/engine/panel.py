"""The judges of a run: which models, their families, the cross-family rule, and agreement.

A model judging its own family can score it too high or too low, so by default a judge of the
candidate's family is refused (``allow_same_family=true`` permits it). ``judges=[…]`` runs
several judges on every row; the first judge of another family than the candidate's is the
primary one (its labels make the scores), and the others give the agreement figures (Cohen's
kappa and raw agreement between every two judges: the benchmark's v1 agreement figure).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from pydantic import Field, field_validator, model_validator

from gen.engine.config import ModelChoice
from gen.engine.runner import CommonConfig, RunContext
from gen.errors import ConfigError
from gen.llm import LanguageModel, LLMConfig
from gen.llm.labels import model_label, unique_labels
from gen.stats import agreement, cohen_kappa, rounded


class JudgeOptions(CommonConfig):
    """The judge options ``judge`` and ``evaluate`` share."""

    judge: ModelChoice | None = None
    """The judge model: an llm preset (smollm2) or a dict ({backend: openai, model: …}); null:
    judges=[…], else (gen judge) llm=."""
    judges: list[ModelChoice] = Field(default_factory=list)
    """Several judges on every row (presets or dicts): the first of another family than the
    candidate's scores, all give agreement."""
    judge_labels: list[str] = Field(default_factory=list)
    """Judge names in the outputs, one per judge ([] = GGUF file stem or served model name)."""
    allow_same_family: bool = False
    """Let a judge of the candidate's model family judge it (refused by default: a model judging its
    own family can score it too high or too low)."""
    candidate_family: str | None = None
    """The candidate's model family when the input does not say (null: from the rows, or the
    candidate model); one gen knows (openai, anthropic, google, meta, qwen…; claude, gemini)."""
    judge_family: str = "auto"
    """Which judge scores: auto (the benchmark's mapping, anthropic->google, google->openai,
    openai->google, among the judges given; else the first judge of another family) or a family
    (claude|gemini|openai|google|…: the judge of that family)."""
    judge_temperature: float = Field(0.0, ge=0, le=2)
    """Sampling temperature of every judge call (0: greedy, the same verdict on a rerun)."""
    verdict_tokens: int = Field(200, ge=32, le=4096)
    """Context judge: cap of the JSON verdict (label and one-sentence rationale)."""
    ranking_condition: str = "baseline"
    """Context judge: the prompt condition whose balanced turn-2 accuracy is the primary score."""
    bootstrap: int = Field(2000, ge=100, le=100_000)
    """Bootstrap resamples of the 95 % intervals of means and balanced accuracy."""

    @field_validator("candidate_family")
    @classmethod
    def _known_family(cls, value: str | None) -> str | None:
        from gen.llm.family import families_text, known_family

        if value is None:
            return None
        family = known_family(value)
        if family is None:
            raise ValueError(f"{value!r} is not a model family gen knows: {families_text()}")
        return family

    @model_validator(mode="after")
    def _panel(self) -> JudgeOptions:
        if self.judge is not None and self.judges:
            raise ValueError("give judge= or judges=[…], not both (judges= lists every judge)")
        n = len(self.judges) or 1
        if self.judge_labels and len(self.judge_labels) != n:
            raise ValueError(f"judge_labels: {len(self.judge_labels)} given for {n} judge(s)")
        if len(set(self.judge_labels)) != len(self.judge_labels):
            raise ValueError("judge_labels must be distinct")
        return self

    def judge_options(self) -> dict[str, Any]:
        """These judge options whole (every field :class:`JudgeOptions` declares), for a judge
        run inside this one: ``ctx.subrun("judge", out, **cfg.judge_options(), kind=…)``. Values
        as validated (a model stays its config object, so nothing is dumped and re-read), so an
        option added here reaches the sub-run with no edit to its caller."""
        return {k: getattr(self, k) for k in JudgeOptions.model_fields if k not in _COMMON}

    def judge_configs(self, default: LLMConfig | None) -> list[LLMConfig]:
        """The judges' configs: judges=, else judge=, else ``default``."""
        if self.judges:
            return list(self.judges)
        if self.judge is not None:
            return [self.judge]
        if default is None:
            raise ConfigError(
                "judge= is required (a model of another family than the candidate's: an llm "
                "preset or a dict; with judge=smollm2 add allow_same_family=true if the candidate "
                "is SmolLM2 too)"
            )
        return [default]


_COMMON = frozenset(CommonConfig.model_fields)


@dataclass
class JudgeModel:
    label: str
    config: LLMConfig
    llm: LanguageModel

    @property
    def family(self) -> str | None:
        return self.llm.family

    def describe(self) -> dict[str, Any]:
        family, source = self.llm.family_info
        d = self.llm.describe()
        return {
            "label": self.label,
            "model": d.get("model"),
            "backend": d.get("backend"),
            "family": family,
            "family_source": source,
        }


@dataclass
class Panel:
    judges: list[JudgeModel]
    primary: JudgeModel
    candidate_families: dict[str, str]
    """Known candidate family -> how it was found."""
    resolution: str
    """How the primary judge was chosen (the manifest's ``judge_family_resolution``)."""

    def manifest(self) -> dict[str, Any]:
        """The judge fields of a run manifest (the benchmark's names)."""
        p = self.primary.describe()
        return {
            "judge_model": p["model"],
            "judge_label": self.primary.label,
            "judge_family": p["family"],
            "judge_family_source": p["family_source"],
            "judge_family_resolution": self.resolution,
            "candidate_family": sorted(self.candidate_families) or None,
            "judges": [j.describe() for j in self.judges],
        }


def require_candidate_family(
    opts: JudgeOptions, candidate_families: dict[str, str], where: str = "candidate"
) -> None:
    """The benchmark's runner's rule: ``judge_family=auto`` needs the candidate's family (a
    model it cannot place, an open-weights one, forces an explicit ``--judge-family``).
    ``where``: what the families were read from (the message's first words).

    Raises:
        ConfigError: no candidate family is known and ``judge_family=auto``.
    """
    from gen.llm.family import families_text

    if opts.judge_family.strip().lower() == "auto" and not any(candidate_families):
        raise ConfigError(
            f"{where}: candidate family unknown (no candidate_family=, no family or known model "
            "name): judge_family=auto cannot choose a judge of another family; give "
            f"candidate_family= or judge_family= (families: {families_text()})"
        )


def build_panel(
    opts: JudgeOptions,
    ctx: RunContext,
    candidate_families: dict[str, str],
    default: LLMConfig | None,
    *,
    candidate: bool = True,
) -> Panel:
    """Load the judges (each with its own usage counters; a judge with the same config as the
    run's model shares its loaded weights), resolve their families and apply the cross-family rule.
    ``candidate=False``: nothing a model wrote is judged (no candidate family to compare).

    Raises:
        ConfigError: a judge of the candidate's family without ``allow_same_family=true``; a
            candidate of unknown family with ``judge_family=auto``
            (:func:`require_candidate_family`).
    """
    if candidate:
        require_candidate_family(opts, candidate_families)
    configs = opts.judge_configs(default)
    labels = opts.judge_labels or unique_labels([model_label(c) for c in configs])
    judges = [
        JudgeModel(label, c, ctx.llm_for(c).fork())
        for label, c in zip(labels, configs, strict=True)
    ]
    known = {f: how for f, how in candidate_families.items() if f}
    for j in judges:
        family, source = j.llm.family_info
        if family is not None and family in known and not opts.allow_same_family:
            raise ConfigError(
                f"judge {j.label} is of the candidate's model family {family!r} (judge: {source}; "
                "candidate: "
                f"{known[family]}): a model judging its own family can score it too high or too "
                "low; choose a "
                "judge of another family (judge= or judges=[…]), or allow_same_family=true"
            )
    cross = [j for j in judges if j.family is None or j.family not in known]
    primary, how = choose_primary(opts.judge_family, judges, cross, known)
    family, source = primary.llm.family_info
    if not known:
        why = (
            "candidate family unknown (no candidate_family=, no family in the rows): the first "
            "judge, "
            f"{primary.label} ({family}, {source}), was not compared"
        )
    elif primary in cross:
        why = (
            f"cross-family: {primary.label} is {family} ({source}); the candidate is "
            f"{', '.join(f'{f} ({h})' for f, h in sorted(known.items()))}"
        )
    else:
        why = (
            f"same family allowed (allow_same_family=true): {primary.label} and the candidate are "
            "both "
            f"{family} ({source})"
        )
    if how:
        why = f"{how}; {why}"
    return Panel(judges, primary, known, why)


def choose_primary(
    option: str, judges: list[JudgeModel], cross: list[JudgeModel], known: dict[str, str]
) -> tuple[JudgeModel, str]:
    """The judge whose labels score, and how it was chosen (``""``: the default, the first judge
    of another family than the candidate's, else the first judge).

    ``judge_family=auto``: when every candidate family maps to one judge family
    (:data:`gen.llm.family.JUDGE_FAMILY_FOR`) and a judge of it is given, that judge; otherwise
    the default. ``judge_family=<family>``: the first judge of that family, a ConfigError when
    none is.
    """
    from gen.llm.family import JUDGE_FAMILY_FOR, canonical_family

    if option.strip().lower() != "auto":
        want = canonical_family(option)
        match = [j for j in judges if j.family == want]
        if not match:
            raise ConfigError(
                f"judge_family={option}: no judge of family {want!r} among "
                f"{', '.join(f'{j.label} ({j.family})' for j in judges)}; add one with judges=[…] "
                "or choose judge_family=auto"
            )
        return match[0], f"judge_family={option} (config)"
    mapped = {JUDGE_FAMILY_FOR.get(f) for f in known}
    target = next(iter(mapped)) if len(mapped) == 1 else None
    if target is not None:
        want = target
        match = [j for j in cross if j.family == want]
        if match:
            return match[0], (
                f"judge_family=auto: the benchmark maps {'/'.join(sorted(known))} to {want}"
            )
        fallback = cross[0] if cross else judges[0]
        return fallback, (
            f"judge_family=auto: the benchmark maps {'/'.join(sorted(known))} to {want}, and no "
            "judge "
            f"of it is given: the first judge of another family"
        )
    return (cross[0] if cross else judges[0]), ""


def pairwise_agreement(values: dict[str, Sequence[Hashable | None]]) -> list[dict[str, Any]]:
    """Cohen's kappa and raw agreement of every two judges, over the rows both gave a value."""
    out = []
    for a, b in combinations(values, 2):
        pairs = [
            (x, y)
            for x, y in zip(values[a], values[b], strict=True)
            if x is not None and y is not None
        ]
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        kappa, raw = cohen_kappa(xs, ys), agreement(xs, ys)
        out.append(
            {
                "judges": [a, b],
                "rows": len(pairs),
                "agreement": None if raw is None else rounded(raw),
                "kappa": None if kappa is None else rounded(kappa),
            }
        )
    return out


def candidate_families(
    option: str | None, named: Sequence[tuple[str | None, str | None]]
) -> dict[str, str]:
    """The candidates' families and how each was found: ``candidate_family=``, else the families
    the rows give, else the families their model names start with (``gpt-4o`` -> openai)."""
    from gen.llm.family import canonical_family, family_of_name

    if option:
        return {option: "candidate_family= (config)"}
    out: dict[str, str] = {}
    for name, family in named:
        if family:
            out.setdefault(canonical_family(family), "the rows' candidate family")
        elif name and (fam := family_of_name(name)):
            out.setdefault(fam, f"the candidate's name {name!r}")
    return out
