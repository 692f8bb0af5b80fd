"""Where code below the database layer finds this process's cancel check.

The pure packages (learners, search, planner, tenancy) never import :mod:`groupml.db`, yet a
long step inside them -- checking a LightGBM model in a child process -- has to notice a
query cancel when it runs in a backend. :mod:`groupml.db` installs the provider when it is
imported (every SQL entry point imports it); without it there is no cancel check.
"""

from __future__ import annotations

from typing import Callable, Optional

_provider: Optional[Callable[[], Optional[Callable[[], None]]]] = None


def install(provider: Callable[[], Optional[Callable[[], None]]]) -> None:
    """Make ``provider()`` the answer of :func:`cancel_check_here`."""
    global _provider
    _provider = provider


def cancel_check_here() -> Optional[Callable[[], None]]:
    """This process's cancel check (a callable that raises on a cancel), or None."""
    return None if _provider is None else _provider()
