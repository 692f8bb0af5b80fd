"""Test configuration shared by unit and integration tests.

The working tree's ``pyudf/`` goes first on sys.path so the tests exercise the
code under review, not an older installed copy; tests/ itself is importable for
the shared test tools (``plpy_stub``).
"""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "pyudf"))
sys.path.insert(1, os.path.join(ROOT, "tests"))


@pytest.fixture
def plpy(monkeypatch):
    """A fresh PL/Python-compatible ``plpy`` stub (tests/plpy_stub.py) in ``sys.modules``, with
    groupml's per-backend state reset (the session and the error class it builds on plpy.Error)."""
    from plpy_stub import PlpyStub

    stub = PlpyStub()
    monkeypatch.setitem(sys.modules, "plpy", stub)
    import groupml.db as db
    import groupml.udf as udf
    monkeypatch.setattr(db, "_session", None)
    monkeypatch.setattr(udf, "_sql_error_class", None)
    return stub
