"""Test configuration shared by unit and integration tests.

The working tree's ``pyudf/`` goes first on sys.path so the tests exercise the
code under review, not an older installed copy.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "pyudf"))
