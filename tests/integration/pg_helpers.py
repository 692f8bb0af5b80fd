"""Small helpers shared by the integration tests."""

import psycopg
import pytest


def sql_error(conn, sql, params=None):
    """Run sql, expect an error; return (sqlstate, message, hint)."""
    with pytest.raises(psycopg.Error) as info:
        conn.execute(sql, params)
    diag = info.value.diag
    return info.value.sqlstate, diag.message_primary, diag.message_hint
