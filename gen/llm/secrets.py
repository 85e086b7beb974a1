"""Secrets (API keys, tokens) come from the environment, at the moment a call is made, and are
never part of a config, a command line, a cache key, a log line or an error message.

A run folder is what people share, bank and attach to papers; Hydra writes the command line into
``.hydra/overrides.yaml`` verbatim and the config into ``.hydra/config.yaml``, and the manifest
holds the config too. So a secret never becomes a config value: a backend config names the
environment *variable* that holds it (``llm.api_key_env``), and :func:`refuse_on_command_line`
refuses any argument that names or looks like a secret before Hydra, the override parser or an
error message sees it (with one line that does not repeat it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from gen.errors import ConfigError

SECRET_NAME = re.compile(
    r"(?:^|[_-])(?:api[_-]?key|apikey|access[_-]?key|secret[_-]?key|token|secret|password|passwd|"
    r"authorization|auth|bearer|cookie|credentials?|headers?)$",
    re.IGNORECASE,
)
"""A name that holds a secret (``api_key``, ``OPENAI_API_KEY``, ``auth_token``, ``headers``…):
never a config field, never an override. Its ``*_env`` counterpart names a variable instead."""

KEY_SHAPES = re.compile(
    r"\bsk-[A-Za-z0-9_-]{16,}|\bhf_[A-Za-z0-9]{20,}|\bgh[opsur]_[A-Za-z0-9]{20,}|\bgithub_pat_\w{20,}"
    r"|\bAKIA[0-9A-Z]{16}\b|\bAIza[0-9A-Za-z_-]{30,}|\bxox[abposr]-[A-Za-z0-9-]{10,}"
    r"|\bBearer\s+\S+|[A-Za-z][A-Za-z0-9+.-]*://[^/\s@]+@",
    re.IGNORECASE,
)
"""Values shaped like a well-known key or token, or a URL with a user or password in it."""

ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$")
"""What an ``*_env`` option may hold: an environment variable's name in capitals. A key's own
characters (lower case, ``-``) are refused without repeating them, so a key pasted into the
wrong option is not written either."""

_NAMED = re.compile(r"([A-Za-z_][\w.-]*)\s*[:=]")

HOW = (
    "gen reads keys and tokens only from the environment (export OPENAI_API_KEY=..., or name "
    "another variable with llm.api_key_env=NAME), so that no run folder, log or cache holds one"
)


def is_secret_name(name: str) -> bool:
    """``name`` (a config key, or its last dotted part) holds a secret by its name."""
    return bool(SECRET_NAME.search(name.rsplit(".", 1)[-1]))


def refuse_on_command_line(args: Iterable[str]) -> None:
    """Refuse a command line that carries a secret: an option or nested key named like one
    (``llm.api_key=…``, ``+llm.api_key=…``, ``models=[{api_key: …}]``,
    ``hydra.job.env_set.OPENAI_API_KEY=…``), or a value shaped like a key (``sk-…``, ``Bearer …``,
    a URL with a password). Runs before anything parses the arguments, so no parser error, no
    Hydra file and no log line ever repeats one.

    Raises:
        ConfigError: one line naming the argument's position and option, never its value.
    """
    for position, arg in enumerate(args, 1):
        key, eq, value = arg.partition("=")
        names = [key.strip()] if eq else []
        if value.lstrip().startswith(("{", "[")):  # a dict or list value: its keys too
            names += [m.group(1) for m in _NAMED.finditer(value)]
        named = next((n for n in names if is_secret_name(n.lstrip("+~"))), None)
        if named is not None:
            raise ConfigError(
                f"{named.lstrip('+~')}: secrets are not taken on the command line; {HOW}"
            )
        if KEY_SHAPES.search(arg):
            option = key.strip().lstrip("+~") if eq else ""
            what = (
                f"the value of {option}"
                if re.fullmatch(r"[\w.]+", option)
                else f"argument {position}"
            )
            raise ConfigError(
                f"{what} looks like a key, a token or a URL with a password (not repeated "
                f"here); {HOW}"
            )


def env_secret(variable: str | None) -> str | None:
    """The secret held by environment variable ``variable`` now (None when unset or empty)."""
    if not variable:
        return None
    value = os.environ.get(variable, "").strip()
    return value or None


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with every occurrence of each secret replaced by ``***`` (a server's error body
    may echo the key it refused)."""
    for s in secrets:
        if s and len(s) >= 4:
            text = text.replace(s, "***")
    return text


def env_secrets(data: Any = None) -> list[str]:
    """The secrets the environment holds now: every variable named like one (``OPENAI_API_KEY``,
    ``HF_TOKEN``…) and every variable an ``api_key_env`` option of ``data`` (a config as plain
    data) names; values shorter than 8 characters are not taken for keys."""
    names = {n for n in os.environ if is_secret_name(n)}
    names |= {v for k, v in _walk(data) if k.rsplit(".", 1)[-1] == "api_key_env" and v}
    values = {os.environ.get(n, "").strip() for n in names}
    return sorted((v for v in values if len(v) >= 8), key=len, reverse=True)


def _walk(data: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted option, text) of every string in ``data`` (dict keys included, as values)."""
    if isinstance(data, dict):
        for k, v in data.items():
            where = f"{prefix}.{k}" if prefix else str(k)
            yield where, str(k)
            yield from _walk(v, where)
    elif isinstance(data, (list, tuple)):
        for i, v in enumerate(data):
            yield from _walk(v, f"{prefix}[{i}]")
    elif isinstance(data, str):
        yield prefix, data


def refuse_in_config(data: Any) -> None:
    """Refuse a composed config (interpolations resolved, Hydra's own node, launcher options and
    folder names included) that holds a secret of the environment or a value shaped like a key:
    ``hydra.run.dir='runs/${oc.env:OPENAI_API_KEY}'`` would put the key in the folder's name,
    the terminal and every file that names the folder. Runs before anything is written.

    Raises:
        ConfigError: one line naming the option, never its value.
    """
    held = env_secrets(data)
    for where, text in _walk(data):
        if any(s in text for s in held) or KEY_SHAPES.search(text):
            raise ConfigError(
                f"{where or 'the config'}: holds a key or a token once interpolated (not repeated "
                f"here; an ${{oc.env:…}} of a key?); {HOW}"
            )


def scrub(text: str) -> str:
    """``text`` without the environment's secrets and key-shaped values (``***`` instead): the
    last guard of every line gen prints or logs."""
    text = redact(text, *env_secrets())
    return KEY_SHAPES.sub(_hidden, text)


def _hidden(m: re.Match[str]) -> str:
    shape = m.group(0)
    if "***" in shape:  # redacted already
        return shape
    return f"{shape.split()[0]} ***" if shape[:6].lower() == "bearer" else "***"


def redact_data(data: Any, *secrets: str | None) -> Any:
    """``data`` (a reply's JSON) with every string redacted of each secret (a server may echo
    the Authorization header it got, in a 200 reply too)."""
    if isinstance(data, dict):
        return {redact_data(k, *secrets): redact_data(v, *secrets) for k, v in data.items()}
    if isinstance(data, list):
        return [redact_data(v, *secrets) for v in data]
    if isinstance(data, str):
        return redact(data, *secrets)
    return data
