CREATE FUNCTION @extschema@.scheduler_report(format text DEFAULT 'html')
RETURNS text LANGUAGE plpython3u STABLE
AS $python$
from groupml.udf.report import scheduler_report; return scheduler_report(format)
$python$;
COMMENT ON FUNCTION @extschema@.scheduler_report(text) IS
  'A self-contained HTML page (inline SVG) of the multi-tenant scheduler: its loss curve over the steps, each job''s best quality so far and the steps; format ''json'' returns the data. Reads groupml.scheduler_log as the caller (row-level security applies). See groupml.help(''scheduler_report'').';
