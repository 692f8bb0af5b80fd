"""Deterministic synthetic datasets for the demo, the tests and the benchmarks.

``grouped_classification`` makes a realistic skewed grouped table: group sizes follow
a Zipf-like law (one big country, a long tail of small ones), every group has its own
true weights (a shared direction plus a group-specific deviation), features are
correlated and on different scales, and the label is drawn from a logistic model.
``copy_binary`` loads such a table through ``COPY ... (FORMAT binary)`` built with
numpy, which is far faster than row-by-row inserts. Client side only.
"""

from __future__ import annotations

import string
from typing import Dict, List

import numpy as np


def group_names(n: int) -> List[str]:
    letters = string.ascii_uppercase
    names = [a + b for a in letters for b in letters]
    if n > len(names):
        raise ValueError(f"at most {len(names)} groups")
    rng = np.random.default_rng(12345)
    return [names[i] for i in rng.choice(len(names), size=n, replace=False)]


def zipf_sizes(n_rows: int, n_groups: int, exponent: float = 1.1, min_size: int = 40) -> np.ndarray:
    w = 1.0 / np.arange(1, n_groups + 1) ** exponent
    sizes = np.maximum(min_size, np.floor(w / w.sum() * n_rows)).astype(np.int64)
    sizes[0] += n_rows - sizes.sum()  # exact total; the largest group absorbs the rest
    return sizes


def grouped_classification(n_rows: int = 1_000_000, n_groups: int = 50, n_features: int = 20,
                           seed: int = 0, exponent: float = 1.1, noise: float = 1.0,
                           task: str = "classification") -> Dict[str, np.ndarray]:
    """Columns: id (int64), grp (2-letter str), f1..fN (float64), label (0/1 or real)."""
    rng = np.random.default_rng(seed)
    sizes = zipf_sizes(n_rows, n_groups, exponent)
    names = group_names(n_groups)
    base = rng.normal(0, 1, n_features) * (rng.random(n_features) < 0.6)
    mix = rng.normal(0, 1, (n_features, n_features)) * 0.3 + np.eye(n_features)
    scales = np.exp(rng.normal(0, 0.5, n_features))
    X = rng.normal(0, 1, (n_rows, n_features)) @ mix * scales
    gid = np.repeat(np.arange(n_groups), sizes)
    W = base + rng.normal(0, 0.8, (n_groups, n_features))
    B = rng.normal(0, 1.0, n_groups)
    z = np.einsum("ij,ij->i", X / scales, W[gid]) * 0.5 + B[gid]
    if task == "classification":
        y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-z / noise))).astype(np.float64)
    else:
        y = z + rng.normal(0, noise, n_rows)
    perm = rng.permutation(n_rows)  # rows arrive interleaved, as in a real table
    out = {"id": np.arange(1, n_rows + 1, dtype=np.int64), "grp": np.array(names)[gid[perm]]}
    for j in range(n_features):
        out[f"f{j + 1}"] = X[perm, j]
    out["label"] = y[perm]
    return out


def _binary_copy_buffer(data: Dict[str, np.ndarray], bool_label: bool) -> bytes:
    cols = list(data)
    n = len(data[cols[0]])
    fields = [("nf", ">i2")]
    values = {}
    for c in cols:
        a = data[c]
        if c == "label" and bool_label:
            fields += [(c + "_l", ">i4"), (c, "u1")]
            values[c] = a.astype(np.uint8)
        elif a.dtype.kind in "US":
            width = max(1, max(len(s) for s in np.unique(a)))
            if any(len(s) != width for s in np.unique(a)):
                raise ValueError("string columns must be fixed width")
            fields += [(c + "_l", ">i4"), (c, f"S{width}")]
            values[c] = a.astype(f"S{width}")
        elif a.dtype.kind == "i":
            fields += [(c + "_l", ">i4"), (c, ">i8")]
            values[c] = a
        else:
            fields += [(c + "_l", ">i4"), (c, ">f8")]
            values[c] = a
    rec = np.empty(n, dtype=np.dtype(fields))
    rec["nf"] = len(cols)
    for c in cols:
        rec[c + "_l"] = rec.dtype[c].itemsize
        rec[c] = values[c]
    header = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
    return header + rec.tobytes() + (-1).to_bytes(2, "big", signed=True)


def create_table(conn, table: str, data: Dict[str, np.ndarray], *, group_col: str = "country",
                 label_col: str = "clicked", bool_label: bool = True) -> None:
    """CREATE TABLE and COPY the data in (binary). ``grp`` becomes ``group_col``."""
    from psycopg import sql

    names = {"grp": group_col, "label": label_col}
    coldefs = []
    for c, a in data.items():
        name = names.get(c, c)
        if c == "label":
            typ = "boolean" if bool_label else "double precision"
        elif a.dtype.kind in "US":
            typ = "text"
        elif a.dtype.kind == "i":
            typ = "bigint"
        else:
            typ = "double precision"
        coldefs.append(sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(typ)))
    conn.execute(sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(table), sql.SQL(", ").join(coldefs)))
    buf = _binary_copy_buffer(data, bool_label)
    with conn.cursor() as cur:
        with cur.copy(sql.SQL("COPY {} FROM STDIN (FORMAT binary)").format(sql.Identifier(table))) as cp:
            step = 1 << 24
            for i in range(0, len(buf), step):
                cp.write(buf[i:i + step])
    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
