"""Inline SVG charts: line charts, histograms and horizontal bars, from plain numbers.

Every drawn series carries ``data-*`` attributes (``data-series`` and what it shows), so a
test or a script reading the page finds the series without parsing coordinates.
"""

from __future__ import annotations

import math
from html import escape
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

#: colour-blind-safe palette (Okabe and Ito), cycled
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 40


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _finite(values) -> List[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def _ticks(lo: float, hi: float, n: int = 5) -> List[float]:
    """About ``n`` round tick values covering [lo, hi]."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / max(n, 1)
    mag = 10.0 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    first = math.ceil(lo / step) * step
    out, v = [], first
    while v <= hi + step * 1e-9 and len(out) < 50:
        out.append(0.0 if abs(v) < step * 1e-9 else v)
        v += step
    return out


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e5 or a < 1e-3:
        return f"{v:.2e}"
    return f"{v:.4g}"


def _range(values: Sequence[float]) -> Tuple[float, float]:
    if not values:
        return 0.0, 1.0
    lo, hi = min(values), max(values)
    if hi == lo:
        pad = abs(lo) * 0.05 or 0.5
        return lo - pad, hi + pad
    return lo, hi


def _frame(title: str, kind: str, body: List[str], x_label: str, y_label: str,
           xt: List[Tuple[float, str]], yt: List[Tuple[float, str]]) -> str:
    """The SVG element: axes, ticks, labels and ``body``."""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{escape(kind)}" '
           f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">',
           f"<title>{escape(title)}</title>",
           f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" class="axis"/>',
           f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" class="axis"/>']
    for px, text in xt:
        out.append(f'<line x1="{px:.1f}" y1="{HEIGHT - BOTTOM}" x2="{px:.1f}" y2="{HEIGHT - BOTTOM + 4}" class="axis"/>'
                   f'<text x="{px:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{escape(text)}</text>')
    for py, text in yt:
        out.append(f'<line x1="{LEFT - 4}" y1="{py:.1f}" x2="{WIDTH - RIGHT}" y2="{py:.1f}" class="grid"/>'
                   f'<text x="{LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">{escape(text)}</text>')
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.1f}" y="{HEIGHT - 6}" text-anchor="middle">'
               f"{escape(x_label)}</text>")
    out.append(f'<text x="14" y="{(TOP + HEIGHT - BOTTOM) / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {(TOP + HEIGHT - BOTTOM) / 2:.1f})">{escape(y_label)}</text>')
    out.extend(body)
    out.append("</svg>")
    return "\n".join(out)


def empty(title: str, kind: str, why: str) -> str:
    """A chart with nothing to draw: a short SVG saying why."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{escape(kind)}" '
            f'width="{WIDTH}" height="60" viewBox="0 0 {WIDTH} 60" role="img"><title>{escape(title)}</title>'
            f'<text x="{LEFT}" y="34">{escape(why)}</text></svg>')


def line_chart(title: str, kind: str, series: Sequence[Mapping], *, x_label: str, y_label: str) -> str:
    """One polyline per series: ``{"name", "points": [(x, y), ...], "attrs": {data-*: value}}``.
    Points with a non-finite y are left out; a series with one point is drawn as a dot."""
    pts_all = [(float(x), float(y)) for s in series for x, y in s["points"]
               if y is not None and math.isfinite(float(y)) and math.isfinite(float(x))]
    if not pts_all:
        return empty(title, kind, "no finite values to plot")
    x0, x1 = _range([p[0] for p in pts_all])
    y0, y1 = _range([p[1] for p in pts_all])

    def sx(x):
        return LEFT + (x - x0) / (x1 - x0) * (WIDTH - LEFT - RIGHT)

    def sy(y):
        return HEIGHT - BOTTOM - (y - y0) / (y1 - y0) * (HEIGHT - TOP - BOTTOM)

    body = []
    for i, s in enumerate(series):
        pts = [(sx(float(x)), sy(float(y))) for x, y in s["points"]
               if y is not None and math.isfinite(float(y)) and math.isfinite(float(x))]
        if not pts:
            continue
        attrs = " ".join(f'data-{escape(k)}="{escape(str(v))}"' for k, v in (s.get("attrs") or {}).items())
        c = s.get("colour") or colour(i)
        name = escape(str(s["name"]))
        if len(pts) == 1:
            body.append(f'<circle cx="{pts[0][0]:.1f}" cy="{pts[0][1]:.1f}" r="3" fill="{c}" class="series" '
                        f'{attrs}><title>{name}</title></circle>')
        else:
            coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            body.append(f'<polyline points="{coords}" fill="none" stroke="{c}" stroke-width="1.8" class="series" '
                        f'{attrs}><title>{name}</title></polyline>')
    xt = [(sx(v), _fmt(v)) for v in _ticks(x0, x1)]
    yt = [(sy(v), _fmt(v)) for v in _ticks(y0, y1)]
    return _frame(title, kind, body, x_label, y_label, xt, yt)


def histogram(title: str, kind: str, values: Sequence[float], *, x_label: str, bins: Optional[int] = None,
              attrs: Optional[Mapping[str, str]] = None) -> str:
    """Counts of ``values`` in equal-width bins, one rect per bin (``data-count``, ``data-lo``, ``data-hi``)."""
    vals = _finite(values)
    if not vals:
        return empty(title, kind, "no finite values to plot")
    lo, hi = _range(vals) if min(vals) == max(vals) else (min(vals), max(vals))
    n_bins = bins or max(1, min(30, int(math.ceil(math.sqrt(len(vals))))))
    width = (hi - lo) / n_bins
    counts = [0] * n_bins
    for v in vals:
        counts[min(n_bins - 1, int((v - lo) / width))] += 1
    top = max(counts)
    bar_w = (WIDTH - LEFT - RIGHT) / n_bins
    base = " ".join(f'data-{escape(k)}="{escape(str(v))}"' for k, v in (attrs or {}).items())
    body = []
    for i, c in enumerate(counts):
        h = c / top * (HEIGHT - TOP - BOTTOM)
        b_lo, b_hi = lo + i * width, lo + (i + 1) * width
        body.append(f'<rect x="{LEFT + i * bar_w + 1:.1f}" y="{HEIGHT - BOTTOM - h:.1f}" width="{max(bar_w - 2, 1):.1f}" '
                    f'height="{h:.1f}" fill="{colour(0)}" class="bin" {base} data-count="{c}" '
                    f'data-lo="{b_lo:.6g}" data-hi="{b_hi:.6g}"><title>{_fmt(b_lo)} to {_fmt(b_hi)}: {c}</title></rect>')
    xt = [(LEFT + (v - lo) / (hi - lo) * (WIDTH - LEFT - RIGHT), _fmt(v)) for v in _ticks(lo, hi)]
    yt = [(HEIGHT - BOTTOM - v / top * (HEIGHT - TOP - BOTTOM), _fmt(v))
          for v in _ticks(0, top) if float(v).is_integer()]
    return _frame(title, kind, body, x_label, "groups", xt, yt)


def bars(title: str, kind: str, items: Sequence[Tuple[str, float]], *, unit: str = "s") -> str:
    """Horizontal bars, one per (label, value) (``data-label``, ``data-value``)."""
    items = [(str(k), float(v)) for k, v in items if v is not None and math.isfinite(float(v))]
    if not items:
        return empty(title, kind, "nothing measured")
    row, label_w = 24, 230
    h = TOP + row * len(items) + 8
    top = max(max(v for _, v in items), 1e-12)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{escape(kind)}" width="{WIDTH}" '
           f'height="{h}" viewBox="0 0 {WIDTH} {h}" role="img"><title>{escape(title)}</title>']
    for i, (label, v) in enumerate(items):
        y = TOP + i * row
        w = max(v, 0.0) / top * (WIDTH - label_w - 90)
        out.append(f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end">{escape(label)}</text>'
                   f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" fill="{colour(i)}" '
                   f'class="bar" data-label="{escape(label)}" data-value="{v:.6g}"/>'
                   f'<text x="{label_w + w + 6:.1f}" y="{y + 15}">{escape(_fmt(v))} {escape(unit)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def legend(entries: Sequence[Tuple[str, str, str]]) -> str:
    """An HTML list of (colour, label, detail)."""
    if not entries:
        return ""
    rows = "".join(f'<li><span class="swatch" style="background:{c}"></span><b>{escape(label)}</b> '
                   f"<code>{escape(detail)}</code></li>" for c, label, detail in entries)
    return f'<ul class="legend">{rows}</ul>'


def table(header: Sequence[str], rows: Sequence[Sequence[object]], *, kind: str,
          row_attrs: Optional[Sequence[Dict[str, str]]] = None) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = []
    for i, r in enumerate(rows):
        attrs = " ".join(f'data-{escape(k)}="{escape(str(v))}"' for k, v in ((row_attrs or [{}] * len(rows))[i] or {}).items())
        body.append(f"<tr {attrs}>" + "".join(f"<td>{escape('' if c is None else str(c))}</td>" for c in r) + "</tr>")
    return f'<table data-table="{escape(kind)}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
