CREATE FUNCTION @extschema@._model_sets_run_done()
RETURNS trigger LANGUAGE plpython3u
AS $python$
from groupml.udf.modelsets import run_done_trigger; return run_done_trigger(TD)
$python$;
COMMENT ON FUNCTION @extschema@._model_sets_run_done() IS
  'Internal (trigger on groupml.runs): when a run is marked done, its pending model set versions get the run''s models and become active, in the same transaction.';
