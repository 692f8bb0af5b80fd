CREATE FUNCTION @extschema@.version()
RETURNS text LANGUAGE plpython3u STABLE PARALLEL SAFE
AS $python$
from groupml.udf.help import version_text; return version_text()
$python$;
COMMENT ON FUNCTION @extschema@.version() IS
  'Version of the groupml Python package loaded by this backend, its path, and the versions of numpy and scipy.';
