"""Write the openAPIV3Schema of upstream CRD files as the compact JSON the tests validate with.

    python tests/schemas/extract.py PATH/kubeflow.org_pytorchjobs.v1.9.4.yaml ...

For each CRD file (one CustomResourceDefinition, one served version) it writes
tests/schemas/<file stem>.schema.json: spec.versions[0].schema.openAPIV3Schema with every
`description` removed (prose only: validation does not read it, and it is most of the bytes),
keys sorted, no whitespace. Nothing else is changed. See README.md for the sources.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent


def without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def extract(crd_path: Path) -> Path:
    crd = yaml.safe_load(crd_path.read_text(encoding="utf-8"))
    [version] = crd["spec"]["versions"]
    schema = without_descriptions(version["schema"]["openAPIV3Schema"])
    out = HERE / f"{crd_path.name.removesuffix('.yaml')}.schema.json"
    out.write_text(json.dumps(schema, sort_keys=True, separators=(",", ":")) + "\n")
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(extract(Path(arg)))
