"""Whether a retrained version replaces the active one: its validation score must be no worse
than the active version's by more than a margin (pure: numbers in, a decision out)."""

from __future__ import annotations

from typing import Optional, Tuple


def gate(new_metric: Optional[str], new_score: Optional[float], old_version: Optional[int],
         old_metric: Optional[str], old_score: Optional[float], margin: float) -> Tuple[bool, str]:
    """(activate?, why). Scores are the versions' mean validation scores over their groups, in
    their metric's own units; the margin is in the same units (the loss the search minimises is
    the metric or 1 - the metric)."""
    from ..learners._metrics import LOSS_OF

    if old_version is None:
        return True, "activated: the set had no active version"
    if new_score is None:
        return False, f"kept version {old_version}: the new version has no group with a validation score"
    if old_score is None:
        return True, f"activated: version {old_version} has no validation score to compare with"
    if new_metric != old_metric or new_metric not in LOSS_OF:
        return False, (f"kept version {old_version}: its scores are {old_metric}, the new version's "
                       f"{new_metric}; they do not compare")
    new_loss, old_loss = LOSS_OF[new_metric](new_score), LOSS_OF[new_metric](old_score)
    if new_loss <= old_loss + margin:
        return True, (f"activated: mean validation {new_metric} {new_score:.6g} against {old_score:.6g} of version "
                      f"{old_version} (margin {margin:g})")
    return False, (f"kept version {old_version}: the new mean validation {new_metric} {new_score:.6g} is worse than "
                   f"its {old_score:.6g} by more than the margin {margin:g}")
