"""deploy/k8s: every manifest is valid against the Kubernetes schemas (offline), and keeps the invariants an
operator relies on: GPU requests on workers, limits and probes everywhere, pinned images, TP ranks on one
node, a policy that reloads live and routes to Services that exist."""

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gateway.policy.loader import parse_policy
from tests.kustomize import build, containers

K8S = Path(__file__).parents[2] / "deploy" / "k8s"
KUSTOMIZATIONS = ["base", "overlays/dev", "overlays/prod", "tenant"]
KUBERNETES_VERSION = "1.32.0"
CRDS = {"ServiceMonitor": "monitoring.coreos.com/v1"}  # no built-in schema: checked by hand below
WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet"}


def render(name: str) -> list[dict]:
    return build(K8S / name)


def key(obj: dict) -> tuple:
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


def find(objects: list[dict], kind: str, name: str) -> dict:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not on PATH: kustomize is the oracle here")
@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_our_rendering_equals_kustomize(name):
    out = subprocess.run(["kubectl", "kustomize", str(K8S / name)], capture_output=True, text=True, check=True)
    theirs = {key(o): o for o in yaml.safe_load_all(out.stdout) if o}
    assert {key(o): o for o in render(name)} == theirs


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_every_object_is_valid_kubernetes(name):
    objects = render(name)
    assert objects
    for obj in objects:
        if obj["kind"] in CRDS:
            assert obj["apiVersion"] == CRDS[obj["kind"]]
            continue
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)  # raises with the offending path


def test_loose_manifests_are_valid_too():
    for path in (K8S / "nvidia").glob("*.yaml"):
        for obj in yaml.safe_load_all(path.read_text()):
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name", ["overlays/dev", "overlays/prod"])
def test_every_container_has_pinned_image_limits_and_probes(name):
    for obj in render(name):
        if obj["kind"] not in WORKLOADS:
            continue
        pod = obj["spec"]["template"]["spec"]
        for container in containers(obj):
            where = f"{obj['metadata']['name']}/{container['name']}"
            image, _, tag = container["image"].rpartition(":")
            assert image and tag and tag != "latest" and "/" not in tag, f"{where}: unpinned image {container['image']}"
            resources = container.get("resources", {})
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(kind, {})), f"{where}: no {kind} for cpu and memory"
            if container in pod.get("containers", []):
                assert "readinessProbe" in container and "livenessProbe" in container, f"{where}: probes"


def test_production_workers_hold_their_tensor_parallel_gpus_on_one_node():
    objects = render("overlays/prod")
    worker = find(objects, "Deployment", "cloud-worker")
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    gpus = container["resources"]["requests"]["nvidia.com/gpu"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
    tp = next(a.split("=")[1] for a in container["args"] if a.startswith("--tp="))
    assert tp == gpus == "2"  # one pod, all its ranks: a TP group never spans nodes
    assert "--device=cuda" in container["args"]
    pod = worker["spec"]["template"]["spec"]
    preferred = pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert any(e["key"] == "tandem.ai/gpu-interconnect" for p in preferred for e in p["preference"]["matchExpressions"])
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} >= {"kubernetes.io/hostname"}
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    warmer = find(objects, "DaemonSet", "model-cache-warmer")
    cache = {v["name"]: v for v in warmer["spec"]["template"]["spec"]["volumes"]}["model-cache"]
    assert cache["hostPath"]["path"] == {v["name"]: v for v in pod["volumes"]}["model-cache"]["hostPath"]["path"]


@pytest.mark.parametrize("name", ["overlays/dev", "overlays/prod"])
def test_the_policy_is_valid_reloads_live_and_routes_to_services_that_exist(name):
    objects = render(name)
    policy_text = find(objects, "ConfigMap", "tandem-policy")["data"]["policy.yaml"]
    policy = parse_policy(policy_text, "deploy/k8s/base/policy.yaml")  # the gateway's own checks
    gateway = find(objects, "Deployment", "gateway")["spec"]["template"]["spec"]
    (container,) = gateway["containers"]
    policy_arg = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--policy="))
    mount = next(m for m in container["volumeMounts"] if m["name"] == "policy")
    assert "subPath" not in mount, "a subPath mount never sees ConfigMap updates: live reload would not work"
    assert Path(policy_arg).parent == Path(mount["mountPath"])
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    for pool in policy.pools.values():
        for endpoint in pool.endpoints:
            host, port = endpoint.removeprefix("dns://").split(":")
            service = services[host]
            assert service["spec"].get("clusterIP") == "None", f"{host}: dns:// needs a headless Service"
            assert int(port) in {p["port"] for p in service["spec"]["ports"]}


@pytest.mark.parametrize("name", ["overlays/dev", "overlays/prod"])
def test_services_budgets_and_autoscalers_select_what_exists(name):
    objects = render(name)
    pod_labels = [o["spec"]["template"]["metadata"]["labels"] for o in objects if o["kind"] in WORKLOADS]

    def selects_pods(selector: dict) -> bool:
        return any(selector.items() <= labels.items() for labels in pod_labels)

    for obj in objects:
        if obj["kind"] == "Service":
            assert selects_pods(obj["spec"]["selector"]), obj["metadata"]["name"]
        if obj["kind"] == "PodDisruptionBudget":
            assert selects_pods(obj["spec"]["selector"]["matchLabels"]), obj["metadata"]["name"]
        if obj["kind"] == "HorizontalPodAutoscaler":
            target = obj["spec"]["scaleTargetRef"]
            find(objects, target["kind"], target["name"])
    budgets = {o["metadata"]["name"] for o in objects if o["kind"] == "PodDisruptionBudget"}
    assert {"gateway", "cloud-worker"} <= budgets
    (metric,) = find(objects, "HorizontalPodAutoscaler", "cloud-worker")["spec"]["metrics"]
    assert metric["external"]["metric"]["name"] == "tandem_autoscale_saturation"  # what the gateway exports
    assert metric["external"]["target"] == {"type": "Value", "value": "1"}  # replicas = ceil(replicas * saturation)


def test_the_dev_overlay_needs_no_gpu_image_or_node():
    for obj in render("overlays/dev"):
        for container in containers(obj):
            assert "cuda" not in container["image"] and "nvidia.com/gpu" not in str(container.get("resources"))
        assert "nvidia.com/gpu" not in str(obj.get("spec", {}).get("template", {}).get("spec", {}).get("affinity"))


def test_workers_publish_hints_under_the_address_the_gateway_dials():
    for name in ["overlays/dev", "overlays/prod"]:
        worker = find(render(name), "Deployment", "cloud-worker")
        (container,) = worker["spec"]["template"]["spec"]["containers"]
        assert "--worker-id=$(POD_IP):50051" in container["args"] and "--port=50051" in container["args"]
        env = {e["name"]: e for e in container["env"]}
        assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
        assert env["REDIS_URL"]["value"].startswith("redis://redis:")


def test_the_tenant_template_caps_gpus_memory_and_pods():
    objects = render("tenant")
    namespace = find(objects, "Namespace", "tenant-example")["metadata"]["name"]
    quota = find(objects, "ResourceQuota", "tenant-quota")
    assert quota["metadata"]["namespace"] == namespace
    assert {"requests.nvidia.com/gpu", "requests.memory", "limits.memory", "pods"} <= set(quota["spec"]["hard"])
    (container,) = [
        x for x in find(objects, "LimitRange", "tenant-limits")["spec"]["limits"] if x["type"] == "Container"
    ]
    assert {"cpu", "memory"} <= set(container["default"]) and "nvidia.com/gpu" in container["max"]
