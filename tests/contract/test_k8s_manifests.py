"""deploy/k8s: every manifest is valid against the Kubernetes schemas (offline), and keeps the invariants an
operator relies on: GPU requests on workers, limits and probes everywhere, pinned images, TP ranks on one
node, a policy that reloads live and routes to Services that exist, and an InferencePool whose endpoint picker
reaches the cloud workers and reads metrics they export."""

import shutil
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry

from gateway.policy.loader import parse_policy
from serving.engine_api import EngineStats
from serving.worker_metrics import EngineCollector
from tests.kustomize import build, containers

K8S = Path(__file__).parents[2] / "deploy" / "k8s"
VENDORED_CRDS = Path(__file__).parents[1] / "data" / "crds"  # trimmed upstream schemas: its README.md
GATEWAY_API = "overlays/gateway-api"
OVERLAYS = ["overlays/dev", "overlays/prod", GATEWAY_API]
KUSTOMIZATIONS = ["base", *OVERLAYS, "tenant"]
KUBERNETES_VERSION = "1.32.0"
# No built-in schema: ServiceMonitor is checked by hand, InferencePool and HTTPRoute against VENDORED_CRDS.
CRDS = {
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "InferencePool": "inference.networking.k8s.io/v1",
    "HTTPRoute": "gateway.networking.k8s.io/v1",
}
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
    paths = sorted((K8S / "nvidia").glob("*.yaml"))
    assert [p.name for p in paths] == ["mig.yaml", "time-slicing.yaml"]  # an empty glob must not pass
    for path in paths:
        for obj in yaml.safe_load_all(path.read_text()):
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name", OVERLAYS)
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


@pytest.mark.parametrize("name", OVERLAYS)
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
            # (a review) `replicas` on what an HPA scales reset the autoscaled count at every `kubectl apply -k`,
            # which a policy edit is: a fleet of 16 GPU workers back to 2, their streams cut
            assert "replicas" not in find(objects, target["kind"], target["name"])["spec"], target["name"]
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


def closed(schema):
    """Unknown fields rejected, as `kubectl apply`'s strict field validation rejects them."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    schema = {key: closed(value) for key, value in schema.items()}
    if "properties" in schema:
        schema.setdefault("additionalProperties", False)
    return schema


def vendored_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> the vendored openAPIV3Schema, closed."""
    schemas = {}
    paths = sorted(VENDORED_CRDS.glob("*.yaml"))
    assert len(paths) == 2, paths  # InferencePool and HTTPRoute
    for path in paths:
        spec = yaml.safe_load(path.read_text())["spec"]
        for version in spec["versions"]:
            schemas[f"{spec['group']}/{version['name']}", spec["names"]["kind"]] = closed(
                version["schema"]["openAPIV3Schema"]
            )
    return schemas


def flags(container: dict) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in container["args"] if a.startswith("--") and "=" in a)


def the_only(objects: list[dict], kind: str) -> dict:
    (obj,) = [o for o in objects if o["kind"] == kind]
    return obj


def test_the_inference_pool_and_route_are_valid_against_the_vendored_crds():
    schemas = vendored_schemas()
    for kind in ("InferencePool", "HTTPRoute"):
        obj = the_only(render(GATEWAY_API), kind)
        schema = schemas[obj["apiVersion"], kind]
        jsonschema.Draft202012Validator.check_schema(schema)
        errors = [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in jsonschema.Draft202012Validator(schema).iter_errors(obj)
        ]
        assert not errors, f"{kind}: {errors}"


def test_the_route_reaches_the_pool_and_the_pool_the_cloud_workers():
    objects = render(GATEWAY_API)
    pool, route = the_only(objects, "InferencePool"), the_only(objects, "HTTPRoute")
    for rule in route["spec"]["rules"]:
        for ref in rule["backendRefs"]:
            assert (ref["group"], ref["kind"]) == ("inference.networking.k8s.io", "InferencePool")
            assert ref["name"] == pool["metadata"]["name"]
    selector = pool["spec"]["selector"]["matchLabels"]
    selected = [
        o["metadata"]["name"]
        for o in objects
        if o["kind"] in WORKLOADS and selector.items() <= o["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert selected == ["cloud-worker"]  # its pods, and no edge agent or gateway
    (worker,) = find(objects, "Deployment", "cloud-worker")["spec"]["template"]["spec"]["containers"]
    (target,) = pool["spec"]["targetPorts"]
    assert target["number"] in {p["containerPort"] for p in worker["ports"]}
    # The picker scrapes /metrics on the target port (no --model-server-metrics-port): the worker's metrics port,
    # where requests are forwarded too, so the worker answers them there (off in the base: opened by the overlay).
    assert target["number"] == int(flags(worker)["metrics-port"])
    assert "--serve-openai" in worker["args"]
    (base_worker,) = find(render("base"), "Deployment", "cloud-worker")["spec"]["template"]["spec"]["containers"]
    assert "--serve-openai" not in base_worker["args"]


def test_the_pool_names_its_endpoint_picker_and_the_picker_its_pool():
    objects = render(GATEWAY_API)
    pool = the_only(objects, "InferencePool")
    ref = pool["spec"]["endpointPickerRef"]
    assert ref.get("kind", "Service") == "Service" and ref.get("group", "") == ""
    service = find(objects, "Service", ref["name"])
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == ref["port"]["number"]]  # CEL: a Service needs one
    epp = next(
        o
        for o in objects
        if o["kind"] == "Deployment"
        and service["spec"]["selector"].items() <= o["spec"]["template"]["metadata"]["labels"].items()
    )
    (container,) = epp["spec"]["template"]["spec"]["containers"]
    (grpc,) = [p for p in container["ports"] if port["targetPort"] in (p.get("name"), p["containerPort"])]
    assert grpc["containerPort"] == int(flags(container)["grpc-port"])  # the ext_proc server the gateway calls
    assert flags(container)["pool-name"] == pool["metadata"]["name"]
    env = {e["name"]: e for e in container["env"]}
    assert flags(container)["pool-namespace"] == "$(NAMESPACE)"
    assert env["NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"  # the pool's: one overlay


# What each scorer reads from the model servers, by the EPP flag that names the metric.
SCORER_METRIC_FLAGS = {
    "queue-scorer": "total-queued-requests-metric",
    "kv-cache-utilization-scorer": "kv-cache-usage-percentage-metric",
}


class _StatsOnly:
    def stats(self) -> EngineStats:
        return EngineStats(model_id="m", kind="cloud", execution_provider="torch-cuda", max_context_tokens=1)


def test_the_endpoint_picker_config_uses_declared_plugins_and_metrics_the_workers_export():
    objects = render(GATEWAY_API)
    pod = find(objects, "Deployment", "tandem-cloud-epp")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    config_file = Path(flags(container)["config-file"])
    volume_name = next(m["name"] for m in container["volumeMounts"] if Path(m["mountPath"]) == config_file.parent)
    config_map = next(v["configMap"]["name"] for v in pod["volumes"] if v["name"] == volume_name)
    config = yaml.safe_load(find(objects, "ConfigMap", config_map)["data"][config_file.name])

    assert (config["apiVersion"], config["kind"]) == ("inference.networking.x-k8s.io/v1alpha1", "EndpointPickerConfig")
    assert all(set(p) <= {"type", "name", "parameters"} for p in config["plugins"])
    declared = {p.get("name", p["type"]): p["type"] for p in config["plugins"]}
    assert len(declared) == len(config["plugins"]), "two plugins under one name"
    assert config["schedulingProfiles"]
    for profile in config["schedulingProfiles"]:
        refs = profile["plugins"]
        assert all(set(r) <= {"pluginRef", "weight"} for r in refs), profile["name"]
        assert {r["pluginRef"] for r in refs} <= set(declared), f"{profile['name']}: undeclared plugins"
        assert [declared[r["pluginRef"]] for r in refs].count("max-score-picker") == 1, profile["name"]
        assert all(r.get("weight", 1) > 0 for r in refs), profile["name"]

    worker = CollectorRegistry()
    worker.register(EngineCollector(_StatsOnly()))
    exported = {family.name for family in worker.collect()}
    scorers = {declared[r["pluginRef"]] for p in config["schedulingProfiles"] for r in p["plugins"]}
    assert scorers & set(SCORER_METRIC_FLAGS), "no scorer reads the workers' load"
    for flag in [SCORER_METRIC_FLAGS[s] for s in scorers & set(SCORER_METRIC_FLAGS)] + ["lora-info-metric"]:
        assert flags(container)[flag] in exported, f"--{flag}: the workers do not export it"


# NetworkPolicy, read as the API server's semantics say: a pod selected by any Ingress policy takes only what one of
# its rules allows (a peer list and a port list, each absent meaning "any"); a peer's podSelector alone means this
# namespace, a namespaceSelector alone every pod of the namespaces it selects.
def _selects(selector: dict, labels: dict) -> bool:
    assert set(selector) <= {"matchLabels"}, f"read here: matchLabels only, got {selector}"
    return selector.get("matchLabels", {}).items() <= labels.items()


def _peer_admits(peer: dict, source: dict, namespace: str) -> bool:
    assert set(peer) <= {"podSelector", "namespaceSelector"}, f"read here: pod and namespace selectors, got {peer}"
    if "namespaceSelector" not in peer:
        return source["namespace"] == namespace and _selects(peer["podSelector"], source["labels"])
    ns_labels = {"kubernetes.io/metadata.name": source["namespace"], **source.get("namespace_labels", {})}
    return _selects(peer["namespaceSelector"], ns_labels) and _selects(peer.get("podSelector", {}), source["labels"])


def reaches(objects: list[dict], source: dict, workload: str, port_name: str) -> bool:
    """May a pod (labels, namespace, its namespace's labels) open the named port of the workload's pods?"""
    target = find(objects, "Deployment", workload)
    labels, namespace = target["spec"]["template"]["metadata"]["labels"], target["metadata"]["namespace"]
    ports = {p["name"]: p["containerPort"] for c in containers(target) for p in c.get("ports", [])}
    policies = [
        o
        for o in objects
        if o["kind"] == "NetworkPolicy"
        and o["metadata"]["namespace"] == namespace
        and "Ingress" in o["spec"]["policyTypes"]
        and _selects(o["spec"]["podSelector"], labels)
    ]
    if not policies:
        return True
    return any(
        ("ports" not in rule or any(p["port"] in (port_name, ports[port_name]) for p in rule["ports"]))
        and ("from" not in rule or any(_peer_admits(peer, source, namespace) for peer in rule["from"]))
        for policy in policies
        for rule in policy["spec"].get("ingress", [])
    )


def pod(app: str | None, namespace: str, **namespace_labels) -> dict:
    return {"labels": {"app.kubernetes.io/name": app} if app else {}, "namespace": namespace,
            "namespace_labels": namespace_labels}  # fmt: skip


@pytest.mark.parametrize("name", OVERLAYS)
def test_only_the_gateway_reaches_the_workers_the_edge_agents_and_redis(name):
    """Secure by default in the cluster: no pod but the gateway may send a worker or an edge agent a request (which
    would skip the API keys, the limits and the privacy rules), and only the gateways and workers reach Redis (hints
    steer routing)."""
    objects = render(name)
    ns = find(objects, "Deployment", "gateway")["metadata"]["namespace"]
    gateway, worker, edge = pod("gateway", ns), pod("cloud-worker", ns), pod("edge-agent", ns)
    stranger, elsewhere = pod("debug-shell", ns), pod(None, "default")
    scraper = pod("prometheus", "monitoring", **{"tandem.ai/metrics-scraper": "true"})
    needed = [
        (gateway, "cloud-worker", "grpc"), (gateway, "edge-agent", "grpc"), (gateway, "redis", "redis"),
        (worker, "redis", "redis"), (elsewhere, "gateway", "http"), (stranger, "gateway", "http"),
        (scraper, "cloud-worker", "metrics"), (scraper, "edge-agent", "metrics"),
        (gateway, "otel-collector", "otlp-grpc"), (worker, "otel-collector", "otlp-grpc"),
        (edge, "otel-collector", "otlp-grpc"),
    ]  # fmt: skip
    for source, workload, port in needed:
        assert reaches(objects, source, workload, port), f"{source} cannot reach {workload}:{port}"
    refused = [
        (stranger, "cloud-worker", "grpc"), (stranger, "edge-agent", "grpc"), (stranger, "redis", "redis"),
        (elsewhere, "cloud-worker", "grpc"), (elsewhere, "edge-agent", "grpc"), (elsewhere, "redis", "redis"),
        (elsewhere, "otel-collector", "otlp-grpc"), (stranger, "cloud-worker", "metrics"),
        (worker, "edge-agent", "grpc"), (edge, "redis", "redis"), (edge, "cloud-worker", "grpc"),
        (pod("prometheus", "monitoring"), "cloud-worker", "metrics"),  # a namespace not labelled as a scraper
    ]  # fmt: skip
    for source, workload, port in refused:
        assert not reaches(objects, source, workload, port), f"{source} reaches {workload}:{port}"
    deny_all = [o for o in objects if o["kind"] == "NetworkPolicy" and o["spec"]["podSelector"] == {}]
    assert any("ingress" not in o["spec"] for o in deny_all), "no default deny: a new workload would be open"


def test_the_inference_gateway_reaches_its_picker_and_the_workers_serving_port():
    objects = render(GATEWAY_API)
    ns = find(objects, "Deployment", "gateway")["metadata"]["namespace"]
    proxy = {"labels": {"gateway.networking.k8s.io/gateway-name": "inference-gateway"}, "namespace": ns}
    envoy_elsewhere = pod("envoy", "envoy-gateway-system", **{"tandem.ai/inference-gateway": "true"})
    picker = pod("tandem-cloud-epp", ns)
    for source in (proxy, envoy_elsewhere):
        assert reaches(objects, source, "tandem-cloud-epp", "grpc")
        assert reaches(objects, source, "cloud-worker", "metrics")  # where --serve-openai answers
    assert reaches(objects, picker, "cloud-worker", "metrics")
    for source in (pod("debug-shell", ns), pod("envoy", "envoy-gateway-system")):
        assert not reaches(objects, source, "cloud-worker", "metrics")
        assert not reaches(objects, source, "tandem-cloud-epp", "grpc")
    assert not reaches(objects, proxy, "cloud-worker", "grpc") and not reaches(objects, proxy, "edge-agent", "grpc")


@pytest.mark.parametrize("name", OVERLAYS)
def test_every_network_policy_names_pods_and_ports_that_exist(name):
    """A typo in a policy's selector or port name fails closed, silently: a worker nobody can reach."""
    objects = render(name)
    workloads = [o for o in objects if o["kind"] in WORKLOADS]
    for policy in (o for o in objects if o["kind"] == "NetworkPolicy"):
        selector = policy["spec"]["podSelector"]
        if selector == {}:
            continue
        selected = [w for w in workloads if _selects(selector, w["spec"]["template"]["metadata"]["labels"])]
        assert selected, f"{policy['metadata']['name']} selects no pod"
        names = {p["name"] for w in selected for c in containers(w) for p in c.get("ports", [])}
        for rule in policy["spec"].get("ingress", []):
            for port in rule.get("ports", []):
                assert port["port"] in names, f"{policy['metadata']['name']}: no port named {port['port']}"


@pytest.mark.parametrize("name", OVERLAYS)
def test_tandems_containers_run_without_privileges(name):
    """(a review) No container dropped its capabilities or barred privilege escalation, and no pod had a seccomp
    profile. Tandem's own run as uid 10001 with none; the cache owners run as root with CHOWN alone."""
    for obj in render(name):
        if obj["kind"] not in WORKLOADS:
            continue
        pod = obj["spec"]["template"]["spec"]
        ours = [c for c in pod["containers"] + pod.get("initContainers", []) if "tandem-serving/tandem" in c["image"]]
        if not ours:
            continue
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, obj["metadata"]["name"]
        for container in ours:
            context = container.get("securityContext", {})
            assert context.get("allowPrivilegeEscalation") is False, container["name"]
            assert context.get("capabilities", {}).get("drop") == ["ALL"], container["name"]
            assert set(context.get("capabilities", {}).get("add", [])) <= {"CHOWN"}, container["name"]


@pytest.mark.parametrize("name", OVERLAYS)
def test_every_tandem_image_the_manifests_pull_is_one_the_dockerfile_says_how_to_build(name):
    """The Dockerfile's header tagged the CUDA build `tandem:0.1.0-cuda` where the manifests pull `tandem-cuda:0.1.0`:
    workers in ImagePullBackOff (a review)."""
    import re

    built = set(re.findall(r"-t (ghcr\.io/tandem-serving/[\w.-]+:[\w.-]+)", (K8S.parent / "Dockerfile").read_text()))
    for obj in render(name):
        if obj["kind"] in WORKLOADS:
            pod = obj["spec"]["template"]["spec"]
            for container in pod["containers"] + pod.get("initContainers", []):
                if "tandem-serving/" in container["image"]:
                    assert container["image"] in built, (container["image"], built)
