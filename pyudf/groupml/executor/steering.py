"""Steering a model hopper run from another session: requests filed, checked and applied.

``groupml.mop_add_trial`` / ``mop_stop_trial`` / ``mop_add_workers`` file a row of
``groupml.run_requests`` after checking it (:func:`file_request`); nothing else is written,
so a refused request leaves no trace. The run reads the rows while it trains
(:class:`RunRequests`): trial requests go to every group's search, which applies them
between epoch blocks (:func:`groupml.search.run_search`'s ``requests``) and keeps the ids
it applied in its checkpoint; worker requests are applied by the coordinator between
sub-epochs (new worker connections; every model hopper trainer gives the new workers
units). A request is marked applied in the transaction that commits the progress that
applied it, so a resumed run neither loses nor repeats it.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional

from .. import catalog
from ..errors import FeatureNotSupportedError, InvalidParameterError, PrerequisiteStateError, UndefinedObjectError
from ..learners import get_learner_family, glmsgd
from ..validation import check_number
from .core import pattern_of

#: added trials are numbered from here, apart from the ids a search procedure gives
ADDED_TRIAL_BASE = 1_000_000
#: the most workers one request adds
MAX_ADDED_WORKERS = 64
TRIAL_KINDS = ("add_trial", "stop_trial")


def _run(session, run_id, owner: str) -> Dict[str, Any]:
    """The run a request is for: visible to the caller, not finished, a model hopper run."""
    rid = check_number(run_id, "run_id", owner, ge=1, integer=True,
                       hint="Pass the run_id of a running model hopper run (groupml.progress).")
    run = catalog.request_target(session, int(rid))
    if run is None:
        raise UndefinedObjectError(
            f"Run {rid} does not exist, or it belongs to a role the calling role is not a member of",
            hint="Pass a run_id of groupml.progress; a run is steered by members of the role that started it and "
                 "by groupml_admin.")
    if run["strategy"] != "mop":
        what = "is not run by the planner-driven executor" if run["strategy"] is None else \
            f"trains with strategy '{run['strategy']}'"
        raise PrerequisiteStateError(
            f"Run {rid} {what}; {owner} steers model hopper runs (strategy 'mop') only",
            hint="Start the run with train_groups(..., workers => p, strategy => 'mop').")
    plan = catalog.recorded_plan(session, int(rid))
    if plan and "nodes" in json.loads(plan["plan"] or "{}"):
        raise FeatureNotSupportedError(
            f"Run {rid} trains on the nodes of a distributed table; {owner} steers model hopper runs on one "
            f"server's worker backends only", hint="On the nodes the workers are the shards' holders: start a new "
                                                   "run with the configurations you want.")
    if run["status"] == "done":
        raise PrerequisiteStateError(
            f"Run {rid} is done; {owner} needs a run that is training or can resume (status running, failed or "
            f"cancelled)", hint="Start a new run, or file requests while a run trains.")
    return dict(run, run_id=int(rid))


def file_add_trial(session, run_id, params) -> int:
    """``groupml.mop_add_trial``: the new trial's id."""
    owner = "mop_add_trial"
    run = _run(session, run_id, owner)
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except ValueError:
            params = None
    if not isinstance(params, Mapping):
        raise InvalidParameterError(
            f"The 'params' value of {owner} must be a JSON object of {run['family']} hyperparameters; got "
            f"{'NULL' if params is None else type(params).__name__}",
            hint='Pass e.g. \'{"lr": 0.01, "layers": "8", "epochs": 3}\'.')
    if pattern_of(run["family"]) == "algebraic":      # a GLM under 'mop' trains by SGD
        params = glmsgd.mop_search(run["family"], params)
    p = get_learner_family(run["family"]).validate_params(params)
    tid = catalog.next_added_trial_id(session, run["run_id"], ADDED_TRIAL_BASE)
    catalog.insert_run_request(session, run["run_id"], "add_trial", trial_id=tid,
                               params=json.loads(json.dumps(p, default=_plain)))
    return tid


def _plain(v):
    return v.item() if hasattr(v, "item") else str(v)


def file_stop_trial(session, run_id, trial_id) -> int:
    """``groupml.mop_stop_trial``: the request's id."""
    owner = "mop_stop_trial"
    run = _run(session, run_id, owner)
    tid = int(check_number(trial_id, "trial_id", owner, ge=0, le=2 ** 31 - 1, integer=True,
                           hint="Pass a trial_id of groupml.run_epochs for the run, or one mop_add_trial returned."))
    where = catalog.trial_progress(session, run["run_id"], tid)
    if where["stop"] is not None:
        raise PrerequisiteStateError(f"Trial {tid} of run {run['run_id']} is already asked to stop (request "
                                     f"{where['stop']})", hint="See groupml.run_requests; a trial is stopped once.")
    if not where["groups"] and where["added"] is None:
        raise UndefinedObjectError(
            f"Run {run['run_id']} has no trial {tid} with a committed epoch",
            hint="Pass a trial_id of groupml.run_epochs for the run (a trial shows there after its first epoch "
                 "block), or one mop_add_trial returned.")
    if where["groups"] and not where["going"]:
        raise PrerequisiteStateError(f"Trial {tid} of run {run['run_id']} has finished in every group",
                                     hint="Its last decision in groupml.run_epochs is not CONTINUE; nothing to stop.")
    return catalog.insert_run_request(session, run["run_id"], "stop_trial", trial_id=tid)


def file_add_workers(session, run_id, n) -> int:
    """``groupml.mop_add_workers``: the request's id. Free connections for loopback workers
    are checked now (53300) and again when the run connects them."""
    from .pool import check_loopback_slots

    owner = "mop_add_workers"
    run = _run(session, run_id, owner)
    k = int(check_number(n, "n", owner, ge=1, le=MAX_ADDED_WORKERS, integer=True,
                         hint=f"Add 1 to {MAX_ADDED_WORKERS} worker backends per request."))
    endpoints = catalog.enabled_endpoints(session)
    if endpoints:
        have = catalog.requested_workers(session, run["run_id"])
        if have + k > endpoints:
            raise InvalidParameterError(
                f"The 'n' value of {owner} must be <= the {max(endpoints - have, 0)} enabled rows of "
                f"groupml.worker_endpoints that run {run['run_id']}'s {have} workers (started and requested) do not "
                f"use; got {k}", hint="Add and enable endpoints first, or empty groupml.worker_endpoints to add "
                                      "loopback workers.")
    check_loopback_slots(session, k)
    return catalog.insert_run_request(session, run["run_id"], "add_workers", n_workers=k)


class RunRequests:
    """The coordinator's view of a run's requests, read between commits (main thread).

    ``trials`` (a list replaced whole, so that group threads read it without a lock) holds
    every trial request of the run as plain dicts; :meth:`pending_workers` lists the worker
    requests still to apply."""

    def __init__(self, session, run_id: int):
        self.session, self.run_id = session, run_id
        self.trials: List[Dict[str, Any]] = []
        self.workers: List[Dict[str, Any]] = []

    def refresh(self) -> None:
        """Read the run's requests again (one statement)."""
        rows = catalog.run_requests(self.session, self.run_id, TRIAL_KINDS + ("add_workers",))
        self.trials = [{"request_id": int(r["request_id"]), "kind": r["kind"], "trial_id": int(r["trial_id"]),
                        "params": None if r["params"] is None else json.loads(r["params"])}
                       for r in rows if r["kind"] in TRIAL_KINDS]
        self.workers = [r for r in rows if r["kind"] == "add_workers" and r["status"] == "pending"]

    def for_search(self) -> List[Dict[str, Any]]:
        return self.trials

    def pending_workers(self) -> List[Dict[str, Any]]:
        """The worker requests not applied yet (as of the last :meth:`refresh`), consumed."""
        todo, self.workers = self.workers, []
        return todo

    def settle(self, request_ids, status: str, note: str) -> None:
        if request_ids:
            catalog.settle_requests(self.session, self.run_id, sorted({int(i) for i in request_ids}), status, note)


def applied_request_ids(state: Optional[Mapping[str, Any]]) -> List[int]:
    """The request ids a group's checkpoint state says its search applied."""
    search = state.get("search") if isinstance(state, Mapping) else None
    return [int(i) for i in (search or {}).get("requests", [])]
