"""Help topics of grouped learning (planner-driven train_groups, snapshots, workers)."""

from __future__ import annotations

TOPICS = {}

TOPICS["grouped"] = """\
CALL groupml.train_groups(source, group_by, features, label, model, search, options, run_id, workers => p, strategy => s)
  The planner-driven form of train_groups (Kingpin grouped learning), used when workers > 1,
  workers => 0 (even if the planner then picks one worker) or a strategy is named. workers => 0 lets the planner choose the count: the fewest workers whose
  estimated makespan is within 10% of the best count's (up to the server's CPUs or the enabled
  endpoints; a NOTICE shows every count's estimate). Steps: (1) a training snapshot: the source is packed once into
  groupml.snapshot_blocks (big-endian float8 blocks, rows shuffled by a seeded row hash, validation
  rows marked with the same content hash as workers => 1), committed; (2) the planner
  (groupml.planner) estimates every strategy and places shards; (3) p worker backends (loopback
  connections, or the DSNs in groupml.worker_endpoints) compute partial loss/gradient sums of their
  shards for all configurations of a group at once (groupml._gap_partial); the coordinator adds
  them up and applies each L-BFGS step when the last shard has reported (algebraic pattern).
  model => 'mlp' (sequential pattern): a group split over workers trains by hopping -- each config's
  state visits the shards one after another within an epoch (groupml._gap_task, never on two
  workers at once); the hops are logged in groupml.run_schedule (kind 'visit') and
  groupml.learners.replay reproduces the weights from them. model => 'lightgbm' (sampling): a
  split group is trained by LightGBM's own data-parallel mode, one rank in each worker backend
  holding a shard. Unsplit MLP/LightGBM groups run their whole search on one worker.
  explain_train_groups names the pattern.

  strategy  auto (cheapest estimate; a new run without worker-only options trains in one backend
            when that is priced no dearer than the workers with their snapshot -- explain shows
            it as strategy 'backend') | grouped (constrained wrap-around, groups split over workers,
            all groups in flight) | gtp (whole group per worker) | mtp (one configuration per task,
            group data copied to every worker) | dp (every group split over all workers, one group
            at a time, synchronous per pass; MLP: per mini-batch step, the coordinator applies
            the averaged gradient; LightGBM: its own data-parallel mode). Every model runs all
            four; MTP for the MLP is one task per config epoch block, for LightGBM one per config.
            mop (MLP and GLMs, never chosen by auto): model hopper parallelism, every group cut into
            p partitions, configurations hop between them under Cerebro's randomized scheduler;
            GLMs are then trained by mini-batch SGD (help('mop')).
  options   besides validation_fraction/metric/seed: keep_snapshot (false), snapshot (reuse a kept
            snapshot_id), worker_memory_mb (512: shard rows cached per worker; beyond, re-read every
            pass), block_rows (8192), lock_timeout_ms (10000), drivers (groups in flight),
            flexible_hops (true: an MLP config may take another free shard of the epoch; false:
            seeded hop order, timing-independent models), network_timeout_s (120: LightGBM ranks),
            checkpoint_every_s (0.5: seconds between commits of finished epoch blocks; 0 = every block),
            whole_group_tasks (true: a GLM group that is not split runs its whole search as one
            task on its worker -- no per-pass round trips, no epoch checkpoint; false: a task per pass),
            whole_group_max_work (1e10: groups with more planned rows x (features+1) x configs x
            iterations keep a task per pass and their epoch checkpoints), placement ('auto': the
            cheaper of wrap-around and whole groups; 'wrap_around': always Kingpin's placement),
            replicas (1: workers holding a copy of each partition under strategy 'mop')

  Workers only see COMMITTED data: the source must be a regular table or view (temp tables are
  refused), and CALL must run outside an explicit transaction block. Models, trials, per-epoch
  losses (groupml.run_epochs) and what ran where (groupml.run_schedule) are committed as groups and
  epochs finish; a failed or cancelled run resumes with run_id => its id: committed groups are kept
  and a group in flight continues after its last committed epoch block (groupml.run_checkpoints;
  unsplit groups run as one worker task each restart). solver 'sgd' needs
  workers => 1. Passwords in endpoint DSNs never appear in errors.

  Example:
    SELECT * FROM groupml.explain_train_groups('clicks', ARRAY['country'], ARRAY['f1','f2'], 'clicked',
                                               'logistic', '{"l2": [0.001, 0.1]}', '{}', 4);
    CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1','f2'], 'clicked', 'logistic',
                              '{"l2": [0.001, 0.1]}', workers => 4, strategy => 'auto');
    SELECT * FROM groupml.progress;          -- from another session, while it runs
"""

TOPICS["explain_train_groups"] = """\
groupml.explain_train_groups(source regclass, group_by text[], features text[], label text, model text,
                             search jsonb DEFAULT '{}', options jsonb DEFAULT '{}', workers integer DEFAULT 4,
                             strategy text DEFAULT 'auto')
  -> TABLE (strategy text, chosen boolean, worker integer, estimated_seconds float8, shards jsonb, explanation text)
  One row per (strategy, worker): the planner's estimated busy seconds, and for the chosen strategy
  the shards the worker would hold and why it was chosen. Reads group sizes only; trains nothing.
  The unit costs are calibrated from the tasks of the latest runs of the same model family
  (groupml.run_schedule) and the expected epochs from earlier runs of the same search; the
  explanation ends with which costs were measured and which are defaults. A run stores them in
  groupml.grouped_runs.plan -> 'unit_costs' and its estimate in groupml.runs.estimated_seconds.
  It refuses exactly what train_groups with the same arguments would (a temporary table or solver
  'sgd' with workers > 1, a snapshot of other arguments).
  Example: SELECT * FROM groupml.explain_train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic');
"""

TOPICS["progress"] = """\
groupml.progress (view)
  Live state of train_groups runs: status, strategy, workers, groups done of n_groups, epoch blocks and
  data passes done, last event, elapsed time. Committed as the run goes, so another session sees it.
  trained_by: the pid of the session training the run now. A cancelled call stores its run as
  'cancelled'; a run whose call ended without a word (terminated, a crash) reads 'cancelled' here at
  once, and the next train_groups call stores it. Resume either with run_id => its id.
  Example: SELECT run_id, status, trained_by, groups_done, n_groups, last_event FROM groupml.progress;
"""

TOPICS["worker_endpoints"] = """\
groupml.worker_endpoints (table: name, dsn, enabled, comment)
  Worker backends for train_groups with workers => p: the first p enabled rows by name. Empty (the
  default): p loopback connections to this server as the calling role (pg_hba must allow it).
  dsn 'loopback' means the same. Passwords are redacted in every message.
  Example: INSERT INTO groupml.worker_endpoints VALUES ('w1', 'host=10.0.0.5 dbname=db user=ml password=...');
"""

TOPICS["snapshots"] = """\
groupml.snapshots / snapshot_groups / snapshot_blocks, groupml.drop_snapshot(snapshot_id)
  Training snapshots built by train_groups with workers. Dropped with the run unless
  options.keep_snapshot; reuse with options.snapshot => id (same source, columns, seed, fraction).
  drop_snapshot is refused (55006) while another session trains a run that uses the snapshot.
  Example: SELECT groupml.drop_snapshot(3);
"""

TOPICS["drop_snapshot"] = """groupml.drop_snapshot(snapshot_id bigint) -> boolean
  Deletes a training snapshot kept with options.keep_snapshot (its groups and blocks go with it);
  false when there is no such snapshot. Refused (55006) while another session trains a run that
  uses it; needs SELECT and DELETE on groupml.snapshots (42501 names them), and drops only the
  snapshots the role sees (row-level security: its own and those of roles it is a member of;
  groupml_admin: all). See help('snapshots').
  Example: SELECT groupml.drop_snapshot(3);
"""
