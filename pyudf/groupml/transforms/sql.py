"""SQL text of a transform: the statistics query that fits it and the per-output float8
expressions that encode a row in the training scan, in C (no Python per row).

Both are built from the catalog kinds only; identifiers are quoted, values are literals, and
every operator and function is schema-qualified: the training scan runs under the caller's
search_path (a source's views may name their tables bare).
"""

from __future__ import annotations

from typing import Any, List, Mapping, Sequence

from ..db import quote_ident, quote_literal
from ._transform import Transform, part_names

_EQ, _MINUS, _DIV = "OPERATOR(pg_catalog.=)", "OPERATOR(pg_catalog.-)", "OPERATOR(pg_catalog./)"


def _f8(x: float) -> str:
    return f"'{float(x)!r}'::pg_catalog.float8"


def _finite(q: str) -> str:
    """A finite float8 or NULL: NaN and infinities are left out of the statistics."""
    return (f"CASE WHEN {q} OPERATOR(pg_catalog.<) 'Infinity'::pg_catalog.float8 AND {q} OPERATOR(pg_catalog.>) "
            f"'-Infinity'::pg_catalog.float8 THEN {q} END")


def _moment(q: str) -> str:
    """A date or timestamp column as a finite timestamp (UTC for timestamptz), else NULL."""
    return f"CASE WHEN pg_catalog.isfinite({q}) THEN {q} END"


def part_exprs(name: str, kind: str, sql_type: str) -> List[str]:
    """float8 expressions of the parts of a date or timestamp column (NULL for NULL or infinity)."""
    q = quote_ident(name)
    if kind == "date":
        base = _moment(q)
        ts = f"({base})::pg_catalog.\"timestamp\""
        days = f"(({base}) {_MINUS} '1970-01-01'::pg_catalog.date)::pg_catalog.float8"
    else:
        col = f"pg_catalog.timezone('UTC', {q})" if "with time zone" in sql_type else q
        ts = _moment(col)
        days = f"(pg_catalog.date_part('epoch', {ts}) {_DIV} 86400::pg_catalog.float8)"
    parts = {"epoch_days": days, "month": f"pg_catalog.date_part('month', {ts})",
             "dow": f"pg_catalog.date_part('dow', {ts})", "hour": f"pg_catalog.date_part('hour', {ts})"}
    return [parts[p] for p in part_names(kind)]


def _text(name: str) -> str:
    return f"(({quote_ident(name)})::pg_catalog.text COLLATE pg_catalog.\"C\")"


def stats_sql(source: str, label: str, specs: Sequence[Mapping[str, str]]) -> str:
    """One row of aggregates over the rows of ``source`` with a label: per numeric column and
    per date part ``m<i>_<j>``, ``s<i>_<j>``, ``n<i>`` (mean, population std, NULLs); per
    boolean ``t<i>``, ``f<i>``, ``n<i>``; per category column ``n<i>`` (its values come from
    :func:`categories_sql`)."""
    out = []
    for i, spec in enumerate(specs):
        q, kind = quote_ident(spec["name"]), spec["kind"]
        if kind in ("numeric", "date", "timestamp"):
            exprs = [f"({q})::pg_catalog.float8"] if kind == "numeric" else part_exprs(spec["name"], kind, spec["type"])
            nulls = q if kind == "numeric" else f"({exprs[0]})"
            for j, e in enumerate(exprs):
                x = _finite(f"({e})")
                out += [f"pg_catalog.avg({x}) AS m{i}_{j}", f"pg_catalog.stddev_pop({x}) AS s{i}_{j}"]
            out.append(f"pg_catalog.count(*) FILTER (WHERE {nulls} IS NULL) AS n{i}")
        elif kind == "boolean":
            out += [f"pg_catalog.count(*) FILTER (WHERE {q}) AS t{i}", f"pg_catalog.count(*) FILTER (WHERE NOT {q}) "
                    f"AS f{i}", f"pg_catalog.count(*) FILTER (WHERE {q} IS NULL) AS n{i}"]
        else:
            out.append(f"pg_catalog.count(*) FILTER (WHERE {q} IS NULL) AS n{i}")
    return (f"SELECT {', '.join(out)} FROM {source} WHERE {quote_ident(label)} IS NOT NULL")


def categories_sql(source: str, label: str, name: str, cap: int) -> str:
    """The ``cap`` + 1 most frequent values of a category column (ties by value, bytewise)."""
    t = _text(name)
    return (f"SELECT {t} AS v, pg_catalog.count(*) AS n FROM {source} WHERE {quote_ident(label)} IS NOT NULL AND "
            f"{quote_ident(name)} IS NOT NULL GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT {int(cap) + 1}")


def stats_of(row: Mapping[str, Any], specs: Sequence[Mapping[str, str]],
             top: Mapping[int, List[Any]]) -> List[Any]:
    """:func:`stats_sql`'s row (and each category column's :func:`categories_sql` rows in
    ``top``) as the statistics :meth:`Transform.from_stats` takes."""
    stats: List[Any] = []
    for i, spec in enumerate(specs):
        kind, nulls = spec["kind"], int(row[f"n{i}"])
        if kind in ("numeric", "date", "timestamp"):
            k = 1 if kind == "numeric" else len(part_names(kind))
            st = [{"mean": row[f"m{i}_{j}"], "std": row[f"s{i}_{j}"], "nulls": nulls} for j in range(k)]
            stats.append(st[0] if kind == "numeric" else st)
        elif kind == "boolean":
            stats.append({"true": int(row[f"t{i}"]), "false": int(row[f"f{i}"]), "nulls": nulls})
        else:
            stats.append({"top": [[r["v"], int(r["n"])] for r in top[i]], "nulls": nulls})
    return stats


def encode_exprs(transform: Transform) -> List[str]:
    """One float8 expression per output of ``transform``, in :meth:`Transform.output_names`
    order; equal to :meth:`Transform.transform` on the same values (up to rounding)."""
    out: List[str] = []
    for c in transform.columns:
        q, kind = quote_ident(c["name"]), c["kind"]
        if kind == "numeric":
            out.append(_scaled(f"({q})::pg_catalog.float8", c))
            missing = f"{q} IS NULL"
        elif kind == "boolean":
            out.append(f"(COALESCE({q}, {'true' if c['mode'] else 'false'}))::pg_catalog.int4::pg_catalog.float8")
            missing = f"{q} IS NULL"
        elif kind == "category":
            t = f"COALESCE({_text(c['name'])}, {quote_literal(c['mode']) if c['mode'] is not None else 'NULL'})"
            out += [f"({t} {_EQ} {quote_literal(v)})::pg_catalog.int4::pg_catalog.float8" for v in c["categories"]]
            if c["other"]:
                arr = "ARRAY[" + ", ".join(quote_literal(v) for v in c["categories"]) + "]::pg_catalog.text[]"
                out.append(f"(NOT ({t} {_EQ} ANY ({arr})))::pg_catalog.int4::pg_catalog.float8")
            missing = f"{q} IS NULL"
        else:
            exprs = part_exprs(c["name"], kind, c["type"])
            out += [_scaled(e, p) for e, p in zip(exprs, c["parts"])]
            missing = f"({exprs[0]}) IS NULL"
        if c["indicator"]:
            out.append(f"({missing})::pg_catalog.int4::pg_catalog.float8")
    return out


def _scaled(x: str, p: Mapping[str, Any]) -> str:
    v = f"COALESCE({x}, {_f8(p['mean'])})"
    return f"(({v} {_MINUS} {_f8(p['mean'])}) {_DIV} {_f8(p['std'])})" if p["scale"] else v
