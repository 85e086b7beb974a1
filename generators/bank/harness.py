"""``bank export format=lm_eval|inspect``: the multiple-choice kinds (``tom``, ``distractors``,
``mcq``) as tasks of the evaluation harnesses people already use.

A candidate sees the visible side of an item only: its visible fields (the context first), the
question and the options, rendered by ``prompts/bank/question.jinja`` (hashed into the run's
manifest and ``EXPORT.json``). Nothing privileged is written to these exports at all: not the
``privileged`` fields, not the original record, not WAGIBench's structured goals.

* ``lm_eval`` (lm-evaluation-harness): per kind ``<task>.yaml`` and ``<kind>.jsonl``, and
  ``utils.py``, whose loader the YAMLs name as ``custom_dataset``, so the harness reads the
  local file and never the hub. ``output_type: multiple_choice``: the prompt lists the options
  as ``A.``, ``B.``… and ends with ``Answer:``; the choices are the letters; the target is the
  answer's index; metric ``acc``. Every task carries the tag ``<bank>_<version>``.
* ``inspect`` (inspect_ai): per kind ``<kind>.jsonl`` in inspect's own sample fields (``id``,
  ``input`` = visible fields and question, ``choices``, ``target`` = the answer's letter,
  ``metadata``) and ``task.py`` with one ``@task`` per kind (``multiple_choice()`` solver,
  ``choice()`` scorer).

An item whose answer is not among its options (an imported row) or that has more options than
letters is a reject of this export (``no_answer``, ``too_many_options``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from gen import kinds
from gen.generators.bank.export import Job, Outcome, write_text
from gen.schemas import Reject
from gen.schemas.mcq import LETTERS, MCQ

PROMPT = "bank/question.jinja"
MAIN_CONTEXT = ("visible.context", "narrations_in_context")
"""Visible fields shown first and without a label: the item's context."""
UTILS_PY = '''"""Loads the items of this lm-evaluation-harness export (written by gen bank export
format=lm_eval). The task YAMLs beside this file name ``load`` as their custom_dataset, so the
harness reads the JSONL files here and never the Hugging Face hub."""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load(data_file, **metadata):
    import datasets

    with open(HERE / data_file, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
'''


def base_name(job: Job) -> str:
    """``<bank>_<version>`` as an identifier (lower case, ``[a-z0-9_]``): the lm-eval tag, the
    prefix of every task name and of every inspect ``@task`` function."""
    name = re.sub(r"[^a-z0-9_]+", "_", f"{job.name}_{job.label}".lower()).strip("_")
    return name if name[:1].isalpha() else f"bank_{name}"


def visible_fields(q: MCQ) -> list[tuple[str, str]]:
    """The item's visible fields as ``(label, text)``, the context first and unlabelled."""
    fields = [
        ("" if k in MAIN_CONTEXT else k.removeprefix("visible."), v)
        for k, v in q.visible.items()
        if v and v.strip()
    ]
    return sorted(fields, key=lambda f: f[0] != "")


def prompt(job: Job, q: MCQ, *, lettered: bool) -> str:
    """What the candidate reads: visible fields, question, and (``lettered``) the options as
    ``A. …`` and ``Answer:``."""
    job.prompts.hash(PROMPT)
    options = [(LETTERS[i].upper(), o) for i, o in enumerate(q.options)] if lettered else []
    return (
        job.prompts.env.get_template(PROMPT)
        .render(fields=visible_fields(q), question=q.question, options=options)
        .strip("\n")
    )


def mcq_kinds(job: Job) -> list[str]:
    """The MCQ-shaped kinds among the exported ones, in the bank's order."""
    return [k for k in job.frames if kinds.require(k).is_mcq]


def items(job: Job, kind: str) -> list[tuple[dict[str, Any], MCQ | Reject]]:
    """Each row of ``kind`` with its MCQ as the harness shows it, or the reject that keeps it
    out."""
    out: list[tuple[dict[str, Any], MCQ | Reject]] = []
    read = kinds.require(kind).mcq
    for r in job.frames[kind].iter_rows(named=True):
        q = read(json.loads(r["record"]))
        assert q is not None  # an MCQ-shaped kind (mcq_kinds)
        reason = None
        if q.answer is None:
            reason = ("no_answer", "the answer is not among the options")
        elif len(q.options) > len(LETTERS):
            reason = (
                "too_many_options",
                f"{len(q.options)} options; the letters go to {len(LETTERS)}",
            )
        out.append(
            (
                r,
                Reject(
                    record_id=r["item_id"],
                    index=0,
                    stage="export",
                    reason=reason[0],
                    detail=reason[1],
                )
                if reason
                else q,
            )
        )
    return out


def jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)


def export_lm_eval(job: Job, out: Path) -> list[Outcome]:
    base = base_name(job)
    outcomes: list[Outcome] = []
    tasks = []
    for kind in mcq_kinds(job):
        rows = []
        data = f"{kind}.jsonl"
        for r, q in items(job, kind):
            if isinstance(q, Reject):
                outcomes.append((r, q))
                continue
            assert q.answer is not None
            rows.append(
                {
                    "item_id": r["item_id"],
                    "question_type": r["question_type"],
                    "group": r["group"],
                    "source_item_id": r["source_item_id"],
                    "prompt": prompt(job, q, lettered=True),
                    "letters": [LETTERS[i].upper() for i in range(len(q.options))],
                    "answer": q.answer,
                }
            )
            outcomes.append((r, data))
        task = f"{base}_{kind}"
        tasks.append((task, kind, len(rows), data))
        write_text(out / data, jsonl(rows))
        config = {
            "task": task,
            "tag": [base],
            "dataset_kwargs": {"data_file": data},
            "test_split": "test",
            "output_type": "multiple_choice",
            "doc_to_text": "prompt",
            "doc_to_choice": "letters",
            "doc_to_target": "answer",
            "target_delimiter": " ",
            "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
            "metadata": {
                "version": float(job.version),
                "bank": job.name,
                "bank_version": job.label,
                "lock_sha256": job.lock_sha,
                "kind": kind,
                "items": len(rows),
                "prompt_sha256": job.prompts.hash(PROMPT),
            },
        }
        write_text(
            out / f"{task}.yaml",
            f"# {kind} items of the bank version {job.label} (gen bank export format=lm_eval)\n"
            "custom_dataset: !function utils.load\n"
            + yaml.safe_dump(config, sort_keys=False, allow_unicode=True, width=1000),
        )
    write_text(out / "utils.py", UTILS_PY)
    lines = [
        f"# {base}: lm-evaluation-harness tasks",
        "",
        f"The multiple-choice items of bank version {job.label} (lock SHA-256 `{job.lock_sha}`), "
        "written by "
        "`gen bank export format=lm_eval`. The prompt shows the visible context, the question and "
        "the lettered "
        "options and ends with `Answer:`; the choices are the letters; the metric is `acc`.",
        "",
        "```bash",
        "lm_eval --model hf --model_args pretrained=<model> --include_path <this folder> "
        f"--tasks {base}",
        "```",
        "",
        "| task | kind | items | data |",
        "|---|---|---|---|",
    ]
    lines += [f"| {t} | {k} | {n} | {d} |" for t, k, n, d in tasks]
    write_text(out / "README.md", "\n".join(lines) + "\n")
    return outcomes


TASK_PY = '''"""inspect_ai tasks of the bank version {label}
(written by gen bank export format=inspect).

Run one with: inspect eval task.py@{first} --model <provider>/<model>
"""

from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.scorer import choice
from inspect_ai.solver import multiple_choice

HERE = Path(__file__).resolve().parent
METADATA = {metadata}
'''
TASK_FN = '''

@task
def {fn}() -> Task:
    """The {kind} items ({n})."""
    return Task(
        dataset=json_dataset(str(HERE / {data!r}), name={fn!r}),
        solver=multiple_choice(),
        scorer=choice(),
        name={fn!r},
        version={version},
        metadata={{**METADATA, "kind": {kind!r}}},
    )
'''


def export_inspect(job: Job, out: Path) -> list[Outcome]:
    base = base_name(job)
    outcomes: list[Outcome] = []
    meta = {"bank": job.name, "bank_version": job.label, "lock_sha256": job.lock_sha}
    fns = []
    for kind in mcq_kinds(job):
        samples = []
        data = f"{kind}.jsonl"
        for r, q in items(job, kind):
            if isinstance(q, Reject):
                outcomes.append((r, q))
                continue
            assert q.answer is not None
            samples.append(
                {
                    "id": r["item_id"],
                    "input": prompt(job, q, lettered=False),
                    "choices": q.options,
                    "target": LETTERS[q.answer].upper(),
                    "metadata": {
                        **meta,
                        "kind": kind,
                        "question_type": r["question_type"],
                        "group": r["group"],
                        "source_item_id": r["source_item_id"],
                    },
                }
            )
            outcomes.append((r, data))
        write_text(out / data, jsonl(samples))
        fns.append(
            TASK_FN.format(
                fn=f"{base}_{kind}", kind=kind, n=len(samples), data=data, version=job.version
            )
        )
    present = mcq_kinds(job)
    source = TASK_PY.format(
        label=job.label,
        first=f"{base}_{present[0]}" if present else f"{base}_<kind>",
        metadata=repr(dict(sorted(meta.items()))),
    )
    write_text(out / "task.py", source + "".join(fns))
    write_text(
        out / "README.md",
        f"# {base}: inspect_ai tasks\n\nThe multiple-choice items of bank version "
        f"{job.label} (lock SHA-256 `{job.lock_sha}`), written by `gen bank export "
        "format=inspect`: one "
        "`@task` per kind in `task.py`, its samples in `<kind>.jsonl`.\n\n```bash\n"
        f"inspect eval task.py@{base}_<kind> --model <provider>/<model>\n```\n",
    )
    return outcomes
