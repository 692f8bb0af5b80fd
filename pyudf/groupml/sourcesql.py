"""Checks and SQL fragments shared by every entry point that reads a user's table.

train_groups, explain_search, submit_job and the executor all take a source relation plus
column names; they validate them the same way (existence, numeric type, SELECT privilege)
and pack rows with the same C-level expression. Identifiers are always quoted.
"""

from __future__ import annotations

import contextlib
from typing import Dict, Iterable, List, Optional

from .db import error_parts, quote_ident, quote_literal
from .errors import (DataError, DatatypeMismatchError, GroupmlError, InsufficientPrivilegeError, InvalidParameterError,
                      ProgramLimitExceededError, SourceReadError, UndefinedColumnError, UndefinedFunctionError,
                      UndefinedTableError, WrongObjectTypeError)
from .validation import clipped, shown

#: Relations a source may be, and what pg_class.relkind calls the others.
SOURCE_KINDS = ("r", "p", "v", "m", "f")
RELKIND_NAMES = {"i": "an index", "I": "a partitioned index", "S": "a sequence", "t": "a TOAST table",
                 "c": "a composite type"}

NUMERIC_TYPES = {"smallint", "integer", "bigint", "real", "double precision", "numeric", "boolean"}


@contextlib.contextmanager
def source_errors(name: str, owner: str):
    """Report an error the user's source ``name`` raised while it was read -- a view dividing
    by zero, a value out of range, a function of the view raising -- as
    :class:`SourceReadError` in ``owner``'s words, with its SQLSTATE and its hint (PL/Python
    passed it on as ``spiexceptions.DivisionByZero: ...`` without one). A cancel and groupml's
    own errors pass unchanged."""
    try:
        yield
    except GroupmlError:
        raise
    except Exception as exc:
        state, first, detail, own_hint = error_parts(exc)
        if not state or state == "57014":
            raise
        first = first[len("groupml: "):] if first.startswith("groupml: ") else first    # a groupml call of the view
        hint = f"Fix the source (or pass a view that selects valid rows), then call {owner} again."
        raise SourceReadError(state, f"{owner} could not read the rows of {name}: {first}",
                              hint=f"{own_hint.rstrip()}{'' if own_hint.rstrip().endswith('.') else '.'} {hint}"
                              if own_hint else hint, detail=detail) from None


@contextlib.contextmanager
def reading_source(session, name: str, owner: str):
    """A block of statements that read the user's source: under the caller's search_path
    (:meth:`~groupml.db.PlpySession.callers_search_path`), with :func:`source_errors`."""
    with session.callers_search_path(), source_errors(name, owner):
        yield


def source_cursor(make_cursor, name: str, owner: str) -> "_SourceCursor":
    """A cursor over the user's source whose opening and fetches report errors by
    :func:`source_errors` (only those: what the caller does with each row keeps its own)."""
    with source_errors(name, owner):
        return _SourceCursor(make_cursor(), name, owner)


class _SourceCursor:
    def __init__(self, cur, name: str, owner: str):
        self.cur, self.name, self.owner = cur, name, owner

    def fetch(self, n: int):
        with source_errors(self.name, self.owner):
            return self.cur.fetch(n)

    def close(self) -> None:
        self.cur.close()


def columns(session, source) -> Dict[str, str]:
    """Column name -> SQL type name of a relation: ``source`` is its OID (int) or a name. A
    column of a domain has its base type's name (a domain over numeric is a numeric feature,
    as it is for learn_over_groups, not refused as 'not numeric')."""
    by_oid = isinstance(source, int)
    rows = session.query(
        "WITH RECURSIVE c AS (SELECT a.attname AS name, a.attnum, a.atttypid AS t FROM pg_catalog.pg_attribute a "
        "WHERE a.attrelid = " + ("$1::oid" if by_oid else "$1::regclass")
        + " AND a.attnum > 0 AND NOT a.attisdropped UNION ALL SELECT c.name, c.attnum, t.typbasetype FROM c "
        "JOIN pg_catalog.pg_type t ON t.oid = c.t WHERE t.typtype = 'd') "       # a domain's base, at any depth
        "SELECT c.name, pg_catalog.format_type(c.t, NULL) AS type FROM c JOIN pg_catalog.pg_type t ON t.oid = c.t "
        "WHERE t.typtype <> 'd' ORDER BY c.attnum", [source], ["oid" if by_oid else "text"])
    return {r["name"]: r["type"] for r in rows}


def check_columns(cols: Dict[str, str], names, what: str, source: str, *, numeric: bool,
                  owner: str) -> List[str]:
    """Every name must be a column of ``source`` (and numeric/boolean when ``numeric``)."""
    if names is None:
        raise InvalidParameterError(f"The '{what}' value of {owner} must be an array of column names; got null",
                                    hint="Pass ARRAY['col1', 'col2'].")
    names = [names] if isinstance(names, str) else list(names)
    if any(isinstance(n, (list, tuple)) for n in names):      # PL/Python passes text[][] as nested lists
        raise InvalidParameterError(f"The '{what}' value of {owner} must be a one-dimensional array of column "
                                    f"names; got a nested array", hint="Pass ARRAY['col1', 'col2'].")
    for name in names:
        if not isinstance(name, str) or name == "":
            raise InvalidParameterError(f"The '{what}' value of {owner} must name a column; got {shown(name)}",
                                        hint=f"Columns of {source}: {', '.join(sorted(cols))}.")
        if name not in cols:
            raise UndefinedColumnError(f"Column '{clipped(name)}' of {owner} {what} does not exist in {source}",
                                       hint=f"Columns of {source}: {', '.join(sorted(cols))}.")
        if numeric and cols[name] not in NUMERIC_TYPES:
            raise DatatypeMismatchError(
                f"Column '{name}' of {owner} {what} must be numeric or boolean; it is {cols[name]}",
                hint="Cast or encode it into a numeric column first (e.g. a view with CASE or one-hot columns).")
    return names


def check_label_not_a_feature(label: str, features: List[str], owner: str) -> None:
    """A model given its own label as a feature learns nothing (and scores perfectly); a
    feature named twice is a mistake (the same column would weigh twice)."""
    if len(set(features)) != len(features):
        raise InvalidParameterError(f"The 'features' value of {owner} must not repeat a column; got "
                                    f"{shown(list(features))}",
                                    hint="Name each feature column once.")
    if label in features:
        raise InvalidParameterError(f"The 'label' column '{label}' of {owner} is also a feature",
                                    hint="Remove the label from the features.")


def check_group_by_apart(group_by: List[str], features: List[str], label: str, owner: str) -> None:
    """Group-by columns are named once and are neither the label (every group would hold one
    class) nor a feature (constant within each group)."""
    if len(set(group_by)) != len(group_by):
        raise InvalidParameterError(f"The 'group_by' value of {owner} must not repeat a column; got "
                                    f"{shown(list(group_by))}", hint="Name each group-by column once.")
    both = [g for g in group_by if g == label or g in features]
    if both:
        raise InvalidParameterError(
            f"The group-by column '{both[0]}' of {owner} is also the label or a feature",
            hint="Group by columns other than the label and the features (a feature is constant within a group).")


def check_group_by_sortable(session, source: str, group_by: List[str], cols: Dict[str, str], owner: str) -> None:
    """Groups are formed and ordered by the group-by columns: each needs equality and ordering
    (a btree operator class). A type without (point, json, xml, ...) is refused with its name
    instead of PostgreSQL's 'could not identify an ordering operator'."""
    for g in group_by:
        col = quote_ident(g)
        with session.callers_search_path():
            _, failed = session.query_or_error(f"SELECT 1 FROM {source} GROUP BY {col} ORDER BY {col} LIMIT 0")
        if failed is not None and failed[0] != "42883":       # not the type: e.g. a view's lost grant
            raise SourceReadError(failed[0], f"{owner} could not read {source}: {failed[1]}",
                                  hint="Fix the source (or a view over it) so that it can be read, then call "
                                       "again.")
        if failed is not None:
            raise UndefinedFunctionError(
                f"Column '{g}' of {owner} group_by must have a type that can be grouped and sorted; it is "
                f"{cols.get(g, 'of another type')}", hint="Group by a cast of it, e.g. a view with (col)::text.")


def check_source_kind(name: str, kind: str, owner: str, hint: str = "Pass the table (or a view over it) that "
                                                                    "holds the rows.") -> None:
    """A source must be a relation that has rows (pg_class.relkind in :data:`SOURCE_KINDS`)."""
    if kind not in SOURCE_KINDS:
        raise WrongObjectTypeError(
            f"The source {name} of {owner} must be a table, view, materialized view or foreign table; it is "
            f"{RELKIND_NAMES.get(kind, 'relkind ' + kind)}", hint=hint)


def source_oid(session, source, owner: str) -> int:
    """The OID of the relation ``source`` names, resolved on the caller's search_path (the
    only statement groupml runs there: a regclass cast names no function or operator another
    role could shadow); everything after runs under :meth:`pinned_search_path` by OID or by
    the schema-qualified name :func:`check_select_privilege` returns."""
    if source is None:
        raise InvalidParameterError(f"The 'source' value of {owner} must name a table or view; got null",
                                    hint="Pass the relation's name, e.g. 'clicks' or 'myschema.clicks'.")
    rows, failed = session.query_or_error("SELECT $1::regclass::oid AS oid", [source], ["text"])
    if failed is not None:       # a regclass given by number, of a relation since dropped
        raise UndefinedTableError(f"The 'source' value of {owner} names no relation: {shown(source)} does not exist",
                                  hint="Pass an existing table or view, by name.")
    return int(rows[0]["oid"])


def check_select_privilege(session, oid: int, owner: str) -> str:
    """The relation ``oid`` must have rows (:func:`check_source_kind`) and the calling role
    must be able to SELECT from it (the whole table, or at least one column:
    :func:`check_column_privileges` then checks the columns used). Returns its schema-qualified,
    quoted name: worker backends and later calls resolve that, never a bare name against their
    own search_path."""
    r = session.query("SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) AS name, c.relkind::text AS kind, "
                      "pg_catalog.has_any_column_privilege(c.oid, 'SELECT') AS ok "
                      "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) "
                      "c.relnamespace WHERE c.oid OPERATOR(pg_catalog.=) $1::oid", [oid], ["bigint"])
    if not r:        # a regclass given by number, of a relation since dropped
        raise UndefinedTableError(f"The 'source' value of {owner} names no relation: OID {oid} does not exist",
                                  hint="Pass an existing table or view, by name.")
    r = r[0]
    check_source_kind(r["name"], r["kind"], owner)
    if not r["ok"]:
        raise InsufficientPrivilegeError(f"permission denied for table {r['name']}: {owner} needs SELECT on it",
                                         hint=f"GRANT SELECT ON {r['name']} TO the calling role.")
    return r["name"]


def check_column_privileges(session, source: str, names: Iterable[str], owner: str) -> None:
    """Every column ``owner`` reads must be readable by the calling role (table-wide SELECT
    covers them all; a column grant covers its column)."""
    names = list(dict.fromkeys(names))
    denied = session.query("SELECT u.col FROM pg_catalog.unnest($2::text[]) WITH ORDINALITY AS u(col, i) "
                           "WHERE NOT pg_catalog.has_column_privilege($1::regclass, u.col, 'SELECT') ORDER BY u.i",
                           [source, names], ["text", "text[]"])
    if denied:
        cols = ", ".join(quote_ident(r["col"]) for r in denied)
        raise InsufficientPrivilegeError(
            f"permission denied for column {denied[0]['col']} of table {source}: {owner} needs SELECT on "
            f"the columns it reads",
            hint=f"GRANT SELECT ({cols}) ON {source} TO the calling role.")


def check_training_source(session, oid: int, group_by, features, label, owner: str, *,
                          label_example: str = "'clicked'", numeric_features: bool = True, check_features=None):
    """The checks of a source and its columns every training entry point makes, in order:
    SELECT on relation ``oid`` (:func:`check_select_privilege`), group-by columns that exist
    and can be grouped and sorted, at least one numeric feature, a numeric label that is not
    a feature, group-by columns apart from both, and SELECT on every column read.
    ``label_example`` is the hint's example of a label argument. With ``numeric_features``
    false, features of any type pass here and ``check_features(source, cols, features)`` (a
    transform's check of what it can encode) decides. Returns (schema-qualified source name,
    its columns, group_by, features) as lists of names."""
    source = check_select_privilege(session, oid, owner)
    cols = columns(session, source)
    group_by = check_columns(cols, group_by or [], "group_by", source, numeric=False, owner=owner)
    check_group_by_sortable(session, source, group_by, cols, owner)
    features = check_columns(cols, features, "features", source, numeric=numeric_features, owner=owner)
    if check_features is not None:
        check_features(source, cols, features)
    if not features:
        raise InvalidParameterError(f"The 'features' value of {owner} must name at least one column; got []",
                                    hint="Pass ARRAY['f1', 'f2', ...].")
    if label is None:
        raise InvalidParameterError(f"The 'label' value of {owner} must be a column name; got null",
                                    hint=f"Pass the label column, e.g. {label_example}.")
    check_columns(cols, [label], "label", source, numeric=True, owner=owner)
    check_label_not_a_feature(label, features, owner)
    check_group_by_apart(group_by, features, label, owner)
    check_column_privileges(session, source, list(group_by) + list(features) + [label], owner)
    return source, cols, group_by, features


def float8_expr(col: str, typ: str) -> str:
    """A column as float8 (booleans as 0/1)."""
    q = quote_ident(col)
    return f"({q})::int::float8" if typ == "boolean" else f"({q})::float8"


def value_expr(col: str, typ: str) -> str:
    """A column as 8 big-endian bytes of float8 (booleans as 0/1), computed in C."""
    return f"pg_catalog.float8send({float8_expr(col, typ)})"


def packed_row_expr(cols: Dict[str, str], names: Iterable[str]) -> str:
    """All named columns of a row packed into one bytea (NULL when any value is NULL)."""
    return " OPERATOR(pg_catalog.||) ".join(value_expr(c, cols[c]) for c in names)


#: Group keys (jsonb) up to this size always fit the catalog's widest index entry, run_epochs'
#: (run_id, group_key, block, trial_id): 2704 bytes at most. Larger ones are tried on an index
#: of that shape (PostgreSQL may compress them under the limit).
SAFE_GROUP_KEY_BYTES = 2600
_PROBE = "pg_temp.groupml_group_key_probe"


def check_group_keys(session, keys: List[str], n_columns: int, owner: str) -> None:
    """54000 for a group key the catalog's indexes could not hold, before anything is trained:
    it failed at the first insert of its model or epoch, after every group had been trained.
    Sizes are PostgreSQL's own: a key's jsonb, not its text (numbers take more there, escapes
    less), and a long key that compresses (a repeated text) passes."""
    # the JSON text bounds the jsonb: each value adds at most 16 bytes of headers and numerics
    suspects = [k for k in keys if len(k.encode("utf-8")) + 16 * max(n_columns, 1) + 32 > SAFE_GROUP_KEY_BYTES]
    if not suspects:
        return
    sizes = session.query("SELECT u.k, pg_catalog.pg_column_size(u.k::jsonb) AS n FROM pg_catalog.unnest($1::text[]) "
                          "AS u(k)", [suspects], ["text[]"])
    big = [(r["k"], int(r["n"])) for r in sizes if int(r["n"]) > SAFE_GROUP_KEY_BYTES]
    if not big:
        return
    _, no_probe = session.query_or_error(f"CREATE TEMP TABLE IF NOT EXISTS {_PROBE} (a bigint, k jsonb, b integer, "
                                         f"c integer, PRIMARY KEY (a, k, b, c)) ON COMMIT DROP")
    for i, (key, n) in enumerate(big):
        if no_probe is not None:            # no TEMP right: only what cannot fit uncompressed
            failed = ("54000", "") if n > 2700 else None
        else:
            _, failed = session.query_or_error(f"INSERT INTO {_PROBE} VALUES ($1, $2::jsonb, 0, 0)", [i, key],
                                               ["bigint", "text"])
        if failed is not None and failed[0] == "54000":
            raise ProgramLimitExceededError(
                f"The group key {shown(key)} of {owner} takes {n:,} bytes; groupml's catalog indexes group keys, "
                f"which PostgreSQL limits to about 2,700 bytes",
                hint="Group by shorter columns: e.g. a view with md5(the_long_column) AS key, grouped by key.")


def check_distinct_group_keys(session, keys: List[str], owner: str) -> None:
    """22000 when two groups get one key: the key is the group-by values as jsonb, and values
    GROUP BY tells apart can be equal there (floats printed with fewer digits under
    extra_float_digits <= 0, arrays with other lower bounds). The catalog's unique key then
    refused the second group's model (a raw 23505) after the first was committed."""
    if len(keys) < 2:
        return
    rows = session.query("SELECT pg_catalog.min(u.k) AS k, pg_catalog.count(*) AS n FROM pg_catalog.unnest($1::text[]) "
                         "AS u(k) GROUP BY u.k::jsonb HAVING pg_catalog.count(*) > 1 LIMIT 1", [keys], ["text[]"])
    if rows:
        raise DataError(
            f"{int(rows[0]['n'])} groups of {owner} have the same key {shown(rows[0]['k'])}: the group-by values are "
            f"distinct, but not once written as JSON, and a run stores one model per key",
            hint="Reset extra_float_digits (SET extra_float_digits = 1) or group by a column that keeps the values "
                 "apart as text, e.g. a view with the_column::text AS key.")


def group_key_sql(group_by: List[str]) -> str:
    """A group's key as a jsonb object of its group-by columns ('{}' without any)."""
    if not group_by:
        return "'{}'::jsonb"
    return "pg_catalog.jsonb_build_object(" + ", ".join(f"{quote_literal(g)}, {quote_ident(g)}" for g in group_by) + ")"


def group_clause_sql(group_by: List[str], source: str, ordered: bool = True) -> str:
    """`` GROUP BY ... ORDER BY ...`` over the group-by columns of ``source`` ('' without any).
    ORDER BY names them through the relation: a bare name would bind to an output column of
    the same name first (a group-by column called n_rows or gkey sorted by the count).
    ``ordered`` False leaves ORDER BY out: sorting rows that carry a group's packed block
    copies every block once more (to disk beyond work_mem)."""
    if not group_by:
        return ""
    cols = ", ".join(quote_ident(g) for g in group_by)
    if not ordered:
        return f" GROUP BY {cols}"
    order = ", ".join(f"{source}.{quote_ident(g)}" for g in group_by)
    return f" GROUP BY {cols} ORDER BY {order}"


#: features per row that groupml._pack_values takes as separate arguments (a function has at
#: most 100 arguments: the aggregate's state, the features and the label); wider rows are
#: packed from an array by groupml._pack_rows
MAX_VALUE_FEATURES = 98


def native_scan_sql(source: str, group_by: List[str], features: List[str], label: str, cols: Dict[str, str],
                    feature_exprs: Optional[List[str]] = None) -> str:
    """:func:`packed_scan_sql`'s groups with each group's rows packed in C (native float8,
    the features then the label per row, a row with a NULL left out) into the load arena: the
    ``block`` column is ``{fd, offset, bytes}`` (groupml._pack_shared), read through a
    :class:`~groupml.procpool.SharedBlock`. Unordered (the caller orders the groups). A row's
    values go to groupml._pack_values as separate arguments (no array is built per row), or
    as an array to groupml._pack_rows beyond :data:`MAX_VALUE_FEATURES` features."""
    values = feature_exprs if feature_exprs is not None else [float8_expr(f, cols[f]) for f in features]
    label_value = float8_expr(label, cols[label])
    if len(values) <= MAX_VALUE_FEATURES:
        packed = f"groupml._pack_values({', '.join(values)}, {label_value})"
    else:
        packed = f"groupml._pack_rows(ARRAY[{', '.join(values)}], {label_value})"
    return (f"SELECT {group_key_sql(group_by)}::text AS gkey, pg_catalog.count(*) AS n_rows, "
            f"{packed} AS block FROM {source}" + group_clause_sql(group_by, source, ordered=False))


def packed_scan_sql(source: str, group_by: List[str], features: List[str], label: str, cols: Dict[str, str],
                    where: str = "", feature_exprs: Optional[List[str]] = None, only: str = "") -> str:
    """One row per group: (gkey text, n_rows, block bytea of packed rows, features then label;
    a row with a NULL value is left out of the block but counted in n_rows). ``where``: an
    SQL condition built by groupml itself (never from input), e.g. a hash-bucket filter.
    ``feature_exprs``: float8 expressions (a transform's encoding, built by groupml) packed in
    place of the feature columns."""
    packed = packed_row_expr(cols, list(features) + [label]) if feature_exprs is None else \
        " OPERATOR(pg_catalog.||) ".join([f"pg_catalog.float8send({e})" for e in feature_exprs]
                                         + [value_expr(label, cols[label])])
    return (f"SELECT {group_key_sql(group_by)}::text AS gkey, pg_catalog.count(*) AS n_rows, "
            f"pg_catalog.string_agg({packed}, ''::bytea) AS block FROM {source}"
            + (f" WHERE {where}" if where else "") + group_clause_sql(group_by, source))
