"""The source checks and SQL builders of :mod:`groupml.sourcesql`, under the names
udf/tenancy.py imports them by."""

from ..sourcesql import (check_columns, check_label_not_a_feature, check_source_kind, columns,  # noqa: F401
                         packed_row_expr, reading_source, source_oid)
