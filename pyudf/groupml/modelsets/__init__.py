"""Named model sets: the pure parts (no plpy).

:mod:`._keys` turns a group key in PostgreSQL's binary form (``record_send`` of the key's
values, each with its type) into a value that compares as PostgreSQL compares the typed values,
whatever DateStyle, TimeZone or extra_float_digits are; :mod:`._arrays` reads the packed columns
the table scorer is given. The SQL entry points are in :mod:`groupml.udf.modelsets`.
"""

from ._arrays import float8_array, float8_image, float8_literal, float8_rows, int8_array
from ._keys import (RECORD_OID, check_key_types, decode_record, group_key, key_class, shown_key, type_label)
from ._choices import MISSING_CHOICES, check_on_missing, check_set_name
from ._gate import gate

__all__ = ["RECORD_OID", "check_key_types", "decode_record", "group_key", "key_class", "shown_key", "type_label",
           "float8_array", "float8_image", "float8_literal", "float8_rows", "int8_array", "MISSING_CHOICES", "check_on_missing", "check_set_name", "gate"]
