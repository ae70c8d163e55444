"""The subset of kustomize that deploy/k8s uses, so `make test` can render the overlays without kubectl.

Where `kubectl` is on PATH, tests/contract/test_k8s_manifests.py renders every kustomization with
`kubectl kustomize` too and requires the same objects: kustomize itself is the oracle, this is the fallback.

Supported: resources (files and kustomization directories), namespace, labels (metadata only),
images (newName, newTag), configMapGenerator (files, literals, behavior create/replace, no name hash),
patches (JSON 6902 with a kind/name target, or a strategic-merge `$patch: delete` of a whole object).
Anything else fails loudly, so a manifest change cannot silently outgrow this file.
"""

import copy
from pathlib import Path

import yaml

Object = dict
SUPPORTED = {"apiVersion", "kind", "namespace", "labels", "resources", "images", "configMapGenerator", "patches"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PersistentVolume"}


class Unsupported(Exception):
    pass


def build(directory: Path) -> list[Object]:
    directory = Path(directory)
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(spec) - SUPPORTED
    if unknown:
        raise Unsupported(f"{directory}: kustomization fields {sorted(unknown)} are not supported here")
    objects: list[Object] = []
    for resource in spec.get("resources", []):
        path = directory / resource
        objects += build(path) if path.is_dir() else [o for o in yaml.safe_load_all(path.read_text()) if o]
    for generator in spec.get("configMapGenerator", []):
        _generate(objects, directory, generator)
    for patch in spec.get("patches", []):
        _patch(objects, directory, patch)
    if "namespace" in spec:
        for obj in objects:
            if obj["kind"] == "Namespace":
                obj["metadata"]["name"] = spec["namespace"]
            elif obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = spec["namespace"]
    for label in spec.get("labels", []):
        if label.get("includeSelectors") or label.get("includeTemplates"):
            raise Unsupported("labels: includeSelectors / includeTemplates")
        for obj in objects:
            obj["metadata"].setdefault("labels", {}).update(label["pairs"])
    for image in spec.get("images", []):
        for container in (c for obj in objects for c in containers(obj)):
            name, _, _ = container["image"].partition(":")
            if name == image["name"]:
                container["image"] = f"{image.get('newName', name)}:{image['newTag']}"
    return objects


def containers(obj: Object) -> list[dict]:
    pod = obj.get("spec", {}).get("template", {}).get("spec", {})
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def _generate(objects: list[Object], directory: Path, generator: dict) -> None:
    if not generator.get("options", {}).get("disableNameSuffixHash"):
        raise Unsupported(f"configMapGenerator {generator['name']}: only disableNameSuffixHash: true")
    data = {}
    for entry in generator.get("files", []):
        key, _, file = entry.partition("=") if "=" in entry else (Path(entry).name, "", entry)
        data[key] = (directory / file).read_text()
    for literal in generator.get("literals", []):
        key, _, value = literal.partition("=")
        data[key] = value
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}, "data": data}
    existing = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == generator["name"]]
    behavior = generator.get("behavior", "create")
    if behavior == "replace" and existing:
        existing[0]["data"] = data
    elif behavior == "create" and not existing:
        objects.append(config_map)
    else:
        raise Unsupported(f"configMapGenerator {generator['name']}: behavior {behavior!r} here")


def _patch(objects: list[Object], directory: Path, patch: dict) -> None:
    if "path" in patch:
        body = yaml.safe_load((directory / patch["path"]).read_text())
        if body.get("$patch") != "delete":
            raise Unsupported(f"{patch['path']}: only `$patch: delete` strategic-merge patches")
        match = [o for o in objects if o["kind"] == body["kind"] and o["metadata"]["name"] == body["metadata"]["name"]]
        if len(match) != 1:
            raise Unsupported(f"{patch['path']}: matches {len(match)} objects")
        objects.remove(match[0])
        return
    target = patch["target"]
    match = [o for o in objects if o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"]]
    if len(match) != 1:
        raise Unsupported(f"patch target {target}: matches {len(match)} objects")
    for op in yaml.safe_load(patch["patch"]):
        _apply(match[0], op)


def _apply(obj: Object, op: dict) -> None:
    """One JSON 6902 operation (add, replace, remove) at a JSON pointer."""
    parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
    parent = obj
    for part in parts[:-1]:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]
    last = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if op["op"] == "remove":
            del parent[index]
        elif op["op"] == "replace":
            parent[index] = copy.deepcopy(op["value"])
        elif op["op"] == "add":
            parent.insert(index, copy.deepcopy(op["value"]))
        else:
            raise Unsupported(f"patch op {op['op']}")
        return
    if op["op"] == "remove":
        del parent[last]
    elif op["op"] in ("replace", "add"):
        if op["op"] == "replace" and last not in parent:
            raise KeyError(f"replace of missing {op['path']}")
        parent[last] = copy.deepcopy(op["value"])
    else:
        raise Unsupported(f"patch op {op['op']}")
