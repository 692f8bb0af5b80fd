CREATE PROCEDURE @extschema@.train_groups(
    source regclass, group_by text[], features text[], label text, model text,
    search jsonb DEFAULT '{}', options jsonb DEFAULT '{}', INOUT run_id bigint DEFAULT NULL,
    workers integer DEFAULT 1, strategy text DEFAULT 'auto', model_set text DEFAULT NULL)
LANGUAGE plpython3u
AS $python$
from groupml.udf.train import train_groups; return train_groups(source, group_by, features, label, model, search, options, run_id, workers, strategy, model_set)
$python$;
COMMENT ON PROCEDURE @extschema@.train_groups(regclass, text[], text[], text, text, jsonb, jsonb, bigint, integer, text, text) IS
  'Train and select one model per group of a table and store them in groupml.models (committed group by group). workers => p > 1 (or an explicit strategy) runs the planner-driven executor over p worker backends: auto | grouped | gtp | mtp | dp | mop (model hopper parallelism: MLP configurations, or GLM configurations trained by mini-batch SGD, hop over p partitions of each group). Pass an existing run_id to resume an interrupted run. model_set => name makes the run a new version of that model set, activated when the run finishes (groupml.help(''model_sets'')). See groupml.help(''train_groups''), groupml.help(''grouped'') and groupml.help(''mop'').';
