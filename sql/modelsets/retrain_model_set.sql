CREATE PROCEDURE @extschema@.retrain_model_set(model_set text, margin float8 DEFAULT 0, workers integer DEFAULT 1)
LANGUAGE plpython3u
AS $python$
from groupml.udf.retrain import retrain_model_set; return retrain_model_set(model_set, margin, workers)
$python$;
COMMENT ON PROCEDURE @extschema@.retrain_model_set(text, float8, integer) IS
  'Train a model set again with the arguments of its active version''s run, on the source''s rows now; the new version becomes active only if its mean validation score is no worse than the active version''s by more than margin (model_set_versions.decision says why). Commits as it goes, like train_groups.';
