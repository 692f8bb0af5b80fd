-- Called once per statement by learn_over_groups' C transition function, under a hashed
-- aggregate, when the statement has buffered 20,000 rows: the helper processes that train its
-- groups start while the scan goes on, not after it.
CREATE FUNCTION @extschema@._learn_prestart(handle bigint)
RETURNS void LANGUAGE plpython3u VOLATILE STRICT
AS $python$
from groupml.udf.aggregate import prestart; return prestart(handle)
$python$;
COMMENT ON FUNCTION @extschema@._learn_prestart(bigint) IS
  'Internal: called by learn_over_groups'' transition function (C) once a hashed aggregate has buffered 20,000 rows; starts the helper processes that will train its groups, so their start overlaps the scan.';
