"""Help topics of the reports (report, scheduler_report)."""

from __future__ import annotations

TOPICS = {}

TOPICS["report"] = """\
groupml.report(run_id bigint, format text DEFAULT 'html')
  -> text
  A self-contained HTML page of a train_groups run, drawn with inline SVG: nothing on it is
  loaded from elsewhere (no script, stylesheet, font or image), so it opens offline. It shows
  - learning curves: per configuration (its params), the validation loss after every epoch
    block, the median over the groups that tried it (groupml.trials.epoch_scores);
  - the distribution of the selected models' validation scores over the groups (histogram),
    and how many groups ended without a model and why;
  - the chosen configuration of every group (table: group, status, configuration, params, score);
  - time per phase: the run's wall clock, its measured training time and the planner's estimate
    (groupml.runs), and with workers the summed time of each kind of worker task (run_schedule).
  format  'html' (the page) or 'json' (the data it is drawn from, for scripts).
  The catalog is read as the calling role: row-level security applies, and a run you may not
  read is reported like one that does not exist.
  Errors: an unknown run_id (42704) names the query that lists your runs; a format other than
  'html' or 'json', or a NULL run_id, is 22023.
  From a shell, installer/groupml report --dsn ... --run N -o report.html writes the page.

  Example:
    \\pset format unaligned
    \\o run7.html
    SELECT groupml.report(7);
    \\o
"""

TOPICS["scheduler_report"] = """\
groupml.scheduler_report(format text DEFAULT 'html')
  -> text
  A self-contained HTML page (inline SVG) of the multi-tenant scheduler, from the rows of
  groupml.scheduler_log the caller may read:
  - its loss curve: after every step, the sum over jobs of (the job's best quality in the log
    minus its best quality so far; a job with no finished candidate yet counts from its worst);
    it ends at 0, and how fast it falls is how well the scheduler served the jobs;
  - each job's best quality so far, step by step;
  - the steps (tenant, job, candidate, status, quality, seconds, policy).
  format  'html' or 'json' (the data); anything else is 22023.
  From a shell: installer/groupml report --dsn ... --scheduler -o scheduler.html.

  Example:
    SELECT groupml.scheduler_report();
"""
