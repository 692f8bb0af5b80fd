CREATE FUNCTION @extschema@.help(topic text DEFAULT NULL)
RETURNS text LANGUAGE plpython3u IMMUTABLE PARALLEL SAFE
AS $python$
from groupml.udf.help import help_text; return help_text(topic)
$python$;
COMMENT ON FUNCTION @extschema@.help(text) IS
  'groupml.help() lists the functions; groupml.help(''learn_over_groups'') explains one, with its parameters and an example.';
