"""train_groups' raw-column transform, on the database side: which feature columns need one
(their catalog types), fitting it with one aggregate query over the source, and keeping it
with the run (``groupml.runs.transform``) so a resumed run encodes as its first attempt did.

A transform is used when ``options.transform`` is true or an object, or when it is absent and
a feature column is not numeric or boolean; ``"transform": false`` keeps the numeric-only path.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..errors import FeatureNotSupportedError
from ..transforms import Transform, check_spec, kind_of_type, scales_for, unsupported
from ..transforms.sql import categories_sql, stats_of, stats_sql
from .. import catalog
from ..sourcesql import NUMERIC_TYPES, reading_source

OWNER = "train_groups"


def transform_option(options_obj: Dict[str, Any]):
    """Take 'transform' out of the options: None (automatic), False, or its settings."""
    if "transform" not in options_obj:
        return None
    value = options_obj.pop("transform")
    return False if value is False else check_spec(value)


def feature_specs(session, source: str, features: List[str]) -> List[Dict[str, str]]:
    """{"name", "kind", "type"} of each feature column, from pg_attribute/pg_type (a domain as
    its base type); 0A000 for a type the transform cannot encode, naming the supported ones."""
    rows = session.query(
        "WITH RECURSIVE c AS (SELECT a.attname::text AS name, a.attnum, a.atttypid AS t FROM pg_catalog.pg_attribute a "
        "WHERE a.attrelid OPERATOR(pg_catalog.=) $1::regclass AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT "
        "a.attisdropped UNION ALL SELECT c.name, c.attnum, t.typbasetype FROM c JOIN pg_catalog.pg_type t ON t.oid "
        "OPERATOR(pg_catalog.=) c.t WHERE t.typtype OPERATOR(pg_catalog.=) 'd') "
        "SELECT c.name, pg_catalog.format_type(c.t, NULL) AS type, t.typtype OPERATOR(pg_catalog.=) 'e' AS is_enum "
        "FROM c JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) c.t WHERE t.typtype OPERATOR(pg_catalog.<>) "
        "'d'", [source], ["text"])
    by_name = {r["name"]: r for r in rows}
    specs = []
    for f in features:
        r = by_name[f]
        kind = kind_of_type(r["type"], bool(r["is_enum"]))
        if kind is None:
            raise unsupported(f, r["type"], OWNER)
        specs.append({"name": f, "kind": kind, "type": r["type"]})
    return specs


def needs_transform(option, cols: Dict[str, str], features: List[str]) -> bool:
    if option is False:
        return False
    return option is not None or any(cols.get(f) not in NUMERIC_TYPES for f in features)


def fit_transform(session, source: str, features: List[str], label: str, settings: Optional[Dict[str, Any]],
                  family: Optional[str]) -> Transform:
    """The run's transform, fitted on every row of ``source`` with a label (all groups
    together: one aggregate query, plus one per category column for its most frequent values)."""
    settings = check_spec(dict(settings or {}))
    specs = feature_specs(session, source, features)
    with reading_source(session, source, OWNER):
        row = session.query(stats_sql(source, label, specs))[0]
        top = {i: session.query(categories_sql(source, label, s["name"], settings["max_categories"]))
               for i, s in enumerate(specs) if s["kind"] == "category"}
    return Transform.from_stats(specs, stats_of(row, specs, top), settings, scales_for(settings, family))


def run_transform(session, run_id: int, source: str, features: List[str], label: str, option, cols,
                  family: Optional[str]) -> Optional[Transform]:
    """The transform of run ``run_id``: the stored one when the run has it (a resumed run), else
    fitted now and stored (the caller commits), else None for a numeric run without one."""
    stored = catalog.run_transform(session, run_id)
    if stored is not None:
        return Transform.from_json(stored)
    if not needs_transform(option, cols, features):
        return None
    t = fit_transform(session, source, features, label, option or {}, family)
    catalog.set_run_transform(session, run_id, t.to_json())
    return t


def check_no_kept_snapshot(exec_options) -> None:
    """A kept snapshot holds rows encoded by its own run; a run with a transform builds its own."""
    if exec_options and exec_options.get("snapshot") is not None:
        raise FeatureNotSupportedError(
            "The 'snapshot' option of train_groups cannot be used with raw (transformed) feature columns",
            hint="Omit the 'snapshot' option: the run builds its own snapshot with its transform.")

