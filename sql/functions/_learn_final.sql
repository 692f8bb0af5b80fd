-- Final function of learn_over_groups: trains and selects the group's model.
CREATE FUNCTION @extschema@._learn_final(state bigint)
RETURNS @extschema@.fit LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.aggregate import final; return final(state)
$python$;
COMMENT ON FUNCTION @extschema@._learn_final(bigint) IS
  'Internal: final function of groupml.learn_over_groups. Splits the buffered rows, trains every configuration together and returns the selected fit.';
