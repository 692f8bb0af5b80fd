"""Help topics of model hopper parallelism (train_groups with strategy => 'mop', replay)."""

from __future__ import annotations

TOPICS = {}

TOPICS["mop"] = """\
CALL groupml.train_groups(source, group_by, features, label, 'mlp', search, options, run_id, workers => p, strategy => 'mop')
  Model hopper parallelism (Cerebro): tune k configurations of an SGD-trained MLP over a table whose
  rows are split into p partitions, one per worker backend. The run's training snapshot is cut per
  group into p contiguous ranges of its hash-shuffled rows (the partitions); a partition's rows stay
  on its worker, only the configurations' training states hop. Within an epoch every configuration
  visits every partition exactly once (one pass of mini-batch SGD over its rows: a training unit),
  never on two workers at once, and a worker trains one unit at a time. Which unit runs next is
  Cerebro's randomized scheduler (Alg. 1): each idle worker, in a seeded random order, takes a
  random unit of an idle configuration whose partition it holds. group_by => '{}' tunes one model
  over the whole table; with a grouping, MOP runs inside every group. Grid, random, TPE, Hyperband
  and ASHA searches drive it epoch by epoch like any other strategy.
  On a Citus distributed table or a table of postgres_fdw partitions the partitions are the shards
  on their nodes (workers is ignored): the rows stay on their node, the states hop between nodes,
  and the other placements of replicated Citus shards are replicas (options.replicas does not
  apply there). A node lost mid-run without a replica: SQLSTATE 08001 naming it; resume with run_id.

  options   replicas (1): workers holding a copy of each partition (partition s on worker s and the
            next replicas-1 workers). With 2 or more a unit may run on any holder, and a worker that
            dies mid-unit (a crash, pg_terminate_backend) puts the unit back into the queue: it reruns
            on another holder from the configuration's last state and the run finishes by itself.
            When every holder of a partition is gone the run stops with SQLSTATE 08006; call
            train_groups again with run_id => its id to resume (fresh worker connections).
            keep_snapshot (false): keep the snapshot so that groupml.replay can retrain a trial.
            Every other executor option of help('grouped') applies.

  Watch: groupml.progress.last_event names each configuration's epoch, sub-epoch (partitions visited
  in the current epoch) and last validation loss; groupml.run_epochs has every epoch's losses. A
  cancel stops the run within about a second (worker loops check for cancel); it resumes with run_id.
  The executed visit log is groupml.run_schedule (kind = 'visit', pass = epoch, ordered by started).

  Example:
    CALL groupml.train_groups('clicks', '{}', ARRAY['f1','f2','f3'], 'clicked', 'mlp',
         '{"method": "random", "n_trials": 8, "space": {"lr": {"loguniform": [1e-3, 1e-1]},
           "layers": ["32", "64,32"], "epochs": [5], "batch_size": [32]}}',
         '{"keep_snapshot": true, "replicas": 2}', workers => 4, strategy => 'mop');
    SELECT run_id, epochs_done, last_event FROM groupml.progress;   -- from another session
"""

TOPICS["replay"] = """\
groupml.replay(run_id bigint, trial_id integer, group_key jsonb DEFAULT NULL) -> bytea
  Retrain one configuration of a model hopper run (strategy => 'mop', or an MLP group split over
  workers) sequentially in this backend, from the run's visit log (groupml.run_schedule, kind =
  'visit', in the order the units actually ran -- reruns after a lost worker included) and its
  training snapshot, and return the model bytes. On the same host they equal the run's model of
  that trial byte for byte (groupml.models.fit.model for the best trial). Needs the snapshot:
  train with options.keep_snapshot => true. group_key may be NULL when the trial is in one group.
  A run on the nodes of a distributed table: the partitions' rows are read from the nodes' kept
  snapshots (as the calling role) and the trial is retrained here.
  Errors: 42704 (no such run or trial), 55000 (snapshot gone, not an MLP run, no visit log),
  22023 (bad argument; a trial in several groups without group_key).

  Example:
    SELECT groupml.replay(42, 3) = (SELECT (fit).model FROM groupml.models WHERE run_id = 42);
"""
