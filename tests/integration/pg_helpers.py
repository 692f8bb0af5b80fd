"""Small helpers shared by the integration tests."""

import psycopg
import pytest

#: the template database every test database is cloned from; it holds the extension
#: (made by pytest-postgresql's noproc fixture, named after its dbname 'groupml')
TEMPLATE = "groupml_tmpl"


def sql_error(conn, sql, params=None):
    """Run sql, expect an error; return (sqlstate, message, hint)."""
    with pytest.raises(psycopg.Error) as info:
        conn.execute(sql, params)
    diag = info.value.diag
    return info.value.sqlstate, diag.message_primary, diag.message_hint


def cancel_when(dsn, pid, condition_sql, timeout=120.0):
    """Start a thread that cancels backend ``pid`` as soon as ``condition_sql`` returns true.

    Returns (thread, fired): join the thread, then check ``fired.is_set()``. Used to cancel
    a long call at a known point of its progress (e.g. after its first committed group)
    instead of guessing a statement_timeout.
    """
    import threading
    import time

    fired = threading.Event()

    def watch():
        with psycopg.connect(dsn, autocommit=True) as watcher:
            deadline = time.time() + timeout
            while time.time() < deadline:
                row = watcher.execute(condition_sql).fetchone()
                if row and row[0]:
                    watcher.execute("SELECT pg_cancel_backend(%s)", [pid])
                    fired.set()
                    return
                time.sleep(0.01)

    thread = threading.Thread(target=watch)
    thread.start()
    return thread, fired


def children_of(pid, marker: bytes):
    """Live processes whose parent is ``pid`` and whose command line holds ``marker``."""
    import os

    out = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{p}/cmdline", "rb") as fh:
                cmd = fh.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and marker in cmd:
            out.append(int(p))
    return out


def cron_runs(pg, jobid, timeout=150.0):
    """pg_cron's run records of job ``jobid`` (status, return_message), once one has finished
    (succeeded or failed) or ``timeout`` seconds have passed: a '* * * * *' job runs at the next
    minute."""
    import time

    deadline = time.monotonic() + timeout
    runs = []
    while time.monotonic() < deadline:
        runs = pg.execute("SELECT status, return_message FROM cron.job_run_details WHERE jobid = %s",
                          [jobid]).fetchall()
        if any(r[0] in ("succeeded", "failed") for r in runs):
            break
        time.sleep(1)
    return runs
