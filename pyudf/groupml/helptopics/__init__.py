"""Text of groupml.help(): one entry per SQL object, each with an example.

Every module in this package defines ``TOPICS`` (topic name -> text); each area of the
extension keeps its topics in its own module. They are merged here.
"""

from __future__ import annotations

import importlib
import pkgutil

TOPICS = {}
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    TOPICS.update(importlib.import_module(f"{__name__}.{_info.name}").TOPICS)


def overview() -> str:
    lines = ["groupml: GROUP BY for machine learning, inside PostgreSQL.", "",
             "Topics (SELECT groupml.help('<topic>')):"]
    for key in sorted(TOPICS):
        first = TOPICS[key].splitlines()[0]
        lines.append(f"  {key:<22} {first[:100]}")
    return "\n".join(lines) + "\n"
