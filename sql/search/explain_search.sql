CREATE FUNCTION @extschema@.explain_search(source regclass, features text[], label text, model text, search jsonb,
                                           group_by text[] DEFAULT '{}', options jsonb DEFAULT '{}')
RETURNS TABLE (item text, value text, detail text)
LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.search import explain_search; return explain_search(source, features, label, model, search, group_by, options)
$python$;
COMMENT ON FUNCTION @extschema@.explain_search(regclass, text[], text, text, jsonb, text[], jsonb) IS
  'The plan of a search without training: procedure, early stopping, configurations, epoch and pass budget, batch size k and why, groups and rows, estimated seconds (all groups and the largest). Reads the catalog and one count query. See groupml.help(''explain_search'').';
