"""Help topics of model hopper parallelism (train_groups with strategy => 'mop', replay)."""

from __future__ import annotations

TOPICS = {}

TOPICS["mop"] = """\
CALL groupml.train_groups(source, group_by, features, label, model, search, options, run_id, workers => p, strategy => 'mop')
  Model hopper parallelism (Cerebro): tune k configurations of an SGD-trained model (model 'mlp' or
  'mlp_regressor', or a GLM: 'logistic', 'linear', 'svm') over a table whose
  rows are split into p partitions, one per worker backend. The run's training snapshot is cut per
  group into p contiguous ranges of its hash-shuffled rows (the partitions); a partition's rows stay
  on its worker, only the configurations' training states hop. Within an epoch every configuration
  visits every partition exactly once (one pass of mini-batch SGD over its rows: a training unit),
  never on two workers at once, and a worker trains one unit at a time. Which unit runs next is
  Cerebro's randomized scheduler (Alg. 1): each idle worker, in a seeded random order, takes a
  random unit of an idle configuration whose partition it holds. group_by => '{}' tunes one model
  over the whole table; with a grouping, MOP runs inside every group. Grid, random, TPE, Hyperband,
  ASHA and population based training (help('pbt')) drive it epoch by epoch like any other strategy.
  On a Citus distributed table or a table of postgres_fdw partitions the partitions are the shards
  on their nodes (workers is ignored): the rows stay on their node, the states hop between nodes,
  and the other placements of replicated Citus shards are replicas (options.replicas does not
  apply there). A node lost mid-run without a replica: SQLSTATE 08001 naming it; resume with run_id.

  GLMs      strategy 'mop' trains a GLM by mini-batch SGD: the search's solver is 'sgd' (an absent or
            'auto' solver means 'sgd'; 'lbfgs' or 'gd' is refused with 22023). Parameters: lr (0.1,
            the step on the standardized columns), batch_size (256), max_iter (100: the epochs), l2,
            l1 (a proximal step), fit_intercept, class_weight ('balanced': weights of the whole
            group's label mix), loss (svm: 'squared_hinge' or 'hinge'), seed (the batch order of
            every visit is drawn from (seed, epoch, partition)). tol (SGD has no convergence test)
            and epochs (a GLM counts epochs in max_iter) are refused with 22023. The stored model
            is an ordinary GLM fit with its weights on the user's scale (groupml.predict).
            LightGBM has no 'mop' (0A000).

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
    CALL groupml.train_groups('clicks', '{}', ARRAY['f1','f2','f3'], 'clicked', 'logistic',
         '{"space": {"lr": [0.3, 0.03], "l2": [0, 0.001], "max_iter": [10], "batch_size": [64]}}',
         '{"keep_snapshot": true}', workers => 2, strategy => 'mop');
"""

TOPICS["pbt"] = """\
search method 'pbt': population based training (Jaderberg et al., 2017), models mlp and mlp_regressor
  A population of configurations trains together, epoch by epoch. Every perturbation_interval
  epochs, once every member has finished that epoch, the members are ranked by validation loss;
  each member of the bottom quantile stops (stop_reason 'exploited at epoch e: replaced by trial c,
  forked from trial p') and a new trial c takes its place: it EXPLOITS a member p of the top
  quantile (drawn at random) by continuing p's training state at epoch e -- weights, optimizer
  moments, dropout generator -- and EXPLORES p's hyperparameters: each searched parameter is, with
  probability resample_probability, drawn afresh from the space, else perturbed (a range value times
  0.8 or 1.2, clipped to the range; a list or choice value moved to a neighbouring item). All draws
  come from one generator seeded by "seed". Under strategy => 'mop' the copied state is the
  configuration's hopping model; it also runs in one backend (workers => 1) and the other MLP
  strategies.

  '{"method": "pbt", "population": 8, "perturbation_interval": 1, "quantile": 0.25,
    "resample_probability": 0.25, "max_epochs": 6, "seed": 7,
    "space": {"lr": {"loguniform": [1e-3, 1e-1]}, "batch_size": [32, 64, 128], "layers": ["32"], "epochs": [6]}}'
  population (8, 2..256): members trained together (slots, if given, must be >= population);
  perturbation_interval (1): epochs between exploit/explore steps, < max_epochs (10);
  quantile (0.25, > 0 and <= 0.5): ceil(quantile * members) are replaced and as many are parents;
  resample_probability (0.25, 0..1). Only lr, momentum, weight_decay and batch_size may vary in the
  space (a fork keeps its parent's network); every other parameter is one value. No early_stopping.
  Errors: 22023 with the value and the rule, before anything is written.

  Lineage: groupml.trials.parent_trial_id and forked_at_epoch (NULL for a first member); the view
  groupml.trial_lineage has one row per forked trial with parent_params, params and explored (the
  params the fork changed). A child's epoch_scores begin with its parent's up to the fork.
  groupml.replay(run_id, trial_id) retrains a forked trial bit for bit: its ancestors' visits up to
  each fork, the fork, then its own.

  Example:
    SELECT trial_id, parent_trial_id, forked_at_epoch, explored FROM groupml.trial_lineage
    WHERE run_id = 42 ORDER BY trial_id;
"""

TOPICS["trial_lineage"] = """\
groupml.trial_lineage  (view)
  One row per trial of a population based training run (search method 'pbt') that was forked
  from another trial: run_id, group_key, trial_id, parent_trial_id, forked_at_epoch (the parent's
  epoch count at the fork), parent_params, params, explored (the params the fork changed; NULL
  when none), status, stop_reason, score. Reads as its caller (row-level security of
  groupml.trials); a role needs SELECT on it. See help('pbt').

  Example (a whole lineage, back to the first member):
    WITH RECURSIVE up AS (
      SELECT group_key, trial_id, parent_trial_id, forked_at_epoch FROM groupml.trials
      WHERE run_id = 42 AND trial_id = 9
      UNION ALL
      SELECT t.group_key, t.trial_id, t.parent_trial_id, t.forked_at_epoch FROM groupml.trials t
      JOIN up ON t.run_id = 42 AND t.group_key = up.group_key AND t.trial_id = up.parent_trial_id)
    SELECT * FROM up;
"""

TOPICS["replay"] = """\
groupml.replay(run_id bigint, trial_id integer, group_key jsonb DEFAULT NULL) -> bytea
  Retrain one configuration of a model hopper run (strategy => 'mop' for an MLP or a GLM, or an
  MLP group split over workers) sequentially in this backend, from the run's visit log (groupml.run_schedule, kind =
  'visit', in the order the units actually ran -- reruns after a lost worker included) and its
  training snapshot, and return the model bytes. On the same host they equal the run's model of
  that trial byte for byte (groupml.models.fit.model for the best trial). Needs the snapshot:
  train with options.keep_snapshot => true. group_key may be NULL when the trial is in one group.
  A run on the nodes of a distributed table: the partitions' rows are read from the nodes' kept
  snapshots (as the calling role) and the trial is retrained here.
  Errors: 42704 (no such run or trial), 55000 (snapshot gone, not an MLP or GLM run, no visit log),
  22023 (bad argument; a trial in several groups without group_key).

  Example:
    SELECT groupml.replay(42, 3) = (SELECT (fit).model FROM groupml.models WHERE run_id = 42);
"""

_STEER_ERRORS = """\
  Errors (nothing is written): 22023 (a bad argument, named with its rule), 42704 (no run of that id
  visible to the calling role: row security lets members of the role that started a run and
  groupml_admin steer it), 55000 (a run that is done or not a model hopper run), 42501 (the role lacks
  SELECT/INSERT on groupml.run_requests or the other tables the hint names)."""

TOPICS["mop_add_trial"] = """\
groupml.mop_add_trial(run_id bigint, params jsonb) -> integer
  Add one MLP configuration to a model hopper run (strategy => 'mop') while it trains, from any
  session. params are the MLP's hyperparameters (help('models')), checked now and completed with
  the defaults. The request goes into groupml.run_requests; the run reads it within a quarter second
  and every group still training (or yet to start) adds the trial at its next epoch boundary, so the
  trial starts at the beginning of an epoch and visits every partition exactly once per epoch, like
  the search's own trials. It is not the search procedure's trial: it takes no slot of it and trains
  its params' epochs (unless stopped). Returns the new trial's id; added trials are numbered from
  1000000. A run that stopped (failed, cancelled) takes requests too: they apply when it resumes.
""" + _STEER_ERRORS + """

  Example:
    SELECT groupml.mop_add_trial(42, '{"lr": 0.01, "layers": "16", "epochs": 5}');
    SELECT status, note, applied_at FROM groupml.run_requests WHERE run_id = 42;
"""

TOPICS["mop_stop_trial"] = """\
groupml.mop_stop_trial(run_id bigint, trial_id integer) -> bigint
  Stop one trial of a model hopper run (strategy => 'mop') while it trains, from any session: the
  trial finishes its current epoch block (the search's epoch_iters epochs; give epoch_iters 1 to stop
  at the end of the current epoch), then leaves the run; its model so far is kept and groupml.trials stores it with
  status 'stopped' and a stop_reason naming the request. trial_id: one of groupml.run_epochs for the
  run (a trial shows there after its first block) or one mop_add_trial returned. Returns the
  request_id of groupml.run_requests. Errors also: 42704 (no such trial with a committed epoch),
  55000 (already asked to stop, or finished in every group).
""" + _STEER_ERRORS + """

  Example:
    SELECT groupml.mop_stop_trial(42, 3);
"""

TOPICS["mop_add_workers"] = """\
groupml.mop_add_workers(run_id bigint, n integer DEFAULT 1) -> bigint
  Add n worker backends to a model hopper run (strategy => 'mop') while it trains (elasticity,
  Cerebro 5.6). The run connects them between sub-epochs (loopback workers, or the next enabled rows
  of groupml.worker_endpoints); each new worker holds a copy of every partition of the groups it
  trains (it loads them from the run's snapshot first: schedule entries of kind 'load') and the
  randomized scheduler gives it units from the next sub-epoch on; the visit log
  (groupml.run_schedule, kind = 'visit') shows them. A resumed run starts with the workers its applied
  requests added. Free connections for loopback workers are checked now (53300) and when the run
  connects them (a worker that cannot connect marks the request 'refused' with the reason; the run
  goes on). n: 1 to 64 (with groupml.worker_endpoints rows: at most the enabled rows the run's workers,
  started and requested, do not use; 22023 otherwise). Returns the request_id of groupml.run_requests.
""" + _STEER_ERRORS + """

  Example:
    SELECT groupml.mop_add_workers(42, 2);
"""

TOPICS["run_requests"] = """\
groupml.run_requests (table)
  Requests steering model hopper runs: request_id, run_id, kind (add_trial | stop_trial | add_workers),
  trial_id, params, n_workers, status (pending | applied | refused | expired), note, requested_by,
  requested_at, applied_at. A request is marked applied in the transaction that commits the progress
  that applied it (a trial request: the group's epoch block and checkpoint; a worker request: the next
  commit after its workers connected), so a resumed run neither loses nor repeats it; requests still
  pending when the run finishes expire. Row security: a role sees the requests of the runs it sees.

  Example:
    SELECT kind, trial_id, status, note FROM groupml.run_requests WHERE run_id = 42 ORDER BY request_id;
"""
