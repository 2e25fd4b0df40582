"""The package's layering and its size rules.

Layering: no import circles, and no module imports one from a layer above it. Every import counts, also those
inside functions (imported on use). Layers, lowest first; a module may import from its own layer and below.
Inside one folder, modules may import each other as long as no circle forms.

Sizes and shape: no module over 400 lines, no function over 80 lines, ``pipeline.reconstruct`` and ``pipeline.run``
under 60; the names of a vocabulary with a registry (engines, regularizers, solvers, coil-map methods, coil-compression
methods; the time series' temporal terms) are compared as text only inside that registry (:data:`VOCABULARIES`, read
from the registries themselves; :data:`ALLOWED` lists the modules still to change), and every throughput constant lives
in ``operators/engines/cost.py``.

Text: no docstring or comment quotes a benchmark run (a time against another, a rate, the GPU it ran on, a run
number or date): a docstring says what the code does and why, the figures live in docs/benchmarks.md. Only
``backend`` imports ``cupy`` at module level; other modules reach CuPy's submodules inside functions.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mri_recon"

LAYERS = [
    {"_version", "errors"},
    {"arrays"},
    {"checks"},
    {"scan"},
    {"kernels"},
    {"io", "operators", "solvers", "filters"},
    {"torch"},
    {"planning"},
    {"prep"},
    {"sim"},
    {"result", "progress", "settings"},
    {"stages"},
    {"pipeline"},
    {"api"},
    {"doctor"},
    {"batch"},
    {"server"},
    {"cli", "__init__", "__main__"},
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


STAGE_MODULES = sorted(name for name in MODULES if name == "pipeline" or name.split(".")[0] == "stages")
"""The stages and the pipeline that runs them: they pass frozen records, and none changes a shared object."""


def _is_dataclass(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return (target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)) == "dataclass"


def _frozen(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and any(k.arg == "frozen" and getattr(k.value, "value", None) is True
                                              for k in node.keywords)


def _mutations(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` of each place in ``source`` that makes or changes a mutable shared record: a dataclass
    that is not frozen, an assignment to an attribute (``state.x = ...``, ``state.x += ...``) or to an item of
    one (``state.extra[k] = ...``), a ``setattr``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            decorators = [d for d in node.decorator_list if _is_dataclass(d)]
            found += [(node.lineno, f"dataclass {node.name} not frozen") for d in decorators if not _frozen(d)]
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) or (isinstance(part, ast.Subscript)
                                                       and isinstance(part.value, ast.Attribute)):
                    found.append((node.lineno, f"assigns {ast.unparse(part)}"))
                    break
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in (
                "setattr", "__setattr__"):
            found.append((node.lineno, "setattr"))
    return found


def test_the_mutation_check_finds_a_mutable_state():
    source = ("@dataclass\nclass State:\n    x: int = 0\n@dataclass(frozen=True)\nclass Record:\n    x: int\n"
              "def stage(state):\n    state.x = 1\n    state.extra['k'] += 2\n    a, state.y = 1, 2\n"
              "    setattr(state, 'z', 3)\n    local = {}\n    local['k'] = 1\n")
    assert sorted(_mutations(source)) == [(2, "dataclass State not frozen"), (8, "assigns state.x"),
                                  (9, "assigns state.extra['k']"), (10, "assigns state.y"), (11, "setattr")]


@pytest.mark.parametrize("module", STAGE_MODULES)
def test_the_stages_pass_frozen_records(module):
    found = _mutations(MODULES[module].read_text())
    assert not found, f"{module} changes a shared record (a stage returns a frozen record instead): {found}"


def _engine_names() -> set[str]:
    """Engine names, old and new (``Encoding.name``, ``Encoding.key``, the aliases), from the registry."""
    from mri_recon.operators.engines import registry

    return {*(e.name for e in registry.engines()), *(e.key for e in registry.engines()), *registry.ALIASES}


def _regularizer_names() -> set[str]:
    from mri_recon.solvers import regularizers

    return set(regularizers.names())


def _solver_names() -> set[str]:
    from mri_recon.solvers.registry import SOLVERS

    return set(SOLVERS)


def _temporal_names() -> set[str]:
    from mri_recon.solvers.temporal_terms import TEMPORAL_TERMS

    return set(TEMPORAL_TERMS)


def _compression_names() -> set[str]:
    from mri_recon.prep.compress_methods import COMPRESSION_METHODS

    return set(COMPRESSION_METHODS)


def _coil_map_names() -> set[str]:
    """The coil-map methods but ``auto`` and ``none``, words of other vocabularies too."""
    from mri_recon.prep.maps_methods import AUTO, COIL_MAPS, ONE_COIL

    return set(COIL_MAPS) - {AUTO, ONE_COIL}


@dataclass(frozen=True)
class Vocabulary:
    """Names that only their registry compares: ``names()`` (read from the registry), the ``homes`` (modules,
    or packages with every module in them) that may compare them, and ``words``: an expression whose name holds
    one of them (``x.regularizer``, ``params["regularizer"]``, ``params.get("regularizer")``) is taken to hold
    such a name."""

    names: Callable[[], set[str]]
    homes: tuple[str, ...]
    words: tuple[str, ...]

    def home(self, module: str) -> bool:
        return any(module == h or module.startswith(h + ".") for h in self.homes)


VOCABULARIES = {
    "engine": Vocabulary(_engine_names, ("operators.engines.registry",), ("name", "key", "engine", "method")),
    "regularizer": Vocabulary(_regularizer_names, ("solvers.regularizers",), ("regularizer",)),
    "solver": Vocabulary(_solver_names, ("solvers.registry",), ("solver", "used")),
    "coil-map": Vocabulary(_coil_map_names, ("prep.maps_methods",), ("maps", "method")),
    "temporal": Vocabulary(_temporal_names, ("solvers.temporal_terms",), ("temporal",)),
    "coil-compression": Vocabulary(_compression_names, ("prep.compress_methods",), ("compress",)),
}
"""Every vocabulary with a registry."""
ALLOWED: dict[str, set[str]] = {}
"""Modules of the time-series path that still compare names of these vocabularies as text, while that path is
rewritten (a time series as a reconstruction with a time axis): empty it as they go; the test fails for an
entry that no longer compares."""


def _word(node: ast.AST) -> str:
    """The name an expression goes by: ``x.word``, ``word``, ``params["word"]``, ``params.get("word", ...)``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and node.args and isinstance(node.args[0], ast.Constant)):
        return str(node.args[0].value)
    return ""


def _holds(node: ast.AST, vocabulary: Vocabulary) -> bool:
    word = _word(node)
    if vocabulary.words[:2] == ("name", "key"):  # engines: x.name, x.key, or a word with engine or method in it
        return word in ("name", "key") or any(w in word for w in vocabulary.words[2:])
    return any(w in word for w in vocabulary.words)


def _constant(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in names
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_constant(e, names) for e in node.elts)
    return False


def _compares(tree: ast.AST, vocabulary: Vocabulary, names: set[str]) -> list[int]:
    """Lines of ``tree`` that compare an expression holding a name of ``vocabulary`` with a literal name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_constant(s, names) for s in sides) and any(_holds(s, vocabulary) for s in sides):
                found.append(node.lineno)
    return found


def _violations() -> dict[tuple[str, str], list[int]]:
    trees = {name: ast.parse(path.read_text()) for name, path in MODULES.items()}
    found = {}
    for kind, vocabulary in VOCABULARIES.items():
        names = vocabulary.names()
        for module, tree in trees.items():
            if not vocabulary.home(module) and (lines := _compares(tree, vocabulary, names)):
                found[(module, kind)] = lines
    return found


def test_no_name_is_compared_outside_its_registry():
    found = _violations()
    unexpected = {f"{module}:{lines} ({kind})" for (module, kind), lines in found.items()
                  if kind not in ALLOWED.get(module, ())}
    assert not unexpected, f"names compared as text outside their registries: {sorted(unexpected)}"
    stale = {f"{module} ({kind})" for module, kinds in ALLOWED.items() for kind in kinds
             if (module, kind) not in found}
    assert not stale, f"ALLOWED lists modules that no longer compare these names (remove them): {sorted(stale)}"


@pytest.mark.parametrize(("code", "kind", "flagged"), [
    ('ok = encoding.name != "gpu-nufft"', "engine", True),
    ('ok = method == "gpu"', "engine", True),
    ('ok = device == "gpu"', "engine", False),
    ('ok = settings.regularizer == "l2"', "regularizer", True),
    ('ok = options.get("regularizer") in ("tv", "wavelet")', "regularizer", True),
    ('ok = kind == "tv"', "regularizer", False),
    ('ok = used == "admm"', "solver", True),
    ('ok = solver != "fista"', "solver", True),
    ('ok = coil_maps == "rss"', "coil-map", True),
    ('ok = method in ("walsh", "espirit")', "coil-map", True),
    ('ok = dcf == "file"', "coil-map", False),
    ('ok = params["temporal"] != "none"', "temporal", True),
    ('ok = params.get("temporal", "none") != "none"', "temporal", True),
    ('ok = gradient_delay == "none"', "temporal", False),
    ('ok = settings.coil_compress_method == "geometric"', "coil-compression", True),
    ('ok = params["coil_compress_method"] != "svd"', "coil-compression", True),
    ('ok = method == "svd"', "coil-compression", False),
])
def test_the_check_sees_a_name_comparison(code, kind, flagged):
    vocabulary = VOCABULARIES[kind]
    assert bool(_compares(ast.parse(code), vocabulary, vocabulary.names())) is flagged


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


_ORDINALS = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
             "fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth")
_TIME = r"(?:ns|us|µs|ms|s)"
RUN_QUOTES = {
    "a GPU model": r"\b(?:A100|H100|H200|B200|V100|L40S?|RTX ?\d{4})\b",
    "a bandwidth": r"\d ?[kMGT]i?B/s\b",
    "a rate": r"\b(?:pairs|triples|points|samples|scans|voxels)/s\b|\b\d(?:\.\d+)?e1[0-5]\b",
    "a run": rf"\bruns? ?#?\d+\b|_run\d+|\b(?:{_ORDINALS}) run\b",
    "a date": r"\b20\d\d-[01]\d-[0-3]\d\b",
    "a time against another": rf"\d ?{_TIME}\b[^.;]{{0,40}}\bagainst\b|\bagainst \d[\d.]* ?{_TIME}\b",
    "a time taken": rf"\btook\b[^.;]{{0,60}}?\d|\babout \d[\d.]* ?{_TIME}\b|\bin \d[\d.]* ?{_TIME}\b"
                    rf"|\d ?{_TIME} (?:each|per (?:scan|call|iteration|application))\b",
    "a speed-up": r"\d(?:\.\d+)?x (?:faster|slower|as long|the)\b|\d+(?:\.\d+)?% (?:faster|slower)\b"
                  r"|\bbeats?\b[^.;]{0,40}\d+%",
    "a measurement": r"\bmeasure[sd]?\b[^.;]{0,60}?\d|\d[\d,.]* measured\b",
    "the machine's cores": r"\(\d+ cores?\)|\b\d+-core (?:machine|host)\b",
}
"""What quotes a benchmark run in a docstring or comment. Physical times (``16 ms readouts``, ``2.5 ms ticks``),
tolerances and defaults are not runs and pass."""
_RUN_QUOTES = {what: re.compile(pattern) for what, pattern in RUN_QUOTES.items()}


def _texts(source: str) -> list[tuple[int, str]]:
    """``(first line, text)`` of every docstring and other string statement, and of every comment."""
    found = [(node.lineno, node.value.value) for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
             and isinstance(node.value.value, str)]
    found += [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
              if token.type == tokenize.COMMENT]
    return found


def run_quotes(source: str) -> list[tuple[int, str, str]]:
    """``(line, what, excerpt)`` of every run quoted in the docstrings and comments of ``source``; a match may
    span lines, so each text is matched with its whitespace folded, and the line is the match's first."""
    quotes = []
    for first, text in _texts(source):
        words = [(m.start(), m.group()) for m in re.finditer(r"\S+", text)]
        flat = " ".join(word for _, word in words)
        starts = [0]
        for _, word in words[:-1]:
            starts.append(starts[-1] + len(word) + 1)
        for what, pattern in _RUN_QUOTES.items():
            for match in pattern.finditer(flat):
                index = max(i for i, start in enumerate(starts) if start <= match.start())
                line = first + text[:words[index][0]].count("\n")
                quotes.append((line, what, flat[max(0, match.start() - 30):match.end() + 20]))
    return quotes


def test_no_docstring_or_comment_quotes_a_benchmark_run():
    found = [f"{name}:{line}: {what}: ...{excerpt}..." for name, path in sorted(MODULES.items())
             for line, what, excerpt in run_quotes(path.read_text())]
    assert not found, ("docstrings and comments say what the code does and why; figures go to "
                       "docs/benchmarks.md:\n" + "\n".join(found))


QUOTED_BEFORE = [  # text the package's docstrings and comments held before the figures moved out
    "on the H200's host about 6-9 GB/s with the source out of the host's caches (16 MiB in 2.7 ms)",
    "8 threads and 4 MiB pieces took 1.8 / 4.7 / 14.5 ms for 16 / 100 /\n400 MiB",
    "``docs/results/bench_cost_run13.json``, table in ``docs/benchmarks.md``",
    "timed on an NVIDIA\nH200 on 2026-12-02",
    "the kernel\nalone measures 3.1e12 on large problems",
    "(8 coils: 5.9e12 triples/s; the\nfit's one-coil rate is high",
    "3D 128^3 8-coil\nadjoint 10.0 ms against 11.7 ms with four warps per block",
    "(measured on an H200: 8 is 2.7x faster than 4)",
    "rows of 64 beat rows of 32 by 23% with 8 coils",
    "measured relative error 1.2e-6..1.6e-6 against the float64 sum",
    "object: about 955 measured)",
    "(12 ms for 524,288 x 2 float32 on a 2-core machine; 0.2 ms this way)",
    "# NumPy's stacked matmul of small matrices is 2.5x slower than einsum here (2 cores)",
    "transform keeps the device busy for about 0.3 ms",
    "(docs/benchmarks.md, seventh run)",
    "8 small scans took 1.6-1.7 s\nwhere one process took 0.26 s",
    "0.19 s per iteration at 128^2",
]
ALLOWED_TEXT = [
    "the frame duration (default: 3.5 ms per readout, a golden-angle FLASH)",
    "time stamps of a time series (2.5 ms ticks; io.frames)",
    "up to about 2 kHz for 4 ms readouts, 450 Hz for 16 ms, 150 Hz for 50 ms",
    "the centred times t - t_c must stay within +-1/2 s",
    "raised by 2% (a safe upper estimate for step sizes)",
    "the fastest of the two by the cost model (fitted by scripts/bench_cost.py; docs/benchmarks.md)",
    "FINUFFT tolerance 1e-7; lambda 1e-3 relative to the peak; 1.02 of the estimate",
    "Measured against tracemalloc and peak RSS on the CPU in ``docs/planner.md``",
]


@pytest.mark.parametrize("text", QUOTED_BEFORE)
def test_the_check_sees_a_quoted_run(text):
    assert run_quotes(f'"""{text}"""')


def test_the_check_reads_comments_and_names_the_line():
    source = 'x = 1\ny = 2  # 12 ms against 0.2 ms\n"""Text.\n\nTimed on an H200."""\n'
    assert [(line, what) for line, what, _ in run_quotes(source)] == [(5, "a GPU model"),
                                                                       (2, "a time against another")]


@pytest.mark.parametrize("text", ALLOWED_TEXT)
def test_the_check_passes_physical_times_and_tolerances(text):
    assert not run_quotes(f'"""{text}"""\nx = 1  # {text}')


def _module_level_imports(tree: ast.Module) -> list[str]:
    """Modules imported outside any function (at the top, or in a module-level ``try``/``if``)."""
    names, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.append(node.module or "")
        elif isinstance(node, (ast.Try, ast.If, ast.With)):
            todo += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                     *[n for h in getattr(node, "handlers", []) for n in h.body]]
    return names


def test_only_the_backend_imports_cupy_at_module_level():
    cupy = re.compile(r"^(?:cupy|cupyx|cupy_backends)(?:\.|$)")
    found = sorted(name for name, path in MODULES.items() if name != "arrays.backend"
                   and any(cupy.match(m) for m in _module_level_imports(ast.parse(path.read_text()))))
    assert not found, f"CuPy imported at module level outside arrays/backend.py: {found}"
