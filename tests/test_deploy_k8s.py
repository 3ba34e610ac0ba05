"""Kubernetes manifests (k8s/): every overlay, with and without the ingress component, is rendered
by kustomize (kubectl's built-in kustomize) and each rendered object is validated offline against
the Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown fields are errors) of the
oldest and newest Kubernetes versions supported. Then the manifests are checked against the code
and against each other: commands name entry points that accept their flags, environment variables
are ones the code reads, addresses point at Services that reach the right pods on the code's
default ports, every reference (volume, claim, ConfigMap, Secret key, named port, selector)
resolves, what a service writes is on a persistent volume shared with its readers, and the
NetworkPolicies allow exactly the connections the workloads are configured to make."""
from __future__ import annotations

import base64
import copy
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy_support import (
    DASHBOARD,
    MONITORING,
    REPO,
    Workload,
    check_connections,
    check_entry_point,
    check_env,
    check_persistence,
    check_writable,
    entry_point_sources,
    env_names_read,
    mount_of,
    operator_secret,
    tool,
)

from tengen.config import Config, RatingsConfig, TritonConfig
from tengen.infra.triton.repository import CONFIG_TEMPLATES

K8S = REPO / "k8s"
NAMESPACE = "tengen"
# Validated against the oldest Kubernetes the manifests support (docs/deployment.md) and the newest schemas
# kubernetes-validate bundles.
KUBERNETES_VERSIONS = ("1.29", kubernetes_validate.utils.latest_version())
VARIANTS = {  # name -> (overlay, components)
    "cpu": ("cpu", ()),
    "gpu": ("gpu", ()),
    "cpu+ingress": ("cpu", ("ingress",)),
    "gpu+ingress": ("gpu", ("ingress",)),
    "cpu+monitoring": ("cpu", ("monitoring",)),
}
POD_OWNERS = ("Deployment", "StatefulSet", "Job")
# The pods each connection of the code must reach (their app.kubernetes.io/name).
CONNECTION_PODS = {"kafka": "kafka", "triton": "triton", "ratings": "ratings", "database": "postgres"}
APP_CONTAINERS = {"trainer", "selfplay", "gating", "strength", "ratings", "model-init", "tensorboard"}
_ADDRESS = re.compile(r"(?<![\w-])([a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9-]+)*):(\d{2,5})\b")
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


# -- rendering ------------------------------------------------------------------------------------
def kustomize(overlay: str, components: tuple[str, ...], workdir: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize` of an overlay, with components added through a throwaway kustomization
    (kustomize accepts only relative paths to other kustomizations)."""
    target = K8S / "overlays" / overlay
    if components:
        root = Path(tempfile.mkdtemp(dir=workdir))
        root.joinpath("kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [os.path.relpath(target, root)],
            "components": [os.path.relpath(K8S / "components" / c, root) for c in components],
        }))
        target = root
    out = subprocess.run([tool("kubectl"), "kustomize", str(target)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kustomize build {target} failed:\n{out.stderr}"
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


@dataclass
class Manifests:
    """The objects one variant renders, with lookups by kind and name."""

    variant: str
    docs: list[dict[str, Any]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        assert len(found) == 1, f"{self.variant}: {len(found)} {kind} named {name}"
        return found[0]

    def names(self, kind: str) -> set[str]:
        return {d["metadata"]["name"] for d in self.of_kind(kind)}

    def pod_owners(self) -> Iterator[dict[str, Any]]:
        for kind in POD_OWNERS:
            yield from self.of_kind(kind)


def pod_spec(owner: dict[str, Any]) -> dict[str, Any]:
    return owner["spec"]["template"]["spec"]


def pod_labels(owner: dict[str, Any]) -> dict[str, str]:
    return owner["spec"]["template"]["metadata"].get("labels", {})


def containers(owner: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(owner)
    return spec.get("initContainers", []) + spec["containers"]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Manifests]:
    workdir = tmp_path_factory.mktemp("kustomize")
    return {name: Manifests(name, kustomize(overlay, components, workdir))
            for name, (overlay, components) in VARIANTS.items()}


@pytest.fixture(params=list(VARIANTS))
def manifests(request: pytest.FixtureRequest, rendered: dict[str, Manifests]) -> Manifests:
    return rendered[request.param]


# -- containers as workloads ----------------------------------------------------------------------
def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of env values, command and args (unknown names stay as is)."""
    return _VAR_REF.sub(lambda m: env.get(m.group(1), m.group(0)), text)


def container_env(m: Manifests, container: dict[str, Any]) -> dict[str, str]:
    """The environment a container starts with: envFrom, then env with references resolved."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef") or source.get("secretRef")
        kind = "ConfigMap" if "configMapRef" in source else "Secret"
        env.update(object_data(m, kind, ref["name"]))
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = expand(str(item["value"]), env)
            continue
        ref = item["valueFrom"]
        kind, key_ref = (("ConfigMap", ref["configMapKeyRef"]) if "configMapKeyRef" in ref
                         else ("Secret", ref["secretKeyRef"]))
        data = object_data(m, kind, key_ref["name"])
        assert key_ref["key"] in data, f"{m.variant}: {kind} {key_ref['name']} has no key {key_ref['key']}"
        env[item["name"]] = data[key_ref["key"]]
    return env


def object_data(m: Manifests, kind: str, name: str) -> dict[str, str]:
    obj = m.get(kind, name)
    data = dict(obj.get("data", {}))
    if kind == "Secret":
        data = {k: base64.b64decode(v).decode() for k, v in data.items()}
        data.update(obj.get("stringData", {}))
        # As deployed: the operator has replaced the placeholders (which the services refuse).
        data = {k: operator_secret(k, v) for k, v in data.items()}
    return data


def volume_ids(owner: dict[str, Any]) -> tuple[dict[str, str], set[str]]:
    """Each pod volume's identity across pods (a claim, a claim template, ...) and the ephemeral ones."""
    ids: dict[str, str] = {}
    ephemeral: set[str] = set()
    for volume in pod_spec(owner).get("volumes", []):
        name = volume["name"]
        if "persistentVolumeClaim" in volume:
            ids[name] = f"pvc/{volume['persistentVolumeClaim']['claimName']}"
        elif "emptyDir" in volume:
            ids[name] = f"emptyDir/{owner['metadata']['name']}/{name}"
            ephemeral.add(ids[name])
        else:
            source = next(k for k in volume if k != "name")
            ids[name] = f"{source}/{volume[source].get('name', name)}"
    for template in owner["spec"].get("volumeClaimTemplates", []):
        ids[template["metadata"]["name"]] = f"template/{owner['metadata']['name']}/{template['metadata']['name']}"
    return ids, ephemeral


def workloads(m: Manifests) -> Iterator[tuple[dict[str, Any], Workload, set[str]]]:
    """(owner, workload, ephemeral volume ids) for every container of every pod template."""
    for owner in m.pod_owners():
        ids, ephemeral = volume_ids(owner)
        for c in containers(owner):
            env = container_env(m, c)
            argv = [expand(a, env) for a in c.get("command", []) + c.get("args", [])]
            mounts = {}
            for mount in c.get("volumeMounts", []):
                assert mount["name"] in ids, f"{m.variant}: {c['name']} mounts undefined volume {mount['name']}"
                volume = ids[mount["name"]] + (f"/{mount['subPath']}" if mount.get("subPath") else "")
                mounts[mount["mountPath"]] = (volume, bool(mount.get("readOnly")))
            ports = {p["containerPort"] for p in c.get("ports", [])}
            yield owner, Workload(c["name"], c["image"], argv, env, mounts, ports), ephemeral


def app_workloads(m: Manifests) -> list[Workload]:
    return [w for _, w, _ in workloads(m) if w.is_app()]


def workload(m: Manifests, name: str) -> Workload:
    found = [w for _, w, _ in workloads(m) if w.name == name]
    assert len(found) == 1, f"{m.variant}: {len(found)} containers named {name}"
    return found[0]


def named_port(container: dict[str, Any], port: int | str) -> int:
    """A probe's or a Service's target port as a number (named ports must exist)."""
    if isinstance(port, int):
        return port
    numbers = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    assert numbers, f"container {container['name']} has no port named {port}"
    return numbers[0]


# -- services and addresses -----------------------------------------------------------------------
def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions) against a set of labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        assert op in ("In", "NotIn", "Exists", "DoesNotExist"), f"unknown operator {op}"
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and labels.get(key) in values)
            or (op == "Exists" and key not in labels)
            or (op == "DoesNotExist" and key in labels)
        ):
            return False
    return True


def service_backends(m: Manifests, service: dict[str, Any], port: int) -> list[tuple[dict[str, Any], int]]:
    """(owner, container port) of every pod template a Service sends its `port` to."""
    matches = [p for p in service["spec"]["ports"] if p["port"] == port]
    assert matches, f"{m.variant}: Service {service['metadata']['name']} has no port {port}"
    target = matches[0].get("targetPort", port)
    backends = []
    for owner in m.pod_owners():
        if selects({"matchLabels": service["spec"]["selector"]}, pod_labels(owner)):
            for c in containers(owner):
                declared = {p["containerPort"] for p in c.get("ports", [])} | {
                    p.get("name") for p in c.get("ports", [])
                }
                if target in declared:
                    backends.append((owner, named_port(c, target)))
    return backends


def resolve_address(
    m: Manifests, host: str, port: int
) -> tuple[dict[str, Any], list[tuple[dict[str, Any], int]]] | None:
    """The Service an in-cluster address names (`svc`, `svc.ns...` or `pod.headless-svc`) and its backends."""
    labels = host.split(".")
    services = m.names("Service")
    for index, candidate in enumerate(labels[:2]):
        if candidate in services:
            service = m.get("Service", candidate)
            # Only a headless Service that governs a StatefulSet gives its pods DNS names.
            assert index == 0 or (
                service["spec"].get("clusterIP") == "None"
                and any(o["spec"].get("serviceName") == candidate for o in m.of_kind("StatefulSet"))
            ), f"{m.variant}: {host} names a pod of {candidate}, which is not a headless governing Service"
            return service, service_backends(m, service, port)
    return None


def addresses(w: Workload) -> set[tuple[str, int]]:
    text = "\n".join([*w.argv, *w.env.values()])
    return {(host, int(port)) for host, port in _ADDRESS.findall(text)}


# -- NetworkPolicy semantics ----------------------------------------------------------------------
@dataclass(frozen=True)
class Peer:
    """A connecting pod: its namespace's labels and its own."""

    name: str
    namespace_labels: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, name: str, namespace: str, labels: dict[str, str]) -> "Peer":
        ns = {"kubernetes.io/metadata.name": namespace}
        return cls(name, tuple(sorted(ns.items())), tuple(sorted(labels.items())))


def peer_matches(rule_peer: dict[str, Any], policy_namespace: str, source: Peer) -> bool:
    assert "ipBlock" not in rule_peer, "ipBlock peers are not modelled by this check"
    ns_labels, labels = dict(source.namespace_labels), dict(source.labels)
    if "namespaceSelector" in rule_peer:
        if not selects(rule_peer["namespaceSelector"], ns_labels):
            return False
    elif ns_labels["kubernetes.io/metadata.name"] != policy_namespace:
        return False
    return selects(rule_peer.get("podSelector", {}), labels)


def port_matches(rule_ports: list[dict[str, Any]] | None, number: int, name: str | None, protocol: str = "TCP") -> bool:
    if not rule_ports:
        return True
    for p in rule_ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        port = p.get("port")
        if (
            port is None
            or port == number
            or (name is not None and port == name)
            or (isinstance(port, int) and port <= number <= p.get("endPort", port))
        ):
            return True
    return False


def ingress_allowed(m: Manifests, source: Peer, target: dict[str, Any], number: int, name: str | None) -> bool:
    """Whether the policies let `source` open a TCP connection to port `number` of `target`'s pods."""
    labels = pod_labels(target)
    policies = [
        p
        for p in m.of_kind("NetworkPolicy")
        if "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and p["metadata"]["namespace"] == target["metadata"]["namespace"]
        and selects(p["spec"]["podSelector"], labels)
    ]
    if not policies:
        return True
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            peers = rule.get("from") or []
            if (
                not peers or any(peer_matches(p, policy["metadata"]["namespace"], source) for p in peers)
            ) and port_matches(rule.get("ports"), number, name):
                return True
    return False


def policy_types(policy: dict[str, Any]) -> list[str]:
    """A NetworkPolicy's types; without policyTypes, Ingress, plus Egress when it has egress rules."""
    spec = policy["spec"]
    return spec.get("policyTypes", ["Ingress", *(["Egress"] if "egress" in spec else [])])


def egress_allowed(
    m: Manifests, source: dict[str, Any], target: Peer, number: int, name: str | None, protocol: str = "TCP"
) -> bool:
    """Whether the policies let `source`'s pods open a connection to port `number` of `target`."""
    labels = pod_labels(source)
    policies = [
        p
        for p in m.of_kind("NetworkPolicy")
        if "Egress" in policy_types(p)
        and p["metadata"]["namespace"] == source["metadata"]["namespace"]
        and selects(p["spec"]["podSelector"], labels)
    ]
    if not policies:
        return True
    for policy in policies:
        for rule in policy["spec"].get("egress", []):
            peers = rule.get("to") or []
            if (
                not peers or any(peer_matches(p, policy["metadata"]["namespace"], target) for p in peers)
            ) and port_matches(rule.get("ports"), number, name, protocol):
                return True
    return False


# Cluster DNS as most distributions run it (kube-dns or CoreDNS behind the kube-dns labels).
KUBE_DNS = Peer.of("kube-dns", "kube-system", {"k8s-app": "kube-dns"})


def egress_mismatches(m: Manifests, needed: set[tuple[str, str, int]]) -> list[str]:
    """For each workload whose outgoing connections a policy restricts: every pod port in the
    namespace whose egress verdict differs from what it needs, and DNS if it is blocked."""
    owners = {o["metadata"]["name"]: o for o in m.pod_owners()}
    restricted = [
        name
        for name, o in owners.items()
        if any(
            "Egress" in policy_types(p) and selects(p["spec"]["podSelector"], pod_labels(o))
            for p in m.of_kind("NetworkPolicy")
        )
    ]
    wrong = []
    for source_name in restricted:
        source = owners[source_name]
        for protocol in ("UDP", "TCP"):
            if not egress_allowed(m, source, KUBE_DNS, 53, "dns", protocol):
                wrong.append(f"{source_name} -> kube-dns:53/{protocol} blocked (egress)")
        for target_name, target in owners.items():
            peer = Peer.of(target_name, NAMESPACE, pod_labels(target))
            for c in containers(target):
                for p in c.get("ports", []):
                    number = p["containerPort"]
                    allowed = egress_allowed(m, source, peer, number, p.get("name"))
                    if allowed != ((source_name, target_name, number) in needed):
                        verdict = "allowed" if allowed else "blocked"
                        wrong.append(f"{source_name} -> {target_name}:{number} {verdict} (egress)")
    return sorted(wrong)


# ==================================================================================================
def test_every_overlay_renders_with_and_without_the_ingress(rendered: dict[str, Manifests]) -> None:
    for name, m in rendered.items():
        assert m.names("Ingress") == ({"ratings"} if "ingress" in name else set()), name
        assert ("tengen-grafana-dashboard" in m.names("ConfigMap")) == ("monitoring" in name), name
        for doc in m.docs:
            meta = doc["metadata"]
            if doc["kind"] != "Namespace":
                assert meta.get("namespace") == NAMESPACE, f"{name}: {doc['kind']}/{meta['name']} outside {NAMESPACE}"
            assert meta.get("labels", {}).get("app.kubernetes.io/part-of") == "tengen", (
                f"{name}: {doc['kind']}/{meta['name']}"
            )
        assert m.names("Namespace") == {NAMESPACE}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_validate_against_the_kubernetes_schemas(manifests: Manifests, version: str) -> None:
    for doc in manifests.docs:
        where = f"{manifests.variant}: {doc['kind']}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            # Custom resources (a Strimzi Kafka, say) would be validated against their CRD's
            # openAPIV3Schema; the manifests use none (k8s/base/kafka/kafka.yaml says why).
            pytest.fail(
                f"{where}: {doc['apiVersion']} {doc['kind']} has no schema in Kubernetes {version} "
                "(a custom resource needs its CRD schema checked in here)"
            )
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{where} is invalid for Kubernetes {version}: {err.message} at {list(err.absolute_path)}")


def test_schema_validation_rejects_mistakes(rendered: dict[str, Manifests]) -> None:
    """The validation can fail: a misspelt field, a wrong type and an unknown kind are caught."""
    version = KUBERNETES_VERSIONS[-1]
    triton = rendered["gpu"].get("Deployment", "triton")
    misspelt = copy.deepcopy(triton)
    misspelt["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    wrong_type = copy.deepcopy(triton)
    wrong_type["spec"]["replicas"] = "one"
    for broken in (misspelt, wrong_type):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, version, strict=True)
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(
            {"apiVersion": "kafka.strimzi.io/v1beta2", "kind": "Kafka", "metadata": {"name": "x"}}, version, strict=True
        )


def test_references_resolve(manifests: Manifests) -> None:
    m = manifests
    claims = m.names("PersistentVolumeClaim")
    for owner in m.pod_owners():
        where = f"{m.variant}: {owner['kind']}/{owner['metadata']['name']}"
        for volume in pod_spec(owner).get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims, f"{where}: no PVC for {volume['name']}"
            if "configMap" in volume:
                data = object_data(m, "ConfigMap", volume["configMap"]["name"])
                assert all(i["key"] in data for i in volume["configMap"].get("items", [])), where
            if "secret" in volume:
                object_data(m, "Secret", volume["secret"]["secretName"])
        for c in containers(owner):
            container_env(m, c)  # every ConfigMap, Secret and key named exists
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                action = c.get(probe, {}).get("httpGet") or c.get(probe, {}).get("tcpSocket")
                if action:
                    named_port(c, action["port"])
        if owner["kind"] == "StatefulSet":
            m.get("Service", owner["spec"]["serviceName"])
        if owner["kind"] != "Job":  # a Job's selector is generated
            assert selects(owner["spec"]["selector"], pod_labels(owner)), f"{where}: selector misses its own pods"
    for service in m.of_kind("Service"):
        for port in service["spec"]["ports"]:
            assert service_backends(m, service, port["port"]), (
                f"{m.variant}: Service {service['metadata']['name']} port {port['port']} reaches no container port"
            )
    for budget in m.of_kind("PodDisruptionBudget"):
        assert [o for o in m.pod_owners() if selects(budget["spec"]["selector"], pod_labels(o))], (
            f"{m.variant}: PDB {budget['metadata']['name']} selects no pods"
        )
    for policy in m.of_kind("NetworkPolicy"):
        selector = policy["spec"]["podSelector"]
        assert not selector or any(selects(selector, pod_labels(o)) for o in m.pod_owners()), (
            f"{m.variant}: NetworkPolicy {policy['metadata']['name']} selects no pods"
        )
    for ingress in m.of_kind("Ingress"):
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                backend = path["backend"]["service"]
                ports = m.get("Service", backend["name"])["spec"]["ports"]
                wanted = backend["port"]
                assert any(
                    p.get("name") == wanted["name"] if "name" in wanted else p["port"] == wanted["number"]
                    for p in ports
                ), f"{m.variant}: Ingress backend {backend}"


def test_app_containers_agree_with_the_code(manifests: Manifests) -> None:
    m = manifests
    known = env_names_read()
    apps = app_workloads(m)
    assert {w.name for w in apps} >= APP_CONTAINERS
    for w in apps:
        assert w.argv, f"{m.variant}: {w.name} has no command (the image's default would run the trainer)"
        check_entry_point(w.argv)
        config = check_env(w, known)
        for target, (host, port) in check_connections(w, config).items():
            resolved = resolve_address(m, host, port)
            assert resolved is not None, f"{m.variant}: {w.name}: {target} host {host} is no Service"
            _, backends = resolved
            assert {pod_labels(o)["app.kubernetes.io/name"] for o, _ in backends} == {CONNECTION_PODS[target]}, (
                f"{m.variant}: {w.name}: {host}:{port} does not lead to {CONNECTION_PODS[target]}"
            )
            assert {number for _, number in backends} == {port}, (
                f"{m.variant}: {w.name}: {host}:{port} lands on another port"
            )
    # The ratings database URL carries the user, password and database PostgreSQL is created with.
    from sqlalchemy.engine import make_url

    url = make_url(workload(m, "ratings").env["TENGEN_DATABASE_URL"])
    postgres = workload(m, "postgres").env
    assert (url.username, url.password, url.database) == (
        postgres["POSTGRES_USER"],
        postgres["POSTGRES_PASSWORD"],
        postgres["POSTGRES_DB"],
    )


def test_ports_and_probes_agree_with_the_code(manifests: Manifests) -> None:
    ratings_grpc, ratings_http = RatingsConfig().grpc_port, RatingsConfig().http_port

    m = manifests

    def container(kind: str, owner: str, name: str) -> dict[str, Any]:
        return next(c for c in containers(m.get(kind, owner)) if c["name"] == name)

    def probe(c: dict[str, Any], kind: str) -> tuple[str, int]:
        action = c[kind]["httpGet"]
        return action["path"], named_port(c, action["port"])

    trainer = container("StatefulSet", "trainer", "trainer")
    port = Config().trainer.http_port
    assert int(workload(m, "trainer").env["TENGEN_TRAINER__HTTP_PORT"]) == port
    assert probe(trainer, "readinessProbe") == probe(trainer, "livenessProbe") == ("/healthz", port)

    ratings = container("Deployment", "ratings", "ratings")
    env = workload(m, "ratings").env
    assert (int(env["TENGEN_RATINGS__GRPC_PORT"]), int(env["TENGEN_RATINGS__HTTP_PORT"])) == (
        ratings_grpc,
        ratings_http,
    )
    assert workload(m, "ratings").ports == {ratings_grpc, ratings_http}
    assert probe(ratings, "readinessProbe") == ("/healthz", ratings_http)

    # Triton: the ports its entrypoint starts it on, probed on its own health endpoints.
    defaults = TritonConfig()
    triton = container("Deployment", "triton", "triton")
    entrypoint = (REPO / "docker" / "triton-entrypoint.sh").read_text()
    for flag, number in (
        ("http", defaults.http_port),
        ("grpc", defaults.grpc_port),
        ("metrics", defaults.metrics_port),
    ):
        assert f"--{flag}-port={number}" in entrypoint
    assert workload(m, "triton").ports == {defaults.http_port, defaults.grpc_port, defaults.metrics_port}
    assert probe(triton, "readinessProbe") == ("/v2/health/ready", defaults.http_port)
    assert probe(triton, "livenessProbe") == probe(triton, "startupProbe") == ("/v2/health/live", defaults.http_port)

    for name, env_name in (
        ("selfplay", "TENGEN_SELFPLAY__HTTP_PORT"),
        ("gating", "TENGEN_GATING__HTTP_PORT"),
        ("strength", "TENGEN_STRENGTH__HTTP_PORT"),
    ):
        port = getattr(Config(), name).http_port
        c = container("Deployment", name, name)
        assert int(workload(m, name).env[env_name]) == port and workload(m, name).ports == {port}
        assert probe(c, "readinessProbe") == probe(c, "livenessProbe") == ("/healthz", port)

    tensorboard = container("StatefulSet", "trainer", "tensorboard")
    argv = tensorboard["command"]
    assert probe(tensorboard, "readinessProbe") == ("/", int(argv[argv.index("--port") + 1]))

    # Kafka advertises the address the clients use, on the port its listener binds.
    kafka = workload(m, "kafka")
    assert ":9092" in kafka.env["KAFKA_LISTENERS"] and "kafka-headless:9092" in " ".join(kafka.argv)
    assert kafka.env["KAFKA_LOG_DIRS"].startswith(next(iter(kafka.mounts)))


def test_volumes_persist_what_services_write_and_share_what_others_read(manifests: Manifests) -> None:
    m = manifests
    known = env_names_read()
    for owner, w, ephemeral in workloads(m):
        if w.is_app():
            check_persistence(w, check_env(w, known), ephemeral)
    # Kafka and PostgreSQL keep their data on their claim templates.
    for name, data_dir in (("kafka", "KAFKA_LOG_DIRS"), ("postgres", "PGDATA")):
        w = workload(m, name)
        found = mount_of(w, PurePosixPath(w.env[data_dir]))
        assert found is not None and found[1][0].startswith(f"template/{name}/"), f"{m.variant}: {name} data on {found}"

    triton = workload(m, "triton")
    repository = triton.env["TRITON_MODEL_REPOSITORY"]
    models_volume, read_only = triton.mounts[repository]
    assert read_only, "Triton only reads the repository"
    assert workload(m, "model-init").mounts["/data/models"] == (models_volume, False)
    trainer = workload(m, "trainer")
    assert trainer.mounts["/data/tensorboard"][0] == workload(m, "tensorboard").mounts["/data/tensorboard"][0]
    # Ratings shows self-play's SGFs and gating's matches (its /games pages) from their claims, read only,
    # at the paths under its games dir (the data dir) where the writers mount them.
    ratings = workload(m, "ratings")
    games_dir = PurePosixPath(check_env(ratings, known).run.data_dir)
    for path, writer in ((games_dir / "sgf", "selfplay"), (games_dir / "gating", "gating")):
        assert ratings.mounts[str(path)] == (workload(m, writer).mounts[str(path)][0], True), f"ratings: {path}"
    # Gating writes versions into the repository Triton serves, and reads the trainer's candidates.
    gating = workload(m, "gating")
    assert gating.mounts["/data/models"] == (models_volume, False)
    assert gating.mounts["/data/candidates"] == (trainer.mounts["/data/candidates"][0], True)
    # Strength reads the newest version from that repository (read-only: it never writes there)
    # and keeps its results on a claim of its own, mounted by no other pod.
    strength = workload(m, "strength")
    assert strength.mounts["/data/models"] == (models_volume, True), "strength only reads the repository"
    results_volume, read_only = strength.mounts["/data/strength"]
    assert results_volume.startswith("pvc/") and not read_only
    assert all(
        results_volume not in (v for v, _ in w.mounts.values()) for _, w, _ in workloads(m) if w.name != "strength"
    ), f"{m.variant}: {results_volume} is shared"
    # Volumes that pods of different workloads share must be ReadWriteMany where pods may land on
    # different nodes (the gpu overlay); the cpu overlay runs on one node, where RWO is enough.
    users: dict[str, set[str]] = {}
    for owner, w, _ in workloads(m):
        for volume, _ in w.mounts.values():
            if volume.startswith("pvc/"):
                users.setdefault(volume.split("/")[1], set()).add(owner["metadata"]["name"])
    for claim in m.of_kind("PersistentVolumeClaim"):
        name = claim["metadata"]["name"]
        assert name in users, f"{m.variant}: PVC {name} is mounted by nothing"
        if len(users[name]) > 1 and m.variant.startswith("gpu"):
            assert claim["spec"]["accessModes"] == ["ReadWriteMany"], f"{name} is shared by {sorted(users[name])}"


def quantity(value: str | int) -> float:
    """A Kubernetes resource quantity (500m, 2, 512Mi, 4Gi, 1G) as a number."""
    text = str(value)
    suffixes = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", text)
    assert match and match.group(2) in ("", *suffixes), f"not a quantity: {text}"
    return float(match.group(1)) * suffixes.get(match.group(2), 1)


def test_every_container_has_requests_and_limits_and_gpus_where_the_overlay_says(manifests: Manifests) -> None:
    m = manifests
    gpu_users = set()
    for owner in m.pod_owners():
        for c in containers(owner):
            resources = c.get("resources", {})
            for key in ("cpu", "memory"):
                request, limit = resources.get("requests", {}).get(key), resources.get("limits", {}).get(key)
                assert request is not None and limit is not None, (
                    f"{m.variant}: {c['name']} lacks a {key} request or limit"
                )
                assert quantity(request) <= quantity(limit), (
                    f"{m.variant}: {c['name']} {key} request {request} > limit {limit}"
                )
            if "nvidia.com/gpu" in resources.get("limits", {}):
                gpu_users.add(owner["metadata"]["name"])
                tolerations = pod_spec(owner).get("tolerations", [])
                assert any(t["key"] == "nvidia.com/gpu" for t in tolerations), (
                    f"{c['name']} cannot land on tainted GPU nodes"
                )
    gpu = m.variant.startswith("gpu")
    assert gpu_users == ({"triton", "trainer"} if gpu else set())
    backend = workload(m, "model-init").env["TENGEN_TRITON__BACKEND"]
    assert backend == ("onnxruntime" if gpu else "python")
    assert ("KIND_GPU" in CONFIG_TEMPLATES[backend].read_text()) == gpu
    if gpu:  # TensorRT writes its engines where the config says: a writable volume of Triton's
        cache = re.search(r'"trt_engine_cache_path" value: "([^"$]+)/', CONFIG_TEMPLATES[backend].read_text()).group(1)
        (triton,) = [c for c in containers(m.get("Deployment", "triton")) if c["name"] == "triton"]
        assert any(v["mountPath"] == cache and not v.get("readOnly") for v in triton["volumeMounts"])
    trainer = workload(m, "trainer")
    assert trainer.env["TENGEN_TRAINER__DEVICE"] == ("cuda" if gpu else "cpu")
    assert trainer.image.endswith("-cuda") == gpu
    # Only the trainer computes with torch on a GPU (Triton has its own image): every other app
    # container, self-play's fleet above all, pulls the CPU image, not the multi-GB CUDA one.
    cuda_images = {c["name"] for owner in m.pod_owners() for c in containers(owner) if c["image"].endswith("-cuda")}
    assert cuda_images == ({"trainer"} if gpu else set())
    assert trainer.env["TENGEN_PRESET"] == ("paper" if gpu else "cpu")
    # Kafka: the voters list one node per replica; topics replicate over all of them.
    kafka = m.get("StatefulSet", "kafka")
    replicas = kafka["spec"]["replicas"]
    voters = workload(m, "kafka").env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert voters == [f"{i}@kafka-{i}.kafka-headless:9093" for i in range(replicas)]
    topics = workload(m, "create-topics").env
    assert (
        int(topics["TOPIC_REPLICATION_FACTOR"])
        == replicas
        == int(workload(m, "kafka").env["KAFKA_DEFAULT_REPLICATION_FACTOR"])
    )
    assert int(topics["TOPIC_MIN_INSYNC_REPLICAS"]) == (2 if replicas >= 3 else 1)
    if replicas > 1:  # replicas that may share a node are not replicas
        anti = pod_spec(kafka).get("affinity", {}).get("podAntiAffinity", {})
        terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution", [])
        assert any(
            t["topologyKey"] == "kubernetes.io/hostname" and selects(t["labelSelector"], pod_labels(kafka))
            for t in terms
        ), f"{m.variant}: Kafka's brokers are not required on different nodes"


def test_pods_are_hardened(manifests: Manifests) -> None:
    """No pod gets a service-account token (none talks to the Kubernetes API); every container,
    init containers and the third-party images (Triton, PostgreSQL, Kafka) included, runs on a
    read-only root file system, with writable mounts where its process writes, without privilege
    escalation or capabilities; every long-running container has a liveness probe, the
    TensorBoard sidecar included."""
    m = manifests
    for owner in m.pod_owners():
        spec = pod_spec(owner)
        assert spec.get("automountServiceAccountToken") is False, (
            f"{m.variant}: {owner['metadata']['name']} mounts a token"
        )
        ids, _ = volume_ids(owner)
        for c in containers(owner):
            where = f"{m.variant}: {owner['metadata']['name']}/{c['name']}"
            context = c.get("securityContext", {})
            assert context.get("readOnlyRootFilesystem") is True, f"{where} has a writable root file system"
            assert context.get("allowPrivilegeEscalation") is False, f"{where} may escalate privileges"
            assert context.get("capabilities", {}).get("drop") == ["ALL"], f"{where} keeps capabilities"
            writable = {
                v["mountPath"]
                for v in c.get("volumeMounts", [])
                if not v.get("readOnly") and not ids[v["name"]].startswith(("configMap/", "secret/"))
            }
            argv = c.get("command", []) + c.get("args", [])
            check_writable(where, c["image"], argv, container_env(m, c), writable)
        if owner["kind"] == "Job":
            continue
        for c in spec["containers"]:  # init containers run to completion: no liveness probe
            assert "livenessProbe" in c, f"{m.variant}: {owner['metadata']['name']}/{c['name']} has no liveness probe"


def test_hardening_check_can_fail(rendered: dict[str, Manifests]) -> None:
    """Kafka without its config scratch volume, or PostgreSQL back on a writable root, is reported."""
    for mutate, message in (
        (
            lambda m: m.get("StatefulSet", "kafka")["spec"]["template"]["spec"]["containers"][0]["volumeMounts"].pop(1),
            "/opt/kafka/config is not a writable mount",
        ),
        (
            lambda m: m.get("StatefulSet", "postgres")["spec"]["template"]["spec"]["containers"][0][
                "securityContext"
            ].pop("readOnlyRootFilesystem"),
            "postgres/postgres has a writable root file system",
        ),
    ):
        broken = Manifests("broken", copy.deepcopy(rendered["cpu"].docs))
        mutate(broken)
        with pytest.raises(AssertionError, match=message):
            test_pods_are_hardened(broken)


def test_a_changed_preset_reaches_triton_and_never_blocks_the_apply(tmp_path: Path) -> None:
    """`kubectl apply` cannot change the pod template of an existing Job (the old model-init Job
    referred to the preset's hash-named ConfigMap, so a new preset failed to apply for a day,
    until the finished Job expired). Rendered with another preset, every Job stays as it was, and the
    container that brings the model's config to the preset (`tengen models prepare`) belongs to a
    workload whose pod template changes, so the apply rolls it, and it reads the new preset."""
    for overlay in ("cpu", "gpu"):
        before = Manifests(overlay, kustomize(overlay, (), tmp_path))
        root = tmp_path / f"{overlay}-tiny"
        root.mkdir()
        root.joinpath("kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": [os.path.relpath(K8S / "overlays" / overlay, root)],
                    "configMapGenerator": [
                        {"name": "tengen-config", "behavior": "merge", "literals": ["TENGEN_PRESET=tiny"]}
                    ],
                }
            )
        )
        out = subprocess.run([tool("kubectl"), "kustomize", str(root)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        after = Manifests(f"{overlay} with preset tiny", [d for d in yaml.safe_load_all(out.stdout) if d])
        for job in before.of_kind("Job"):
            assert after.get("Job", job["metadata"]["name"])["spec"]["template"] == job["spec"]["template"], (
                f"{overlay}: the {job['metadata']['name']} Job changes with the preset; kubectl apply would fail"
            )
        preparers = [
            (o, c)
            for o in after.pod_owners()
            for c in containers(o)
            if c.get("command", [])[:3] == ["tengen", "models", "prepare"]
        ]
        assert len(preparers) == 1, f"{overlay}: {len(preparers)} containers prepare the model"
        owner, container = preparers[0]
        assert owner["kind"] in ("Deployment", "StatefulSet"), f"{overlay}: the model is prepared by a {owner['kind']}"
        assert container_env(after, container)["TENGEN_PRESET"] == "tiny"
        old = before.get(owner["kind"], owner["metadata"]["name"])
        assert old["spec"]["template"] != owner["spec"]["template"], f"{overlay}: the preset change does not roll it"
        # ... and Triton serves what it prepared: the same claim, Triton started after it.
        assert owner["metadata"]["name"] == "triton" and container in pod_spec(owner).get("initContainers", [])


def min_replicas(m: Manifests, owner: dict[str, Any]) -> int:
    """The fewest pods a workload runs: its HPA's minimum when one scales it, else its replicas."""
    for hpa in m.of_kind("HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]
        if (target["kind"], target["name"]) == (owner["kind"], owner["metadata"]["name"]):
            return hpa["spec"].get("minReplicas", 1)
    return owner["spec"].get("replicas", 1)


def test_disruption_budgets_cover_the_replicated_services(manifests: Manifests) -> None:
    m = manifests
    covered = {
        o["metadata"]["name"]
        for b in m.of_kind("PodDisruptionBudget")
        for o in m.pod_owners()
        if selects(b["spec"]["selector"], pod_labels(o))
    }
    assert covered >= {"kafka", "ratings", "selfplay"}
    for budget in m.of_kind("PodDisruptionBudget"):
        (owner,) = [o for o in m.pod_owners() if selects(budget["spec"]["selector"], pod_labels(o))]
        spec = budget["spec"]
        # A budget the workload can never satisfy would block every node drain.
        if "maxUnavailable" in spec:
            assert spec["maxUnavailable"] not in (0, "0%"), budget
        else:
            assert isinstance(spec["minAvailable"], int) and spec["minAvailable"] < min_replicas(m, owner), budget


def test_selfplay_scales_on_cpu_and_gating_runs_alone(manifests: Manifests) -> None:
    m = manifests
    (hpa,) = m.of_kind("HorizontalPodAutoscaler")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == ("apps/v1", "Deployment", "selfplay")
    selfplay = m.get("Deployment", "selfplay")
    assert "replicas" not in selfplay["spec"], "the HPA owns the replica count; a fixed one is reset by every apply"
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Resource" and metric["resource"]["name"] == "cpu"
    assert 0 < metric["resource"]["target"]["averageUtilization"] <= 100
    # Utilisation is relative to the request, so every container of the pod must request CPU.
    assert all("cpu" in c["resources"]["requests"] for c in containers(selfplay))
    if m.variant.startswith("gpu"):
        assert hpa["spec"]["maxReplicas"] >= 16, "the GPU cluster runs a fleet of workers"
    gating = m.get("Deployment", "gating")
    assert gating["spec"]["replicas"] == 1 and gating["spec"]["strategy"]["type"] == "Recreate", (
        "two gating pods would promote concurrently"
    )
    strength = m.get("Deployment", "strength")
    assert strength["spec"]["replicas"] == 1 and strength["spec"]["strategy"]["type"] == "Recreate", (
        "two strength pods would measure the same versions, on one ReadWriteOnce claim"
    )
    assert "nvidia.com/gpu" not in str(strength), "strength plays on the CPU"


def needed_connections(m: Manifests) -> set[tuple[str, str, int]]:
    """(client, server, server container port) for every address a workload is configured with,
    plus Triton's HTTP port for code that uses it."""
    needed = set()
    for owner, w, _ in workloads(m):
        client = owner["metadata"]["name"]
        for host, port in addresses(w):
            resolved = resolve_address(m, host, port)
            if resolved is not None:
                needed |= {(client, server["metadata"]["name"], number) for server, number in resolved[1]}
        if w.is_app() and ".triton.http_port" in entry_point_sources(w.argv):
            needed |= {
                (client, s["metadata"]["name"], n) for s, n in resolve_address(m, "triton", TritonConfig().http_port)[1]
            }
    return needed


def policy_mismatches(m: Manifests, needed: set[tuple[str, str, int]]) -> list[str]:
    """Every (source, pod port) whose NetworkPolicy verdict differs from what the workloads need."""
    owners = {o["metadata"]["name"]: o for o in m.pod_owners()}
    # Ratings is public (reads are open, writes need the token): gating, the CLI, the Ingress.
    public = {
        (name, p["containerPort"]) for name in ["ratings"] for c in containers(owners[name]) for p in c.get("ports", [])
    }
    # Prometheus in the `monitoring` namespace scrapes /metrics of each service that serves it.
    scraped = {("triton", TritonConfig().metrics_port)}
    for owner, w, _ in workloads(m):
        scraped |= {
            (owner["metadata"]["name"], int(v)) for k, v in w.env.items() if re.fullmatch(r"TENGEN_\w+_HTTP_PORT", k)
        }
    monitoring = Peer.of("prometheus", "monitoring", {"app.kubernetes.io/name": "prometheus"})
    stranger = Peer.of("stranger", "default", {"app": "curl"})
    sources = [Peer.of(name, NAMESPACE, pod_labels(o)) for name, o in owners.items()] + [monitoring, stranger]
    wrong = []
    for target_name, target in owners.items():
        for c in containers(target):
            for p in c.get("ports", []):
                number = p["containerPort"]
                for source in sources:
                    allowed = ingress_allowed(m, source, target, number, p.get("name"))
                    expected = (
                        (source.name, target_name, number) in needed
                        or (target_name, number) in public
                        or (source is monitoring and (target_name, number) in scraped)
                    )
                    if allowed != expected:
                        wrong.append(f"{source.name} -> {target_name}:{number} {'allowed' if allowed else 'blocked'}")
    return sorted(wrong)


def test_network_policies_allow_exactly_the_connections_the_workloads_make(manifests: Manifests) -> None:
    m = manifests
    needed = needed_connections(m)
    wrong = policy_mismatches(m, needed) + egress_mismatches(m, needed)
    assert not wrong, f"{m.variant}: NetworkPolicies disagree with the configured connections:\n" + "\n".join(wrong)
    # The documented paths, spelt out: the database only from ratings, Triton only from its clients.
    sources_of = lambda server, port: {c for c, s, n in needed if (s, n) == (server, port)}  # noqa: E731
    assert sources_of("postgres", 5432) == {"ratings"}
    assert sources_of("triton", TritonConfig().grpc_port) == {"selfplay", "gating"}
    # The Triton pod's model-init init container announces the served version.
    assert sources_of("kafka", 9092) == {"kafka", "kafka-topics", "triton", "trainer", "selfplay", "gating", "ratings"}
    assert "trainer" not in sources_of("triton", TritonConfig().grpc_port) | sources_of(
        "triton", TritonConfig().http_port
    )
    # Strength reports to ratings' gRPC port, reaches nothing else of the namespace (egress), and
    # Prometheus may scrape its /metrics.
    ratings_grpc = RatingsConfig().grpc_port
    assert {(s, n) for c, s, n in needed if c == "strength"} == {("ratings", ratings_grpc)}
    strength = m.get("Deployment", "strength")
    reachable = {
        (t["metadata"]["name"], p["containerPort"])
        for t in m.pod_owners()
        for c in containers(t)
        for p in c.get("ports", [])
        if egress_allowed(
            m, strength, Peer.of(t["metadata"]["name"], NAMESPACE, pod_labels(t)), p["containerPort"], p.get("name")
        )
    }
    assert reachable == {("ratings", ratings_grpc)}, f"{m.variant}: strength's egress reaches {sorted(reachable)}"
    monitoring = Peer.of("prometheus", "monitoring", {"app.kubernetes.io/name": "prometheus"})
    port = int(workload(m, "strength").env["TENGEN_STRENGTH__HTTP_PORT"])
    assert ingress_allowed(m, monitoring, strength, port, "http")
    trainer = Peer.of("trainer", NAMESPACE, pod_labels(m.get("StatefulSet", "trainer")))
    assert not ingress_allowed(m, trainer, strength, port, "http")


def test_network_policy_check_can_fail(rendered: dict[str, Manifests]) -> None:
    """Opening Postgres to every pod of the namespace is reported."""
    m = rendered["cpu"]
    loose = Manifests("loose", copy.deepcopy(m.docs))
    policy = loose.get("NetworkPolicy", "postgres")
    policy["spec"]["ingress"][0]["from"] = [{"podSelector": {}}]
    trainer = Peer.of("trainer", NAMESPACE, pod_labels(m.get("StatefulSet", "trainer")))
    postgres = loose.get("StatefulSet", "postgres")
    assert not ingress_allowed(m, trainer, m.get("StatefulSet", "postgres"), 5432, "postgres")
    assert ingress_allowed(loose, trainer, postgres, 5432, "postgres")
    assert policy_mismatches(m, needed_connections(m)) == []
    assert "trainer -> postgres:5432 allowed" in policy_mismatches(loose, needed_connections(loose))


def test_egress_check_can_fail(rendered: dict[str, Manifests]) -> None:
    """Dropping strength's DNS rule, or pointing its ratings rule at the HTTP port, is reported."""
    m = rendered["cpu"]
    assert egress_mismatches(m, needed_connections(m)) == []
    no_dns = Manifests("no-dns", copy.deepcopy(m.docs))
    rules = no_dns.get("NetworkPolicy", "strength-egress")["spec"]["egress"]
    rules[:] = [r for r in rules if not any(p.get("port") == 53 for p in r.get("ports", []))]
    assert "strength -> kube-dns:53/UDP blocked (egress)" in egress_mismatches(no_dns, needed_connections(no_dns))
    wrong_port = Manifests("wrong-port", copy.deepcopy(m.docs))
    for rule in wrong_port.get("NetworkPolicy", "strength-egress")["spec"]["egress"]:
        for p in rule.get("ports", []):
            if p["port"] == 50061:
                p["port"] = 8061
    assert egress_mismatches(wrong_port, needed_connections(wrong_port)) == [
        "strength -> ratings:50061 blocked (egress)",
        "strength -> ratings:8061 allowed (egress)",
    ]


def test_kustomize_reports_a_broken_overlay(tmp_path: Path) -> None:
    """A patch naming a missing object fails the render instead of being skipped."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    overlay.joinpath("patch.yaml").write_text(
        yaml.safe_dump(
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "no-such"}, "spec": {"replicas": 2}}
        )
    )
    overlay.joinpath("kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [os.path.relpath(K8S / "base", overlay)], "patches": [{"path": "patch.yaml"}]})
    )
    out = subprocess.run([tool("kubectl"), "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "no-such" in out.stderr


def metrics_ports(m: Manifests) -> dict[str, int]:
    """Each workload serving Prometheus metrics -> the container port: the services' HTTP port
    (TENGEN_<NAME>_HTTP_PORT), Triton's metrics port."""
    ports = {"triton": TritonConfig().metrics_port}
    for owner, w, _ in workloads(m):
        for key, value in w.env.items():
            if w.is_app() and re.fullmatch(r"TENGEN_\w+_HTTP_PORT", key):
                ports[owner["metadata"]["name"]] = int(value)
    return ports


def test_monitoring_component_ships_the_dashboard_and_scrapes_every_service(rendered: dict[str, Manifests]) -> None:
    m = rendered["cpu+monitoring"]
    dashboard = m.get("ConfigMap", "tengen-grafana-dashboard")
    # The one copy: the ConfigMap holds the very file compose's Grafana mounts.
    assert dashboard["data"] == {"tengen-dashboard.json": DASHBOARD.read_text()}
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"  # Grafana's dashboard sidecar
    # `kubectl apply` keeps the object in an annotation limited to 256 KiB.
    assert len(DASHBOARD.read_bytes()) < 200 * 1024
    (job,) = yaml.safe_load((MONITORING / "prometheus-scrape-configs.yaml").read_text())
    (discovery,) = job["kubernetes_sd_configs"]
    assert discovery["role"] == "endpointslice" and discovery["namespaces"]["names"] == [NAMESPACE]
    keep = next(r for r in job["relabel_configs"] if r.get("action") == "keep")
    assert keep["source_labels"] == ["__meta_kubernetes_service_name", "__meta_kubernetes_endpointslice_port_name"]
    pairs = [alternative.split(";") for alternative in re.fullmatch(r"\((.*)\)", keep["regex"]).group(1).split("|")]
    expected = metrics_ports(m)
    monitoring = Peer.of("prometheus", "monitoring", {"app.kubernetes.io/name": "prometheus"})
    reached = set()
    for service_name, port_name in pairs:
        service = m.get("Service", service_name)
        (port,) = [p for p in service["spec"]["ports"] if p.get("name") == port_name]
        backends = service_backends(m, service, port["port"])
        assert backends, f"{service_name}:{port_name} reaches no pod"
        for owner, number in backends:
            name = owner["metadata"]["name"]
            assert expected.get(name) == number, f"{service_name}:{port_name} reaches {name}:{number}, not its metrics"
            assert ingress_allowed(m, monitoring, owner, number, port_name), f"the policies block {name}:{number}"
            reached.add(name)
    assert reached == set(expected), f"not scraped: {set(expected) - reached}"
