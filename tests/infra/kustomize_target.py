"""kustomize's reading of a remote target (a git URL with a path and a ref), for the tests.

A port of `NewRepoSpecFromURL` in kustomize's api/internal/git/repospec.go (kubernetes-sigs/
kustomize at 12f9e6391464b3ad9dd3fe8182049dc1b1772990, August 2026), which is what both
`kustomize build URL` and Pulumi's kustomize.v2.Directory (through kustomize's API) do with a
`directory` that is not a local folder. It mirrors the parts that decide what is cloned and
built: the query (`ref`, or `version` when there is no `ref`; `timeout`, `submodules`), the
host (scheme, user, GitHub's normal forms), and the split between the repository and the
folder in it (`_git/`, then `//`, then `.git`, else the first two path segments). Where it
differs: it returns what kustomize would clone and build and never clones; durations are kept
as the query's text; an error is a ValueError with kustomize's message.
tests/infra/test_infra_sources.py checks it against cases of kustomize's own repospec_test.go.
"""

from __future__ import annotations

import posixpath
import re
import urllib.parse
from dataclasses import dataclass

FILE, HTTP, HTTPS, SSH = "file://", "http://", "https://", "ssh://"
_USER = re.compile(r"^([a-zA-Z][a-zA-Z0-9-]*)@")


@dataclass(frozen=True)
class RemoteTarget:
    host: str  # "https://github.com/"
    repo_path: str  # "kubeflow/training-operator": what is cloned (host + repo_path)
    root_path: str  # the kustomization's folder inside the clone ("" for its root)
    ref: str  # the branch, tag or commit checked out; "" is the remote's default branch
    timeout: str  # the query's timeout as given ("" for kustomize's 27 s)
    submodules: bool

    @property
    def clone_spec(self) -> str:
        return self.host + self.repo_path


def parse(url: str) -> RemoteTarget:
    if url.startswith("/"):
        raise ValueError(f"uri looks like abs path: {url}")
    rest, _, query = url.partition("?")
    ref, timeout, submodules = _query(query)
    host, rest = _host(rest)
    repo_path, root_path = _path_parts(rest, host)
    return RemoteTarget(host, repo_path, root_path, ref, timeout, submodules)


def _query(query: str) -> tuple[str, str, bool]:
    values = urllib.parse.parse_qs(query, keep_blank_values=True)

    def get(key: str) -> str:  # Go's url.Values.Get: the first value, "" when absent
        return values.get(key, [""])[0]

    ref = get("ref") or get("version")
    submodules = {"1": True, "t": True, "true": True, "0": False, "f": False, "false": False}
    return ref, get("timeout"), submodules.get(get("submodules").lower(), True)


def _host(n: str) -> tuple[str, str]:
    if n.lower().startswith("git::"):
        n = n[len("git::") :]
    scheme = next((p for p in (SSH, HTTPS, HTTP, FILE) if n.lower().startswith(p)), "")
    n = n[len(scheme) :]
    match = _USER.match(n)
    username = match.group(0) if match else ""
    n = n[len(username) :]
    github = n.lower().startswith(("github.com/", "github.com:"))
    accept_scp = scheme == "" and (username != "" or github)
    if scheme == "" and not accept_scp:
        raise ValueError("failed to parse scheme")
    if scheme == FILE:
        return scheme, username + n
    host, rest = n, ""
    sep = n.find("/")
    if accept_scp:
        colon = n.find(":")
        if sep == -1 or 0 < colon < sep:
            sep = colon
    if sep >= 0:
        host, rest = n[: sep + 1], n[sep + 1 :]
    if github:
        if scheme.startswith(SSH) or username:
            scheme, host = "", "github.com:"
        else:
            scheme, username, host = HTTPS, "", "github.com/"
    if not host:
        raise ValueError("failed to parse host segment")
    return scheme + username + host, rest


def _path_parts(n: str, host: str) -> tuple[str, str]:
    split = _explicit_split(n)
    if split is None:
        if host.startswith(FILE):
            split = (n, "")
        elif len(segments := n.split("/")) >= 2:
            split = ("/".join(segments[:2]), "/".join(segments[2:]))
    if split is None or not split[0]:
        raise ValueError("failed to parse repo path segment")
    repo_path, root_path = split
    if posixpath.normpath(root_path.lstrip("/")).split("/")[0] == "..":
        raise ValueError(f"url path exits repo: {n}")
    return repo_path, root_path.removeprefix("/")


def _explicit_split(n: str) -> tuple[str, str] | None:
    if (i := n.find("_git/")) >= 0:
        head, tail = n[: i + len("_git/")], n[i + len("_git/") :].split("/")
        return head + tail[0], "/".join(tail[1:])
    if (i := n.find("//")) >= 0:
        return n[:i], n[i + 2 :]
    if (i := n.find(".git")) >= 0:
        return n[: i + len(".git")], n[i + len(".git") :]
    return None
