"""Writing one unit (a scenario, or a contrast pair): the :class:`Writer` and the stages
(situations, camera, speech, a contrast pair's follow-up) with every code rule on every attempt.
The one-shot examples and specs are :mod:`.examples`, the model checks :mod:`.model_checks`,
assembly and the bank-level :func:`~.bank.resolve` :mod:`.bank`."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from gen.contextbench.rules import (
    VOCABULARY,
    Problem,
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
    shift_announced,
    speech_properties,
    text_problem,
)
from gen.engine.runner import RunContext
from gen.errors import LLMOutputError
from gen.generators.scenarios.examples import (
    EXAMPLES,
    echo_problems,
    example_for,
    example_prompt,
    referent_names,
    situation_echo,
    situations_of,
    spec,
)
from gen.generators.scenarios.model_checks import identification, semantic_leak
from gen.generators.scenarios.skeleton import Skeleton
from gen.llm.attempts import AttemptFailure, retry
from gen.schemas.scenarios import (
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
    ShiftAbstainSituationsDraft,
    SituationsDraft,
    SpeechDraft,
)
from gen.text.gates import Gates

if TYPE_CHECKING:
    from gen.generators.scenarios import ScenariosConfig

# --------------------------------------------------------------------------- traces and stages


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
        return {
            k: {"first": v[0], "final": v[-1], "evaluations": len(v)}
            for k, v in sorted(self.evals.items())
        }


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
    failure: AttemptFailure | None = None

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
        return self.ctx.prompts.render(
            f"scenarios/{stage}.jinja", example=example_prompt(stage, ex), s=s
        )

    def attempts(
        self,
        u: Unit,
        stage: str,
        messages: list[dict[str, str]],
        schema: type[BaseModel],
        max_tokens: int,
        check: Callable[[dict[str, Any]], tuple[list[str], list[Problem]]],
        model_check: Callable[[dict[str, Any], int], list[Problem]] | None,
        budget: int,
        tidy: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Up to ``budget`` generations of one stage: each is corrected by ``tidy`` where code
        can, then checked by every code rule of the stage (all recorded), then by its model
        check; the first that passes is the stage's output. Raises :class:`AttemptFailure` with
        the last attempt's first broken rule. Attempts are numbered per unit and stage across
        calls (a stage regenerated by resolve() goes on with fresh seeds)."""

        def call(_: int) -> tuple[int, BaseModel]:
            a = u.trace.next_attempt(stage)
            try:
                return a, self.ctx.stage_llm(stage).structured(  # stages.<stage>.llm
                    messages, schema, seed=self.ctx.seed(u.index, stage, a), max_tokens=max_tokens
                )
            except LLMOutputError:
                u.trace.llm_errors[stage] += 1
                raise

        def checked(answer: tuple[int, BaseModel]) -> dict[str, Any]:
            a, draft = answer
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
            raise AttemptFailure(
                stage,
                problems[0][0],
                "; ".join(d for _, d in problems[:4]),
                draft.model_dump_json(),
                counts=[f"{stage}.{rule}" for rule in dict.fromkeys(r for r, _ in problems)],
            )

        return retry(call, checked, budget=budget, stage=stage, count=self.ctx.count)


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
    candidates = {key(c) for c in sit.get("candidates", [])} & {
        key(x) for x in gold["prior_answers"]
    }
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


def check_camera(
    sk: Skeleton, sit: dict[str, Any], cam: dict[str, Any], avoid: frozenset[str] = frozenset()
) -> tuple[list[str], list[Problem]]:
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
    if "turn_2_image_b" in images and key(images["turn_2_image_b"] or "") == key(
        images["turn_2_image"] or ""
    ):
        problems.append(("duplicate_turn_2", "turn_2_image_b is the same text as turn_2_image"))
    for f, t in turn2.items():
        if (t or "").strip().lower() in avoid:
            problems.append(
                ("duplicate_turn_2", f"{f} is identical to another scenario's turn_2_image")
            )
    evaluated = [
        *HYGIENE,
        "object_name_in_camera",
        "camera_functional_label",
        "camera_evaluates_technique",
        "camera_refers_to_turn_1",
        "no_visible_shift",
    ]
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
    both = sk.subset == "contrast" or sk.change_type not in (
        "absent_referent",
        "cross_session_reference",
    )
    return intended, wrong if both else []


def check_speech(
    sk: Skeleton,
    sit: dict[str, Any],
    sp: dict[str, Any],
    avoid: frozenset[str] = frozenset(),
    stage: str = "speech",
    other_turn_2: str | None = None,
) -> tuple[list[str], list[Problem]]:
    """Stage 3's rules (and 3b's for a contrast member B: no turn 1 of its own)."""
    gold = situations_of(sk, sit)["gold"]
    fields = [
        f
        for f in (
            "turn_1_user",
            "turn_2_user",
            "turn_3_repair_prompt",
            "turn_3_repair_prompt_deictic",
        )
        if f in sp
    ]
    texts: dict[str, str | None] = {f: sp[f] for f in fields}
    problems = _hygiene(texts) + echo_problems("speech", texts)
    spoken: dict[str, str | None] = {
        f: sp[f] for f in ("turn_1_user", "turn_2_user", "turn_3_repair_prompt_deictic") if f in sp
    }
    problems += gold_in_speech(spoken, [*gold["current_answers"], *gold["prior_answers"]])
    problems += object_names_in_speech(spoken, referent_names(sit))
    problems += speech_properties(spoken)
    evaluated = [
        *HYGIENE,
        "gold_in_speech",
        "object_name_in_speech",
        "speech_describes_properties",
        "shift_announced",
        "speech_not_deictic",
    ]
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


# --------------------------------------------------------------------------- the stages of one unit


def situations_schema(sk: Skeleton) -> type[BaseModel]:
    """The situations a scenario needs, by its target and whether its shift type has a
    pre-conversation frame (cross-session) or loses its referent (absent)."""
    cross = sk.change_type == "cross_session_reference"
    if sk.target_context == "clarify":
        return CrossClarifySituationsDraft if cross else ClarifySituationsDraft
    if sk.target_context == "abstain":
        return (
            CrossAbstainSituationsDraft
            if cross
            else AbstainSituationsDraft
            if sk.change_type == "absent_referent"
            else ShiftAbstainSituationsDraft
        )
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

    u.sit = w.attempts(
        u,
        "situations",
        w.render("situations", ex, spec(sk)),
        schema,
        w.cfg.situations_tokens,
        lambda d: check_situations(sk, d),
        None,
        w.cfg.attempts,
        tidy,
    )


def stage_camera(
    w: Writer, u: Unit, avoid: frozenset[str] = frozenset(), budget: int | None = None
) -> None:
    sk, sit = u.lead, u.sit or {}
    messages = w.render("camera", example_for(sk), spec(sk, sit))
    u.camera = w.attempts(
        u,
        "camera",
        messages,
        camera_schema(sk),
        w.cfg.camera_tokens,
        lambda d: check_camera(sk, sit, d, avoid),
        lambda d, a: identification(w, u, d, a),
        budget or w.cfg.attempts,
    )


def stage_speech(
    w: Writer, u: Unit, avoid: frozenset[str] = frozenset(), budget: int | None = None
) -> None:
    sk, sit = u.lead, u.sit or {}
    messages = w.render("speech", example_for(sk), spec(sk, sit))
    u.speech = w.attempts(
        u,
        "speech",
        messages,
        speech_schema(sk),
        w.cfg.speech_tokens,
        lambda d: check_speech(sk, sit, d, avoid),
        lambda d, a: semantic_leak(w, u, sk, d["turn_1_user"], d["turn_2_user"], "speech", a),
        budget or w.cfg.attempts,
    )


def stage_follow_up(
    w: Writer, u: Unit, avoid: frozenset[str] = frozenset(), budget: int | None = None
) -> None:
    """Contrast member B: its own turn 2 (targeting prior) after the pair's shared turn 1."""
    a_sk, b_sk = u.members
    sit, speech = u.sit or {}, u.speech or {}
    messages = w.render(
        "follow_up", example_for(b_sk), spec(b_sk, sit, turn_1_user=speech["turn_1_user"])
    )
    u.follow = w.attempts(
        u,
        "follow_up",
        messages,
        FollowUpDraft,
        w.cfg.speech_tokens,
        lambda d: check_speech(b_sk, sit, d, avoid, "follow_up", speech.get("turn_2_user")),
        lambda d, a: semantic_leak(
            w, u, b_sk, speech["turn_1_user"], d["turn_2_user"], "follow_up", a
        ),
        budget or w.cfg.attempts,
    )


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
    except AttemptFailure as e:
        u.failure = e
    return u


def _catch(fn: Callable[[], None]) -> AttemptFailure | None:
    try:
        fn()
    except AttemptFailure as e:
        return e
    return None
