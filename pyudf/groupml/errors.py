"""One exception hierarchy for groupml, each class mapped to a SQLSTATE.

Every error a user can cause is raised as a :class:`GroupmlError` subclass with a
message that states the offending value and the rule it broke, plus a HINT that
says what to do. The PL/Python glue (``groupml.udf``) turns these into
``ERROR``/``HINT`` with the class's SQLSTATE; internal bugs propagate unchanged, and
``QueryCanceled`` is passed on as the same ERROR (57014) under the ``groupml:`` prefix.

Message style::

    The 'lr' value of search must be > 0; got -1
"""

from __future__ import annotations


class GroupmlError(Exception):
    """Base class. ``sqlstate`` is the five-character SQLSTATE sent to the client."""

    sqlstate = "XX000"  # internal_error; subclasses override

    def __init__(self, message: str, *, hint: str | None = None, detail: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.detail = detail

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


class InvalidParameterError(GroupmlError, ValueError):
    """A parameter value is out of range or of the wrong kind (22023)."""

    sqlstate = "22023"  # invalid_parameter_value


class SearchSpecError(InvalidParameterError):
    """A search specification (jsonb) is malformed (22023)."""


class DataError(GroupmlError, ValueError):
    """The data itself breaks a rule, e.g. ragged feature arrays (22000)."""

    sqlstate = "22000"  # data_exception


class ArrayLengthError(DataError):
    """A feature array has a different length from the first one seen (2202E)."""

    sqlstate = "2202E"  # array_subscript_error


class NullValueError(DataError):
    """An argument that must have a value is NULL (22004)."""

    sqlstate = "22004"  # null_value_not_allowed


class NumericOverflowError(DataError):
    """A value is too large for the arithmetic it goes through."""

    sqlstate = "22003"  # numeric_value_out_of_range


class PassedOnError(GroupmlError):
    """An error another component (pg_cron, PostgreSQL itself) raised for a call, passed on
    with its SQLSTATE in groupml's words, with a hint (and its detail)."""

    def __init__(self, sqlstate: str, message: str, *, hint: str | None = None, detail: str | None = None):
        super().__init__(message, hint=hint, detail=detail)
        self.sqlstate = sqlstate


class SourceReadError(PassedOnError):
    """Reading a user's source failed; carries the SQLSTATE of the failure (a value out of
    range, a view that raises, a view whose owner lost a grant, ...)."""



class UndefinedObjectError(GroupmlError, LookupError):
    """An unknown model family, function, tenant, run ... (42704)."""

    sqlstate = "42704"  # undefined_object


class UndefinedTableError(UndefinedObjectError):
    sqlstate = "42P01"  # undefined_table


class UndefinedColumnError(UndefinedObjectError):
    sqlstate = "42703"  # undefined_column


class InvalidCatalogNameError(UndefinedObjectError):
    sqlstate = "3D000"  # invalid_catalog_name (a database that does not exist)


class DuplicateObjectError(GroupmlError):
    """Something of that name exists already and may not be changed by this call."""

    sqlstate = "42710"  # duplicate_object


class WrongObjectTypeError(GroupmlError):
    """The named object is of another kind than the call needs (e.g. an index as a source)."""

    sqlstate = "42809"  # wrong_object_type


class DatatypeMismatchError(GroupmlError, TypeError):
    """A column or value has a type groupml cannot use (42804)."""

    sqlstate = "42804"  # datatype_mismatch


class UndefinedFunctionError(GroupmlError, LookupError):
    """A needed operator or function does not exist for a type (42883)."""

    sqlstate = "42883"  # undefined_function


class InsufficientPrivilegeError(GroupmlError, PermissionError):
    sqlstate = "42501"  # insufficient_privilege


class FeatureNotSupportedError(GroupmlError, NotImplementedError):
    sqlstate = "0A000"  # feature_not_supported


class PrerequisiteStateError(GroupmlError, RuntimeError):
    """An object is not in the state the operation needs (55000)."""

    sqlstate = "55000"  # object_not_in_prerequisite_state


class InvalidTransactionTerminationError(GroupmlError):
    """A procedure that commits was called inside a transaction block (2D000)."""

    sqlstate = "2D000"  # invalid_transaction_termination


class TooManyConnectionsError(GroupmlError):
    """The server has no connection slots left for the workers asked for (53300)."""

    sqlstate = "53300"  # too_many_connections


class ProgramLimitExceededError(GroupmlError):
    """A value beyond a PostgreSQL limit groupml's catalog is bound by (54000)."""

    sqlstate = "54000"  # program_limit_exceeded


class OutOfMemoryError(GroupmlError):
    """A call needed more memory than the backend could get (53200)."""

    sqlstate = "53200"  # out_of_memory


class ObjectInUseError(PrerequisiteStateError):
    """The object is in use by another session, e.g. a run another session is training (55006)."""

    sqlstate = "55006"  # object_in_use


class ModelFormatError(DataError):
    """A stored model cannot be decoded by the safe loaders (22P03)."""

    sqlstate = "22P03"  # invalid_binary_representation


__all__ = [name for name, obj in globals().items() if isinstance(obj, type) and issubclass(obj, GroupmlError)]
