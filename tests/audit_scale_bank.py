"""A generated bank of a thousand-odd items that gives every MCQ check of ``audit`` work, in both
formats (MCQ records with tom-like privileged fields; EgoToM CSVs): what ``test_audit_scale.py``
audits and compares with the findings the audit gave before it streamed its input
(``tests/fixtures/audit_scale/golden.json``, made by ``python tests/audit_scale_bank.py`` on that
code). numpy's PCG64 draws it, the same on every platform and version.

Planted: exact duplicate items and ids, near duplicates (one option and one context word changed),
answers copied into the context or the id, a future narration of one clip in another clip's
context, goal answers that are the longest option more often than chance, an empty and a repeated
option, option source times in time order for the ``actions`` items, an ``against=`` bank holding
copies and near copies, an option that is not English.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

VERBS = [
    "picks",
    "puts",
    "holds",
    "moves",
    "opens",
    "closes",
    "cleans",
    "cuts",
    "pours",
    "stirs",
    "washes",
    "dries",
    "folds",
    "places",
    "lifts",
    "drops",
    "wipes",
    "turns",
    "pushes",
    "pulls",
    "checks",
    "carries",
    "rinses",
]
OBJECTS = [
    "cup",
    "plate",
    "knife",
    "spoon",
    "bowl",
    "pan",
    "pot",
    "lid",
    "towel",
    "sponge",
    "bottle",
    "jar",
    "box",
    "bag",
    "brush",
    "trolley",
    "phone",
    "drawer",
    "onion",
    "tomato",
    "carrot",
    "dough",
    "saw",
    "hammer",
    "bucket",
    "mop",
    "window",
    "laptop",
    "book",
    "shirt",
    "basket",
    "lamp",
    "kettle",
    "mug",
]
PLACES = [
    "on the table",
    "on the counter",
    "in the sink",
    "on the floor",
    "in the cupboard",
    "on the shelf",
    "in the drawer",
    "on the stove",
    "in the bag",
    "by the window",
]
GOALS = [
    "finish",
    "prepare",
    "clean up",
    "repair",
    "organise",
    "cook",
    "pack",
    "paint",
    "sort",
    "store",
    "wash",
]
BELIEFS = [
    "is ready",
    "needs more cleaning",
    "is almost done",
    "is in the wrong place",
    "is still dirty",
    "has been put away",
    "is not working",
    "is full",
    "is empty",
    "will be needed later",
]
ADJECTIVES = [
    "red",
    "blue",
    "green",
    "small",
    "large",
    "wooden",
    "metal",
    "plastic",
    "glass",
    "old",
    "new",
    "striped",
    "heavy",
    "empty",
    "folded",
    "wet",
    "dry",
    "broken",
    "clean",
    "dusty",
    "round",
    "square",
]
QUESTION = {
    "goal": "What is C's future goal?",
    "belief": "At the end of these actions, what does C most likely believe?",
    "actions": "What will C most likely do next?",
}
CHOICES = {"goal": 3, "belief": 4, "actions": 4}


class Draw:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def pick(self, xs: list[str]) -> str:
        return xs[int(self.rng.integers(len(xs)))]

    def narration(self) -> str:
        return f"C {self.pick(VERBS)} the {self.pick(OBJECTS)} {self.pick(PLACES)}"

    def future(self) -> str:
        """A narration of what comes next: more specific than the context's lines, as Ego4D's are
        (a later clip repeating it word for word is a leak, not the domain's phrasing)."""
        return (
            f"C {self.pick(VERBS)} "
            f"the {self.pick(ADJECTIVES)} {self.pick(OBJECTS)} {self.pick(PLACES)} "
            f"next to the {self.pick(ADJECTIVES)} {self.pick(OBJECTS)}"
        )

    def option(self, q: str) -> str:
        a, b = self.pick(OBJECTS), self.pick(OBJECTS)
        if q == "goal":
            return f"To {self.pick(GOALS)} the {a} and the {b} {self.pick(PLACES)}."
        if q == "belief":
            return f"C believes that the {a} {self.pick(BELIEFS)}."
        v = [VERBS[int(j)] for j in self.rng.choice(len(VERBS), 2, replace=False)]
        return f"C {v[0]} the {a} {self.pick(PLACES)} and {v[1]} the {b}."


def _clip(d: Draw, c: int) -> dict[str, Any]:
    t, lines = 0, []
    for _ in range(int(d.rng.integers(12, 30))):
        t += int(d.rng.integers(1, 12))
        lines.append(f"{t // 60:02d}m:{t % 60:02d}s | {d.narration()}")
    return {
        "id": f"clip-{c:04d}",
        "lines": lines,
        "future": [d.future() for _ in range(int(d.rng.integers(2, 5)))],
    }


def records(n: int = 1200, seed: int = 5) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``n`` MCQ records (and an ``against=`` bank of 60) with the plants above."""
    d = Draw(seed)
    out: list[dict[str, Any]] = []
    clips: list[dict[str, Any]] = []
    while len(out) < n:
        clip = _clip(d, len(clips))
        if clips and d.rng.random() < 0.05:  # another clip's future narration in this context
            clip["lines"][-1] = f"{clip['lines'][-1][:9]}{clips[-1]['future'][0]}"
        clips.append(clip)
        for q in [
            list(CHOICES)[int(j)] for j in d.rng.choice(3, int(d.rng.integers(1, 4)), replace=False)
        ]:
            k = CHOICES[q]
            options: list[str] = []
            while len(options) < k:
                o = d.option(q)
                if o not in options:
                    options.append(o)
            truth = options[0]
            if q == "goal" and d.rng.random() < 0.3:  # the length tell
                truth = options[0] = (
                    truth[:-1] + f" before they {d.pick(GOALS)} the {d.pick(OBJECTS)}."
                )
            order = [int(j) for j in d.rng.permutation(k)]
            options = [options[j] for j in order]
            answer = options.index(truth)
            lines = list(clip["lines"])
            r = d.rng.random()
            if r < 0.01:  # the answer copied into the context
                lines.append(f"09m:59s | {truth}")
            rec: dict[str, Any] = {
                "item_id": f"{clip['id']}-{q}"
                + ("-ans-b" if 0.01 <= r < 0.012 and answer == 1 else ""),
                "question_type": q,
                "question": QUESTION[q],
                "options": options,
                "answer": answer,
                "origins": ["truth" if o == truth else "counterfactual" for o in options],
                "group": clip["id"],
                "visible": {"context": lines, "query_time": lines[-1][:6]},
                "privileged": {
                    "transition": clip["future"][0],
                    "future": "\n".join(clip["future"]),
                    "truth": {q: truth},
                    "source": "generated",
                },
            }
            if q == "actions":  # source times, shown in time order
                rec["privileged"]["option_times"] = {
                    str(j): 10.0 * j + float(d.rng.integers(5)) for j in range(k)
                }
            if 0.012 <= r < 0.016:
                rec["options"][(answer + 1) % k] = ""  # an empty option
            elif 0.016 <= r < 0.02:
                rec["options"][(answer + 1) % k] = rec["options"][
                    (answer + 2) % k
                ]  # the same option twice
            elif 0.02 <= r < 0.024:
                rec["options"][(answer + 1) % k] = (
                    "C lava los platos en la cocina con agua caliente."
                )
            out.append(rec)
            if (
                0.024 <= r < 0.034 and len(out) < n
            ):  # an exact duplicate (its own id or the same id)
                out.append({**rec, "item_id": rec["item_id"] + ("" if r < 0.029 else "-copy")})
            elif 0.034 <= r < 0.05 and len(out) < n:  # a near duplicate
                twin = json.loads(json.dumps(rec))
                twin["item_id"] += "-near"
                j = (answer + 1) % k
                twin["options"][j] = twin["options"][j].replace(" the ", " a ", 1)
                twin["visible"]["context"][0] = twin["visible"]["context"][0].replace(
                    " the ", " a ", 1
                )
                out.append(twin)
    out = out[:n]
    against = []
    for j, rec in enumerate(out[::20][:60]):
        twin = json.loads(json.dumps(rec))
        twin["item_id"] = f"old-{j:03d}"
        if j % 2:
            twin["options"][(twin["answer"] + 1) % len(twin["options"])] += " again"
        against.append(twin)
    return out, against


def egotom_rows(recs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The records as EgoToM CSV rows by question type (a copy's cuid repeats, as it would)."""
    rows: dict[str, list[dict[str, Any]]] = {q: [] for q in CHOICES}
    for r in recs:
        q = r["question_type"]
        truth = r["options"][r["answer"]]
        row = {
            "vuid": r["group"],
            "cuid": r["item_id"],
            "narrations_in_context": "\n".join(r["visible"]["context"]),
            f"gt_{q}": truth if "ans" not in r["item_id"] else truth + " (edited)",
            "clip_start_time": "0",
            "clip_end_time": "60",
        }
        row.update({f"{q}_choice_{'abcd'[j]}": o for j, o in enumerate(r["options"])})
        rows[q].append(row)
    return rows


def write(folder: Path, n: int = 1200, seed: int = 5) -> dict[str, Path]:
    """The bank as ``bank.jsonl``, ``against.jsonl`` and a folder of EgoToM CSVs ``egotom/``."""
    from gen.formats.mcq import write_egotom_csv

    recs, against = records(n, seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {
        "jsonl": folder / "bank.jsonl",
        "against": folder / "against.jsonl",
        "csv": folder / "egotom",
    }
    for key, rows in (("jsonl", recs), ("against", against)):
        paths[key].write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
    paths["csv"].mkdir(exist_ok=True)
    for q, rows in egotom_rows(recs).items():
        write_egotom_csv(rows, q, paths["csv"] / f"egotom_{q}_shuffled.csv")
    return paths


VOLATILE = {"seconds"}


def outcome(out: Path) -> dict[str, Any]:
    """What an audit run found, without what varies between runs (timings, folders)."""
    report = json.loads((out / "audit.json").read_text())
    checks = [{k: v for k, v in c.items() if k not in VOLATILE} for c in report["checks"]]
    return {
        "findings": [
            json.loads(x) for x in (out / "audit.jsonl").read_text().splitlines() if x.strip()
        ],
        "checks": checks,
        "summary": report["summary"],
        "power": report["power"],
    }


GOLDEN_CHECKS = [
    "structure", "leakage", "position", "length", "similar_options", "duplicates", "shortcut",
    "blind", "digital", "history", "judge", "chronology", "text", "review", "integrity",
    "scenarios", "context_states",
]  # fmt: skip
"""The checks golden.json holds (the in-memory audit's, before the items were streamed); a check
added since (context_options) is tested on its own."""


def audit_both(folder: Path) -> dict[str, Any]:
    """The audit (every check of :data:`GOLDEN_CHECKS`, the trigram stand-in embedder) of the JSONL
    bank against its ``against=`` bank, and of the CSV folder."""
    from audit_runs import run_audit

    paths = write(folder / "bank")
    got = {}
    for key, extra in (("jsonl", {"against": str(paths["against"])}), ("csv", {})):
        out = folder / f"out_{key}"
        run_audit(out, paths[key], checks=GOLDEN_CHECKS, **extra)
        got[key] = outcome(out)
    return got


if __name__ == "__main__":  # the golden file, from the code on PYTHONPATH
    import sys
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))

    import gen

    print("code:", gen.__file__)
    with tempfile.TemporaryDirectory() as tmp:
        result = audit_both(Path(tmp))
    target = Path(__file__).resolve().parent / "fixtures" / "audit_scale" / "golden.json"
    target.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(target, {k: len(v["findings"]) for k, v in result.items()})
