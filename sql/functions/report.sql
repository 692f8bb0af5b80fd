CREATE FUNCTION @extschema@.report(run_id bigint, format text DEFAULT 'html')
RETURNS text LANGUAGE plpython3u STABLE
AS $python$
from groupml.udf.report import run_report; return run_report(run_id, format)
$python$;
COMMENT ON FUNCTION @extschema@.report(bigint, text) IS
  'A self-contained HTML page (inline SVG, nothing loaded from elsewhere) of a train_groups run: per-configuration learning curves, the per-group validation score histogram, the chosen configuration per group and time per phase; format ''json'' returns the data it is drawn from. Reads the catalog as the caller (row-level security applies). See groupml.help(''report'').';
