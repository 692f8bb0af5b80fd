CREATE FUNCTION @extschema@.calibrate_cost_model(sizes jsonb DEFAULT NULL, model text DEFAULT 'logistic',
                                                 passes integer DEFAULT 5)
RETURNS TABLE (n bigint, d integer, k integer, measured_passes integer, seconds_per_pass float8,
               estimated_seconds_per_pass float8)
LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.search import calibrate_cost_model; return calibrate_cost_model(sizes, model, passes)
$python$;
COMMENT ON FUNCTION @extschema@.calibrate_cost_model(jsonb, text, integer) IS
  'Measure a few real batched training passes on synthetic data (default sizes, or sizes => ''[{"n": 10000, "d": 20, "k": 4}, ...]''), store them in groupml.cost_runs and return each measurement beside the refitted cost model''s estimate. See groupml.help(''calibrate_cost_model'').';
