CREATE FUNCTION @extschema@.explain_train_groups(
    source regclass, group_by text[], features text[], label text, model text,
    search jsonb DEFAULT '{}', options jsonb DEFAULT '{}', workers integer DEFAULT 4, strategy text DEFAULT 'auto')
RETURNS TABLE (strategy text, chosen boolean, worker integer, estimated_seconds float8, shards jsonb, explanation text)
LANGUAGE plpython3u
AS $python$
from groupml.udf.train import explain_train_groups; return explain_train_groups(source, group_by, features, label, model, search, options, workers, strategy)
$python$;
COMMENT ON FUNCTION @extschema@.explain_train_groups(regclass, text[], text[], text, text, jsonb, jsonb, integer, text) IS
  'What train_groups would do with these arguments: every strategy''s estimated busy seconds per worker, the chosen one''s placement (shards per worker) and why. Reads group sizes only; trains nothing. See groupml.help(''grouped'').';
