"""The import contracts of the groupml package, read from the source with ``ast``.

* the pure layers (search, learners, planner, tenancy, fitting) import no database code
  (``groupml.db``), no SQL entry point (``groupml.udf``) and no executor;
* the executor never imports the SQL entry layer;
* no import cycles among groupml's modules.

Every import counts, also one inside a function: such an import hides a dependency, it does
not remove it.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "pyudf" / "groupml"

PURE = ("groupml.search", "groupml.learners", "groupml.planner", "groupml.tenancy", "groupml.fitting")
NOT_BELOW_PURE = ("groupml.db", "groupml.udf", "groupml.executor")


def _in(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _modules():
    """Module name -> (path, is a package's __init__)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


MODULES = _modules()


def _imports(module: str):
    """(imported groupml module, line) for every import statement of ``module``: ``from X
    import name`` counts as an import of ``X.name`` when that is a module, else of ``X``."""
    path, is_pkg = MODULES[module]
    here = module.split(".") if is_pkg else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _in(alias.name, ("groupml",)):
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not _in(target, ("groupml",)):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in MODULES else target), node.lineno


GRAPH = {m: {t for t, _ in _imports(m) if t in MODULES} for m in MODULES}


def test_the_package_is_found():
    assert "groupml.executor.run" in MODULES and "groupml.learners" in MODULES


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _in(m, PURE)))
def test_pure_layers_import_no_db_udf_or_executor(module):
    bad = [f"line {line}: {target}" for target, line in _imports(module) if _in(target, NOT_BELOW_PURE)]
    assert bad == [], f"{module} imports {bad}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _in(m, ("groupml.executor",))))
def test_the_executor_imports_no_udf(module):
    bad = [f"line {line}: {target}" for target, line in _imports(module) if _in(target, ("groupml.udf",))]
    assert bad == [], f"{module} imports {bad}"


def _cycles(graph):
    """The strongly connected components with a cycle (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert _cycles(GRAPH) == []
