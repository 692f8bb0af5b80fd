-- Transition functions of learn_over_groups, one per aggregate signature: each buffers one row in
-- backend memory under the handle it returns (the aggregate state).
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label float8, model @extschema@.model_family, search jsonb)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.aggregate import step; return step(state, features, label, model, search, None)
$python$;
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], float8, @extschema@.model_family, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (float8 label).';
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label float8, model @extschema@.model_family, search jsonb, options jsonb)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.aggregate import step; return step(state, features, label, model, search, options)
$python$;
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], float8, @extschema@.model_family, jsonb, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (float8 label, with options).';
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label boolean, model @extschema@.model_family, search jsonb)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.aggregate import step; return step(state, features, label, model, search, None)
$python$;
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], boolean, @extschema@.model_family, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (boolean label).';
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label boolean, model @extschema@.model_family, search jsonb, options jsonb)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.aggregate import step; return step(state, features, label, model, search, options)
$python$;
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], boolean, @extschema@.model_family, jsonb, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (boolean label, with options).';
