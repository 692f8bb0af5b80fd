"""Guard rails run with the unit tests: ruff over the code, and the integration marker on
every integration test module (``pytest -m "not integration"`` must select no test that needs
a cluster)."""

import ast
import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_ruff_finds_nothing():
    # the rules are in pyproject.toml ([tool.ruff]); ruff comes with the 'test' extra
    try:
        import ruff  # noqa: F401
    except ImportError:
        raise AssertionError("ruff is not installed: pip install 'groupml[test]' (or pip install ruff)") from None
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "pyudf", "tests", "bench", "installer"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]


def _marks_integration(path: str) -> bool:
    """Whether the module sets ``pytestmark`` to pytest.mark.integration (alone or in a list)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets):
            marks = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            return any(isinstance(m, ast.Attribute) and m.attr == "integration" for m in marks)
    return False


def test_every_integration_module_is_marked_integration():
    modules = sorted(glob.glob(os.path.join(ROOT, "tests", "integration", "test_*.py")))
    assert modules
    unmarked = [os.path.basename(p) for p in modules if not _marks_integration(p)]
    assert unmarked == [], f"add pytestmark = pytest.mark.integration to {unmarked}"
