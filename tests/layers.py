"""The package's layers, read from its source: which module and which folder may import which.

Each module belongs to one layer; an import (at module level, in a function, or under ``TYPE_CHECKING``) may point
to its own layer or one below, never above, and the imports form no cycle. ``drivetrain/__init__.py`` is the
public API on top of it all and is not itself imported by any module. The folders (``loop/``, ``control/``, …; a
top-level module counts as a folder of its own) form a DAG as well: no two import each other, in either direction.
``docs/architecture.md`` shows the picture this module draws (``python tests/layers.py``), and a test keeps both
true.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "drivetrain"

# Bottom to top: (layer, module prefixes). A module's layer is that of its longest matching prefix. The folders
# are in this order too: every module of a folder sits at or above the layers of the folders below it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("errors", "home", "jsontypes", "messages", "pricing", "prompts")),
    ("the host", ("host",)),
    ("providers and tools", ("models", "tools", "testing")),
    ("control", ("control",)),
    ("the run's value", ("loop.state", "loop.result", "loop.events", "loop.profile", "loop.budget", "loop.repair")),
    ("the step's working types", ("loop.draft",)),
    ("the loop's parts", ("loop.calls", "loop.guard", "loop.context", "loop.compaction", "loop.nodes")),
    ("the loop", ("loop.step", "loop.graph")),
    ("the session log", ("sessions",)),
    ("telemetry", ("telemetry",)),
    ("the agent", ("agent",)),
    ("profiles and plans", ("small", "plans", "subagents", "batch")),
    ("MCP", ("mcp",)),
    ("front ends", ("cli", "serve", "__main__")),
]
# a package's __init__ that only names its folder belongs with what is in it
FOLDERS = (
    "loop",
    "control",
    "sessions",
    "plans",
    "small",
    "batch",
    "host",
    "mcp",
    "subagents",
    "cli",
    "models",
    "tools",
    "testing",
    "serve",
    "telemetry",
)


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package by its name under ``drivetrain`` ("" is the package itself)."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int | None:
    best, found = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), i
    if found is None and module in FOLDERS:
        return 0  # a folder's docstring-only __init__
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` imports, wherever the import statement is."""
    out: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ["drivetrain", *name.split(".")] if name else ["drivetrain"]
                base = base if is_package else base[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target != "drivetrain" and not target.startswith("drivetrain."):
                continue
            target = target.removeprefix("drivetrain").removeprefix(".")
            for alias in node.names:  # ``from drivetrain.loop import budget`` imports the module loop.budget
                sub = f"{target}.{alias.name}" if target else alias.name
                out.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "drivetrain" or alias.name.startswith("drivetrain."):
                    out.add(alias.name.removeprefix("drivetrain").removeprefix("."))
    out.discard(name)
    return out


def graph() -> dict[str, set[str]]:
    """{module: the package modules it imports}, read from the source once per process."""
    return {name: set(targets) for name, targets in _graph().items()}


@functools.lru_cache(maxsize=1)
def _graph() -> dict[str, frozenset[str]]:
    mods = modules()
    return {name: frozenset(imports(name, path, set(mods))) for name, path in mods.items()}


def problems() -> list[str]:
    """Every import that points up a layer or at the public API, every module without a layer, and any cycle."""
    g = graph()
    out = []
    for name, targets in sorted(g.items()):
        if name == "":
            continue
        mine = layer_of(name)
        if mine is None:
            out.append(f"drivetrain.{name} has no layer in tests/layers.py LAYERS")
            continue
        for t in sorted(targets):
            if t == "":
                out.append(f"drivetrain.{name} imports the public API (drivetrain); import the module that defines it")
                continue
            theirs = layer_of(t)
            if theirs is not None and theirs > mine:
                out.append(
                    f"drivetrain.{name} ({LAYERS[mine][0]}) imports drivetrain.{t}, a layer above ({LAYERS[theirs][0]})"
                )
    out += [f"import cycle: {' -> '.join('drivetrain.' + m for m in c)}" for c in cycles(g)]
    out += [f"folder cycle: {' -> '.join(c)}" for c in cycles(folder_graph(g))]
    return out


def folder_of(module: str) -> str:
    """The folder a module is in (``loop/step`` → ``loop``); a top-level module is a folder of its own."""
    return module.split(".")[0]


def folder_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
    """{folder: the other folders its modules import}; the public API (``drivetrain/__init__``) is left out."""
    out: dict[str, set[str]] = {}
    for name, targets in g.items():
        if name:
            out.setdefault(folder_of(name), set()).update(folder_of(t) for t in targets if t)
    for folder, targets in out.items():
        targets.discard(folder)
    return out


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules (Tarjan's algorithm), if any."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group) + [sorted(group)[0]])

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def mermaid() -> str:
    """The layers as a picture: one box per layer (bottom at the bottom) listing its modules by folder, and an
    arrow from a layer to each layer it imports from, less those implied by the others (a transitive reduction)."""
    g = graph()
    members: dict[int, dict[str, list[str]]] = {}
    for name in g:
        i = layer_of(name) if name else None
        if i is None or any(other.startswith(name + ".") for other in g):
            continue  # the public API, or a package's own __init__
        folder, _, leaf = name.rpartition(".")
        members.setdefault(i, {}).setdefault(folder.replace(".", "/"), []).append(leaf)
    lines = ["flowchart TB"]
    for i in reversed(range(len(LAYERS))):
        text = "<br/>".join(
            f"<b>{f}/</b> {', '.join(sorted(ms))}" if f else ", ".join(sorted(ms))
            for f, ms in sorted(members.get(i, {}).items())
        )
        lines.append(f'    L{i}["<b>{i}. {LAYERS[i][0]}</b><br/>{text}"]')
    uses = {(layer_of(a), layer_of(b)) for a, ts in g.items() if a for b in ts if b}
    uses = {(a, b) for a, b in uses if a is not None and b is not None and a != b}
    implied = {(a, b) for a, b in uses for c in range(b + 1, a) if (a, c) in uses and _reaches(uses, c, b)}
    lines += [f"    L{a} --> L{b}" for a, b in sorted(uses - implied, reverse=True)]
    return "\n".join(lines)


def _reaches(edges: set[tuple[int, int]], a: int, b: int) -> bool:
    return (a, b) in edges or any(_reaches(edges, c, b) for c in range(b + 1, a) if (a, c) in edges)


if __name__ == "__main__":
    print(mermaid())
