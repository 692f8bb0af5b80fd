"""The planner-driven grouped-learning executor (Kingpin): training snapshots, worker
backends addressed by DSN, GAP for the algebraic pattern (GLMs), GTP/MTP/DP baselines.

Modules: ``core`` (the types, codecs and strategy table the others share; it imports none
of them), ``snapshot`` (ETL into packed blocks), ``pool`` (endpoints, worker connections,
redaction), ``worker`` (the worker-side partial pass and the MLP / LightGBM tasks), ``glm``
(ShardedGLMTrainer and the per-group evaluator), ``patterns`` (the sequential MLP hopper,
LightGBM data-parallel ranks, whole-group searches on one worker), ``baselines`` (MTP for
the MLP and LightGBM, per-step synchronous DP for the MLP), ``plan`` (planner
placements → worker tasks), ``invariants`` (checks on executed schedules), ``costs`` (unit costs
calibrated from earlier runs), ``run`` (the coordinator). Catalog I/O goes through
:mod:`groupml.catalog`; nothing here imports :mod:`groupml.udf`. See docs/grouped.md.
"""
