"""The project's import structure: one top-level package, no cycles, and rooms that share
only through the floor below them.

- ``gen``'s runtime (everything but ``gen.generators`` and ``gen.schemas``) never imports a
  generator, at any level: the registry finds them through entry points.
- No generator room (``gen.generators.<room>``) imports another room, at any level (a lazy
  import inside a function counts: it is a dependency all the same); a piece two rooms need
  lives in ``gen``.
- Module-level imports have no cycle. An import under ``if TYPE_CHECKING:`` never runs and is
  not counted. ``from pkg.mod import x`` is an edge to ``pkg.mod``; ``from pkg import x`` is an
  edge to ``pkg``'s ``__init__``, or to ``pkg.x`` when that is a module. A package's parents,
  which Python imports first, are not edges.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path
from typing import cast

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gen",)
ROOMS = "gen.generators"


def project_modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root`` (but ``__main__``): dotted name -> source
    file."""
    out: dict[str, Path] = {}

    def walk(name: str, folder: Path) -> None:
        out[name] = folder / "__init__.py"
        for info in pkgutil.iter_modules([str(folder)]):
            if info.ispkg:
                walk(f"{name}.{info.name}", folder / info.name)
            elif info.name != "__main__":
                out[f"{name}.{info.name}"] = folder / f"{info.name}.py"

    for pkg in packages:
        walk(pkg, root / pkg)
    return out


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
    )


def _module_level(
    tree: ast.Module, *, functions: bool = False
) -> list[ast.Import | ast.ImportFrom]:
    """Import statements that run when the module is imported (not inside a function, unless
    ``functions``; never under ``if TYPE_CHECKING:``, which never runs)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                and not functions
            ):
                continue
            if _type_checking(child):
                for other in cast(ast.If, child).orelse:  # an else branch does run
                    visit(ast.Module(body=[other], type_ignores=[]))
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append(child)
            visit(child)

    visit(tree)
    return found


def import_graph(modules: dict[str, Path], *, functions: bool = False) -> dict[str, set[str]]:
    """Module -> the project modules it imports at module level (and inside functions too, with
    ``functions``)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        edges: set[str] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _module_level(tree, functions=functions):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    anchor = ".".join(parts[: len(parts) - node.level + 1])
                    base = f"{anchor}.{base}" if base else anchor
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            for target in targets:
                while target and target not in modules:  # import a.b.c of a non-module c
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := dfs(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := dfs(node)):
            return cycle
    return None


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(project_modules(ROOT, PACKAGES))


def room(module: str) -> str | None:
    """The generator room a module belongs to (``gen.generators.bank.add`` -> ``bank``)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and module.startswith(ROOMS + ".") else None


def room_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(room, other room) -> the modules of the first that import the second."""
    out: dict[tuple[str, str], list[str]] = {}
    for m, targets in graph.items():
        for t in targets:
            a, b = room(m), room(t)
            if a and b and a != b:
                out.setdefault((a, b), []).append(f"{m} -> {t}")
    return out


def test_every_module_imports() -> None:
    modules = project_modules(ROOT, PACKAGES)
    assert {
        "gen.llm",
        "gen.llm.boundary",
        "gen.llm.llama_server",
        "gen.engine.runner",
        "gen.engine.registry",
        "gen.generators.digital",
        "gen.schemas.mcq",
    } <= set(modules)
    for name in modules:
        importlib.import_module(name)


def test_the_project_has_no_import_cycle(graph: dict[str, set[str]]) -> None:
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


@pytest.fixture(scope="module")
def every_import() -> dict[str, set[str]]:
    """The graph with the imports inside functions too."""
    return import_graph(project_modules(ROOT, PACKAGES), functions=True)


def test_gen_does_not_import_generators(every_import: dict[str, set[str]]) -> None:
    """The runtime finds generators through entry points; no import of it, at any level, names
    one. The schemas are the floor: they import only schemas."""
    bad = {
        m: sorted(t for t in targets if t.startswith(ROOMS))
        for m, targets in every_import.items()
        if not m.startswith((ROOMS, "gen.schemas"))
    }
    assert not {m: t for m, t in bad.items() if t}
    floor = {
        m: sorted(t for t in targets if not t.startswith("gen.schemas"))
        for m, targets in every_import.items()
        if m.startswith("gen.schemas")
    }
    assert not {m: t for m, t in floor.items() if t}


def test_no_room_imports_another(every_import: dict[str, set[str]]) -> None:
    """Rooms share through ``gen``: an import of another room, even inside a function, is a
    dependency the module graph would otherwise hide."""
    edges = room_edges(every_import)
    assert not edges, "\n".join(
        f"{a} -> {b}: {', '.join(sites)}" for (a, b), sites in sorted(edges.items())
    )


def test_one_top_level_package() -> None:
    """Nothing imports the card's folders by their own names: they are gen.generators and
    gen.schemas (a second name would load every module twice)."""
    offenders = []
    for path in [*ROOT.glob("gen/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/*.py")]:
        if "gen/generators/" in path.as_posix() or "gen/schemas/" in path.as_posix():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            if any(n.split(".")[0] in ("generators", "schemas") for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_the_llm_package_is_split_as_documented(graph: dict[str, set[str]]) -> None:
    """Backends sit on the boundary, never the other way round; no submodule goes through
    the package's ``__init__`` (which imports them all)."""
    inside = {m: t for m, t in graph.items() if m.startswith("gen.llm.")}
    assert all("gen.llm" not in targets for targets in inside.values()), inside
    assert graph["gen.llm.config"] <= {"gen.errors", "gen.llm.secrets"}
    assert graph["gen.llm.secrets"] <= {"gen.errors"}
    assert graph["gen.llm.http"] <= {
        "gen.llm.secrets",
        "gen.llm.admission",
        "gen.timing",
    }  # the transport knows no config
    # the calls-in-flight budget knows nothing else (but the run's clock, which knows nothing)
    assert graph["gen.llm.admission"] <= {"gen.timing"}
    assert graph["gen.timing"] == set()
    assert graph["gen.llm.cache"] <= {"gen.errors", "gen.netfs"}
    assert graph["gen.netfs"] == set()
    for backend in ("gen.llm.boundary", "gen.llm.config", "gen.llm.cache", "gen.llm.http"):
        assert not graph[backend] & {
            "gen.llm.llama_cpp",
            "gen.llm.openai_compat",
            "gen.llm.llama_server",
            "gen.llm.fake",
        }
    assert not (ROOT / "gen" / "server.py").exists() and not (ROOT / "gen" / "llm.py").exists()


def test_the_checker_finds_cycles_and_ignores_lazy_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from toy.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from .. import c\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import toy.a\n"
        "def f():\n    import toy.a\n"
    )
    modules = project_modules(tmp_path, ("toy",))
    graph = import_graph(modules)
    assert graph["toy.a"] == {"toy.sub.b"} and graph["toy.sub.b"] == {"toy.c"}
    assert find_cycle(graph) is None  # toy.c's imports are lazy or for the type checker only
    (pkg / "c.py").write_text("import toy.a\n")
    assert find_cycle(import_graph(modules)) == ["toy.a", "toy.sub.b", "toy.c", "toy.a"]
    (pkg / "c.py").write_text("def f():\n    import toy.a\n")
    assert "toy.a" not in import_graph(modules)["toy.c"]
    assert "toy.a" in import_graph(modules, functions=True)["toy.c"]


def test_every_package_is_installed() -> None:
    """A non-editable install takes what pyproject's package finder includes: every package of
    the project (subpackages too) must match one of its patterns."""
    import fnmatch
    import tomllib

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]["find"]["include"]
    found = {m for m, p in project_modules(ROOT, PACKAGES).items() if p.name == "__init__.py"}
    assert found and all(any(fnmatch.fnmatchcase(m, pat) for pat in include) for m in found), (
        found,
        include,
    )


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: each strongly connected set of two or more modules,
    sorted (Tarjan's algorithm, without recursion). An edge from a module to a package above it
    (which Python imports first) is no cycle of its own and is left out."""
    edges = {
        m: sorted(t for t in ts if t in graph and not m.startswith(t + "."))
        for m, ts in graph.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            if i < len(edges[v]):
                work.append((v, i + 1))
                w = edges[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            for w in edges[v]:  # children finished: take their low links
                if w in on_stack:
                    low[v] = min(low[v], low[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def test_gen_core_has_no_import_cycle_counting_imports_inside_functions(
    every_import: dict[str, set[str]],
) -> None:
    """gen's own modules (the generators and schemas aside) in layers: no module imports one
    that imports it back, not even inside a function (an import under ``TYPE_CHECKING`` never
    runs and does not count)."""
    core = {
        m: {t for t in ts if not t.startswith((ROOMS, "gen.schemas"))}
        for m, ts in every_import.items()
        if not m.startswith((ROOMS, "gen.schemas"))
    }
    cycles = import_cycles(core)
    assert not cycles, "\n".join(f"cycle of {len(c)}: {', '.join(c)}" for c in cycles)


def test_the_cycle_counter_counts_each_knot_once_and_skips_lazy_type_imports(
    tmp_path: Path,
) -> None:
    pkg = tmp_path / "toy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from toy import a\n")  # a package's own chain: no cycle
    (pkg / "a.py").write_text("import toy.b\n")
    (pkg / "b.py").write_text("def f():\n    import toy.c\n")  # inside a function: counted
    (pkg / "c.py").write_text("import toy.a\nimport toy.d\n")
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import toy.e\n"
    )
    (pkg / "e.py").write_text("import toy.d\nimport toy\n")
    graph = import_graph(project_modules(tmp_path, ("toy",)), functions=True)
    assert import_cycles(graph) == [["toy.a", "toy.b", "toy.c"]]
    (pkg / "d.py").write_text("import toy.e\n")
    graph = import_graph(project_modules(tmp_path, ("toy",)), functions=True)
    assert import_cycles(graph) == [["toy.a", "toy.b", "toy.c"], ["toy.d", "toy.e"]]


def test_one_function_is_called_run() -> None:
    """``gen.run`` is the one public way to run a generator; the engine under it says what it
    does (``gen.engine.runner.run_config``), and no other module of gen's core defines a ``run``."""
    import gen
    from gen.engine.runner import run_config

    defined = [
        f"{m}:{node.lineno}"
        for m, path in project_modules(ROOT, PACKAGES).items()
        if not m.startswith((ROOMS, "gen.schemas"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name in ("run", "execute")
    ]
    assert len(defined) == 1 and defined[0].startswith("gen.engine.api:"), defined
    assert gen.run.__module__ == "gen.engine.api" and run_config.__module__ == "gen.engine.runner"


# gen in layers, bottom to top: a module imports only its own layer and the layers below, at any
# level (an import inside a function counts; one under ``TYPE_CHECKING`` never runs). A key is a
# module or a package (its modules too; the longest key wins); ``gen`` names the top package alone.
# The run engine sits above the model boundary, not below it: the runner loads the models of a
# command (``gen.engine.backends``) and the config composes their presets (``gen.engine.config``).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "base",  # no model, no run: errors, files, readers, pure maths, the records' schemas
        (
            "gen.errors",
            "gen.extras",
            "gen.paths",
            "gen.netfs",
            "gen.cores",
            "gen.readers",
            "gen.templates",
            "gen.timing",
            "gen.stats",
            "gen.agreement",
            "gen.intervals",
            "gen.schemas",
        ),
    ),
    ("text", ("gen.text",)),  # checks on text the model wrote, no model of their own but the tagger
    ("models", ("gen.llm",)),  # the LLM and embedding boundary
    ("engine", ("gen.engine",)),  # registry, config, run folders, runner, API
    (
        "kinds",  # record kinds and the formats rooms share
        ("gen.kinds", "gen.banks", "gen.formats", "gen.contextbench"),
    ),
    ("face", ("gen", "gen.cli", "gen.docs", "gen.sweep")),  # the package's face, the CLI
    ("rooms", ("gen.generators",)),  # the generators, which share only through the floors below
)


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> int | None:
    """The index of ``module``'s layer: its own key, else its nearest package's (``gen``, the top
    package, holds only itself), or None."""
    keys = {key: i for i, (_, ks) in enumerate(layers) for key in ks}
    name = module
    while name:
        if name in keys and (name == module or "." in name):
            return keys[name]
        name = name.rpartition(".")[0]
    return None


def upward_imports(
    graph: dict[str, set[str]], layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS
) -> list[str]:
    """Every import from a layer to a higher one, and every module no key places."""
    names = [name for name, _ in layers]
    out = [f"{m}: in no layer" for m in sorted(graph) if layer_of(m, layers) is None]
    for m in sorted(graph):
        low = layer_of(m, layers)
        for t in sorted(graph[m]):
            high = layer_of(t, layers)
            if low is not None and high is not None and high > low:
                out.append(f"{m} ({names[low]}) -> {t} ({names[high]})")
    return out


def test_gen_is_in_layers(every_import: dict[str, set[str]]) -> None:
    """No module of gen imports a higher layer, not even inside a function, and each has a
    layer (a new module is placed in ``LAYERS``)."""
    bad = upward_imports(every_import)
    assert not bad, "\n".join(bad)
    unused = [
        k
        for _, ks in LAYERS
        for k in ks
        if not any(m == k or m.startswith(k + ".") for m in every_import)
    ]
    assert not unused, unused  # a key that places no module names one that moved


def test_the_layer_check_finds_upward_and_unplaced_modules() -> None:
    layers = (("low", ("toy.a",)), ("high", ("toy", "toy.sub")))
    graph = {"toy": {"toy.a"}, "toy.a": set(), "toy.sub.b": {"toy.a"}, "toy.c": set()}
    assert layer_of("toy.sub.b", layers) == 1 and layer_of("toy.c", layers) is None
    assert upward_imports(graph, layers) == ["toy.c: in no layer"]
    graph["toy.a"] = {"toy.sub.b", "toy"}
    assert upward_imports(graph, layers) == [
        "toy.c: in no layer",
        "toy.a (low) -> toy (high)",
        "toy.a (low) -> toy.sub.b (high)",
    ]
