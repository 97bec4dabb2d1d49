"""Which job controller ran a job: submit reads the controller's Deployment once and records the
manager container's image, and the version that image names, in job.json's `cluster.controller`
beside the runtime (`cluster.training_runtime`).

Where the controller runs is contract/stack.py's JOB_CONTROLLERS (the names the stack's add-ons
install); a stack's runner identity may `get` that one Deployment (controller_role_rules). The
answer is the cluster's and may be anything: an identity made before it could read it (403), a
controller installed elsewhere (404), a Deployment with no such container, an image that is no
reference, huge or full of control characters. Each is recorded as version "unknown" with a
short reason of our own words, with the cluster's text only escaped and cut short; none fails
the submit. A recorded image or version is one that matched a reference's grammar, so it is
printable and bounded.

Not here: the call itself and its errors (api/client.py), writing job.json (memory.py).
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from contract.rundir import one_line
from contract.stack import JOB_CONTROLLERS, JobApi, JobController
from runner.backends.kubernetes.api.apierrors import Forbidden, NotFound
from runner.errors import RunnerError

UNKNOWN = "unknown"
MAX_IMAGE_CHARS = 255  # the registry's limit of a repository name; a reference a bit more
MAX_REASON_CHARS = 200
MAX_SHOWN_CHARS = 60  # of a hostile value quoted in a reason
MAX_CONTAINERS = 64  # a Deployment lists a few; more is not looked through
# An image reference's characters (distribution/reference: host[:port]/path[:tag][@digest]).
_REFERENCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class DeploymentReader(Protocol):
    def get_deployment(self, namespace: str, name: str) -> Any: ...


class Unreadable(Exception):
    """Why the Deployment read says no version (a short reason, ours)."""


def read_controller(api: DeploymentReader, job_api: JobApi, stack: str | None) -> dict[str, str]:
    """job.json's `cluster.controller`: the Deployment read, and its manager's `image` and
    `version`, or version "unknown" and the `reason`. Never raises a RunnerError. `stack`: the
    stack the cluster is (None: a kubeconfig's), for what a 403 means."""
    controller = JOB_CONTROLLERS[job_api]
    where = f"{controller.namespace}/{controller.deployment}"
    try:
        deployment = api.get_deployment(controller.namespace, controller.deployment)
        image = manager_image(deployment, controller)
        version = image_version(image)
    except Forbidden:
        return _unknown(where, forbidden(stack))
    except NotFound:
        return _unknown(where, "no such Deployment (the controller is installed elsewhere)")
    except RunnerError as err:
        return _unknown(where, f"not read: {err}")
    except Unreadable as err:
        return _unknown(where, str(err))
    return {"deployment": where, "image": image, "version": version}


def forbidden(stack: str | None) -> str:
    """Why a 403 on the Deployment: the Role a stack grants is missing, or the user's."""
    if stack:
        return (f"forbidden: stack {stack}'s runner identity was made before stacks let it "
                f"read the controller's Deployment; `pulumi up --stack {stack}` does")  # fmt: skip
    return "forbidden: the kubeconfig's user may not get the controller's Deployment"


def manager_image(deployment: Any, controller: JobController) -> str:
    """The image of `controller`'s manager container in `deployment` (Unreadable if none)."""
    meta = _dig(deployment, "metadata")
    if not isinstance(meta, dict) or (meta.get("namespace"), meta.get("name")) != (
        controller.namespace, controller.deployment
    ):  # fmt: skip
        raise Unreadable("the answer is another object than the Deployment asked for")
    containers = _dig(deployment, "spec", "template", "spec", "containers")
    if not isinstance(containers, list) or not containers:
        raise Unreadable("the Deployment has no containers")
    found = [c for c in containers[:MAX_CONTAINERS]
             if isinstance(c, dict) and c.get("name") == controller.container]  # fmt: skip
    if not found:
        raise Unreadable(f"the Deployment has no container named {controller.container!r}")
    image = found[0].get("image")
    if not isinstance(image, str) or not image:
        raise Unreadable(f"container {controller.container!r} has no image")
    if len(image) > MAX_IMAGE_CHARS:
        raise Unreadable(f"the image reference is {len(image)} characters long, more than "
                         f"any real one ({_shown(image)}...)")  # fmt: skip
    if not _REFERENCE.fullmatch(image):
        raise Unreadable(f"the image is no image reference ({_shown(image)})")
    return image


def image_version(image: str) -> str:
    """The version an image reference names: its tag, else its digest (Unreadable if none:
    an untagged image is whatever `latest` was when it was pulled)."""
    name, _, digest = image.partition("@")
    tag = name.rsplit("/", 1)[-1].partition(":")[2]
    if tag and _TAG.fullmatch(tag):
        return tag
    if digest and _DIGEST.fullmatch(digest):
        return digest
    raise Unreadable(f"the image names no tag or digest ({_shown(image)})")


def _unknown(where: str, reason: str) -> dict[str, str]:
    return {"deployment": where, "version": UNKNOWN, "reason": one_line(reason)[:MAX_REASON_CHARS]}


def _shown(value: str) -> str:
    """A hostile value as a reason quotes it: escaped (ascii), cut short."""
    return ascii(value[:MAX_SHOWN_CHARS])


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data
