"""A structural check of LightGBM model text, made before LightGBM parses it.

LightGBM's text loader trusts what it reads, and so does its prediction: a tree whose
``split_feature``, child or categorical index points outside its arrays makes LightGBM
read outside them for exactly the rows that reach that node. Loading such a text in a
throwaway child and predicting probe rows (``_lgbm.check_in_child``) catches a crash on
load and on the probed paths, not one on a path the probes miss: measured, a forged tree
with one bad ``split_feature`` behind ``0.3 < x0 <= 0.31`` passes the probes and then
crashes the process on ``x0 = 0.305``. In a PostgreSQL backend that restarts every
session of the server.

:func:`check_model_text` therefore reads the text the way LightGBM 4 does (a header up to
the first ``Tree=`` line, trees at the offsets ``tree_sizes`` gives, each tree up to 22
``key=value`` lines ending at an empty line) and accepts only what prediction can walk
safely: every array as long as ``num_leaves`` says, every feature index below the
model's width, every child inside the tree (an internal child after its parent, so no
walk loops; every node and leaf the child of exactly one node), categorical splits that
index their bitsets inside ``cat_threshold``, no linear trees, one tree per iteration.
Anything outside LightGBM's own layout (the layout ``model_to_string`` writes) is
refused rather than interpreted. Pure Python, no LightGBM needed.
"""

from __future__ import annotations

import math
import re
from typing import Dict, List, Tuple

from ..errors import ModelFormatError

MAX_TREE_LINES = 22                  # LightGBM's Tree(const char*) reads at most this many lines
DECISION_BITS = 0x0F                 # categorical (1), default left (2), missing type (4 | 8)
CATEGORICAL = 0x01
_INT = re.compile(r"-?[0-9]+\Z")
_HINT = "Use the model as train_groups or learn_over_groups stored it; a changed model cannot be used."
# arrays LightGBM may read, and how many entries each has: internal nodes or leaves
_PER_NODE = ("split_feature", "threshold", "decision_type", "left_child", "right_child",
             "split_gain", "internal_value", "internal_weight", "internal_count")
_PER_LEAF = ("leaf_value", "leaf_weight", "leaf_count")
_TREE_KEYS = frozenset(_PER_NODE + _PER_LEAF + ("num_leaves", "num_cat", "cat_boundaries", "cat_threshold",
                                                "is_linear", "shrinkage"))


def _damaged(why: str) -> ModelFormatError:
    return ModelFormatError(f"The lightgbm model is damaged: {why}", hint=_HINT)


def _key_values(lines: List[str], where: str) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for line in lines:
        key, eq, value = line.partition("=")
        if not eq:
            raise _damaged(f"{where}: line {line[:40]!r} is not key=value")
        if key in out or key not in _TREE_KEYS:
            raise _damaged(f"{where}: {key[:40]!r} appears twice or is not a key LightGBM writes")
        out[key] = value
    return out


def _ints(value: str, where: str, key: str) -> List[int]:
    parts = value.split(" ") if value else []
    if not all(_INT.match(p) for p in parts):
        raise _damaged(f"{where}: {key} is not a list of integers")
    return [int(p) for p in parts]


def _floats(value: str, where: str, key: str) -> List[float]:
    try:
        return [float(p) for p in value.split(" ")] if value else []
    except ValueError:
        raise _damaged(f"{where}: {key} is not a list of numbers") from None


def _one_int(kv: Dict[str, str], key: str, where: str) -> int:
    if key not in kv or not _INT.match(kv[key]):
        raise _damaged(f"{where}: {key} is missing or not an integer")
    return int(kv[key])


def split_text(text: str) -> Tuple[Dict[str, str], List[str]]:
    """(header key/values, the text of each tree after its ``Tree=i`` line), as LightGBM
    reads them; raises ModelFormatError on any other layout."""
    if "\r" in text or "\0" in text:
        raise _damaged("it holds carriage returns or NUL characters")
    start = 0 if text.startswith("Tree=") else text.find("\nTree=") + 1
    if start <= 0:
        raise _damaged("it holds no trees")
    header: Dict[str, str] = {}
    for line in text[:start].split("\n"):
        key, eq, value = line.partition("=")
        if not line or not eq:
            continue
        if key in header:
            raise _damaged(f"the header names {key!r} twice")
        header[key] = value
    sizes = _ints(header.get("tree_sizes", ""), "the header", "tree_sizes")
    if not sizes or min(sizes) <= 0:
        raise _damaged("the header's tree_sizes is missing or not positive")
    trees, at = [], start
    for i, size in enumerate(sizes):
        block = text[at:at + size]
        first = f"Tree={i}\n"
        if len(block) != size or not block.startswith(first):
            raise _damaged(f"tree_sizes does not match the trees (tree {i})")
        trees.append(block[len(first):])
        at += size
    if not text.startswith("end of trees\n", at):
        raise _damaged("tree_sizes does not match the trees (no 'end of trees' after them)")
    return header, trees


def _tree_lines(block: str, where: str) -> List[str]:
    lines = block.split("\n")
    n = lines.index("") if "" in lines else len(lines)
    if n > MAX_TREE_LINES or any(lines[n:]):
        raise _damaged(f"{where} is not {MAX_TREE_LINES} or fewer key=value lines ended by an empty line")
    return lines[:n]


def check_tree(kv: Dict[str, str], n_features: int, where: str) -> None:
    """Raise ModelFormatError unless LightGBM can walk the tree ``kv`` for any row of
    ``n_features`` values without leaving its arrays."""
    leaves = _one_int(kv, "num_leaves", where)
    num_cat = _one_int(kv, "num_cat", where)
    if not 1 <= leaves <= 1 << 24 or not 0 <= num_cat < leaves:
        raise _damaged(f"{where}: num_leaves {leaves} or num_cat {num_cat} is out of range")
    if kv.get("is_linear", "0") != "0":
        raise _damaged(f"{where} is a linear tree, which groupml does not make")
    for key in _PER_NODE + _PER_LEAF if leaves > 1 else ("leaf_value",):   # a stump: LightGBM reads no more
        if key not in kv:
            continue
        want = leaves if key in _PER_LEAF else leaves - 1
        got = len(kv[key].split(" ")) if kv[key] else 0
        if got != want:
            raise _damaged(f"{where}: {key} has {got} values; num_leaves {leaves} needs {want}")
    if "leaf_value" not in kv:
        raise _damaged(f"{where}: leaf_value is missing")
    _floats(kv["leaf_value"], where, "leaf_value")
    if leaves == 1:
        return
    for key in ("split_feature", "threshold", "left_child", "right_child"):
        if key not in kv:
            raise _damaged(f"{where}: {key} is missing")
    features = _ints(kv["split_feature"], where, "split_feature")
    thresholds = _floats(kv["threshold"], where, "threshold")
    kinds = _ints(kv["decision_type"], where, "decision_type") if "decision_type" in kv else [0] * (leaves - 1)
    parents = [0] * (2 * leaves - 1)            # how often each internal node, then each leaf, is a child
    for side in ("left_child", "right_child"):
        for node, child in enumerate(_ints(kv[side], where, side)):
            if child >= 0 and not node < child <= leaves - 2:
                raise _damaged(f"{where}: {side} {child} of node {node} is not a later internal node")
            if child < 0 and not 0 <= ~child < leaves:
                raise _damaged(f"{where}: {side} {child} of node {node} is not a leaf of the tree")
            parents[child if child >= 0 else leaves - 1 + ~child] += 1
    if parents[0] != 0 or any(p != 1 for p in parents[1:]):
        raise _damaged(f"{where}: its nodes do not form one tree")
    for node, (f, kind) in enumerate(zip(features, kinds)):
        if not 0 <= f < n_features:
            raise _damaged(f"{where}: split_feature {f} of node {node} is not a feature index (0..{n_features - 1})")
        if kind & ~DECISION_BITS:                # a negative kind has every high bit set
            raise _damaged(f"{where}: decision_type {kind} of node {node} is not one LightGBM writes")
        if kind & CATEGORICAL:
            t = thresholds[node]
            if not num_cat or not math.isfinite(t) or t != int(t) or not 0 <= t < num_cat:
                raise _damaged(f"{where}: categorical node {node} names bitset {t!r} of {num_cat}")
    if num_cat:
        _check_bitsets(kv, num_cat, where)


def _check_bitsets(kv: Dict[str, str], num_cat: int, where: str) -> None:
    bounds = _ints(kv.get("cat_boundaries", ""), where, "cat_boundaries")
    words = _ints(kv.get("cat_threshold", ""), where, "cat_threshold")
    if (len(bounds) != num_cat + 1 or bounds[0] != 0 or bounds[-1] != len(words)
            or any(b > a for a, b in zip(bounds[1:], bounds))
            or any(not 0 <= w < 1 << 32 for w in words)):
        raise _damaged(f"{where}: cat_boundaries and cat_threshold do not describe {num_cat} bitsets")


#: Trees checked between two calls of the caller's interrupt check (a 1 GB text is ~20 s of
#: checking; 256 trees of a big model are a few ms)
CHECK_EVERY_TREES = 256


def check_model_text(body: bytes, n_features: int, interrupt_check=None) -> None:
    """Raise ModelFormatError unless ``body`` is LightGBM model text, in LightGBM's own layout,
    whose every tree prediction can walk safely for rows of ``n_features`` values.
    ``interrupt_check`` (a backend's cancel check) runs every :data:`CHECK_EVERY_TREES` trees."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _damaged("it is not UTF-8 text") from None
    header, trees = split_text(text)
    width = _one_int(header, "max_feature_idx", "the header") + 1
    if width != n_features:
        raise _damaged(f"n_features does not match the trees ({width} features in the text, {n_features} stored)")
    for key in ("num_class", "num_tree_per_iteration"):
        if _one_int(header, key, "the header") != 1:
            raise _damaged(f"the header's {key} is not 1, as in every model groupml makes")
    for i, block in enumerate(trees):
        if interrupt_check is not None and i % CHECK_EVERY_TREES == 0:
            interrupt_check()
        where = f"tree {i}"
        check_tree(_key_values(_tree_lines(block, where), where), n_features, where)
