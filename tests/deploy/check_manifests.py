#!/usr/bin/env python3
"""Checks that the rendered Kubernetes manifests, the image's default config and the Dockerfile
agree with each other and with server/graftd.example.yaml.

Usage: check_manifests.py REPO_DIR [NAME=RENDERED.yaml ...]
Each NAME=FILE is the output of `kubectl kustomize` for one base or overlay. Prints one line per
mismatch and exits 1 if there is any.
"""

import json
import math
import re
import shlex
import sys
from fractions import Fraction
from pathlib import Path

import yaml

# Memory model from the comments in deploy/base/deployment.yaml: a running request holds about
# four copies of its model (upload, IR, rollback snapshot, serialized output), a queued one its
# upload, plus a fixed allowance for the process itself. The uploads held at once are also
# bounded by max_inflight_bytes (0: graftd takes a quarter of its memory limit).
COPIES_PER_RUNNING_REQUEST = 4
PROCESS_OVERHEAD_BYTES = 256 * 1024 * 1024
DEFAULT_VERIFY_MAX_BYTES = 1024 * 1024 * 1024  # graftd's built-in default

failures = []


def fail(where, message):
    failures.append(f"[{where}] {message}")


def parse_quantity(text):
    """A Kubernetes resource quantity ("2Gi", "500m", "1e9") as a Fraction."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(?:[eE]([-+]?[0-9]+))?([a-zA-Z]*)", str(text).strip())
    if not m:
        raise ValueError(f"not a quantity: {text!r}")
    number = Fraction(m.group(1))
    if m.group(2):
        number *= Fraction(10) ** int(m.group(2))
    suffixes = {"": 1, "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9,
                "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20,
                "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
    if m.group(3) not in suffixes:
        raise ValueError(f"unknown quantity suffix in {text!r}")
    return number * suffixes[m.group(3)]


def split_host_port(address):
    host, sep, port = str(address).rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not HOST:PORT: {address!r}")
    return host.strip("[]"), int(port)


def check_config_keys(where, config, example):
    if not isinstance(config, dict):
        fail(where, "graftd.yaml is not a YAML mapping")
        return False
    unknown = sorted(set(config) - set(example))
    missing = sorted(set(example) - set(config))
    if unknown:
        fail(where, f"graftd.yaml has keys that server/graftd.example.yaml does not: {unknown}")
    if missing:
        fail(where, f"graftd.yaml lacks keys of server/graftd.example.yaml: {missing}")
    # Mappings (shared_cache:) may leave keys out (graftd's defaults), but not add unknown ones.
    sections_ok = True
    for key, value in example.items():
        if not isinstance(value, dict) or key not in config:
            continue
        section = config[key]
        if section is None:
            continue
        if not isinstance(section, dict):
            fail(where, f"graftd.yaml {key} is not a mapping")
            sections_ok = False
            continue
        extra = sorted(set(section) - set(value))
        if extra:
            fail(where, f"graftd.yaml {key} has keys that server/graftd.example.yaml does not: "
                        f"{extra}")
            sections_ok = False
    return not unknown and not missing and sections_ok


# graftd.yaml's address keys and the container port name each one must have.
ADDRESS_KEYS = {"listen": "grpc", "metrics_listen": "metrics", "health_listen": "health"}
TLS_FILE_KEYS = ("tls_cert_file", "tls_key_file", "tls_client_ca_file")


def listen_ports(where, config):
    """{'grpc': port, 'metrics': port[, 'health': port]} from the address keys (health_listen
    only when set); none may be loopback."""
    ports = {}
    for key, name in ADDRESS_KEYS.items():
        if key == "health_listen" and not config.get(key):
            continue
        try:
            host, port = split_host_port(config[key])
        except (KeyError, ValueError) as e:
            fail(where, f"graftd.yaml {key}: {e}")
            continue
        if host in ("127.0.0.1", "localhost", "::1"):
            fail(where, f"graftd.yaml {key} is {config[key]!r}: loopback is unreachable from "
                        "outside the container; listen on 0.0.0.0")
        ports[name] = port
    return ports


def parse_dockerfile(path):
    """The final stage's instructions as (KEYWORD, argument text), continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            instructions = []
        instructions.append((keyword, rest.strip()))
    return instructions


def exec_form(where, keyword, text):
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        fail(where, f"{keyword} should use the exec (JSON) form, got {text!r}")
        return None
    return value


def check_docker(repo, example):
    """Checks the runtime stage of the Dockerfile and the config it bakes in; returns its UID."""
    where = "Dockerfile"
    instructions = parse_dockerfile(repo / "Dockerfile")
    by_keyword = {}
    for keyword, rest in instructions:
        by_keyword.setdefault(keyword, []).append(rest)

    config_path = None
    for rest in by_keyword.get("COPY", []):
        args = [a for a in shlex.split(rest) if not a.startswith("--")]
        if args and args[0] == "deploy/docker/graftd.yaml":
            config_path = args[-1]
    if config_path is None:
        fail(where, "the runtime stage does not COPY deploy/docker/graftd.yaml")

    entrypoint = exec_form(where, "ENTRYPOINT", (by_keyword.get("ENTRYPOINT") or ["[]"])[-1])
    if entrypoint != ["/usr/local/bin/graftd"]:
        fail(where, f"ENTRYPOINT is {entrypoint}, expected [\"/usr/local/bin/graftd\"]")
    cmd = exec_form(where, "CMD", (by_keyword.get("CMD") or ["[]"])[-1])
    if cmd != ["--config", config_path]:
        fail(where, f"CMD is {cmd}, expected [\"--config\", \"{config_path}\"] (the baked config)")

    uid = None
    users = by_keyword.get("USER", [])
    if not users:
        fail(where, "the runtime stage has no USER: the container would run as root")
    else:
        user = users[-1].split(":")[0]
        if not user.isdigit() or int(user) == 0:
            fail(where, f"USER {users[-1]} should be a numeric non-root UID (runAsNonRoot can "
                        "only verify numeric UIDs)")
        else:
            uid = int(user)

    config = yaml.safe_load((repo / "deploy/docker/graftd.yaml").read_text())
    where_config = "deploy/docker/graftd.yaml"
    if check_config_keys(where_config, config, example):
        ports = listen_ports(where_config, config)
        exposed = set()
        for rest in by_keyword.get("EXPOSE", []):
            exposed |= {int(p.split("/")[0]) for p in rest.split()}
        if exposed != set(ports.values()):
            fail(where, f"EXPOSE {sorted(exposed)} differs from the baked config's listen and "
                        f"metrics_listen ports {sorted(ports.values())}")
    return uid


def one(where, docs, kind):
    found = [d for d in docs if d.get("kind") == kind]
    if len(found) != 1:
        fail(where, f"expected exactly one {kind}, found {len(found)}")
        return None
    return found[0]


def is_subset(small, big):
    return all(big.get(k) == v for k, v in (small or {}).items())


def pod_containers(doc):
    return ((doc.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []


def graftd_deployment(where, docs):
    """The Deployment that runs graftd (an overlay may add others, e.g. the shared cache's
    Redis)."""
    found = [d for d in docs if d.get("kind") == "Deployment"
             and any(c.get("name") == "graftd" for c in pod_containers(d))]
    if len(found) != 1:
        fail(where, f"expected exactly one Deployment with a container named graftd, found "
                    f"{len(found)}")
        return None
    return found[0]


def graftd_service(where, docs, deployment):
    """The Service over graftd's pods."""
    pod_labels = deployment["spec"]["template"]["metadata"].get("labels") or {}
    services = [d for d in docs if d.get("kind") == "Service"]
    found = [s for s in services if is_subset(s["spec"].get("selector"), pod_labels)]
    if len(found) != 1:
        selectors = [s["spec"].get("selector") for s in services]
        fail(where, f"expected exactly one Service selecting graftd's pods {pod_labels}, found "
                    f"{len(found)} (selectors: {selectors})")
        return None
    return found[0]


def parse_redis_memory(text):
    """A Redis memory size ("2gb", "512mb", "1000000") in bytes."""
    m = re.fullmatch(r"([0-9]+)(b|k|kb|m|mb|g|gb)?", str(text).strip().lower())
    if not m:
        raise ValueError(f"not a Redis memory size: {text!r}")
    units = {None: 1, "b": 1, "k": 10**3, "kb": 2**10, "m": 10**6, "mb": 2**20, "g": 10**9,
             "gb": 2**30}
    return int(m.group(1)) * units[m.group(2)]


def check_shared_cache(where, docs, config, graftd_pod_labels):
    """When graftd.yaml turns the shared cache on, its URL names a Service of this rendering
    whose pods run a Redis bounded by maxmemory with an allkeys eviction policy and no
    persistence, within its container's memory limit; a NetworkPolicy over those pods admits
    graftd's."""
    url = (config.get("shared_cache") or {}).get("url") or ""
    if not url:
        return
    m = re.fullmatch(r"redis://(?:[^@/]*@)?([^:/@]+)(?::([0-9]+))?(?:/[0-9]*)?", url)
    if not m:
        fail(where, f"shared_cache.url {url!r} is not redis://HOST[:PORT][/DB]")
        return
    host, port = m.group(1), int(m.group(2) or 6379)
    name = host.split(".")[0]  # NAME or NAME.NAMESPACE.svc...
    services = [d for d in docs if d.get("kind") == "Service" and d["metadata"]["name"] == name]
    if len(services) != 1:
        fail(where, f"shared_cache.url {url!r}: no Service named {name!r} in this rendering")
        return
    service = services[0]
    ports = [p for p in service["spec"].get("ports", []) if p.get("port") == port]
    if not ports:
        fail(where, f"Service {name} has no port {port} (shared_cache.url {url!r})")
        return
    selector = service["spec"].get("selector") or {}
    deployments = [d for d in docs if d.get("kind") == "Deployment" and selector and is_subset(
        selector, d["spec"]["template"]["metadata"].get("labels") or {})]
    if len(deployments) != 1:
        fail(where, f"Service {name} selects {len(deployments)} Deployments, expected one (Redis)")
        return
    containers = pod_containers(deployments[0])
    target = ports[0].get("targetPort", port)
    redis = [c for c in containers if any(
        p.get("containerPort") == target or p.get("name") == target for p in c.get("ports", []))]
    if len(redis) != 1:
        fail(where, f"no container of Deployment {deployments[0]['metadata']['name']} serves "
                    f"Service {name}'s port {target!r}")
        return
    container = redis[0]
    args = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]

    def arg(flag):
        return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) \
            else None

    policy = arg("--maxmemory-policy")
    if policy not in ("allkeys-lru", "allkeys-lfu"):
        fail(where, f"Redis --maxmemory-policy is {policy!r}: use allkeys-lru (or allkeys-lfu) so "
                    "a full Redis evicts old entries instead of refusing writes")
    if arg("--save") != "":
        fail(where, "Redis must run without RDB snapshots (--save \"\"): it is a cache")
    if arg("--appendonly") != "no":
        fail(where, "Redis must run without AOF (--appendonly no): it is a cache")
    maxmemory = arg("--maxmemory")
    limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    try:
        budget = parse_redis_memory(maxmemory) if maxmemory is not None else 0
    except ValueError as e:
        fail(where, str(e))
        budget = None
    if budget == 0:
        fail(where, "Redis has no --maxmemory: the shared cache's total size would be unbounded")
    elif budget is not None:
        if limit is None:
            fail(where, "the Redis container has no memory limit")
        elif parse_quantity(limit) < budget * Fraction(5, 4):
            fail(where, f"the Redis container's memory limit {limit} leaves less than a quarter "
                        f"above --maxmemory {maxmemory} for fragmentation and buffers")
        max_entry = (config.get("shared_cache") or {}).get("max_entry_bytes", 256 * 2**20)
        if isinstance(max_entry, int) and max_entry * 4 > budget:
            fail(where, f"shared_cache.max_entry_bytes {max_entry} is more than a quarter of "
                        f"Redis's --maxmemory {maxmemory}")
    redis_labels = deployments[0]["spec"]["template"]["metadata"].get("labels") or {}
    for policy_doc in docs:
        if policy_doc.get("kind") != "NetworkPolicy" or not is_subset(
                (policy_doc["spec"].get("podSelector") or {}).get("matchLabels"), redis_labels):
            continue
        admitted = False
        for rule in policy_doc["spec"].get("ingress") or []:
            sources = rule.get("from")
            if not sources or any(is_subset((src.get("podSelector") or {}).get("matchLabels"),
                                            graftd_pod_labels) and "podSelector" in src
                                  for src in sources):
                admitted = True
        if not admitted:
            fail(where, f"NetworkPolicy {policy_doc['metadata']['name']} does not admit graftd's "
                        "pods to Redis")


def check_rendering(where, docs, example, image_uid):
    deployment = graftd_deployment(where, docs)
    service = graftd_service(where, docs, deployment) if deployment is not None else None
    configmap = one(where, docs, "ConfigMap")
    hpa = one(where, docs, "HorizontalPodAutoscaler")
    pdb = one(where, docs, "PodDisruptionBudget")
    monitor = one(where, docs, "ServiceMonitor")
    if deployment is None or configmap is None:
        return

    # --- the configuration graftd will read ------------------------------------------------
    data = configmap.get("data") or {}
    if "graftd.yaml" not in data:
        fail(where, f"ConfigMap has no graftd.yaml key (keys: {sorted(data)})")
        return
    config = yaml.safe_load(data["graftd.yaml"])
    if not check_config_keys(where, config, example):
        return
    config_ports = listen_ports(where, config)

    pod = deployment["spec"]["template"]["spec"]
    pod_labels = deployment["spec"]["template"]["metadata"].get("labels") or {}
    containers = [c for c in pod.get("containers", []) if c.get("name") == "graftd"]
    if len(containers) != 1:
        fail(where, "the Deployment has no container named graftd")
        return
    container = containers[0]

    # --- the config file the container is told to read is the ConfigMap's ------------------
    args = container.get("args") or []
    if "--config" not in args or args.index("--config") + 1 >= len(args):
        fail(where, f"container args {args} do not pass --config FILE")
    else:
        config_file = args[args.index("--config") + 1]
        directory, _, filename = config_file.rpartition("/")
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounted = [m for m in container.get("volumeMounts", []) if m.get("mountPath") == directory]
        volume = volumes.get(mounted[0]["name"]) if mounted else None
        if not volume or (volume.get("configMap") or {}).get("name") != configmap["metadata"]["name"]:
            fail(where, f"--config {config_file}: {directory} is not a mount of ConfigMap "
                        f"{configmap['metadata']['name']}")
        elif filename != "graftd.yaml":
            fail(where, f"--config {config_file}: the ConfigMap's key is graftd.yaml")

    # --- ports -------------------------------------------------------------------------------
    container_ports = {p.get("name"): p.get("containerPort") for p in container.get("ports", [])}
    key_of = {name: key for key, name in ADDRESS_KEYS.items()}
    for name, port in config_ports.items():
        if container_ports.get(name) != port:
            fail(where, f"container port {name} is {container_ports.get(name)} but graftd.yaml "
                        f"listens on {port} ({key_of[name]})")
    # The kubelet's gRPC probes speak plaintext only: with TLS on the gRPC port they must ask
    # the plaintext health port (health_listen), which serves grpc.health.v1 alone.
    tls_on = bool(config.get("tls_cert_file"))
    if tls_on:
        probe_port, probe_what = config_ports.get("health"), "the plaintext health port"
        if "health" not in config_ports:
            fail(where, "graftd.yaml serves TLS (tls_cert_file) but has no health_listen: the "
                        "kubelet's gRPC probes cannot speak TLS and would fail")
    else:
        probe_port, probe_what = config_ports.get("grpc"), "gRPC (and grpc.health.v1)"
    for probe_kind in ("readinessProbe", "livenessProbe"):
        probe = container.get(probe_kind)
        if not probe:
            fail(where, f"the container has no {probe_kind}")
            continue
        grpc = probe.get("grpc")
        if not grpc:
            fail(where, f"{probe_kind} is not a native gRPC probe (grpc: {{port: ...}})")
        elif probe_port is not None and grpc.get("port") != probe_port and not (
                not tls_on and grpc.get("port") == config_ports.get("health")):
            hint = " (a gRPC probe takes a number, not a port name)" if isinstance(
                grpc.get("port"), str) else ""
            fail(where, f"{probe_kind} probes port {grpc.get('port')!r} but graftd serves "
                        f"{probe_what} on {probe_port}{hint}")
    check_tls_files(where, config, pod, container)

    # --- shutdown: preStop + graftd's drain must fit in the grace period ---------------------
    grace = config.get("grace_period_seconds")
    termination = pod.get("terminationGracePeriodSeconds", 30)
    pre_stop = ((container.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}
    command = pre_stop.get("command") or []
    pre_stop_seconds = 0
    if len(command) == 2 and command[0] == "/bin/sleep" and str(command[1]).isdigit():
        pre_stop_seconds = int(command[1])
    elif command:
        fail(where, f"preStop {command} is not [/bin/sleep, N]: cannot account for its time")
    if (isinstance(grace, bool) or not isinstance(grace, (int, float))
            or not termination > grace + pre_stop_seconds):
        fail(where, f"terminationGracePeriodSeconds {termination} must exceed the preStop sleep "
                    f"({pre_stop_seconds}) + grace_period_seconds ({grace}) from graftd.yaml, "
                    "or the kubelet kills graftd while it drains")

    # --- resources ---------------------------------------------------------------------------
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    cache = config.get("cache_bytes")
    if "memory" not in limits:
        fail(where, "the container has no memory limit")
    else:
        memory = parse_quantity(limits["memory"])
        workers, queue, model = (config.get("workers"), config.get("queue_length"),
                                 config.get("max_model_bytes"))
        if not isinstance(cache, int) or not memory >= cache:
            fail(where, f"memory limit {limits['memory']} ({int(memory)} bytes) is below "
                        f"cache_bytes {cache} from graftd.yaml")
        elif all(isinstance(v, int) for v in (cache, workers, queue, model)):
            verify = config.get("verify_max_bytes", DEFAULT_VERIFY_MAX_BYTES)
            inflight = config.get("max_inflight_bytes", 0)
            if not isinstance(inflight, int) or inflight < 0:
                fail(where, f"max_inflight_bytes is {inflight!r}, not a byte count")
                inflight = 0
            if inflight == 0:
                inflight = memory // 4
            elif inflight < model:
                fail(where, f"max_inflight_bytes {inflight} is below max_model_bytes {model}: "
                            "a model of max_model_bytes could never be accepted")
            uploads = min(inflight, (workers + queue) * model)
            # The shared cache tier: each admitted call may assemble an entry read from Redis,
            # and write_queue results may wait to be written.
            shared = config.get("shared_cache") or {}
            shared_bytes = 0
            if shared.get("url"):
                entry = shared.get("max_entry_bytes", 256 * 2**20)
                queued = shared.get("write_queue", 4)
                if isinstance(entry, int) and isinstance(queued, int):
                    shared_bytes = (workers + queue + queued) * entry
            need = (cache + uploads + workers * (COPIES_PER_RUNNING_REQUEST - 1) * model
                    + workers * verify + shared_bytes + PROCESS_OVERHEAD_BYTES)
            if memory < need:
                fail(where, f"memory limit {limits['memory']} ({int(memory)} bytes) is below "
                            f"cache_bytes + min(max_inflight_bytes, (workers + queue_length) x "
                            f"max_model_bytes) + workers x {COPIES_PER_RUNNING_REQUEST - 1} x "
                            f"max_model_bytes + workers x verify_max_bytes + (workers + "
                            f"queue_length + shared_cache.write_queue) x "
                            f"shared_cache.max_entry_bytes when the shared cache is on + 256 MiB "
                            f"= {int(need)} bytes")
        if "memory" in (resources.get("requests") or {}):
            if parse_quantity(resources["requests"]["memory"]) > memory:
                fail(where, "memory request exceeds the memory limit")
    workers = config.get("workers")
    if not isinstance(workers, int) or workers <= 0:
        fail(where, f"workers is {workers!r}: in a pod set it to the CPU limit (0 means the "
                    "node's cores, not the pod's)")
    elif "cpu" in limits and workers > math.ceil(parse_quantity(limits["cpu"])):
        fail(where, f"workers {workers} exceeds the CPU limit {limits['cpu']}")

    # --- security ----------------------------------------------------------------------------
    pod_security = pod.get("securityContext") or {}
    security = container.get("securityContext") or {}
    if not security.get("runAsNonRoot", pod_security.get("runAsNonRoot")):
        fail(where, "runAsNonRoot is not set to true")
    run_as = security.get("runAsUser", pod_security.get("runAsUser"))
    if image_uid is not None and run_as not in (None, image_uid):
        fail(where, f"runAsUser {run_as} differs from the image's USER {image_uid}")
    if security.get("readOnlyRootFilesystem") is not True:
        fail(where, "readOnlyRootFilesystem is not set to true")
    if security.get("allowPrivilegeEscalation") is not False:
        fail(where, "allowPrivilegeEscalation is not set to false")
    if "ALL" not in ((security.get("capabilities") or {}).get("drop") or []):
        fail(where, "capabilities do not drop ALL")
    tmp = [m for m in container.get("volumeMounts", []) if m.get("mountPath") == "/tmp"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    if not tmp or "emptyDir" not in volumes.get(tmp[0]["name"], {}):
        fail(where, "/tmp is not an emptyDir (the root filesystem is read-only)")

    # --- Service, ServiceMonitor, HPA, PDB point at these pods and ports --------------------
    service_ports = {}
    if service is not None:
        if not is_subset(service["spec"].get("selector"), pod_labels):
            fail(where, f"Service selector {service['spec'].get('selector')} does not match the "
                        f"pod labels {pod_labels}")
        for port in service["spec"].get("ports", []):
            service_ports[port.get("name")] = port
            target = port.get("targetPort", port.get("port"))
            resolved = container_ports.get(target) if isinstance(target, str) else target
            if resolved not in container_ports.values():
                fail(where, f"Service port {port.get('name')} targets {target!r}, which is not a "
                            f"container port ({container_ports})")
            elif port.get("name") in config_ports and resolved != config_ports[port["name"]]:
                fail(where, f"Service port {port['name']} targets {resolved} but graftd.yaml "
                            f"puts {port['name']} on {config_ports[port['name']]}")
        for name in ("grpc", "metrics"):
            if name not in service_ports:
                fail(where, f"the Service has no port named {name}")
        if service_ports.get("grpc", {}).get("appProtocol") != "grpc":
            fail(where, "the Service's grpc port lacks appProtocol: grpc")
    if monitor is not None and service is not None:
        if not is_subset((monitor["spec"].get("selector") or {}).get("matchLabels"),
                         service["metadata"].get("labels") or {}):
            fail(where, "the ServiceMonitor's selector does not match the Service's labels")
        for endpoint in monitor["spec"].get("endpoints", []):
            if endpoint.get("port") not in service_ports:
                fail(where, f"ServiceMonitor port {endpoint.get('port')!r} is not a port name of "
                            f"the Service ({sorted(service_ports)})")
            if endpoint.get("path", "/metrics") != "/metrics":
                fail(where, f"ServiceMonitor path is {endpoint.get('path')}, graftd serves /metrics")
    if hpa is not None:
        target = hpa["spec"].get("scaleTargetRef") or {}
        if (target.get("kind"), target.get("name")) != ("Deployment",
                                                        deployment["metadata"]["name"]):
            fail(where, f"the HPA scales {target}, not Deployment {deployment['metadata']['name']}")
    if pdb is not None and not is_subset((pdb["spec"].get("selector") or {}).get("matchLabels"),
                                         pod_labels):
        fail(where, "the PodDisruptionBudget's selector does not match the pod labels")
    check_network_policies(where, docs, pod_labels, container, config_ports, monitor is not None)
    check_shared_cache(where, docs, config, pod_labels)


def check_tls_files(where, config, pod, container):
    """Each TLS file graftd.yaml names lies in a read-only, whole-volume mount of a Secret that
    holds it, so the kubelet delivers it and its renewals; half a TLS configuration fails."""
    files = {key: config.get(key) for key in TLS_FILE_KEYS if config.get(key)}
    if bool(files.get("tls_cert_file")) != bool(files.get("tls_key_file")):
        fail(where, "graftd.yaml sets one of tls_cert_file and tls_key_file: graftd refuses "
                    "half a TLS configuration")
    auth = config.get("tls_client_auth", "none")
    if bool(files.get("tls_client_ca_file")) != (auth in ("request", "require")):
        fail(where, f"tls_client_auth {auth!r} and tls_client_ca_file "
                    f"{config.get('tls_client_ca_file')!r} do not go together (graftd refuses it)")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for key, path in files.items():
        if not str(path).startswith("/"):
            fail(where, f"{key} {path!r} is not an absolute path")
            continue
        mounts = [m for m in container.get("volumeMounts", [])
                  if path.startswith(m.get("mountPath", "").rstrip("/") + "/")]
        if not mounts:
            fail(where, f"{key} {path}: no volume is mounted at its folder")
            continue
        mount = max(mounts, key=lambda m: len(m["mountPath"]))
        secret = (volumes.get(mount["name"]) or {}).get("secret")
        if secret is None:
            fail(where, f"{key} {path}: {mount['mountPath']} is not a Secret volume (volume "
                        f"{mount['name']!r})")
            continue
        if mount.get("readOnly") is not True:
            fail(where, f"{key} {path}: the Secret mount {mount['mountPath']} is not readOnly")
        if mount.get("subPath") or mount.get("subPathExpr"):
            fail(where, f"{key} {path}: the Secret is mounted with subPath, which the kubelet "
                        "never updates: renewed certificates would not reach graftd")
        relative = path[len(mount["mountPath"].rstrip("/")) + 1:]
        items = secret.get("items")
        if items is not None and relative not in [i.get("path") for i in items]:
            fail(where, f"{key} {path}: Secret {secret.get('secretName')!r} is mounted with "
                        f"items {[i.get('path') for i in items]}, which lack {relative!r}")
        if secret.get("optional"):
            fail(where, f"{key} {path}: Secret {secret.get('secretName')!r} is optional: graftd "
                        "would start without its certificate and exit")


def check_network_policies(where, docs, pod_labels, container, config_ports, has_monitor):
    """A NetworkPolicy over graftd's pods must name real ports, admit the gRPC and health ports
    from everywhere (clients; the kubelet's probes come from the node), and admit the metrics
    port from somewhere when a ServiceMonitor scrapes it."""
    container_ports = {p.get("name"): p.get("containerPort") for p in container.get("ports", [])}
    policies = [d for d in docs if d.get("kind") == "NetworkPolicy" and is_subset(
        (d["spec"].get("podSelector") or {}).get("matchLabels"), pod_labels)]
    for policy in policies:
        if "Ingress" not in (policy["spec"].get("policyTypes") or ["Ingress"]):
            continue
        open_ports, any_ports = set(), set()
        for rule in policy["spec"].get("ingress") or []:
            ports = rule.get("ports")
            resolved = set()
            for p in ports or []:
                port = p.get("port")
                number = container_ports.get(port) if isinstance(port, str) else port
                if number not in container_ports.values():
                    fail(where, f"NetworkPolicy {policy['metadata']['name']} admits port "
                                f"{port!r}, which is not a container port ({container_ports})")
                resolved.add(number)
            if ports is None:
                resolved = set(container_ports.values())
            any_ports |= resolved
            if not rule.get("from"):
                open_ports |= resolved
        for name in ("grpc", "health"):
            if name in config_ports and config_ports[name] not in open_ports:
                fail(where, f"NetworkPolicy {policy['metadata']['name']} does not admit the "
                            f"{name} port {config_ports[name]} from everywhere")
        if has_monitor and config_ports.get("metrics") not in any_ports:
            fail(where, f"NetworkPolicy {policy['metadata']['name']} admits no one to the "
                        f"metrics port {config_ports.get('metrics')}: Prometheus cannot scrape")


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    repo = Path(sys.argv[1])
    example = yaml.safe_load((repo / "server/graftd.example.yaml").read_text())
    image_uid = check_docker(repo, example)
    checked = ["Dockerfile", "deploy/docker/graftd.yaml"]
    for arg in sys.argv[2:]:
        name, _, path = arg.partition("=")
        docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
        check_rendering(name, docs, example, image_uid)
        checked.append(name)
    for line in failures:
        print(f"FAIL {line}")
    if failures:
        print(f"{len(failures)} mismatch(es) in {', '.join(checked)}")
        return 1
    print(f"ok: {', '.join(checked)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
