"""The package's layering and its size rules.

Layering: no import circles, and no module imports one from a layer above it. Every import counts, also those
inside functions (imported on use). Layers, lowest first; a module may import from its own layer and below.
Inside one folder, modules may import each other as long as no circle forms.

Sizes and shape: no module over 400 lines, no function over 80 lines, ``pipeline.reconstruct`` and ``pipeline.run``
under 60; engine names are compared only inside the engine registry, and every throughput constant lives in
``operators/engines/cost.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mri_recon"

LAYERS = [
    {"_version", "errors"},
    {"staging"},
    {"backend"},
    {"units"},
    {"validation", "grid", "scaling"},
    {"scan"},
    {"kernels"},
    {"io", "operators", "solvers", "filters"},
    {"planner", "prep_memory"},
    {"prep"},
    {"sim"},
    {"result", "progress", "settings"},
    {"stages"},
    {"pipeline", "series"},
    {"api"},
    {"doctor"},
    {"batch"},
    {"server"},
    {"cli", "console", "__init__", "__main__"},
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


MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
MAX_RECONSTRUCT_LINES = 60
ENGINE_NAMES = {"exact", "nufft", "gpu", "gpu-nufft", "exact-cpu", "nufft-cpu", "exact-gpu", "nufft-gpu", "fft",
                "gpu-fft", "fft-cpu", "fft-gpu"}
"""Engine names, old and new (``Encoding.name``, ``Encoding.key``, the aliases)."""
ENGINE_REGISTRY = "operators.engines.registry"


def _functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _length(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1


def test_every_module_is_small():
    large = {name: n for name, path in MODULES.items()
             if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not large, f"modules over {MAX_MODULE_LINES} lines: {large}"


def test_every_function_fits_a_screen():
    long = {(name, node.name): _length(node) for name, path in MODULES.items() for node in _functions(path)
            if _length(node) > MAX_FUNCTION_LINES}
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_pipeline_is_a_short_sequence_of_stages():
    for name in ("reconstruct", "run"):  # the settings, then the stages
        (function,) = [node for node in _functions(MODULES["pipeline"]) if node.name == name]
        assert _length(function) < MAX_RECONSTRUCT_LINES, f"pipeline.{name} has {_length(function)} lines"


def _engine_like(node: ast.AST) -> bool:
    """An expression that holds an engine or its name: ``x.name``, ``x.key``, or a variable or attribute
    called ``engine``/``method``."""
    word = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return word in ("name", "key") or "engine" in word or "method" in word


def _engine_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in ENGINE_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_engine_constant(e) for e in node.elts)
    return False


def test_no_engine_name_is_compared_outside_the_registry():
    found = []
    for name, path in MODULES.items():
        if name == ENGINE_REGISTRY:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(_engine_constant(s) for s in sides) and any(_engine_like(s) for s in sides):
                    found.append(f"{name}:{node.lineno}")
    assert not found, f"engine names compared outside {ENGINE_REGISTRY}: {found}"


def test_the_check_sees_an_engine_name_comparison():
    tree = ast.parse('ok = encoding.name != "gpu-nufft" or method == "gpu"\nother = device == "gpu"')
    compares = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Compare)),
                      key=lambda c: (c.lineno, c.col_offset))
    flagged = [any(_engine_constant(s) for s in (c.left, *c.comparators))
               and any(_engine_like(s) for s in (c.left, *c.comparators)) for c in compares]
    assert flagged == [True, True, False]


def test_every_throughput_is_defined_once_in_the_cost_module():
    rates = {}
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and (target.id.endswith("_PER_S") or target.id.startswith("R_")):
                    rates.setdefault(target.id, []).append(name)
    elsewhere = {rate: where for rate, where in rates.items() if where != ["operators.engines.cost"]}
    assert rates and not elsewhere, f"throughputs outside operators/engines/cost.py or defined twice: {elsewhere}"
