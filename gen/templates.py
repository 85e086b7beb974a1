"""Prompt templates are Jinja files under ``prompts/``; every one used is hashed for the manifest.

A template renders to chat messages: lines ``[system]``, ``[user]`` and ``[assistant]`` open a
message (an ``[assistant]`` turn before the last ``[user]`` is a one-shot example).
"""

from __future__ import annotations

import hashlib
import re
import threading
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta

from gen.errors import ConfigError
from gen.paths import PROMPTS

_ROLE = re.compile(r"^\[(system|user|assistant)\]\s*$", re.MULTILINE)


class Prompts:
    """Renders templates with StrictUndefined and remembers the SHA-256 of each one used."""

    def __init__(self, root: Path = PROMPTS):
        self.root = root
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(root)),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=False,
            trim_blocks=True,
            lstrip_blocks=True,
            autoescape=False,
        )
        self.used: dict[str, str] = {}
        self._lock = threading.Lock()

    def hash(self, name: str) -> str:
        """Record a template (or any file under prompts/) as used; return its SHA-256."""
        path = self.root / name
        if not path.is_file():
            raise ConfigError(f"prompt template {name} not found under {self.root}")
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            known = self.used.get(name) == digest
            self.used[name] = digest
        if not known and name.endswith(".jinja"):  # partials it includes are inputs too
            ast = self.env.parse(data.decode("utf-8"))
            for ref in jinja2.meta.find_referenced_templates(ast):
                if ref:
                    self.hash(ref)
        return digest

    def render(self, name: str, **variables: Any) -> list[dict[str, str]]:
        """Render ``name`` (relative to prompts/) into a list of chat messages."""
        self.hash(name)
        text = self.env.get_template(name).render(**variables)
        return split_messages(text)


def split_messages(text: str) -> list[dict[str, str]]:
    """Split rendered text on ``[role]`` lines into messages; text before any marker is
    a user message."""
    parts = _ROLE.split(text)
    messages = []
    head = parts[0].strip()
    if head:
        messages.append({"role": "user", "content": head})
    for role, body in zip(parts[1::2], parts[2::2], strict=True):
        messages.append({"role": role, "content": body.strip()})
    return messages
