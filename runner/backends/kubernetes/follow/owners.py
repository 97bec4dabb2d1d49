"""Which of the pods that carry a run's label are its job's (PodOwner): the pods of a job
deleted and made again under the same name carry the label too, and linger while they terminate.

A PyTorchJob's pods name their job's uid in an owner reference: nothing to ask. A TrainJob's do
not: Kubeflow Trainer makes a JobSet under the job's name, with a controller owner reference to
the TrainJob's uid, and the JobSet's batch Jobs make the pods, which JobSet labels with its own
name and uid. So a TrainJob's pods are those labelled with the uid of the JobSet that names the
TrainJob's uid as its controller: one GET of the JobSet, once per job (a TrainJob keeps its
JobSet), and only once the job has pods at all. Until that JobSet exists, no pod is the job's.
JobSet before v0.9 labels pods with its name only: such a pod is the job's if made after it.

Where RBAC forbids reading JobSets, the runner says so once, naming the permission, and tells
the pods apart by time only: a pod made before the TrainJob is another job's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runner.backends.kubernetes.api.apierrors import Forbidden, NotFound
from runner.backends.kubernetes.api.client import MAX_UID_CHARS, KubeApi
from runner.backends.kubernetes.follow import observe
from runner.backends.kubernetes.follow.pods import PodOwner
from runner.errors import RunnerError

log = logging.getLogger(__name__)
PERMISSION = "get jobsets.jobset.x-k8s.io"


class PodOwners:
    """The owners of jobs' pods for one backend; its answers are cached per job uid."""

    def __init__(self, api: Callable[[], KubeApi]) -> None:
        self._api = api
        self._lock = threading.Lock()
        # One GET at a time: a job's watch and its log followers see its pods appear at once.
        self._resolving = threading.Lock()
        self._jobsets: dict[str, str] = {}  # TrainJob uid -> its JobSet's uid (never changes)
        self._created: dict[str, str] = {}  # TrainJob uid -> its creationTimestamp
        self._forbidden = False  # RBAC forbids reading JobSets: said once, not asked again

    def of(
        self,
        name: str,
        uid: str | None,
        pods: Sequence[Mapping[str, Any]],
        job: Mapping[str, Any] | None = None,
    ) -> PodOwner:
        """Which of `pods` may be the job `name`'s, the job `uid` (None: known by its name
        only, any pod is). `job`: the job as read now, if at hand."""
        api = self._api()
        if uid is None or api.conn.kind.owner_references:
            return PodOwner(uid)
        self._remember_created(uid, job)
        if not pods and not self._forbidden:
            return PodOwner(uid, jobset=(name, self._known(uid)))  # no GET for no pods
        with self._resolving:
            known = self._known(uid)
            if known is not None:
                return PodOwner(uid, jobset=(name, known), not_before=self._since(api, name, uid))
            if self._forbidden:
                return self._by_time(api, name, uid)
            return self._resolve(api, name, uid)

    def _known(self, uid: str) -> str | None:
        with self._lock:
            return self._jobsets.get(uid)

    def _resolve(self, api: KubeApi, name: str, uid: str) -> PodOwner:
        try:
            jobset = api.get_jobset(name, attempts=1)
        except NotFound:
            return PodOwner(uid, jobset=(name, None))  # not made yet: no pod is the job's
        except Forbidden as err:
            self._forbid(err)
            return self._by_time(api, name, uid)
        except RunnerError as err:  # unreachable, garbage: asked again next time
            log.info("%s; telling the job's pods apart by time this once", err)
            return self._by_time(api, name, uid)
        found = _jobset_uid(jobset, uid)
        if found is None:
            # An earlier TrainJob's, not yet removed: Trainer makes ours once it is gone.
            return PodOwner(uid, jobset=(name, None))
        with self._lock:
            self._jobsets[uid] = found
        return PodOwner(uid, jobset=(name, found), not_before=self._since(api, name, uid))

    def _since(self, api: KubeApi, name: str, uid: str) -> str | None:
        """The TrainJob's creationTimestamp: remembered from a job read here, else asked for
        once (a `runner logs` has read no job), since a JobSet before v0.9 labels no pod
        with its uid and the time is then all that tells an earlier job's pods apart."""
        with self._lock:
            created = self._created.get(uid)
        if created is None:
            try:
                job: Mapping[str, Any] | None = api.get_job(name)
            except RunnerError:
                job = None
            self._remember_created(uid, job)
            with self._lock:
                created = self._created.get(uid)
        return created

    def _forbid(self, err: RunnerError) -> None:
        with self._lock:
            said, self._forbidden = self._forbidden, True
        if not said:
            log.warning(
                "the kubeconfig may not read JobSets (%s), so a TrainJob's pods are told from "
                "those of an earlier job of the same name by their creation time only; grant "
                "`%s` in the namespace (docs/security.md)",
                err,
                PERMISSION,
            )

    def _by_time(self, api: KubeApi, name: str, uid: str) -> PodOwner:
        """The owner by time only: a pod made before the job is another job's."""
        return PodOwner(uid, not_before=self._since(api, name, uid))

    def _remember_created(self, uid: str, job: Mapping[str, Any] | None) -> None:
        created = (job or {}).get("metadata", {}).get("creationTimestamp")
        if observe.job_uid(job) == uid and isinstance(created, str) and created:
            with self._lock:
                self._created[uid] = created


def _jobset_uid(jobset: Mapping[str, Any], job_uid: str) -> str | None:
    """The JobSet's uid if its controller is the TrainJob `job_uid`; None if it is another's
    (or says nothing usable)."""
    meta = jobset["metadata"]
    refs = meta.get("ownerReferences") or []
    ours = any(
        r.get("controller") is True and r.get("kind") == "TrainJob" and r.get("uid") == job_uid
        for r in refs
    )
    uid = meta.get("uid")
    valid = isinstance(uid, str) and 0 < len(uid) <= MAX_UID_CHARS
    return uid if ours and valid else None
