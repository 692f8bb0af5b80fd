-- A text value (a column, a text parameter) converts to model_family where a function takes one,
-- through a function that names the known families when the value is not one; a literal such
-- as 'logistic' is read as a model_family directly.
CREATE FUNCTION @extschema@._model_family(name text)
RETURNS @extschema@.model_family LANGUAGE plpython3u IMMUTABLE STRICT PARALLEL SAFE
AS $python$
from groupml.udf.aggregate import model_family; return model_family(name)
$python$;
COMMENT ON FUNCTION @extschema@._model_family(text) IS
  'Internal: the cast from text to groupml.model_family; an unknown name is an ERROR that lists the known families.';
CREATE CAST (text AS @extschema@.model_family) WITH FUNCTION @extschema@._model_family(text) AS IMPLICIT;
COMMENT ON CAST (text AS @extschema@.model_family) IS
  'Lets learn_over_groups take the model family as a text value (a column, a text parameter) too.';
