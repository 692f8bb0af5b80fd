"""Reports of training runs as self-contained HTML pages with inline SVG plots.

Pure Python, no plpy: :func:`render_run` and :func:`render_scheduler` take plain data
(dicts and lists, as :mod:`groupml.udf.report` reads them from the catalog) and return the
page. Nothing on the page loads anything: no script, stylesheet, font or image from
elsewhere, so it opens offline and in a mail attachment.
"""

from ._page import FORMATS, check_format, render_run, render_scheduler

__all__ = ["FORMATS", "check_format", "render_run", "render_scheduler"]
