"""A cluster run's own Secret: the random secret that signs its elastic group's records
(contract/runsecret.py), made at submit and given to the worker containers only through
`valueFrom.secretKeyRef` (render/common.run_secret_env).

Submit creates the job first, then the Secret, owned by the job (ownerReferences, the job's
uid): deleting the job deletes it too (Kubernetes' garbage collector), and so does anything the
runner deletes a job by (cancel, the pending timeout, a complete fetch, a failed submit), at
once, by name. A pod the operator starts before the Secret exists waits for it (its container
is not created while the Secret it reads is missing), never runs without it. The secret is in
this process's memory and the create request's body alone: never in the run directory, job.json,
a manifest, an error or a log line. The runner's Role may create and delete Secrets, never read
them (contract.stack.runner_role_rules).

What it is not: signing (workloads/adaptive/elastic/signing.py), rendering the reference.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

from contract.runsecret import SECRET_KEY, new_secret, secret_name
from runner.backends.kubernetes.api.apierrors import Forbidden, NameConflict, NotFound
from runner.backends.kubernetes.api.client import KubeApi
from runner.backends.kubernetes.render.common import MANAGED_BY, RUN_ID_LABEL
from runner.errors import RunnerError

log = logging.getLogger(__name__)


class SecretTaken(RunnerError):
    """A Secret of the run's name was there before submit made one: not the run's."""


def manifest(
    run_id: str, namespace: str, secret: str, owner: dict[str, Any] | None
) -> dict[str, Any]:
    """The run's Secret, holding `secret`, owned by `owner` (an ownerReference; None: unowned).
    Immutable: nothing changes the key once the pods may have read it."""
    meta: dict[str, Any] = {
        "name": secret_name(run_id),
        "namespace": namespace,
        "labels": {RUN_ID_LABEL: run_id, "app.kubernetes.io/managed-by": MANAGED_BY},
    }
    if owner is not None:
        meta["ownerReferences"] = [owner]
    data = {SECRET_KEY: base64.b64encode(secret.encode()).decode()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque",
            "immutable": True, "data": data}  # fmt: skip


def owner_reference(api: KubeApi, name: str, uid: str) -> dict[str, Any]:
    """The run's job `name` (uid `uid`) as an owner. Neither `controller` nor
    `blockOwnerDeletion`: the latter would need update on the job's finalizers, which the
    runner's Role does not grant, and no controller manages the Secret."""
    r = api.resource
    return {"apiVersion": f"{r.group}/{r.version}", "kind": r.kind, "name": name, "uid": uid}


def create(api: KubeApi, name: str, job_uid: str | None) -> None:
    """Create the run `name`'s Secret with a new random secret, owned by its job `job_uid`
    (without a uid, which a broken server's answer may lack, it is unowned: only the runner's
    deletes remove it). A Secret of its name that is already there is refused, never used: its
    secret may be known to whoever made it."""
    owner = owner_reference(api, name, job_uid) if job_uid else None
    if owner is None:
        log.warning("the Secret %s has no owner: the job's uid is unknown; `runner cancel %s` "
                    "or a complete `runner fetch` removes it", secret_name(name), name)  # fmt: skip
    secret = new_secret()
    body = manifest(name, api.conn.namespace, secret, owner)
    what, ns = f"create Secret {secret_name(name)}", api.conn.namespace
    try:
        api.answer(what, api.core.create_namespaced_secret, ns, body)
    except NameConflict:
        raise SecretTaken(
            f"a Secret named {secret_name(name)} is already in namespace {ns}, not made by this "
            "submit, so its secret may be known to others; the run is not started: remove it "
            f"(`kubectl delete secret {secret_name(name)} -n {ns}`) and submit again"
        ) from None
    except Forbidden as err:
        raise RunnerError(
            f"{err}; a stack's runner Role made before runs had their own Secret lacks "
            "`secrets create, delete`: `pulumi up` adds them"
        ) from None
    except RunnerError as err:  # a server's message may quote the body: never the secret
        raise _scrubbed(err, (secret, body["data"][SECRET_KEY])) from None


def _scrubbed(err: RunnerError, secrets: tuple[str, ...]) -> RunnerError:
    """`err`, with no secret in its message."""
    text = str(err)
    for secret in secrets:
        text = text.replace(secret, "<the run's secret>")
    return err if text == str(err) else RunnerError(text)


def delete(api: KubeApi, name: str) -> None:
    """Delete the run `name`'s Secret, with or after its job; gone already is fine, and a
    failure is said, not raised (an owned Secret goes with its job anyway)."""
    what = f"delete Secret {secret_name(name)}"
    try:
        api.answer(what, api.core.delete_namespaced_secret, secret_name(name), api.conn.namespace)
    except NotFound:
        return
    except RunnerError as err:
        log.warning("%s; remove it with `kubectl delete secret %s -n %s`", err,
                    secret_name(name), api.conn.namespace)  # fmt: skip
