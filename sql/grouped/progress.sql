CREATE VIEW @extschema@.progress WITH (security_invoker = true) AS
SELECT r.run_id,
       -- a run 'running' that no session trains was left by a call that is gone (a cancel whose
       -- own update was lost, a terminated backend, a crash): it reads 'cancelled' at once, and
       -- the next train_groups call stores that
       CASE WHEN r.status = 'running' AND h.pid IS NULL THEN 'cancelled' ELSE r.status END AS status,
       r.source, r.family, g.strategy, g.workers, r.n_groups, r.groups_done,
       g.epochs_done, g.passes_done, g.last_event, r.started_at,
       coalesce(r.finished_at,
                CASE WHEN r.status = 'running' AND h.pid IS NULL
                     THEN coalesce(g.updated_at, r.started_at + r.seconds * interval '1 second', r.started_at) END,
                clock_timestamp()) - r.started_at AS elapsed,
       g.updated_at,
       h.pid AS trained_by
FROM @extschema@.runs r LEFT JOIN @extschema@.grouped_runs g USING (run_id)
     -- the session training the run now: it holds the run's advisory lock (class 'gmlr')
     LEFT JOIN LATERAL (SELECT min(l.pid) AS pid FROM pg_catalog.pg_locks l
                        WHERE l.locktype = 'advisory' AND l.granted AND l.classid::int8 = 1735224434
                          AND l.objid::int8 = (r.run_id & 4294967295) AND l.objsubid = 2
                          AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                                            WHERE d.datname = pg_catalog.current_database())) h ON true;
COMMENT ON VIEW @extschema@.progress IS
  'Live progress of train_groups runs (committed as groups and epochs finish; query it from another session). trained_by: the pid of the session training the run now. status: running, done, failed or cancelled; a run whose call is gone (cancel, statement_timeout, terminate, crash) reads cancelled at once and resumes with train_groups(..., run_id => its id).';
GRANT SELECT ON @extschema@.progress TO groupml_admin;
