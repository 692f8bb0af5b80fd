"""groupml.db's PlpySession and the catalog version check, over the shared plpy stub."""

import pytest

from groupml import db
from groupml.errors import InvalidTransactionTerminationError, PrerequisiteStateError


def test_a_statement_is_prepared_once_and_run_with_its_arguments(plpy):
    plpy.on("FROM groupml.runs", lambda sql, args: [{"run_id": args[0], "status": "done"}])
    session = db.PlpySession(plpy)
    assert session.query("SELECT run_id, status FROM groupml.runs WHERE run_id = $1", [7], ["int8"]) == \
        [{"run_id": 7, "status": "done"}]
    session.query("SELECT run_id, status FROM groupml.runs WHERE run_id = $1", [8], ["int8"])
    assert len(session._plans) == 1
    assert [args for _sql, args in plpy.statements] == [[7], [8]]


def test_query_or_error_reports_a_failed_statement_and_passes_a_cancel_on(plpy):
    def refuse(sql, args):
        raise plpy.spiexceptions.InsufficientPrivilege("permission denied for table t\nmore")

    def cancel(sql, args):
        raise plpy.spiexceptions.QueryCanceled("canceling statement due to user request")

    plpy.on("FROM t", refuse)
    plpy.on("FROM slow", cancel)
    session = db.PlpySession(plpy)
    assert session.query_or_error("SELECT * FROM t") == (None, ("42501", "permission denied for table t"))
    with pytest.raises(plpy.spiexceptions.QueryCanceled):
        session.query_or_error("SELECT * FROM slow")
    assert plpy.subtransactions == 2


def test_a_plain_spierror_is_read_through_its_packed_sqlstate(plpy):
    # a plain plpy.SPIError has no sqlstate attribute: the code is packed into spidata[0]
    err = plpy.SPIError("custom failure")
    assert getattr(err, "sqlstate", None) is None
    assert db.sqlstate_of(err) == "XX000"
    assert db.sqlstate_of(plpy.spiexceptions.ReadOnlySqlTransaction("x")) == "25006"


def test_commit_inside_a_transaction_block_is_our_2d000(plpy):
    def refuse():
        raise plpy.spiexceptions.InvalidTransactionTermination("invalid transaction termination")

    session = db.PlpySession(plpy)
    plpy.commit = refuse
    with pytest.raises(InvalidTransactionTerminationError) as info:
        session.commit()
    assert info.value.sqlstate == "2D000" and "CALL it on its own" in info.value.hint


def test_the_backend_session_refuses_objects_of_another_version(plpy):
    import groupml

    plpy.extversion = "0.1.0"
    with pytest.raises(PrerequisiteStateError) as info:
        db.backend_session()
    assert info.value.message == (f"groupml's objects in this database are version 0.1.0, and its Python "
                                  f"package is version {groupml.__version__}")
    assert info.value.hint.startswith("Run ALTER EXTENSION groupml UPDATE;")
    assert db._session is None
    plpy.extversion = groupml.__version__
    assert db.backend_session() is db.backend_session()


def test_notices_reach_the_client(plpy):
    db.PlpySession(plpy).notice("group 1 of 2 trained")
    assert plpy.notices == ["group 1 of 2 trained"]
