"""Hand-altered LightGBM model texts for the tests of groupml's model checks (what someone
changing a stored model would make: the layout kept, tree_sizes recomputed)."""

import re

from groupml.learners._lgbm_text import split_text


def set_tree_key(text, key, value, tree=0):
    """``text`` with ``key`` of one tree set to ``value``."""
    trees = split_text(text)[1]
    trees[tree] = re.sub(rf"(?m)^{key}=.*$", lambda _: f"{key}={value}", trees[tree], count=1)
    return join_trees(text, trees)


def join_trees(text, trees):
    """``text`` with its trees replaced by ``trees`` (each the text after its Tree=i line)."""
    blocks = [f"Tree={i}\n{t}" for i, t in enumerate(trees)]
    head = text[:text.index("Tree=0")]
    head = re.sub(r"(?m)^tree_sizes=.*$", "tree_sizes=" + " ".join(str(len(b)) for b in blocks), head)
    return head + "".join(blocks) + text[text.index("end of trees"):]


def unprobed_bad_split(text):
    """A one-tree model from LightGBM's ``text`` (of any width) whose node 2 reads feature
    2,000,000,000 -- far outside any row -- and is reached only by rows with
    0.3 < x0 <= 0.31, which no probe row of ``_lgbm.check_in_child`` has."""
    for key, value in (("num_leaves", 4), ("num_cat", 0), ("split_feature", "0 0 2000000000"),
                       ("threshold", "0.3 0.31 0"), ("decision_type", "2 2 2"), ("left_child", "-1 2 -3"),
                       ("right_child", "1 -2 -4"), ("leaf_value", "1 2 3 4"), ("split_gain", "1 1 1"),
                       ("leaf_weight", "1 1 1 1"), ("leaf_count", "1 1 1 1"), ("internal_value", "0 0 0"),
                       ("internal_weight", "1 1 1"), ("internal_count", "4 2 2")):
        text = set_tree_key(text, key, value)
    return join_trees(text, split_text(text)[1][:1])
