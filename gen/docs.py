"""Reference text generated from the code: a generator's options (the rows ``--help`` prints)
and its records' schema, as Markdown for the docs site (``docs/hooks.py`` puts them into the
reference pages), so the options are described in one place: their config's field docstrings.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from gen.engine.registry import REGISTRY, Generator
from gen.kinds import field_docs


@dataclass(frozen=True)
class Option:
    """One option of a generator, as ``gen <name> --help`` lists it."""

    key: str
    default: Any
    """The default as ``--help`` shows it (a backend by its preset name, a dict or list as JSON)."""
    description: str
    """The field's docstring, on one line."""


def options(name: str, *, environment: bool = True) -> list[tuple[str, list[Option]]]:
    """A generator's options in ``--help``'s sections: its own, then the common ones.

    ``environment``: a default read from an environment variable shows today's value (as
    ``--help`` does); without it, the variable (``$GEN_CACHE_DIR or ~/.cache/gen``), as the docs
    show it.
    """
    from gen.engine.runner import CommonConfig

    spec = REGISTRY[name]
    own = [k for k in spec.config.model_fields if k not in CommonConfig.model_fields]
    return [
        (f"{name} options", [option(spec.config, k, environment) for k in own]),
        (
            "common options",
            [option(spec.config, k, environment) for k in CommonConfig.model_fields],
        ),
    ]


def option(model: type[BaseModel], key: str, environment: bool = True) -> Option:
    """One field of a config as an :class:`Option`."""
    field = model.model_fields[key]
    return Option(
        key, shown_default(model, key, environment), " ".join((field.description or "").split())
    )


def shown_default(model: type[BaseModel], key: str, environment: bool = True) -> Any:
    """A default as ``--help`` prints it: a backend by its preset, other dicts and lists inline."""
    from gen.engine.config import field_default, preset_of

    value = field_default(model, key)
    if isinstance(value, str) and "${" in value:  # an environment variable
        if environment:
            value = model.model_fields[key].get_default(call_default_factory=True)
        else:
            value = re.sub(r"\$\{oc\.env:(\w+),'?([^'}]*)'?\}", r"$\1 or \2", value)
    if key in ("llm", "embedder") and isinstance(value, dict):
        return preset_of(key, value) or json.dumps(value, separators=(",", ":"))
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return value


# --------------------------------------------------------------------------- Markdown


def cell(text: str) -> str:
    """Text for a Markdown table cell: RST's ````x```` as Markdown code, pipes escaped outside
    code (a table keeps a code span's pipes as they are, and would show an escape there)."""
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else p.replace("|", "\\|") for p in parts).replace(
        "\n", " "
    )


def code(value: Any) -> str:
    """A value as inline code (a backtick inside it is doubled around)."""
    text = (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def options_markdown(name: str) -> str:
    """A generator's options as Markdown tables (one per ``--help`` section), inside a
    ``gen-options`` block (the docs test reads the built page's tables from it)."""
    out = ['<div class="gen-options" markdown>', ""]
    for title, rows in options(name, environment=False):
        out += [f"**{title}**", "", "| option | default | what it does |", "|---|---|---|"]
        out += [f"| `{o.key}` | {code(o.default)} | {cell(o.description)} |" for o in rows]
        out.append("")
    out += ["</div>", ""]
    return "\n".join(out)


def backend_markdown(model: type[BaseModel], skip: tuple[str, ...] = ()) -> str:
    """A backend config's fields (``llm.<key>=``) as a Markdown table."""
    rows = ["| option | default | what it does |", "|---|---|---|"]
    for key in model.model_fields:
        if key in skip:
            continue
        o = option(model, key, environment=False)
        rows.append(f"| `{key}` | {code(o.default)} | {cell(o.description)} |")
    return "\n".join(rows) + "\n"


def generators_markdown() -> str:
    """Every registered generator with its help line, linked to its reference page."""
    rows = ["| generator | what it does |", "|---|---|"]
    rows += [f"| [`{n}`]({n}.md) | {cell(REGISTRY[n].help)} |" for n in sorted(REGISTRY)]
    return "\n".join(rows) + "\n"


def records_markdown(name: str) -> str:
    """A generator's record models (``records=``) and the models they hold, as Markdown."""
    spec: Generator = REGISTRY[name]
    if not spec.records:
        return (
            f"`{name}` declares no record model: its records file holds what its input "
            "held (see above).\n"
        )
    out = [
        f"Records file: `{name}.jsonl` (kind `{spec.kind}`); one line is "
        + ", or ".join(f"a `{m.__name__}`" for m in spec.records)
        + ".",
        "",
    ]
    for model in nested_models(spec.records):
        out += [f"#### `{model.__name__}`", ""]
        doc = first_paragraph(model)
        if doc:
            out += [cell(doc), ""]
        out += ["| field | type | what it holds |", "|---|---|---|"]
        docs = field_docs(model)
        for key, field in model.model_fields.items():
            shown = field.alias or key
            need = "" if field.is_required() else f" (default {code(default_of(field))})"
            out.append(
                f"| `{shown}` | {code(type_name(field.annotation))}{need} "
                f"| {cell(docs.get(key, ''))} |"
            )
        if model.model_config.get("extra") == "allow":
            out.append("| … | | further fields are kept as they are |")
        out.append("")
    return "\n".join(out)


def default_of(field: Any) -> Any:
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return json.dumps(value) if isinstance(value, dict | list) else value


def first_paragraph(model: type) -> str:
    doc = inspect.getdoc(model) or ""
    if model.__doc__ is None or doc == (inspect.getdoc(BaseModel) or ""):
        return ""
    return " ".join(doc.split("\n\n")[0].split())


def nested_models(roots: tuple[type[BaseModel], ...]) -> list[type[BaseModel]]:
    """The roots, then every model of gen's own that their fields hold (breadth first, once),
    and the models a record names in its ``doc_models`` class variable (what a field kept as a
    plain dict is checked against, such as a digital bundle's app states)."""
    seen: list[type[BaseModel]] = []
    queue = list(roots)
    while queue:
        model = queue.pop(0)
        if model in seen:
            continue
        seen.append(model)
        for field in model.model_fields.values():
            queue += [m for m in models_in(field.annotation) if m not in seen]
        queue += [m for m in getattr(model, "doc_models", ()) if m not in seen]
    return seen


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models of gen's own inside a type (``list[AppState] | None`` -> AppState)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation] if annotation.__module__.startswith("gen.") else []
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        out += models_in(arg)
    return out


def type_name(annotation: Any) -> str:
    """A field's type as a reader writes it: ``list[str] | None``, ``AppState``."""
    if annotation is None or annotation is type(None):
        return "None"
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) if isinstance(a, str) else str(a) for a in args)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join('...' if a is Ellipsis else type_name(a) for a in args)}]"
    return re.sub(r"\b(?:[a-z_]\w*\.)+(\w+)", r"\1", str(annotation))


__all__ = [
    "Option",
    "backend_markdown",
    "generators_markdown",
    "options",
    "options_markdown",
    "records_markdown",
]
