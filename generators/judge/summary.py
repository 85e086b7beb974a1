"""What every judge run ends with: the judge prompt's identity, the judges, the summary file."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import jinja2.meta

from gen.engine.panel import Panel
from gen.engine.runner import RunContext

if TYPE_CHECKING:
    from gen.generators.judge import JudgeConfig


def prompt_sha256(ctx: RunContext, name: str) -> str:
    """The SHA-256 of a judge prompt: its template file's, or, when it includes partials, of the
    sorted ``{template: sha}`` of it and every partial (a change to a partial changes it too)."""
    digest = ctx.prompts.hash(name)
    loader = ctx.prompts.env.loader
    assert loader is not None
    ast = ctx.prompts.env.parse(loader.get_source(ctx.prompts.env, name)[0])
    partials = sorted(p for p in jinja2.meta.find_referenced_templates(ast) if p)
    if not partials:
        return digest
    parts = {name: digest, **{p: ctx.prompts.hash(p) for p in partials}}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def finish(
    cfg: JudgeConfig,
    ctx: RunContext,
    panel: Panel | None,
    summary: dict[str, Any],
    prompt: dict[str, Any],
    lines: list[str] | None = None,
) -> None:
    """Write ``summary.json`` and the manifest's ``judge`` section (prompt version and hash, the
    candidate and judge models and families, how the judge was chosen, the summary); print
    ``lines`` at the end of the run."""
    if panel is not None:
        summary["usage"] = {j.label: j.llm.usage.as_dict() for j in panel.judges}
    ctx.write_json("summary.json", summary)
    ctx.extra["judge"] = {
        "kind": cfg.kind or "meta",
        **prompt,
        **(panel.manifest() if panel else {}),
        "summary": summary,
    }
    ctx.say(*(lines or []))
