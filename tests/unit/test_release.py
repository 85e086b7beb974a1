"""Releasing a bank (issue 20): ``bank export format=croissant|hf|lm_eval|inspect`` read by the
real libraries (mlcroissant's validator and loader, ``datasets.load_dataset`` offline,
lm-eval's task loader, inspect_ai's dataset reader and a ``mockllm`` run), the privileged side
kept out of every harness file, the review summary, and byte-reproducible exports that name
their version.

The library tests need the ``[release]`` extra (``pip install -e ".[release]"``) and skip with
that reason without it; the others run on the default install. No test reaches the network:
:func:`no_network` refuses every connection that does not stay on this machine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml
from bank_runs import LEAK, Bank, mcq, run_folder, standin_audit
from conftest import read_jsonl

from gen import kinds
from gen.banks.store import LOCK, version_dir
from gen.engine.registry import REGISTRY
from gen.errors import GenError
from gen.generators.bank import BankConfig
from gen.generators.bank.export import FORMATS, export_kinds

MCQ_KINDS = tuple(k.name for k in kinds.bank_kinds() if k.is_mcq)

SENT = "PRIVSENTINEL"
"""Planted in every privileged field of every item: it must reach no harness file."""
RELEASE_EXTRA = 'needs the [release] extra: pip install -e ".[release]"'
LICENSE = "CC-BY-4.0"
CITATION = "@misc{egoqa, title={EgoQA}, year={2026}}"


def need(module: str) -> Any:
    return pytest.importorskip(module, reason=f"{module} {RELEASE_EXTRA}")


@pytest.fixture(autouse=True)
def no_network(monkeypatch) -> None:
    """Nothing may download: a connection to anything but this machine fails the test."""
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def local(host: Any) -> bool:
        return host is None or str(host) in ("localhost", "::1", "") or str(host).startswith("127.")

    def connect(self, address):  # type: ignore[no-untyped-def]
        if self.family in (socket.AF_INET, socket.AF_INET6) and not local(address[0]):
            raise OSError(f"test_release: network access to {address} refused")
        return real_connect(self, address)

    def getaddrinfo(host, *a, **k):  # type: ignore[no-untyped-def]
        if not local(host):
            raise OSError(f"test_release: name lookup of {host} refused")
        return real_getaddrinfo(host, *a, **k)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# --------------------------------------------------------------------------- a released bank


def tom_items() -> list[dict[str, Any]]:
    items = [mcq(i) for i in range(4)] + [mcq(i, "belief", n_options=4) for i in range(3)]
    for i, r in enumerate(items):
        r["privileged"] = {
            "truth": f"{SENT} truth {i}",
            "future": [f"{SENT} line a", f"{SENT} line b"],
        }
    return items


def distractor_items() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    items = [
        dict(
            mcq(i, "similar", n_options=4),
            question="Which action would help C now?",
            privileged={
                "reference_goal_id": f"{SENT}g{i}",
                "structured_goal": {"type": "shop", "content": f"{SENT} milk {i}"},
            },
        )
        for i in range(3)
    ]
    layout = [
        {
            "x": {
                "client_tag": f"obs{i}",
                "context_window": {"start_s": 1, "end_s": 2},
                "cues": [],
                "mcq_set": [{"type": "shop", "content": f"o{k}"} for k in range(4)],
            },
            "y": d["answer"],
            "meta": {
                "client_tag": f"obs{i}",
                "scenario": {"shortname": "s"},
                "item_id": d["item_id"],
                "question_type": "similar",
                "structured_goal": {"type": "shop", "content": f"{SENT} truth"},
            },
        }
        for i, d in enumerate(items[:2])
    ]
    return items, layout


def roles_bank(tmp: Path) -> tuple[Path, Path]:
    rows = [
        {
            "qid": f"q{i}",
            "prompt": f"Which tool does C need next, {i}?",
            "kind": "tool",
            "clip": f"c{i}",
            "choices": [f"hammer {i}", f"wrench {i}", f"pliers {i}"],
            "gold": "b",
            "scene": {"caption": f"C stands at bench {i}", "time": f"00:0{i}"},
            "hidden": {"why": f"{SENT} the next step needs tool {i}"},
        }
        for i in range(3)
    ]
    data = tmp / "tools.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in rows))
    roles = tmp / "roles.yaml"
    roles.write_text(
        "id: qid\nquestion: prompt\nvisible: [scene]\nprivileged: [hidden]\noptions: choices\n"
        "answer: gold\nanswer_format: letter\ngroup: clip\nquestion_type: kind\n"
    )
    return data, roles


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Iterator[Bank]:
    """A bank in four releases: tom (v1), distractors with WAGIBench layout rows, forced past a
    planted leakage error (v2), an external JSONL bank through a roles file (v3, kind mcq) and a
    digital bundle (v4). Every privileged field holds :data:`SENT`."""
    from digital_runs import digital_script, run_digital, write_pool

    real = standin_audit()
    try:
        tmp = tmp_path_factory.mktemp("released")
        bank = Bank(tmp)
        bank.root = tmp / "released"  # the bank's name: task names start with released_v0004
        assert (
            bank.add(run_folder(tmp / "tom", tom_items()), message="tom questions")[0].accepted == 7
        )
        dis, layout = distractor_items()
        assert (
            bank.add(
                run_folder(
                    tmp / "dis", dis, "distractors", extra={"wagibench_mcq_similar.json": layout}
                ),
                force=True,
                audit_options={"findings": [LEAK]},
            )[0].accepted
            == 3
        )
        data, roles = roles_bank(tmp)
        assert bank.add(data, roles=str(roles), near_dup_sim=None)[0].accepted == 3
        digital = tmp / "digital"
        run_digital(digital, write_pool(tmp / "pool.jsonl"), digital_script(), n=1, cue_rate=1.0)
        assert bank.add(digital)[0].accepted == 1
        assert bank.current == 4
        yield bank
    finally:
        if real is not None:
            REGISTRY["audit"] = real


def export(bank: Bank, fmt: str, out: Path, **cfg: Any) -> Path:
    cfg = {"license": LICENSE, "citation": CITATION, **cfg}
    result, _ = bank_export(bank, fmt, out, **cfg)
    assert result.exit_code == 0
    return out


def bank_export(bank: Bank, fmt: str, out: Path, **cfg: Any):
    return bank.export(fmt, out=str(out), **cfg)


def counts(bank: Bank) -> dict[str, int]:
    return {k: c["items"] for k, c in bank.lock()["counts"].items()}


# --------------------------------------------------------------------------- Croissant


@pytest.mark.parametrize(
    "fmt, data",
    [("croissant", "{k}.parquet"), ("parquet", "{k}.parquet"), ("hf", "{k}/test.parquet")],
)
def test_croissant_validates_and_loads_every_record_set(
    released: Bank, tmp_path: Path, fmt: str, data: str, caplog
) -> None:
    mlc = need("mlcroissant")
    out = export(released, fmt, tmp_path / fmt)
    doc = json.loads((out / "croissant.json").read_text())
    with caplog.at_level(logging.WARNING):
        ds = mlc.Dataset(jsonld=str(out / "croissant.json"))
    issues = ds.metadata.ctx.issues
    assert (issues.errors, issues.warnings) == (set(), set())
    assert [
        r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
    ] == []  # standard @context
    assert [d["contentUrl"] for d in doc["distribution"]] == [
        data.format(k=k) for k in counts(released)
    ] + [LOCK]
    for d in doc["distribution"]:  # each file's SHA-256 is the one of the file there
        assert d["sha256"] == hashlib.sha256((out / d["contentUrl"]).read_bytes()).hexdigest()
    for kind, n in counts(released).items():
        frame = released.frame(kind)
        records = list(ds.records(kind))
        assert len(records) == n  # the loader reads every record set; counts as in the lock
        assert [r[f"{kind}/item_id"].decode() for r in records] == frame["item_id"].to_list()
        if kind in MCQ_KINDS:
            assert [[o.decode() for o in r[f"{kind}/options"]] for r in records] == frame[
                "options"
            ].to_list()
            assert [r[f"{kind}/answer"] for r in records] == frame["answer"].to_list()
        else:
            assert [[a.decode() for a in r[f"{kind}/apps"]] for r in records] == frame[
                "apps"
            ].to_list()


def test_croissant_provenance(released: Bank, tmp_path: Path) -> None:
    """Generator, models and their hashes, prompt hashes, filters, the audits (the forced one
    with its finding), license and citation, version — from the lock and the audit folders."""
    doc = json.loads((export(released, "croissant", tmp_path / "c") / "croissant.json").read_text())
    lock = released.lock()
    assert doc["conformsTo"] == "http://mlcommons.org/croissant/1.1"
    assert (
        doc["version"] == "4.0.0"
        and "v0004" in doc["description"]
        and lock["created_at"] == doc["datePublished"]
    )
    assert (
        doc["license"] == "https://spdx.org/licenses/CC-BY-4.0.html" and doc["citeAs"] == CITATION
    )
    assert "LLM llama_cpp smollm2.gguf (sha256 " + "b" * 64 + ")" in " ".join(
        doc["rai:machineAnnotationTools"]
    )
    assert f"prompt template tom/goals.jinja sha256 {'a' * 64}" in doc["rai:machineAnnotationTools"]
    pre = doc["rai:dataPreprocessingProtocol"]
    assert any(line.startswith("v0002: the batch's audit forced past its findings") for line in pre)
    assert any(
        line.startswith(
            "v0001: 7 items from tom (run manifest sha256 " + lock["sources"][0]["source"]
        )
        for line in pre
    )
    assert doc["rai:dataLimitations"] == [
        f"v0002: error leakage/answer_in_visible: {LEAK['what']} (1 item(s))"
    ]
    assert (
        "v0002: audit of the batch: 1 error, 0 info, 0 warning (forced)"
        in doc["rai:dataAnnotationAnalysis"]
    )
    assert "rai:annotationsPerItem" not in doc and not any(
        "Review" in a for a in doc["rai:dataAnnotationProtocol"]
    )
    assert doc["rai:dataCollectionType"] == [
        "Synthetic data (LLM-generated)",
        "Existing dataset",
    ]  # v3 is imported
    assert doc["rai:dataCollection"].startswith(
        "Generated with gen (its generators and an LLM; see "
        "prov:wasGeneratedBy) and imported from existing MCQ banks; "
    )
    acts = doc["prov:wasGeneratedBy"]
    assert [a["sha256"] for a in acts] == [s["source"] for s in lock["sources"]]
    assert {"@type": "prov:Entity", "name": "tom/goals.jinja", "sha256": "a" * 64} in acts[0][
        "prov:used"
    ]
    assert acts[0]["prov:wasAssociatedWith"][1] == {
        "@type": "prov:SoftwareAgent",
        "name": "llama_cpp smollm2.gguf",
        "sha256": "b" * 64,
    }


def test_croissant_without_license_warns_about_it(released: Bank, tmp_path: Path) -> None:
    mlc = need("mlcroissant")
    out = export(released, "croissant", tmp_path / "c", license=None, citation=None)
    issues = mlc.Dataset(jsonld=str(out / "croissant.json")).metadata.ctx.issues
    assert issues.errors == set() and len(issues.warnings) == 2
    assert all("license" in w or "citeAs" in w for w in issues.warnings)


# --------------------------------------------------------------------------- Hugging Face


def card_header(path: Path) -> dict[str, Any]:
    text = path.read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def test_hf_folder_loads_offline(released: Bank, tmp_path: Path, monkeypatch) -> None:
    datasets = need("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    out = export(released, "hf", tmp_path / "hf")
    assert datasets.get_dataset_config_names(str(out)) == list(counts(released))
    for kind, n in counts(released).items():
        ds = datasets.load_dataset(str(out), kind, split="test", cache_dir=str(tmp_path / "cache"))
        frame = released.frame(kind)
        assert ds.num_rows == n and ds["item_id"] == frame["item_id"].to_list()
        if kind in MCQ_KINDS:
            assert ds.features["options"] == datasets.List(datasets.Value("string"))
            assert ds.features["answer"] == datasets.Value("int64")
            assert ds.features["answer_text"] == datasets.Value("string")
            assert [o[a] for o, a in zip(ds["options"], ds["answer"], strict=True)] == ds[
                "answer_text"
            ]
        else:
            assert ds.features["related_personas"] == datasets.List(datasets.Value("string"))
            assert ds.features["chars_total"] == datasets.Value("int64")
    header = card_header(out / "README.md")
    assert header["license"] == "cc-by-4.0" and header["pretty_name"].endswith(" v0004")
    assert [c["config_name"] for c in header["configs"]] == list(counts(released))
    assert {
        i["config_name"]: i["splits"][0]["num_examples"] for i in header["dataset_info"]
    } == counts(released)


def test_hf_card_counts_provenance_license_and_findings(released: Bank, tmp_path: Path) -> None:
    card = (export(released, "hf", tmp_path / "hf") / "README.md").read_text()
    assert "| tom | goal | 4 |" in card and "| mcq | tool | 3 |" in card
    assert "| tom/goals.jinja | " + "a" * 64 + " |" in card and "smollm2.gguf" in card
    assert "## Known audit findings\n\nv0002 (1):\n\n- error leakage/answer_in_visible: " in card
    assert (
        f"License: {LICENSE} (https://spdx.org/licenses/{LICENSE}.html)." in card
        and CITATION in card
    )
    assert "only in the columns `wagibench`, `record`" in card and "## Review" not in card
    assert 'load_dataset("<this folder>", "tom", split="test")' in card


def test_a_url_license_and_a_bad_one(released: Bank, tmp_path: Path) -> None:
    out = export(released, "hf", tmp_path / "hf", license="https://example.org/terms")
    header = card_header(out / "README.md")
    assert (header["license"], header["license_link"]) == ("other", "https://example.org/terms")
    with pytest.raises(ValueError, match="license='my license': an SPDX id"):
        BankConfig(action="export", bank="b", license="my license")


# --------------------------------------------------------------------------- review summary


def plant_review(bank: Bank, summary: dict[str, Any]) -> None:
    """A review summary in the current version, with the lock's file list updated (as the review
    feature will release it), so the version still verifies."""
    folder = version_dir(bank.root, bank.current)
    (folder / "review").mkdir(exist_ok=True)
    (folder / "review" / "summary.json").write_text(json.dumps(summary))
    lock = json.loads((folder / LOCK).read_text())
    lock["files"]["review/summary.json"] = hashlib.sha256(
        (folder / "review" / "summary.json").read_bytes()
    ).hexdigest()
    lock["files"] = dict(sorted(lock["files"].items()))
    (folder / LOCK).write_text(json.dumps(lock, indent=1, ensure_ascii=False) + "\n")


def test_review_summary_goes_into_card_and_croissant(tmp_path: Path) -> None:
    real = standin_audit()
    try:
        bank = Bank(tmp_path)
        bank.add(run_folder(tmp_path / "tom", tom_items()))
        plant_review(
            bank,
            {
                "items_reviewed": 7,
                "reviewers": 2,
                "by_verdict": {"accept": 6, "reject": 1},
                "protocol": "two annotators per item",
                "other": "ignored",
            },
        )
        card = (export(bank, "parquet", tmp_path / "p") / "README.md").read_text()
        line = (
            "7 items reviewed by 2 reviewer(s): accept 6, reject 1; "
            "protocol: two annotators per item."
        )
        assert f"## Review\n\n{line}" in card
        doc = json.loads((export(bank, "croissant", tmp_path / "c") / "croissant.json").read_text())
        assert (
            doc["rai:annotationsPerItem"] == line
            and f"Review: {line}" in doc["rai:dataAnnotationProtocol"]
        )
        # a later unreviewed batch carries the version's review summary over, as it was
        bank.add(run_folder(tmp_path / "tom2", [mcq(i, seed=1) for i in range(10, 12)]))
        assert bank.current == 2 and bank.verify()[0].exit_code == 0
        card = (export(bank, "parquet", tmp_path / "p2") / "README.md").read_text()
        assert f"## Review\n\n{line}" in card
        plant_review(
            bank, {"items_reviewed": "seven", "by_verdict": {}}
        )  # verify's problem, so export's refusal
        with pytest.raises(
            GenError,
            match=r"review/summary.json: bad_review_summary: .*items_reviewed: Input should "
            "be a valid integer",
        ) as e:
            bank.export("hf", out=str(tmp_path / "h"))
        assert e.value.exit_code == 1
    finally:
        if real is not None:
            REGISTRY["audit"] = real


# --------------------------------------------------------------------------- harnesses


def test_harness_prompts_show_the_visible_side_only(released: Bank, tmp_path: Path) -> None:
    lm = export(released, "lm_eval", tmp_path / "lm")
    tom = read_jsonl(lm / "tom.jsonl")
    first = mcq(0)
    letters = "\n".join(f"{'ABC'[k]}. {o}" for k, o in enumerate(first["options"]))
    assert (
        tom[0]["prompt"]
        == f"{first['visible']['context']}\n\nQuestion: {first['question']}\n{letters}\nAnswer:"
    )
    assert tom[0]["letters"] == ["A", "B", "C"] and tom[0]["answer"] == first["answer"]
    tools = read_jsonl(lm / "mcq.jsonl")
    assert tools[0]["prompt"].startswith(
        "scene.caption: C stands at bench 0\n\nscene.time: 00:00\n\n"
        "Question: Which tool does C need next, 0?\nA. hammer 0\n"
    )
    ins = read_jsonl(export(released, "inspect", tmp_path / "ins") / "tom.jsonl")
    assert ins[0]["input"] == f"{first['visible']['context']}\n\nQuestion: {first['question']}"
    assert ins[0]["choices"] == first["options"] and ins[0]["target"] == "ABC"[first["answer"]]
    assert ins[0]["metadata"]["bank_version"] == "v0004"


def test_privileged_side_reaches_no_harness_file(released: Bank, tmp_path: Path) -> None:
    """The sentinel planted in every privileged field is in no file of the lm_eval and inspect
    exports; in the data exports only in the columns the card names as privileged."""
    assert any(SENT in r for r in released.frame("tom")["record"].to_list())  # it was planted
    for fmt in ("lm_eval", "inspect"):
        out = export(released, fmt, tmp_path / fmt)
        files = [p for p in out.rglob("*") if p.is_file()]
        assert len(files) >= 5
        for p in files:
            assert SENT.encode() not in p.read_bytes(), f"{fmt}: {p.name} holds a privileged value"
    for fmt in ("hf", "parquet"):
        out = export(released, fmt, tmp_path / fmt)
        holding = set()
        for p in out.rglob("*.parquet"):
            df = pl.read_parquet(p)
            holding |= {c for c in df.columns if any(SENT in str(v) for v in df[c].to_list())}
        assert holding == {"record", "wagibench"}
        assert (
            SENT not in (out / "README.md").read_text()
            and SENT not in (out / "croissant.json").read_text()
        )


def test_lm_eval_tasks_load_with_the_harness(released: Bank, tmp_path: Path) -> None:
    need("lm_eval")
    from lm_eval.tasks import TaskManager, get_task_dict

    out = export(released, "lm_eval", tmp_path / "lm")
    tm = TaskManager(include_path=str(out), include_defaults=False)
    names = [f"released_v0004_{k}" for k in MCQ_KINDS]
    assert (
        set(names) <= set(tm.all_tasks) and "released_v0004" in tm.all_tasks
    )  # tasks and their tag
    tasks = get_task_dict(["released_v0004"], tm)
    assert sorted(tasks) == sorted(names)
    for name in names:
        task = tasks[name]
        kind = name.rsplit("_", 1)[1]
        rows = read_jsonl(out / f"{kind}.jsonl")
        docs = list(task.test_docs())
        assert len(docs) == counts(released)[kind] == len(rows)
        assert (
            task.config.metadata["bank_version"] == "v0004"
            and task.config.metadata["version"] == 4.0
        )
        task.build_all_requests(limit=None, rank=0, world_size=1)
        assert len(task.instances) == sum(len(r["letters"]) for r in rows)
        for doc, row in zip(docs, rows, strict=True):
            assert (
                task.doc_to_text(doc) == row["prompt"] and task.doc_to_target(doc) == row["answer"]
            )
            assert task.doc_to_choice(doc) == row["letters"]
        for inst in task.instances:
            context, continuation = inst.args
            assert SENT not in context and continuation in (" A", " B", " C", " D")


def test_inspect_task_runs_on_mockllm(released: Bank, tmp_path: Path) -> None:
    need("inspect_ai")
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import json_dataset
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    out = export(released, "inspect", tmp_path / "ins")
    samples = json_dataset(str(out / "tom.jsonl"))
    assert len(samples) == counts(released)["tom"]
    assert samples[0].choices == mcq(0)["options"] and samples[0].metadata["kind"] == "tom"

    def always_a(messages, tools, tool_choice, config) -> ModelOutput:  # type: ignore[no-untyped-def]
        assert SENT not in str(messages)
        out = ModelOutput.from_content(model="mockllm", content="ANSWER: A")
        out.usage = ModelUsage(
            input_tokens=1, output_tokens=1, total_tokens=2
        )  # no tokenizer download
        return out

    model = get_model("mockllm/model", custom_outputs=always_a)
    logs = inspect_eval(
        f"{out / 'task.py'}@released_v0004_tom",
        model=model,
        limit=5,
        log_dir=str(tmp_path / "logs"),
        display="none",
    )
    log = logs[0]
    assert log.status == "success", log.error
    assert len(log.samples) == 5 and log.eval.metadata["bank_version"] == "v0004"
    expected = sum(s.target == "A" for s in samples[:5]) / 5
    assert log.results.scores[0].metrics["accuracy"].value == pytest.approx(expected)
    assert 0 < expected < 1  # the scorer tells right from wrong


def test_harness_rejects_an_item_without_answer(tmp_path: Path) -> None:
    """An EgoToM row whose truth is none of its options is kept by the bank but cannot be a
    harness item: a reject ``no_answer``, the others exported."""
    from gen.formats.mcq import egotom_columns

    real = standin_audit()
    try:
        cols = egotom_columns("goal")
        rows = [
            dict.fromkeys(cols, "")
            | {
                "vuid": f"v{i}",
                "cuid": f"c{i}",
                "narrations_in_context": f"C looks {i}",
                "gt_goal": f"To go {i}" if i else "To fly",
                "goal_choice_a": f"To go {i}",
                "goal_choice_b": f"To sit {i}",
                "goal_choice_c": f"To run {i}",
            }
            for i in range(3)
        ]
        (tmp_path / "csv").mkdir()
        pl.DataFrame(rows).select(cols).write_csv(tmp_path / "csv" / "egotom_goal_shuffled.csv")
        bank = Bank(tmp_path)
        assert bank.add(tmp_path / "csv", near_dup_sim=None)[0].accepted == 3
        for fmt in ("lm_eval", "inspect"):
            result, _ = bank.export(fmt, out=str(tmp_path / fmt))
            assert (result.accepted, result.rejected) == (2, 1)
            assert [r["reason"] for r in read_jsonl(result.out_dir / "rejects.jsonl")] == [
                "no_answer"
            ]
            assert len(read_jsonl(tmp_path / fmt / "mcq.jsonl")) == 2
    finally:
        if real is not None:
            REGISTRY["audit"] = real


# -------------------------------------------------------------------------- reproducible, versioned


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_export_is_byte_reproducible_and_names_its_version(
    released: Bank, tmp_path: Path, fmt: str
) -> None:
    a = export(released, fmt, tmp_path / "a")
    b = export(released, fmt, tmp_path / "b")
    files_a = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    assert files_a == sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    for name in files_a:
        assert (a / name).read_bytes() == (b / name).read_bytes(), f"{fmt}: {name} differs"
    info = json.loads((a / "EXPORT.json").read_text())
    lock = released.lock()
    assert (info["label"], info["version"], info["format"]) == ("v0004", 4, fmt)
    assert info["lock_sha256"] == released_lock_sha(released)
    assert sorted(info["files"]) == [n for n in files_a if n != "EXPORT.json"]
    assert info["items"] == {
        k: lock["counts"][k]["items"] for k in export_kinds(fmt) if k in lock["counts"]
    }
    text = "".join(
        (a / n).read_text(errors="replace") for n in files_a if not n.endswith(".parquet")
    )
    assert (
        str(a) not in text and str(tmp_path) not in text
    )  # nothing says where the export was written
    native = {
        "parquet": "README.md",
        "hf": "README.md",
        "croissant": "croissant.json",
        "lm_eval": "released_v0004_tom.yaml",
        "inspect": "task.py",
        "wagibench": "EXPORT.json",
        "egotom": "EXPORT.json",
        "scenarios": "MANIFEST.lock.json",
    }[fmt]
    assert "v0004" in (a / native).read_text()


def released_lock_sha(bank: Bank) -> str:
    return hashlib.sha256((version_dir(bank.root, bank.current) / LOCK).read_bytes()).hexdigest()


def test_task_names_from_a_hostile_bank_name_are_identifiers(tmp_path: Path) -> None:
    """The bank's folder name goes into Python and YAML: only ``[a-z0-9_]`` reaches them."""
    real = standin_audit()
    try:
        bank = Bank(tmp_path)
        bank.root = tmp_path / 'x"); import os; os.system("boom'
        bank.add(run_folder(tmp_path / "tom", tom_items()))
        out = export(bank, "inspect", tmp_path / "ins")
        source = (out / "task.py").read_text()
        compile(source, "task.py", "exec")
        fns = re.findall(r"^def (\w+)\(\)", source, re.MULTILINE)
        assert fns == ["x_import_os_os_system_boom_v0001_tom"]
        assert "os.system(" not in source.replace(repr(bank.root.name), "")
        lm = export(bank, "lm_eval", tmp_path / "lm")
        cfg = yaml.safe_load(
            (lm / "x_import_os_os_system_boom_v0001_tom.yaml").read_text().replace("!function ", "")
        )
        assert cfg["metadata"]["bank"] == bank.root.name
    finally:
        if real is not None:
            REGISTRY["audit"] = real


def test_the_network_guard_refuses_outside_addresses() -> None:
    with pytest.raises(OSError, match="refused"):
        socket.create_connection(("192.0.2.1", 80), timeout=1)  # TEST-NET-1: never reached
    with pytest.raises(OSError, match="refused"):
        socket.getaddrinfo("huggingface.co", 443)


def test_filters_name_the_blind_filter_and_the_chain() -> None:
    """A batch that went tom -> nocontext says it was blind-filtered; an imported file says so."""
    from gen.generators.bank.export import Job
    from gen.generators.bank.facts import filter_lines
    from gen.templates import Prompts

    lock = {
        "sources": [
            {
                "version": 1,
                "items_added": 5,
                "generator": "nocontext",
                "source": "f" * 64,
                "upstream": [{"generator": "tom"}],
            },
            {"version": 2, "items_added": 3, "generator": None, "source": "e" * 64},
        ],
        "history": [
            {
                "label": "v0002",
                "audit": {"by_severity": {"error": 1}, "fail_on": "error", "forced": True},
                "refused": {"bank:near_duplicate": 2},
            }
        ],
    }
    job = Job(Path("b"), 2, Path("b/versions/v0002"), lock, "0" * 64, {}, Prompts())
    assert filter_lines(job) == [
        f"v0001: 5 items from tom -> nocontext (run manifest sha256 {'f' * 64}); each generator's "
        "own checks dropped "
        "or regenerated what failed them (counted in its manifest); blind-filtered by nocontext: "
        "items that models "
        "answered without the context were removed.",
        f"v0002: 3 items from external file (record files sha256 {'e' * 64}).",
        "v0002: the batch's audit forced past its findings (force=true) (fail_on=error; 1 errors, "
        "0 warnings, 0 info); "
        "refused as exact or near duplicates of bank or batch items: bank:near_duplicate 2.",
    ]
