CREATE VIEW @extschema@.progress AS
SELECT r.run_id, r.status, r.source, r.family, g.strategy, g.workers, r.n_groups, r.groups_done,
       g.epochs_done, g.passes_done, g.last_event, r.started_at,
       coalesce(r.finished_at, clock_timestamp()) - r.started_at AS elapsed, g.updated_at
FROM @extschema@.runs r LEFT JOIN @extschema@.grouped_runs g USING (run_id);
COMMENT ON VIEW @extschema@.progress IS
  'Live progress of train_groups runs (committed as groups and epochs finish; query it from another session).';
