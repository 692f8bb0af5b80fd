"""The planner-driven grouped-learning executor (Kingpin): training snapshots, worker
backends addressed by DSN, GAP for the algebraic pattern (GLMs), GTP/MTP/DP baselines.

Modules: ``snapshot`` (ETL into packed blocks), ``pool`` (endpoints, worker connections,
redaction), ``worker`` (the worker-side partial pass), ``glm`` (ShardedGLMTrainer and the
per-group evaluator), ``plan`` (planner placements → worker tasks), ``invariants``
(checks on executed schedules), ``run`` (the coordinator). See docs/grouped.md.
"""
