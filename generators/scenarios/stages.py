"""Writing one unit (a scenario, or a contrast pair) and resolving it against the bank: the
one-shot examples and the specs the prompts read, the :class:`Writer` and the stages (situations,
camera, speech, a contrast pair's follow-up) with every code rule on every attempt, the model
checks (identification, semantic leak), assembly into the released layout, and :func:`resolve`
(the bank-level rules, in index order)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from gen.contextbench.rules import (
    VOCABULARY,
    Problem,
    bank_problems,
    camera_evaluates,
    camera_functional,
    camera_refers_back,
    category_problems,
    gold_in_speech,
    key,
    not_deictic,
    object_names_in_camera,
    object_names_in_speech,
    repair_names,
    rule_problems,
    shift_announced,
    shingles,
    signature,
    speech_properties,
    text_problem,
    word_match,
)
from gen.errors import LLMOutputError
from gen.gates import Gates
from gen.generators.scenarios.skeleton import Skeleton, complexity_of
from gen.paths import PROMPTS
from gen.runner import RunContext
from gen.schemas import Reject
from gen.schemas.scenarios import (
    GOLD_FIELDS,
    RECORD_FIELDS,
    AbstainSituationsDraft,
    CameraDraft,
    ClarifySituationsDraft,
    ContrastCameraDraft,
    CrossAbstainSituationsDraft,
    CrossClarifySituationsDraft,
    CrossSessionCameraDraft,
    CrossSessionSituationsDraft,
    DeicticSpeechDraft,
    FollowUpDraft,
    IdentifyDraft,
    ScenarioChecks,
    ScenarioRecord,
    ShiftAbstainSituationsDraft,
    SituationsDraft,
    SpeechDraft,
)

if TYPE_CHECKING:
    from gen.generators.scenarios import ScenariosConfig

EXAMPLES = "scenarios/examples.json"

# --------------------------------------------------------------------------- one-shot examples and specs


@lru_cache(maxsize=4)
def _examples(path: str) -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(Path(path).read_text(encoding="utf-8"))["examples"])


def examples() -> tuple[dict[str, Any], ...]:
    """The project's worked scenarios (``prompts/scenarios/examples.json``)."""
    return _examples(str(PROMPTS / EXAMPLES))


def example_for(sk: Skeleton) -> dict[str, Any]:
    """The one-shot example a scenario's prompts show: the contrast pair for a pair, the
    clarify / abstain example for those targets, else the example of its shift type."""
    exs = examples()
    if sk.pair_id is not None:
        return next(e for e in exs if e.get("subset") == "contrast")
    if sk.target_context in ("clarify", "abstain"):
        return next(e for e in exs if e["target_context"] == sk.target_context)
    return next(e for e in exs if e["change_type"] == sk.change_type and not e.get("subset")
                and e["target_context"] in ("current", "prior"))


def example_skeleton(ex: dict[str, Any]) -> Skeleton:
    subset = ex.get("subset", "bank")
    return Skeleton("sc-00" if subset == "bank" else "adv-00", subset, "pair-00" if subset == "contrast" else None,
                    ex["change_type"], ex["target_context"], ex["activity_domain"],
                    complexity_of(ex["change_type"], ex["target_context"], "easy", subset), "easy",
                    ex["time_gap_bucket"])


def situations_of(sk: Skeleton, sit: dict[str, Any]) -> dict[str, Any]:
    """Gold lists and their categories from a situations draft (code decides which list is which)."""
    def items(x: dict[str, Any]) -> list[str]:
        return list(dict.fromkeys(t.strip() for t in [x["name"], *x["technique"], *x["state"]] if t.strip()))

    def cats(x: dict[str, Any]) -> dict[str, Any]:
        return {"name": x["name"].strip(), "technique": [t.strip() for t in x["technique"]],
                "state": [t.strip() for t in x["state"]]}

    gold: dict[str, list[str]] = {k: [] for k in GOLD_FIELDS}
    categories: dict[str, dict[str, Any]] = {}
    gold["prior_answers"] = items(sit["earlier"])
    categories["prior_answers"] = cats(sit["earlier"])
    if "now" in sit:
        gold["current_answers"] = items(sit["now"])
        categories["current_answers"] = cats(sit["now"])
    if "clarify_indicators" in sit:
        gold["clarify_indicators"] = list(dict.fromkeys(t.strip() for t in sit["clarify_indicators"] if t.strip()))
    if "abstain_indicators" in sit:
        gold["abstain_indicators"] = list(dict.fromkeys(t.strip() for t in sit["abstain_indicators"] if t.strip()))
    return {"gold": gold, "categories": categories}


def referent_names(sit: dict[str, Any]) -> list[str]:
    """The scenario's own object names (never in a camera text)."""
    return [n for n in [sit["earlier"]["name"], sit.get("now", {}).get("name"), *sit.get("candidates", [])] if n]


def spec(sk: Skeleton, sit: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """What the request macros read about a scenario (``prompts/scenarios/_requests.jinja``)."""
    s: dict[str, Any] = {
        "change_type": sk.change_type, "target_context": sk.target_context,
        "activity_domain": sk.activity_domain, "time_gap_bucket": sk.time_gap_bucket,
        "cross": sk.change_type == "cross_session_reference", "clarify": sk.target_context == "clarify",
        "abstain": sk.target_context == "abstain", "absent": sk.change_type == "absent_referent",
        "contrast": sk.subset == "contrast", "pair": sk.pair_id is not None, "distractor": sk.distractor,
        "in_hand": sk.change_type == "object_in_hand", "deictic": sk.deictic,
        "name_both": sk.subset == "contrast" or sk.change_type not in ("absent_referent", "cross_session_reference"),
    }
    if sit is not None:
        gold = situations_of(sk, sit)["gold"]
        s.update(sit=sit, names=referent_names(sit),
                 forbidden=[*gold["current_answers"], *gold["prior_answers"]])
    s.update(extra)
    return s


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def example_prompt(stage: str, ex: dict[str, Any]) -> dict[str, Any]:
    """A stage's one-shot: the example's own spec and its JSON answer."""
    sk = example_skeleton(ex)
    sit = ex["situations"]
    if stage == "situations":
        return {"s": spec(sk), "answer": dumps(sit)}
    if stage == "camera":
        return {"s": spec(sk, sit), "answer": dumps(ex["camera"])}
    if stage == "speech":
        return {"s": spec(sk, sit), "answer": dumps(ex["speech"])}
    return {"s": spec(sk, sit, turn_1_user=ex["speech"]["turn_1_user"]), "answer": dumps(ex["follow_up"])}


@lru_cache(maxsize=1)
def example_shingles() -> dict[str, frozenset[tuple[str, ...]]]:
    """8-word runs of every example text, per stage (echo check)."""
    out: dict[str, set[tuple[str, ...]]] = {"camera": set(), "speech": set()}
    for ex in examples():
        for t in ex["camera"].values():
            out["camera"] |= shingles(t)
        for part in ("speech", "follow_up"):
            for t in ex.get(part, {}).values():
                out["speech"] |= shingles(t)
    return {k: frozenset(v) for k, v in out.items()}


def echo_problems(stage: str, texts: dict[str, str | None]) -> list[Problem]:
    pool = example_shingles()["camera" if stage == "camera" else "speech"]
    out = []
    for f, t in texts.items():
        if not t:
            continue
        if shingles(t) & pool or any(key(t) == key(x) for ex in examples() for part in ("camera", "speech", "follow_up")
                                     for x in ex.get(part, {}).values()):
            out.append(("example_echo", f"{f} copies the one-shot example: {t[:60]!r}"))
    return out


def situation_echo(sit: dict[str, Any]) -> list[Problem]:
    """A situation copied whole (name and every phrase) from an example."""
    known = set()
    for ex in examples():
        for role in ("earlier", "now"):
            x = ex["situations"].get(role)
            if x:
                known.add((key(x["name"]), tuple(sorted(key(t) for t in x["technique"] + x["state"]))))
    out = []
    for role in ("earlier", "now"):
        x = sit.get(role)
        if x and (key(x["name"]), tuple(sorted(key(t) for t in x["technique"] + x["state"]))) in known:
            out.append(("example_echo", f"{role} situation {x['name']!r} is the example's"))
    return out


# --------------------------------------------------------------------------- traces and stages


class StageFailure(Exception):
    """A stage gave nothing usable after its attempts; carries the reject fields."""

    def __init__(self, stage: str, reason: str, detail: str, raw: str | None = None):
        super().__init__(f"{stage}: {reason}: {detail}")
        self.stage, self.reason, self.detail, self.raw = stage, reason, detail, raw


@dataclass
class Trace:
    """Per unit: every rule's results in evaluation order, and generations per stage."""

    evals: dict[str, list[bool]] = field(default_factory=dict)
    attempts: Counter[str] = field(default_factory=Counter)
    llm_errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, stage: str, evaluated: Sequence[str], problems: Sequence[Problem]) -> None:
        failed = {r for r, _ in problems}
        with self.lock:
            for rule in dict.fromkeys(evaluated):
                self.evals.setdefault(f"{stage}.{rule}", []).append(rule not in failed)

    def next_attempt(self, stage: str) -> int:
        with self.lock:
            a = self.attempts[stage]
            self.attempts[stage] += 1
            return a

    def summary(self) -> dict[str, dict[str, Any]]:
        return {k: {"first": v[0], "final": v[-1], "evaluations": len(v)} for k, v in sorted(self.evals.items())}


@dataclass
class Unit:
    """One unit's state through the stages (a scenario, or a contrast pair)."""

    index: int
    members: list[Skeleton]
    trace: Trace = field(default_factory=Trace)
    sit: dict[str, Any] | None = None
    camera: dict[str, Any] | None = None
    speech: dict[str, Any] | None = None
    follow: dict[str, Any] | None = None
    identification: list[dict[str, Any]] = field(default_factory=list)
    leak: list[dict[str, Any]] = field(default_factory=list)
    failure: StageFailure | None = None

    @property
    def lead(self) -> Skeleton:
        return self.members[0]


class Writer:
    """What the stages share for one run: the context, config, the check panel and the counters."""

    def __init__(self, ctx: RunContext, cfg: ScenariosConfig):
        self.ctx, self.cfg = ctx, cfg
        self._panel: list[tuple[str, Any]] | None = None
        self._lock = threading.Lock()
        self.embed_lock = threading.Lock()
        ctx.prompts.hash(VOCABULARY)
        ctx.prompts.hash(EXAMPLES)

    @property
    def panel(self) -> list[tuple[str, Any]]:
        """The model-check models with their labels (loaded on first use)."""
        with self._lock:
            if self._panel is None:
                from gen.llm.labels import model_label, unique_labels

                configs = self.cfg.models or [self.cfg.llm]
                labels = self.cfg.labels or unique_labels([model_label(c) for c in configs])
                self._panel = list(zip(labels, [self.ctx.llm_for(c) for c in configs], strict=True))
            return self._panel

    @property
    def labels(self) -> list[str]:
        """The model-check models' labels, when they were loaded."""
        return [label for label, _ in self._panel] if self._panel is not None else []

    def render(self, stage: str, ex: dict[str, Any], s: dict[str, Any]) -> list[dict[str, str]]:
        return self.ctx.prompts.render(f"scenarios/{stage}.jinja", example=example_prompt(stage, ex), s=s)

    def attempts(self, u: Unit, stage: str, messages: list[dict[str, str]], schema: type[BaseModel],
                 max_tokens: int, check: Callable[[dict[str, Any]], tuple[list[str], list[Problem]]],
                 model_check: Callable[[dict[str, Any], int], list[Problem]] | None, budget: int,
                 tidy: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> dict[str, Any]:
        """Up to ``budget`` generations of one stage: each is corrected by ``tidy`` where code
        can, then checked by every code rule of the stage (all recorded), then by its model
        check; the first that passes is the stage's output. Raises :class:`StageFailure` with
        the last attempt's first broken rule."""
        last = StageFailure(stage, "no_attempt", "no attempt left")
        for _ in range(budget):
            a = u.trace.next_attempt(stage)
            try:
                draft = self.ctx.llm.structured(messages, schema, seed=self.ctx.seed(u.index, stage, a),
                                                max_tokens=max_tokens)
            except LLMOutputError as e:
                self.ctx.count(f"{stage}.llm_{e.reason}")
                u.trace.llm_errors[stage] += 1
                last = StageFailure(stage, e.reason, e.detail, e.raw)
                continue
            value = draft.model_dump()
            if tidy is not None:
                value = tidy(value)
            evaluated, problems = check(value)
            u.trace.record(stage, evaluated, problems)
            if not problems and model_check is not None and self.cfg.model_checks != "off":
                problems = model_check(value, a)
                if self.cfg.model_checks == "record":
                    problems = []
            if not problems:
                return value
            for rule in dict.fromkeys(r for r, _ in problems):
                self.ctx.count(f"{stage}.{rule}")
            last = StageFailure(stage, problems[0][0], "; ".join(d for _, d in problems[:4]), draft.model_dump_json())
        raise last


def _hygiene(texts: dict[str, str | None]) -> list[Problem]:
    """Each model-written text through the shared text gates first (a referent's name as a name,
    every other text as prose; the reason is the gate's name), then the benchmark's own
    ``empty_text`` / ``repetitive_text``."""
    gates = Gates()
    out: list[Problem] = []
    for f, t in texts.items():
        if t is None:
            continue
        failure = gates.check(t, "name" if f.endswith(".name") else "prose")
        if failure is not None:
            out.append(("text_gates", f"{failure.gate}: {f}: {t[:60]!r} ({failure.detail})"))
        elif why := text_problem(t):
            out.append((why, f"{f}: {t[:60]!r}"))
    return out


HYGIENE = ("text_gates", "empty_text", "repetitive_text", "example_echo")
"""The text rules every stage evaluates: the shared gates (the detail names the gate), then the
benchmark's own."""


def tidy_situations(sit: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Drop gold phrases that cannot tell the two referents apart: a phrase in both situations'
    lists, a phrase equal to a referent's name (its own, the other's, a clarify candidate), and
    a repeat within one situation. Returns the corrected draft and how many were dropped; the
    rules then run on what is left (a list that loses a category fails three_categories)."""
    out = json.loads(json.dumps(sit))
    roles = [r for r in ("earlier", "now") if r in out]
    names = {key(out[r]["name"]) for r in roles} | {key(c) for c in out.get("candidates", [])}

    def phrases(r: str) -> set[str]:
        return {key(x) for x in out[r]["technique"] + out[r]["state"]}

    shared = phrases("earlier") & phrases("now") if len(roles) == 2 else set()
    dropped = 0
    for r in roles:
        seen: set[str] = set()
        for cat in ("technique", "state"):
            kept = []
            for x in out[r][cat]:
                k = key(x)
                if k in shared or k in names or k in seen:
                    dropped += 1
                    continue
                seen.add(k)
                kept.append(x)
            out[r][cat] = kept
    return out, dropped


def check_situations(sk: Skeleton, sit: dict[str, Any]) -> tuple[list[str], list[Problem]]:
    """Stage 1's rules on a situations draft."""
    texts: dict[str, str | None] = {}
    for role in ("earlier", "now"):
        x = sit.get(role)
        if x:
            texts[f"{role}.name"] = x["name"]
            texts.update({f"{role}.technique[{i}]": t for i, t in enumerate(x["technique"])})
            texts.update({f"{role}.state[{i}]": t for i, t in enumerate(x["state"])})
    for k in ("meanwhile", "hidden_detail"):
        if k in sit:
            texts[k] = sit[k]
    for k in ("candidates", "clarify_indicators", "abstain_indicators"):
        texts.update({f"{k}[{i}]": t for i, t in enumerate(sit.get(k) or [])})
    problems = _hygiene(texts) + situation_echo(sit)
    made = situations_of(sk, sit)
    problems += category_problems(made["categories"])
    gold = made["gold"]
    shared = {key(x) for x in gold["current_answers"]} & {key(x) for x in gold["prior_answers"]}
    candidates = {key(c) for c in sit.get("candidates", [])} & {key(x) for x in gold["prior_answers"]}
    if shared or candidates:
        problems.append(("gold_lists_overlap", f"in both lists: {sorted(shared | candidates)[:3]}"))
    evaluated = [*HYGIENE, "three_categories", "gold_lists_overlap"]
    if sk.target_context in ("clarify", "abstain"):
        evaluated.append("indicators_missing")
        lst = f"{sk.target_context}_indicators"
        if len({key(x) for x in gold[lst]}) < 3:
            problems.append(("indicators_missing", f"fewer than 3 distinct {lst}"))
    return evaluated, problems


def camera_fields(sk: Skeleton) -> tuple[str, ...]:
    if sk.pair_id is not None:
        return ("turn_1_image", "turn_2_image", "turn_2_image_b")
    if sk.change_type == "cross_session_reference":
        return ("context_image", "turn_1_image", "turn_2_image")
    return ("turn_1_image", "turn_2_image")


def camera_schema(sk: Skeleton) -> type[BaseModel]:
    if sk.pair_id is not None:
        return ContrastCameraDraft
    return CrossSessionCameraDraft if sk.change_type == "cross_session_reference" else CameraDraft


def check_camera(sk: Skeleton, sit: dict[str, Any], cam: dict[str, Any],
                 avoid: frozenset[str] = frozenset()) -> tuple[list[str], list[Problem]]:
    """Stage 2's rules on camera descriptions; ``avoid``: turn-2 images already in the bank."""
    images = {f: cam.get(f) for f in camera_fields(sk)}
    turn2 = {f: t for f, t in images.items() if f.startswith("turn_2")}
    problems = _hygiene(images) + echo_problems("camera", images)
    problems += object_names_in_camera(images, referent_names(sit))
    problems += camera_functional(images)
    problems += camera_evaluates(images)
    problems += camera_refers_back(turn2)
    for f, t in turn2.items():
        if key(t or "") == key(images["turn_1_image"] or ""):
            problems.append(("no_visible_shift", f"{f} is the same text as turn_1_image"))
    if "turn_2_image_b" in images and key(images["turn_2_image_b"] or "") == key(images["turn_2_image"] or ""):
        problems.append(("duplicate_turn_2", "turn_2_image_b is the same text as turn_2_image"))
    for f, t in turn2.items():
        if (t or "").strip().lower() in avoid:
            problems.append(("duplicate_turn_2", f"{f} is identical to another scenario's turn_2_image"))
    evaluated = [*HYGIENE, "object_name_in_camera", "camera_functional_label", "camera_evaluates_technique",
                 "camera_refers_to_turn_1", "no_visible_shift"]
    if avoid or "turn_2_image_b" in images:  # within the pair now; against the bank in resolve()
        evaluated.append("duplicate_turn_2")
    return evaluated, problems


def speech_schema(sk: Skeleton) -> type[BaseModel]:
    return DeicticSpeechDraft if sk.deictic else SpeechDraft


def repair_targets(sk: Skeleton, sit: dict[str, Any]) -> tuple[list[str], list[str]] | None:
    """Names the named repair must hold (intended, wrong), or None where the rule does not apply."""
    if sk.target_context not in ("current", "prior"):
        return None
    earlier, now = [sit["earlier"]["name"]], [sit["now"]["name"]]
    intended, wrong = (now, earlier) if sk.target_context == "current" else (earlier, now)
    both = sk.subset == "contrast" or sk.change_type not in ("absent_referent", "cross_session_reference")
    return intended, wrong if both else []


def check_speech(sk: Skeleton, sit: dict[str, Any], sp: dict[str, Any], avoid: frozenset[str] = frozenset(),
                 stage: str = "speech", other_turn_2: str | None = None) -> tuple[list[str], list[Problem]]:
    """Stage 3's rules (and 3b's for a contrast member B: no turn 1 of its own)."""
    gold = situations_of(sk, sit)["gold"]
    fields = [f for f in ("turn_1_user", "turn_2_user", "turn_3_repair_prompt", "turn_3_repair_prompt_deictic") if f in sp]
    texts: dict[str, str | None] = {f: sp[f] for f in fields}
    problems = _hygiene(texts) + echo_problems("speech", texts)
    spoken: dict[str, str | None] = {f: sp[f] for f in ("turn_1_user", "turn_2_user", "turn_3_repair_prompt_deictic")
                                     if f in sp}
    problems += gold_in_speech(spoken, [*gold["current_answers"], *gold["prior_answers"]])
    problems += object_names_in_speech(spoken, referent_names(sit))
    problems += speech_properties(spoken)
    evaluated = [*HYGIENE, "gold_in_speech", "object_name_in_speech", "speech_describes_properties",
                 "shift_announced", "speech_not_deictic"]
    problems += shift_announced(sp.get("turn_2_user"))
    problems += not_deictic({f: sp[f] for f in ("turn_1_user", "turn_2_user") if f in sp})
    names = repair_targets(sk, sit)
    if names is not None:
        evaluated.append("repair_not_named")
        problems += repair_names(sp.get("turn_3_repair_prompt"), *names)
    t2 = (sp.get("turn_2_user") or "").strip().lower()
    if avoid or other_turn_2 is not None:  # within the pair now; against the bank in resolve()
        evaluated.append("duplicate_turn_2")
    if t2 in avoid:
        problems.append(("duplicate_turn_2", "turn_2_user is identical to another scenario's"))
    if other_turn_2 is not None and t2 == other_turn_2.strip().lower():
        problems.append(("duplicate_turn_2", "turn_2_user is the same as the pair's other member"))
    return evaluated, problems


# --------------------------------------------------------------------------- model checks


def identify_frames(sk: Skeleton, sit: dict[str, Any]) -> list[tuple[str, str]]:
    """(camera field, gold name) the identification check applies to: every frame that shows a
    named referent. Not: a clarify turn 2 (hidden on purpose), a turn 2 without a referent of its
    own (an absent referent's abstain scenario: the place without it)."""
    frames = []
    if sk.change_type == "cross_session_reference":
        frames += [("context_image", sit["earlier"]["name"]), ("turn_1_image", sit["meanwhile"])]
    else:
        frames.append(("turn_1_image", sit["earlier"]["name"]))
    if sk.target_context != "clarify" and "now" in sit:
        frames.append(("turn_2_image", sit["now"]["name"]))
        if sk.pair_id is not None:
            frames.append(("turn_2_image_b", sit["now"]["name"]))
    return frames


def identification(w: Writer, u: Unit, cam: dict[str, Any], attempt: int) -> list[Problem]:
    """Each model names the thing from each camera text alone; a frame passes when
    ``identify_quorum`` of the models answer within ``identify_min_cosine`` of the gold name.
    Every answer is recorded on the unit."""
    cfg, ctx = w.cfg, w.ctx
    ex = examples()[0]
    shown = {"description": ex["camera"]["turn_2_image"], "answer": dumps({"name": ex["situations"]["now"]["name"]})}
    jobs = [(f, gold, label, llm) for f, gold in identify_frames(u.lead, u.sit or {}) for label, llm in w.panel]

    def ask(job: tuple[str, str, str, Any]) -> str | None:
        f, _, label, llm = job
        messages = ctx.prompts.render("scenarios/identify.jinja", example=shown, description=cam[f])
        try:
            return llm.structured(messages, IdentifyDraft, seed=ctx.seed(u.index, "identify", f, label, attempt),
                                  max_tokens=48).name
        except LLMOutputError as e:
            ctx.count(f"identify.llm_{e.reason}")
            return None

    answers = ctx.map(ask, jobs)
    texts = [t for (_, gold, _, _), a in zip(jobs, answers, strict=True) for t in (a or "", gold)]
    with w.embed_lock:
        vecs = ctx.embedder.encode(texts) if texts else None
    rows: list[dict[str, Any]] = []
    by_frame: dict[str, list[bool]] = {}
    for j, ((f, gold, label, _), a) in enumerate(zip(jobs, answers, strict=True)):
        cos = float(vecs[2 * j] @ vecs[2 * j + 1]) if a and vecs is not None else None
        ok = cos is not None and cos >= cfg.identify_min_cosine
        rows.append({"field": f, "gold": gold, "model": label, "answer": a, "cosine": None if cos is None else round(cos, 4),
                     "pass": ok, "attempt": attempt})
        by_frame.setdefault(f, []).append(ok)
    u.identification += rows
    failed = [f for f, oks in by_frame.items() if not (any(oks) if cfg.identify_quorum == "any" else all(oks))]
    problems = [("not_identifiable", f"{f}: " + "; ".join(f"{r['model']} said {r['answer']!r} (cosine {r['cosine']})"
                                                          for r in rows if r["field"] == f and r["attempt"] == attempt))
                for f in failed]
    u.trace.record("camera", ["not_identifiable"], problems)
    return problems


def gold_list_of(target: str) -> str:
    return {"current": "current_answers", "prior": "prior_answers", "clarify": "clarify_indicators",
            "abstain": "abstain_indicators"}[target]


def semantic_leak(w: Writer, u: Unit, member: Skeleton, turn_1_user: str, turn_2_user: str, stage: str,
                  attempt: int) -> list[Problem]:
    """MMStar-style: the candidate's conversation without its camera blocks, to each model
    (greedy); a turn-2 reply that hits the target's gold list (word boundary) leaks."""
    cfg, ctx = w.cfg, w.ctx
    if member.target_context not in cfg.leak_targets:
        return []
    tokens = situations_of(member, u.sit or {})["gold"][gold_list_of(member.target_context)]

    def ask(job: tuple[str, Any]) -> dict[str, Any]:
        label, llm = job
        row: dict[str, Any] = {"member": member.scenario_id, "model": label, "attempt": attempt}
        try:
            first = ctx.prompts.render("scenarios/leak.jinja", turns=[{"user": turn_1_user, "assistant": None}])
            reply_1 = llm.complete(first, seed=ctx.seed(u.index, stage, "leak", label, attempt, 1),
                                   max_tokens=cfg.leak_tokens, temperature=0.0)
            second = ctx.prompts.render("scenarios/leak.jinja", turns=[{"user": turn_1_user, "assistant": reply_1},
                                                                       {"user": turn_2_user, "assistant": None}])
            reply_2 = llm.complete(second, seed=ctx.seed(u.index, stage, "leak", label, attempt, 2),
                                   max_tokens=cfg.leak_tokens, temperature=0.0)
        except LLMOutputError as e:
            ctx.count(f"leak.llm_{e.reason}")
            return {**row, "error": e.detail, "hits": [], "leak": False}
        hits = [t for t in tokens if t.strip() and word_match(t, reply_2)]
        return {**row, "reply_1": reply_1, "reply_2": reply_2, "hits": hits, "leak": bool(hits)}

    rows = ctx.map(ask, w.panel)
    u.leak += rows
    problems = [("semantic_leak", f"{r['model']} answered without the camera and hit {r['hits'][:3]}")
                for r in rows if r["leak"]]
    u.trace.record(stage, ["semantic_leak"], problems)
    return problems


# --------------------------------------------------------------------------- the stages of one unit


def situations_schema(sk: Skeleton) -> type[BaseModel]:
    """The situations a scenario needs, by its target and whether its shift type has a
    pre-conversation frame (cross-session) or loses its referent (absent)."""
    cross = sk.change_type == "cross_session_reference"
    if sk.target_context == "clarify":
        return CrossClarifySituationsDraft if cross else ClarifySituationsDraft
    if sk.target_context == "abstain":
        return (CrossAbstainSituationsDraft if cross else AbstainSituationsDraft
                if sk.change_type == "absent_referent" else ShiftAbstainSituationsDraft)
    return CrossSessionSituationsDraft if cross else SituationsDraft


def stage_situations(w: Writer, u: Unit) -> None:
    sk = u.lead
    ex = example_for(sk)
    schema = situations_schema(sk)
    def tidy(d: dict[str, Any]) -> dict[str, Any]:
        out, dropped = tidy_situations(d)
        if dropped:
            w.ctx.count("situations.phrases_dropped", dropped)
        return out

    u.sit = w.attempts(u, "situations", w.render("situations", ex, spec(sk)), schema, w.cfg.situations_tokens,
                       lambda d: check_situations(sk, d), None, w.cfg.stage_attempts, tidy)


def stage_camera(w: Writer, u: Unit, avoid: frozenset[str] = frozenset(), budget: int | None = None) -> None:
    sk, sit = u.lead, u.sit or {}
    messages = w.render("camera", example_for(sk), spec(sk, sit))
    u.camera = w.attempts(u, "camera", messages, camera_schema(sk), w.cfg.camera_tokens,
                          lambda d: check_camera(sk, sit, d, avoid),
                          lambda d, a: identification(w, u, d, a), budget or w.cfg.stage_attempts)


def stage_speech(w: Writer, u: Unit, avoid: frozenset[str] = frozenset(), budget: int | None = None) -> None:
    sk, sit = u.lead, u.sit or {}
    messages = w.render("speech", example_for(sk), spec(sk, sit))
    u.speech = w.attempts(u, "speech", messages, speech_schema(sk), w.cfg.speech_tokens,
                          lambda d: check_speech(sk, sit, d, avoid),
                          lambda d, a: semantic_leak(w, u, sk, d["turn_1_user"], d["turn_2_user"], "speech", a),
                          budget or w.cfg.stage_attempts)


def stage_follow_up(w: Writer, u: Unit, avoid: frozenset[str] = frozenset(), budget: int | None = None) -> None:
    """Contrast member B: its own turn 2 (targeting prior) after the pair's shared turn 1."""
    a_sk, b_sk = u.members
    sit, speech = u.sit or {}, u.speech or {}
    messages = w.render("follow_up", example_for(b_sk), spec(b_sk, sit, turn_1_user=speech["turn_1_user"]))
    u.follow = w.attempts(u, "follow_up", messages, FollowUpDraft, w.cfg.speech_tokens,
                          lambda d: check_speech(b_sk, sit, d, avoid, "follow_up", speech.get("turn_2_user")),
                          lambda d, a: semantic_leak(w, u, b_sk, speech["turn_1_user"], d["turn_2_user"], "follow_up", a),
                          budget or w.cfg.stage_attempts)


def draft_unit(w: Writer, index: int, members: list[Skeleton]) -> Unit:
    """Stages 1-3 of one unit, on their own (no bank state): camera and speech are independent
    given the situations and run concurrently where the backend allows."""
    u = Unit(index, members)
    try:
        stage_situations(w, u)

        def words() -> None:
            stage_speech(w, u)
            if len(members) == 2:
                stage_follow_up(w, u)

        failures = w.ctx.map(lambda f: _catch(f), [lambda: stage_camera(w, u), words])
        u.failure = next((f for f in failures if f is not None), None)
    except StageFailure as e:
        u.failure = e
    return u


def _catch(fn: Callable[[], None]) -> StageFailure | None:
    try:
        fn()
    except StageFailure as e:
        return e
    return None


# --------------------------------------------------------------------------- assembly


def assemble(u: Unit, sk: Skeleton) -> dict[str, Any]:
    """The record of one member, fields in the released order."""
    sit, cam = u.sit or {}, u.camera or {}
    member_b = len(u.members) == 2 and sk is u.members[1]
    speech = {**(u.speech or {}), **(u.follow or {})} if member_b else (u.speech or {})
    made = situations_of(sk, sit)
    gold = made["gold"]
    if sk.target_context == "clarify":
        more = f"hidden: {' / '.join(sit['candidates'])}"
    elif sk.target_context == "abstain":
        more = f"never shown: {sit['hidden_detail']}"
    elif sk.change_type == "cross_session_reference":
        more = f"turn 1: {sit['meanwhile']}; turn 2: {sit['now']['name']}"
    else:
        more = f"turn 2: {sit['now']['name']}"
    record = {
        "scenario_id": sk.scenario_id, "subset": sk.subset, "pair_id": sk.pair_id,
        "target_context": sk.target_context, "change_type": sk.change_type,
        "activity_domain": sk.activity_domain, "referent_complexity": sk.referent_complexity,
        "difficulty_tier": sk.difficulty_tier, "time_gap_bucket": sk.time_gap_bucket,
        "context_image": cam.get("context_image") if sk.change_type == "cross_session_reference" else None,
        "turn_1_image": cam["turn_1_image"],
        "turn_1_user": speech["turn_1_user"],
        "turn_2_image": cam["turn_2_image_b"] if member_b else cam["turn_2_image"],
        "turn_2_user": speech["turn_2_user"],
        "turn_3_repair_prompt": speech["turn_3_repair_prompt"],
        "turn_3_repair_prompt_deictic": speech.get("turn_3_repair_prompt_deictic") if sk.deictic else None,
        "notes": f"gen scenarios: {sk.change_type} in {sk.activity_domain}, target {sk.target_context}; "
                 f"{'context image' if sk.change_type == 'cross_session_reference' else 'turn 1'}: "
                 f"{sit['earlier']['name']}; {more}.",
        "gold": gold,
    }
    assert tuple(record) == RECORD_FIELDS
    return record


def categories_of(u: Unit, sk: Skeleton) -> dict[str, dict[str, Any]]:
    return situations_of(sk, u.sit or {})["categories"] if u.sit else {}


# --------------------------------------------------------------------------- the bank, in index order


@dataclass
class BankView:
    """The accepted scenarios so far (``existing=`` first): what the bank-level rules see."""

    rows: list[dict[str, Any]]

    def texts(self, f: str) -> frozenset[str]:
        return frozenset((r.get(f) or "").strip().lower() for r in self.rows if r.get(f))


@dataclass
class Outcome:
    unit: Unit
    items: list[ScenarioRecord | Reject]
    checks: list[ScenarioChecks]


def resolve(w: Writer, u: Unit, bank: BankView) -> Outcome:
    """Bank-level rules for one drafted unit against the scenarios accepted before it (a
    duplicate turn-2 text regenerates its stage with the bank known, up to ``stage_attempts``
    more), then the final check of every record (:func:`rule_problems`, :func:`bank_problems`):
    anything that breaks a rule is rejected, never written."""
    if u.failure is None:
        users, images = bank.texts("turn_2_user"), bank.texts("turn_2_image")

        def dup(stage: str, texts: list[str | None], seen: frozenset[str]) -> bool:
            hit = any((t or "").strip().lower() in seen for t in texts)
            u.trace.record(stage, ["duplicate_turn_2"],
                           [("duplicate_turn_2", "identical to an earlier scenario's")] if hit else [])
            return hit

        try:
            cam = u.camera or {}
            if dup("camera", [cam.get("turn_2_image"), cam.get("turn_2_image_b")], images):
                stage_camera(w, u, images)
            if dup("speech", [(u.speech or {}).get("turn_2_user")], users):
                stage_speech(w, u, users)
                if len(u.members) == 2:
                    stage_follow_up(w, u, users)
            elif len(u.members) == 2 and dup("follow_up", [(u.follow or {}).get("turn_2_user")], users):
                stage_follow_up(w, u, users)
        except StageFailure as e:
            u.failure = e
    records: list[dict[str, Any]] = []
    if u.failure is None:
        records = [assemble(u, sk) for sk in u.members]
        final: list[Problem] = []
        for rec, sk in zip(records, u.members, strict=True):
            final += rule_problems(rec, categories=categories_of(u, sk))
        rec_problems = [(r, d) for r, d in final if r in ("schema", "field_presence")]
        u.trace.record("record", ["schema", "field_presence"], rec_problems)
        trial = bank_problems([*bank.rows, *records], signature_limit=w.cfg.signature_limit)
        mine = {r["scenario_id"] for r in records}
        bank_level = [(rule, d) for sid, rule, d in trial if sid in mine or (rule == "signature_limit" and any(
            str(signature(r)) in d for r in records))]
        u.trace.record("record", ["duplicate_id", "signature_limit"],
                       [(r, d) for r, d in bank_level if r in ("duplicate_id", "signature_limit")])
        problems = final + bank_level
        if problems:
            rule, detail = problems[0]
            u.failure = StageFailure("record", rule, "; ".join(d for _, d in problems[:4]))
            w.ctx.count(f"record.{rule}")
    items: list[ScenarioRecord | Reject] = []
    checks = []
    f = u.failure
    for j, sk in enumerate(u.members):
        if f is None:
            items.append(ScenarioRecord.model_validate(records[j]))
        else:
            items.append(Reject(record_id=sk.scenario_id, index=u.index, stage=f.stage, reason=f.reason,
                                detail=f"{sk.scenario_id} ({sk.change_type}/{sk.target_context}): {f.detail}", raw=f.raw))
        checks.append(ScenarioChecks(
            scenario_id=sk.scenario_id, index=u.index, status="accepted" if f is None else "rejected",
            stage=None if f is None else f.stage, reason=None if f is None else f.reason, skeleton=sk.as_dict(),
            categories=categories_of(u, sk), rules=u.trace.summary(), attempts=dict(sorted(u.trace.attempts.items())),
            identification=u.identification, leak=[r for r in u.leak if r["member"] == sk.scenario_id]))
    if u.failure is None:
        bank.rows += records
    return Outcome(u, items, checks)
