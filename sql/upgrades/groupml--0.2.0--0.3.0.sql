-- groupml 0.2.0 -> 0.3.0 (ALTER EXTENSION groupml UPDATE). What changed in the catalog:
\echo Use "ALTER EXTENSION groupml UPDATE TO '0.3.0'" to load this file. \quit

-- report: a self-contained HTML page of a run (learning curves, score histogram, chosen
-- configurations, time per phase); scheduler_report: the multi-tenant scheduler's page
CREATE FUNCTION @extschema@.report(run_id bigint, format text DEFAULT 'html')
RETURNS text LANGUAGE plpython3u STABLE
AS $python$
from groupml.udf.report import run_report; return run_report(run_id, format)
$python$;
COMMENT ON FUNCTION @extschema@.report(bigint, text) IS
  'A self-contained HTML page (inline SVG, nothing loaded from elsewhere) of a train_groups run: per-configuration learning curves, the per-group validation score histogram, the chosen configuration per group and time per phase; format ''json'' returns the data it is drawn from. Reads the catalog as the caller (row-level security applies). See groupml.help(''report'').';
CREATE FUNCTION @extschema@.scheduler_report(format text DEFAULT 'html')
RETURNS text LANGUAGE plpython3u STABLE
AS $python$
from groupml.udf.report import scheduler_report; return scheduler_report(format)
$python$;
COMMENT ON FUNCTION @extschema@.scheduler_report(text) IS
  'A self-contained HTML page (inline SVG) of the multi-tenant scheduler: its loss curve over the steps, each job''s best quality so far and the steps; format ''json'' returns the data. Reads groupml.scheduler_log as the caller (row-level security applies). See groupml.help(''scheduler_report'').';
