"""The package's layering: no import circles, and no module imports one from a layer above it.

Every import counts, also those inside functions (imported on use). Layers, lowest first; a module may import
from its own layer and below. Inside one folder, modules may import each other as long as no circle forms.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mri_recon"

LAYERS = [
    {"_version", "errors"},
    {"backend"},
    {"validation", "grid", "scaling"},
    {"scan"},
    {"kernels"},
    {"io", "operators", "solvers", "filters"},
    {"planner", "prep_memory"},
    {"prep"},
    {"sim"},
    {"result", "progress"},
    {"pipeline", "series"},
    {"api"},
    {"doctor"},
    {"batch"},
    {"cli", "cli_batch", "cli_solver", "cli_temporal", "console", "__init__", "__main__", "simulate"},
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _package_of(name: str, path: Path) -> list[str]:
    parts = name.split(".") if name != "__init__" else []
    return parts if path.name == "__init__.py" else parts[:-1]


def _imports(name: str, path: Path) -> set[str]:
    """Modules of the package that ``name`` imports (dotted names relative to ``mri_recon``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(name, path)
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("mri_recon"):
                target = node.module[len("mri_recon"):].lstrip(".")
            else:
                continue
            for alias in node.names:
                child = f"{target}.{alias.name}" if target else alias.name
                found.add(child if child in MODULES else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("mri_recon."):
                    found.add(alias.name[len("mri_recon."):])
    return {m for m in found if m and m != name and m in MODULES}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _rank(module: str) -> int:
    top = module.split(".")[0]
    assert top in RANK, f"module {module} belongs to no layer: add its folder to LAYERS"
    return RANK[top]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_from_a_higher_layer(module):
    upward = sorted(t for t in GRAPH[module]
                    if _rank(t) > _rank(module) and t.split(".")[0] != module.split(".")[0])
    assert not upward, f"{module} imports from a higher layer: {upward}"


def test_no_import_circles():
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(GRAPH[node]):
            if state.get(target) == 1:
                cycle = stack[stack.index(target):] + [target]
                raise AssertionError(f"import circle: {' -> '.join(cycle)}")
            if target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)


def test_every_module_is_small():
    large = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > 450}
    assert not large, f"modules over 450 lines: {large}"
