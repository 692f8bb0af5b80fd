"""groupml.help(), the SQL files and docs/ agree on what a user types.

The help texts (pyudf/groupml/helptopics) and the docs are written by hand beside the SQL
files that define the objects, so these checks hold them to the SQL: every entry point has a
help topic, every signature in help names the SQL arguments in order with their defaults,
every named argument (``name => value``) in help, docs and README exists, and every option key
the code accepts is documented in help and in the docs.
"""

import glob
import os
import re

import pytest

from groupml.executor.run import EXEC_KEYS
from groupml.fitting import OPTION_KEYS
from groupml.helptopics import TOPICS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SQL = os.path.join(ROOT, "sql")

_CREATE = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE|AGGREGATE|VIEW|TABLE|TYPE)\s+"
                     r"@extschema@\.(\w+)", re.I)
_MODES = ("IN", "OUT", "INOUT", "VARIADIC")


def _balanced(text: str, start: int) -> str:
    """The text inside the parenthesis that opens at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    raise AssertionError(f"unbalanced parentheses after {text[start:start + 60]!r}")


def _split_top(text: str):
    """Split on the commas outside parentheses, brackets and quotes."""
    out, depth, quote, cur = [], 0, False, ""
    for ch in text:
        if ch == "'":
            quote = not quote
        elif not quote and ch in "([":
            depth += 1
        elif not quote and ch in ")]":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [p.strip() for p in out]


def _norm(expr: str) -> str:
    return re.sub(r"\s+", " ", expr.strip()).lower()


def _sql_args(arglist: str):
    """[(name, default or None)] of an SQL argument list."""
    args = []
    for part in _split_top(arglist):
        words = part.split()
        if words[0].upper() in _MODES:
            words = words[1:]
        m = re.search(r"\bDEFAULT\b(.*)$", " ".join(words), re.I)
        args.append((words[0], _norm(m.group(1)) if m else None))
    return args


def _sql_objects():
    """{name: (kind, [argument lists of its overloads])} of every object the manifests build."""
    objects = {}
    for manifest in sorted(glob.glob(os.path.join(SQL, "manifests", "*.txt"))):
        for line in open(manifest):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            text = open(os.path.join(SQL, line)).read()
            for m in _CREATE.finditer(text):
                kind, name = m.group(1).upper(), m.group(2)
                entry = objects.setdefault(name, (kind, []))
                if kind in ("FUNCTION", "PROCEDURE", "AGGREGATE"):
                    entry[1].append(_sql_args(_balanced(text, text.index("(", m.end()))))
    return objects


OBJECTS = _sql_objects()
ENTRY_POINTS = {n: o for n, o in OBJECTS.items() if o[0] in ("FUNCTION", "PROCEDURE", "AGGREGATE")
                and not n.startswith("_")}
RELATIONS = {n for n, o in OBJECTS.items() if o[0] in ("VIEW", "TABLE", "TYPE") and not n.startswith("_")}
DOCS = {os.path.relpath(p, ROOT): open(p).read()
        for p in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "README.md")]}


def test_the_manifests_build_the_entry_points_this_test_knows():
    # the parser found the objects (a regex that matched nothing would pass every check below)
    assert {"learn_over_groups", "train_groups", "predict_batch", "explain_train_groups",
            "run_scheduler"} <= set(ENTRY_POINTS)
    assert len(ENTRY_POINTS["learn_over_groups"][1]) == 4
    assert ("workers", "1") in ENTRY_POINTS["train_groups"][1][0]


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_every_entry_point_has_a_help_topic(name):
    assert name in TOPICS, f"groupml.help('{name}') has no topic: add one to pyudf/groupml/helptopics"


@pytest.mark.parametrize("name", sorted(RELATIONS))
def test_every_table_view_and_type_is_described_in_help(name):
    assert name in TOPICS or re.search(rf"\b{name}\b", TOPICS["catalog"] + TOPICS["tenancy"]) \
        or any(f"groupml.{name}" in t for t in TOPICS.values()), \
        f"the relation groupml.{name} is neither a help topic nor described in one"


def _help_signature(name: str):
    """The argument list of the signature at the top of help('<name>'), as
    [(name, default or None, optional)]; optional = written inside [ ]."""
    text = TOPICS[name]
    m = re.match(rf"\s*(?:CALL\s+)?groupml\.{name}\(", text)
    assert m, f"help('{name}') does not start with its signature: {text.splitlines()[0]!r}"
    inner = _balanced(text, m.end() - 1)
    out, optional = [], False
    for part in _split_top(inner.replace("[,", ",[")):
        if part.startswith("["):
            optional, part = True, part[1:]
        part = part.rstrip("]").strip()
        if not part:
            continue
        words = part.split()
        if words[0].upper() in _MODES:
            words = words[1:]
        d = re.search(r"\bDEFAULT\b(.*)$", " ".join(words), re.I)
        out.append((words[0], _norm(d.group(1)) if d else None, optional))
    return out


SIGNED = sorted(n for n in ENTRY_POINTS if n != "help")   # help's topic is prose about help() itself


@pytest.mark.parametrize("name", SIGNED)
def test_help_signature_names_the_sql_arguments_in_order(name):
    shown = [a[0] for a in _help_signature(name)]
    overloads = [[a[0] for a in args] for args in ENTRY_POINTS[name][1]]
    assert max(overloads, key=len) == shown, \
        f"help('{name}') shows ({', '.join(shown)}); the SQL file has {overloads}"


@pytest.mark.parametrize("name", SIGNED)
def test_help_signature_shows_every_default(name):
    """An argument the SQL gives a default is shown with the same DEFAULT (or as [optional]);
    one without a default is not shown optional."""
    sql = dict(max(ENTRY_POINTS[name][1], key=len))
    counts = {len(args) for args in ENTRY_POINTS[name][1]}
    for arg, default, optional in _help_signature(name):
        if optional:
            # an optional argument is one a shorter overload leaves out, or one with a default
            assert sql[arg] is not None or len(counts) > 1, f"help('{name}') shows {arg} optional; SQL has no default"
        elif sql[arg] is not None:
            assert default == sql[arg], \
                f"help('{name}') shows {arg} with DEFAULT {default}; the SQL default is {sql[arg]}"
        else:
            assert default is None, f"help('{name}') shows {arg} DEFAULT {default}; the SQL argument has none"


def _named_arguments(text: str):
    """(function, argument) for every ``groupml.f(... name => ...)`` call in a text."""
    for m in re.finditer(r"groupml\.(\w+)\(", text):
        if m.group(1) not in ENTRY_POINTS:
            continue
        try:
            inner = _balanced(text, m.end() - 1)
        except AssertionError:
            continue                                  # a call cut off by the end of a table cell
        for part in _split_top(inner):
            n = re.match(r"(\w+)\s*=>", part)
            if n:
                yield m.group(1), n.group(1)


@pytest.mark.parametrize("where", sorted(["help:" + t for t in TOPICS] + list(DOCS)))
def test_named_arguments_in_help_and_docs_exist(where):
    text = TOPICS[where[5:]] if where.startswith("help:") else DOCS[where]
    for fn, arg in _named_arguments(text):
        names = {a[0] for args in ENTRY_POINTS[fn][1] for a in args}
        assert arg in names, f"{where} calls groupml.{fn}({arg} => ...); its arguments are {sorted(names)}"


def _in_docs(key: str) -> bool:
    """The docs name an option in code: "key", `key` or options.key (not a function key())."""
    return any(re.search(rf"(?:[\"`]|options\.){key}\b(?!\()", t) for t in DOCS.values())


@pytest.mark.parametrize("key", list(OPTION_KEYS))
def test_learn_over_groups_options_are_in_help_and_docs(key):
    assert re.search(rf'"{key}"|\b{key}:', TOPICS["learn_over_groups"]), f"help('learn_over_groups') lacks option {key!r}"
    assert _in_docs(key), f"no doc names the learn_over_groups option {key!r}"


@pytest.mark.parametrize("key", list(EXEC_KEYS) + ["processes"])
def test_train_groups_options_are_in_help_and_docs(key):
    helped = TOPICS["train_groups"] + TOPICS["grouped"] + TOPICS["snapshots"]
    assert re.search(rf"\b{key}\b", helped), f"help('train_groups') / help('grouped') lacks option {key!r}"
    assert _in_docs(key), f"no doc names the train_groups option {key!r}"


def test_the_readme_indexes_every_doc():
    readme = DOCS["README.md"]
    for path in sorted(DOCS):
        if path.startswith("docs/"):
            assert f"`{path}`" in readme, f"README.md's documentation table lacks {path}"
