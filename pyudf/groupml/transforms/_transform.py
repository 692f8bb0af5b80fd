"""The raw-column transform: plain data in, a float64 matrix out (no database access).

A :class:`Transform` turns the raw values of a row's feature columns -- numbers, booleans,
text or enum labels, dates and timestamps, NULLs among them -- into the numeric vector a
model is trained on. It is fitted once per run and stored with every model of the run.

Encoding of each column kind (the kind comes from the column's SQL type, :func:`kind_of_type`):

``numeric``   the value; a NULL becomes the training mean; standardised ``(x - mean) / std``
              when the transform scales (a constant column keeps std 1): under scale 'auto'
              for every family but LightGBM's and those in :data:`INTERNALLY_STANDARDISED`.
``boolean``   0/1; a NULL becomes the most frequent value.
``category``  one-hot over the ``max_categories`` most frequent values (ties by value), plus
              an ``other`` column when training saw more; a value not among them -- an
              unseen one too -- sets ``other`` (all zeros when there is no ``other`` column);
              a NULL becomes the most frequent value. A column without any value in training
              has the ``other`` column only (1 for every row: nothing is learned from it).
``date``      parts ``epoch_days``, ``month`` (1-12), ``dow`` (0 = Sunday); ``timestamp`` adds
              ``hour``; each part is a numeric output (mean-imputed, scaled like numerics).
              A timestamp with time zone is taken in UTC; an infinite date counts as NULL.

When ``missing_indicators`` is on, a column that had NULLs in its training rows gets one more
output, 1.0 where the value is NULL. A column without NULLs in training gets none; a NULL at
scoring time is still imputed.

The format (:meth:`Transform.to_json`) is JSON only: never pickle.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections import Counter
from decimal import Decimal
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

from ..errors import DatatypeMismatchError, FeatureNotSupportedError, InvalidParameterError, ModelFormatError

FORMAT = 1
KINDS = ("numeric", "boolean", "category", "date", "timestamp")
DEFAULT_MAX_CATEGORIES = 20
MAX_MAX_CATEGORIES = 1000
SCALE_CHOICES = ("auto", "standard", "none")
#: Families whose learner standardises its inputs itself: scale 'auto' leaves their numeric
#: outputs unscaled, so the work is not done twice. A GLM family belongs here once its solver
#: standardises internally (and stores coefficients on its input's scale).
INTERNALLY_STANDARDISED: frozenset = frozenset({"logistic", "linear", "svm"})
#: Families that need no scaling at all (trees split on order only).
UNSCALED_FAMILIES = frozenset({"lightgbm", "lightgbm_regressor"})

_NUMERIC_TYPES = {"smallint", "integer", "bigint", "real", "double precision", "numeric"}
_TEXT_TYPES = {"text", "character varying", "character", "name"}
_DATE_PARTS = ("epoch_days", "month", "dow")
_TIMESTAMP_PARTS = ("epoch_days", "month", "dow", "hour")

#: what an error's HINT lists as the supported feature types
SUPPORTED_TYPES = ("smallint, integer, bigint, real, double precision, numeric, boolean, text, varchar, char, "
                   "enum types, date, timestamp, timestamptz (and domains over them)")

_EPOCH = _dt.datetime(1970, 1, 1)


def kind_of_type(type_name: str, is_enum: bool = False) -> Optional[str]:
    """The column kind of an SQL type (its base type's ``format_type`` name, without a
    modifier such as ``(10)``), or None when it is not supported."""
    if is_enum:
        return "category"
    base = type_name.split("(")[0].strip()
    if base in _NUMERIC_TYPES:
        return "numeric"
    if base == "boolean":
        return "boolean"
    if base in _TEXT_TYPES:
        return "category"
    if base == "date":
        return "date"
    if base in ("timestamp without time zone", "timestamp with time zone"):
        return "timestamp"
    return None


def check_spec(spec: Any, owner: str = "train_groups options") -> Dict[str, Any]:
    """The ``transform`` option as a dict of its settings (defaults filled in); ``true`` is
    all defaults. Raises 22023 naming the bad key or value."""
    if spec is True or spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise InvalidParameterError(f"The 'transform' value of {owner} must be true, false or an object; got "
                                    f"{json.dumps(spec)[:80]}",
                                    hint='Pass {"transform": {"max_categories": 20, "scale": "auto", '
                                         '"missing_indicators": true}} or {"transform": true}.')
    unknown = sorted(set(spec) - {"max_categories", "scale", "missing_indicators"})
    if unknown:
        raise InvalidParameterError(f"The 'transform' value of {owner} has an unknown key '{unknown[0]}'",
                                    hint="Keys are max_categories, scale and missing_indicators.")
    cap = spec.get("max_categories", DEFAULT_MAX_CATEGORIES)
    if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_MAX_CATEGORIES:
        raise InvalidParameterError(f"The 'max_categories' value of the transform must be an integer from 1 to "
                                    f"{MAX_MAX_CATEGORIES}; got {json.dumps(cap)}",
                                    hint="One-hot columns per category column; the rest share an 'other' column.")
    scale = spec.get("scale", "auto")
    if scale not in SCALE_CHOICES:
        raise InvalidParameterError(f"The 'scale' value of the transform must be one of auto, standard, none; "
                                    f"got {json.dumps(scale)}",
                                    hint="auto standardises numeric columns except for LightGBM and families "
                                         "that standardise internally.")
    ind = spec.get("missing_indicators", True)
    if not isinstance(ind, bool):
        raise InvalidParameterError(f"The 'missing_indicators' value of the transform must be true or false; got "
                                    f"{json.dumps(ind)}", hint="true adds a 0/1 column per column with NULLs.")
    return {"max_categories": cap, "scale": scale, "missing_indicators": ind}


def scales_for(spec: Mapping[str, Any], family: Optional[str]) -> bool:
    """Whether a transform with settings ``spec`` standardises numerics for ``family``."""
    if spec["scale"] == "auto":
        return family not in UNSCALED_FAMILIES and family not in INTERNALLY_STANDARDISED
    return spec["scale"] == "standard"


# -- statistics: the same dicts from Python values (fit) and from SQL aggregates --------------

def numeric_stats(values: Iterable[Optional[float]]) -> Dict[str, Any]:
    """{"mean", "std", "nulls"} of a numeric series (None for NULL); NaN and infinities are
    left out of the mean and std (a training row holding one is skipped, not imputed)."""
    values = list(values)
    arr = np.asarray([float(v) for v in values if v is not None and math.isfinite(float(v))], dtype=np.float64)
    return {"mean": float(arr.mean()) if arr.size else 0.0, "std": float(arr.std()) if arr.size else 0.0,
            "nulls": sum(1 for v in values if v is None)}


def category_stats(values: Iterable[Optional[str]], cap: int) -> Dict[str, Any]:
    """{"top": [(value, count)] of the ``cap`` + 1 most frequent (ties by value), "nulls"}."""
    values = list(values)
    counts = Counter(v for v in values if v is not None)
    nulls = sum(1 for v in values if v is None)
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:cap + 1]
    return {"top": [[k, int(n)] for k, n in top], "nulls": nulls}


def parts_of(kind: str, value: Any) -> Optional[List[float]]:
    """The parts of a date or timestamp value (a ``datetime.date``/``datetime`` or its ISO
    text), None for NULL or infinity."""
    if value is None:
        return None
    if isinstance(value, str):
        v = value.strip()
        if v in ("infinity", "-infinity"):
            return None
        try:
            value = (_dt.date.fromisoformat(v) if kind == "date" and len(v) == 10
                     else _dt.datetime.fromisoformat(v.replace(" ", "T", 1)))
        except ValueError:
            raise DatatypeMismatchError(f"A {kind} value must be an ISO date or timestamp; got {value[:40]!r}",
                                        hint="Pass the column itself (to_jsonb writes ISO dates), "
                                             "e.g. '2024-03-05' or '2024-03-05T10:00:00'.") from None
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        epoch = (value - _EPOCH) / _dt.timedelta(days=1)
        out = [epoch, float(value.month), float(value.isoweekday() % 7)]
        return out + [float(value.hour)] if kind == "timestamp" else out
    if isinstance(value, _dt.date):
        out = [float((value - _EPOCH.date()).days), float(value.month), float(value.isoweekday() % 7)]
        return out + [0.0] if kind == "timestamp" else out
    raise DatatypeMismatchError(f"A {kind} value must be a date or timestamp; got {type(value).__name__}",
                                hint="Pass the column itself (to_jsonb writes ISO dates).")


def part_names(kind: str) -> Sequence[str]:
    return _TIMESTAMP_PARTS if kind == "timestamp" else _DATE_PARTS


# -- the transform --------------------------------------------------------------------------

class Transform:
    """A fitted transform: ``columns`` (one dict per raw column: name, kind, type and its
    fitted statistics) and ``settings`` (max_categories, scale, missing_indicators, scaled)."""

    def __init__(self, columns: List[Dict[str, Any]], settings: Dict[str, Any]):
        self.columns = columns
        self.settings = settings

    # construction
    @classmethod
    def from_stats(cls, specs: Sequence[Mapping[str, str]], stats: Sequence[Mapping[str, Any]],
                   settings: Mapping[str, Any], scaled: bool) -> "Transform":
        """Build from per-column ``specs`` ({"name", "kind", "type"}) and their statistics
        (:func:`numeric_stats` / :func:`category_stats` dicts, a list of numeric stats per
        part for dates, {"true", "false", "nulls"} for booleans)."""
        cap, ind = settings["max_categories"], settings["missing_indicators"]
        cols = []
        for spec, st in zip(specs, stats):
            c = {"name": spec["name"], "kind": spec["kind"], "type": spec["type"]}
            if spec["kind"] == "numeric":
                c.update(_num(st, scaled))
                nulls = st["nulls"]
            elif spec["kind"] == "boolean":
                c["mode"] = bool(st["true"] > st["false"])
                nulls = st["nulls"]
            elif spec["kind"] == "category":
                top = [list(t) for t in st["top"]]
                c["categories"] = [t[0] for t in top[:cap]]
                c["other"] = len(top) > cap or not top       # no value in training: 'other' only
                c["mode"] = top[0][0] if top else None
                nulls = st["nulls"]
            else:
                c["parts"] = [dict(part=p, **_num(s, scaled)) for p, s in zip(part_names(spec["kind"]), st)]
                nulls = st[0]["nulls"] if st else 0
            c["indicator"] = bool(ind and nulls > 0)
            cols.append(c)
        return cls(cols, dict(settings, scaled=bool(scaled)))

    @classmethod
    def fit(cls, specs: Sequence[Mapping[str, str]], columns: Mapping[str, Sequence[Any]],
            settings: Optional[Mapping[str, Any]] = None, family: Optional[str] = None) -> "Transform":
        """Fit on plain columns: ``columns[name]`` is the list of raw values (None for NULL)."""
        settings = check_spec(dict(settings or {}))
        stats = []
        for spec in specs:
            vals = list(columns[spec["name"]])
            kind = spec["kind"]
            if kind == "numeric":
                stats.append(numeric_stats([None if v is None else float(v) for v in vals]))
            elif kind == "boolean":
                stats.append({"true": sum(1 for v in vals if v is True), "false": sum(1 for v in vals if v is False),
                              "nulls": sum(1 for v in vals if v is None)})
            elif kind == "category":
                stats.append(category_stats([None if v is None else _text(v, spec["type"]) for v in vals],
                                            settings["max_categories"]))
            else:
                ps = [parts_of(kind, v) for v in vals]
                stats.append([numeric_stats([None if p is None else p[i] for p in ps])
                              for i in range(len(part_names(kind)))])
        return cls.from_stats(specs, stats, settings, scales_for(settings, family))

    # shape
    @property
    def input_names(self) -> List[str]:
        return [c["name"] for c in self.columns]

    def output_names(self) -> List[str]:
        """Names of the encoded features, in order: ``col``, ``col=value``, ``col:other``,
        ``col:epoch_days``..., ``col:missing``."""
        out = []
        for c in self.columns:
            n, k = c["name"], c["kind"]
            if k in ("numeric", "boolean"):
                out.append(n)
            elif k == "category":
                out += [f"{n}={v}" for v in c["categories"]] + ([f"{n}:other"] if c["other"] else [])
            else:
                out += [f"{n}:{p['part']}" for p in c["parts"]]
            if c["indicator"]:
                out.append(f"{n}:missing")
        return out

    @property
    def width(self) -> int:
        return len(self.output_names())

    # applying
    def transform(self, rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Rows (mappings column name -> raw value) as an ``len(rows) x width`` float64 matrix."""
        X = np.empty((len(rows), self.width), dtype=np.float64)
        for i, row in enumerate(rows):
            X[i] = self._row(row)
        return X

    def _row(self, row: Mapping[str, Any]) -> List[float]:
        out: List[float] = []
        for c in self.columns:
            v = row[c["name"]]
            k = c["kind"]
            missing = v is None
            if k == "numeric":
                x = c["mean"] if missing else _number(v, c["name"])
                out.append((x - c["mean"]) / c["std"] if c["scale"] else x)
            elif k == "boolean":
                if not missing and not isinstance(v, bool):
                    raise DatatypeMismatchError(f"Column '{c['name']}' must be a boolean; got {_shown(v)}",
                                                hint="Pass the column itself, or true/false.")
                out.append(1.0 if (c["mode"] if missing else v) else 0.0)
            elif k == "category":
                if not missing and not isinstance(v, str):
                    raise DatatypeMismatchError(f"Column '{c['name']}' must be a text or enum value; got "
                                                f"{_shown(v)}", hint="Pass the column itself (a string).")
                t = c["mode"] if missing else _text(v, c["type"])
                hot = [1.0 if t == cat else 0.0 for cat in c["categories"]]
                out += hot
                if c["other"]:
                    out.append(0.0 if any(hot) else 1.0)
            else:
                ps = parts_of(k, v)
                missing = ps is None
                for j, p in enumerate(c["parts"]):
                    x = p["mean"] if missing else ps[j]
                    out.append((x - p["mean"]) / p["std"] if p["scale"] else x)
            if c["indicator"]:
                out.append(1.0 if missing else 0.0)
        return out

    # format
    def to_dict(self) -> Dict[str, Any]:
        return {"format": FORMAT, "settings": self.settings, "columns": self.columns}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text) -> "Transform":
        """Read :meth:`to_json`'s text (or its parsed dict); a malformed one is a corrupt model."""
        try:
            doc = json.loads(text) if isinstance(text, (str, bytes, bytearray)) else text
            if doc["format"] != FORMAT:
                raise ModelFormatError(f"Unsupported transform format {doc['format']}",
                                       hint="Retrain the model with this version of groupml.")
            cols = [dict(c) for c in doc["columns"]]
            for c in cols:
                if c["kind"] not in KINDS or not isinstance(c["name"], str):
                    raise ValueError(c)
            t = cls(cols, dict(doc["settings"]))
            t.output_names()
            return t
        except ModelFormatError:
            raise
        except Exception:  # noqa: BLE001 - any decoding failure of stored bytes
            raise ModelFormatError("The transform stored with the model cannot be decoded",
                                   hint="Retrain the model; the stored transform is not groupml's JSON.") from None


def _num(st: Mapping[str, Any], scaled: bool) -> Dict[str, Any]:
    std = float(st["std"] or 0.0)
    return {"mean": float(st["mean"] or 0.0), "std": std if std > 0 and math.isfinite(std) else 1.0,
            "scale": bool(scaled)}


def _text(v: Any, sql_type: str) -> str:
    s = str(v)
    # char(n) pads with blanks; its text form (what the training query compares) does not
    return s.rstrip(" ") if sql_type.startswith("character(") or sql_type == "character" else s


def _number(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
        raise DatatypeMismatchError(f"Column '{name}' must be a number; got {_shown(v)}",
                                    hint="Pass the column itself, or a number.")
    return float(v)


def _shown(v: Any) -> str:
    return f"{type(v).__name__} {json.dumps(v, default=str)[:40]}"


def apply(transform: Transform, rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """``transform.transform(rows)``: the pure function scoring paths call."""
    return transform.transform(rows)


def unsupported(name: str, type_name: str, owner: str) -> FeatureNotSupportedError:
    return FeatureNotSupportedError(f"Column '{name}' of {owner} features has type {type_name}, which the transform "
                                    f"cannot encode", hint=f"Supported feature types: {SUPPORTED_TYPES}. Cast or "
                                                           f"extract it in a view first.")
