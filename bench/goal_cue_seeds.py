"""Goal cue seeds against a blind model, per action type: how often the embedded model picks the
goal among its MCQ's options given the cue seed as the app's state, for the seeds as they were
(``tests/fixtures/digital/goal_cue_before.jinja``, on the apps that perform the goal) and as they
are, and given no state at all.

A cue item carries its seed's words (the cue prompts ask the LLM to write the item behind the
seed), so the seed, shown as ``Current state of the user's <app> app:``, stands for the key-only
state without the cost of generating bundles (``bench/goal_cues.py`` makes real ones). Per action
type ``--per-type`` goals are drawn (seeded) from the bank; each goal's similar- and dissimilar-band
MCQ (``distractors``, MiniLM) is scored by log-likelihood per character of its four answer lines
after prompts/evaluate/mcq.jinja (acc_norm). Also recorded: the share of the goal's action words
each seed holds.

Run from the repository root:  nice -n 10 python bench/goal_cue_seeds.py [--per-type 5] [--band
similar]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BEFORE = Path("tests/fixtures/digital/goal_cue_before.jinja")
BEFORE_APPS = {
    "communication": ["Messaging"],
    "translate": ["Messaging"],
    "temporal_attention": ["Calendar"],
    "find_directions": ["Maps", "Calendar"],
    "entertain": ["Music", "Videos"],
    "search": ["Search"],
    "store_memory": ["Notes"],
    "shop": ["Notes", "Search"],
    "guided_activity": ["Videos", "Search"],
    "control_environment": [],
}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--goals", default="examples/goals.jsonl")
    ap.add_argument("--per-type", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--band", default=None, help="score only this band's MCQ (default: both)")
    ap.add_argument("--out", default="bench/results/goal_cue_seeds.json")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import jinja2

    from gen.engine.runner import RunContext, run_config
    from gen.formats.goals import load_goals, verbalise
    from gen.formats.people import sample_related
    from gen.generators.digital import DigitalConfig
    from gen.generators.digital.goals import action_share, goal_cue
    from gen.generators.distractors import DistractorsConfig
    from gen.generators.personas import sample_facts
    from gen.schemas.digital import App
    from gen.schemas.personas import PersonaRecord
    from gen.templates import Prompts
    from gen.text.words import content_words

    t0 = time.time()
    load0 = os.getloadavg()
    prompts = Prompts()
    bank = load_goals(Path(args.goals))
    texts = [verbalise(r, prompts) for r in bank.rows]
    df = Counter(w for t in texts for w in set(content_words(t)))
    pool = [PersonaRecord(**f.model_dump(), bio="x") for f in sample_facts(args.seed, 8)]
    before_env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(BEFORE.parent)), undefined=jinja2.StrictUndefined
    )
    before = before_env.get_template(BEFORE.name)
    by: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(bank.rows):
        if r.goal is not None and r.goal.type != "control_environment":
            by[r.goal.type].append(i)
    rng = random.Random(args.seed)
    drawn = sorted(i for t in sorted(by) for i in rng.sample(by[t], min(args.per_type, len(by[t]))))

    tmp = Path(tempfile.mkdtemp(prefix="cue_seeds-"))
    dcfg = DistractorsConfig(
        input=str(Path(args.goals)), seed=args.seed, progress="off", wagibench=False
    )
    dctx = RunContext("distractors", dcfg, tmp / "mcqs")
    run_config("distractors", dcfg, tmp / "mcqs", ctx=dctx, quiet=True)
    mcqs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for x in (tmp / "mcqs" / "distractors.jsonl").read_text().splitlines():
        m = json.loads(x)
        mcqs[m["reference_id"]].append(m)
    llm = RunContext("digital", DigitalConfig(), tmp / "llm").llm
    letters = "ABCD"
    ctx: Any = SimpleNamespace(prompts=prompts)

    def picks(context: str, m: dict[str, Any]) -> bool:
        opts = [(letters[k], o) for k, o in enumerate(m["options"])]
        prompt = prompts.render(
            "evaluate/mcq.jinja", context=context, question=m["question"], options=opts
        )
        lines = [f" {a}) {o}" for a, o in opts]
        scores = llm.loglik([*prompt, {"role": "assistant", "content": "Answer:"}], lines)
        norm = [s.logprob / max(1, len(line)) for s, line in zip(scores, lines, strict=True)]
        return max(range(len(norm)), key=norm.__getitem__) == m["answer"]

    rows = []
    for i in drawn:
        row = bank.rows[i]
        goal = row.goal
        assert goal is not None
        grng = random.Random(args.seed * 1_000_003 + i)
        _, related = sample_related(pool, grng)
        cue, ref = goal_cue(
            ctx, DigitalConfig(), row, related, random.Random(i), df, len(bank.rows)
        )
        assert cue is not None
        old_app = random.Random(i).choice(BEFORE_APPS[goal.type])
        if goal.type == "search" and goal.source == "timeline":
            old_app = random.Random(i).choice(["Notes", "Messaging"])
        person = related[0].persona.first_name
        old_seed = " ".join(before.render(g=goal.model_dump(), app=old_app, person=person).split())
        states = {
            "before": f"Current state of the user's {old_app} app:\n{old_seed}",
            "after": f"Current state of the user's {cue.app.value} app:\n{cue.cue}",
        }
        rec: dict[str, Any] = {
            "goal_id": row.goal_id,
            "type": goal.type,
            "goal": texts[i],
            "before": {
                "app": old_app,
                "seed": old_seed,
                "action_share": round(action_share(goal, old_seed), 3),
            },
            "after": {
                "app": cue.app.value,
                "seed": cue.cue,
                "word": ref.word,
                "action_share": round(action_share(goal, cue.cue), 3),
            },
        }
        for m in mcqs[row.goal_id]:
            band = m["question_type"]
            if args.band and band != args.band:
                continue
            rec.setdefault("picks", {})[band] = {
                "none": picks("", m),
                "before": picks(states["before"], m),
                "after": picks(states["after"], m),
            }
        rows.append(rec)
        assert App(cue.app.value) in (App.Messaging, App.Calendar, App.Notes)

    table: dict[str, Any] = {}
    for t in sorted({r["type"] for r in rows}):
        rs = [r for r in rows if r["type"] == t]
        cell: dict[str, Any] = {"goals": len(rs)}
        for cond in ("none", "before", "after"):
            xs = [p[cond] for r in rs for p in r.get("picks", {}).values()]
            cell[f"picks_{cond}"] = f"{sum(xs)}/{len(xs)}"
        cell["action_share_before"] = round(
            sum(r["before"]["action_share"] for r in rs) / len(rs), 3
        )
        cell["action_share_after"] = round(sum(r["after"]["action_share"] for r in rs) / len(rs), 3)
        table[t] = cell
    total = {
        cond: [p[cond] for r in rows for p in r.get("picks", {}).values()]
        for cond in ("none", "before", "after")
    }
    out = {
        "machine": {
            "platform": platform.platform(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": [round(x, 2) for x in load0],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "date": dt.datetime.now().isoformat(timespec="seconds"),
            "seconds": round(time.time() - t0, 1),
        },
        "llm": llm.describe(),
        "bank": args.goals,
        "per_type": args.per_type,
        "chance": 0.25,
        "by_type": table,
        "total": {c: {"picks": sum(v), "mcqs": len(v)} for c, v in total.items()},
        "goals": rows,
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"{'type':20} goals  none    before  after   action words before -> after")
    for t, v in table.items():
        print(
            f"{t:20} {v['goals']:5} "
            f" {v['picks_none']:7} {v['picks_before']:7} {v['picks_after']:7} "
            f"{v['action_share_before']} -> {v['action_share_after']}"
        )
    print("total", {c: f"{sum(v)}/{len(v)}" for c, v in total.items()})


if __name__ == "__main__":
    main()
