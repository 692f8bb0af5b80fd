"""torch's first import in a process, with a cancel check: the check keeps running while torch
loads, a cancel it raises stops the wait (not the import), and the next call waits for the
same import. Run in a new interpreter, where torch is not imported yet."""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

PYUDF = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "pyudf")

SCRIPT = textwrap.dedent("""
    import sys, threading
    from groupml.learners import _mlp

    class Cancel(Exception):
        pass

    calls = []

    def cancel_on_second_check():
        calls.append(threading.current_thread() is threading.main_thread())
        if len(calls) == 2:
            raise Cancel()

    try:
        _mlp.torch_module(cancel_on_second_check)
    except Cancel:
        pass
    else:
        raise SystemExit("the cancel was not raised")
    assert calls == [True, True], calls
    assert _mlp._torch_mod is None and _mlp._loader.is_alive()      # still loading
    loader = _mlp._loader
    checks = []
    torch = _mlp.torch_module(lambda: checks.append(1))
    assert _mlp._loader is loader and not loader.is_alive()          # the same import, awaited
    assert torch is sys.modules["torch"] and torch.get_num_threads() == _mlp.TORCH_THREADS
    assert _mlp.torch_module() is torch
    print("ok", len(checks))
""")


def test_a_cancel_check_runs_while_torch_loads_and_a_cancel_stops_the_wait():
    env = dict(os.environ, PYTHONPATH=PYUDF)
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "ok", out.stdout
