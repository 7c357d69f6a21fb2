"""ops/ and the local stack, checked by parsing (no Docker engine, Prometheus or Grafana
runs here): docker-compose.yml, the Dockerfile, Prometheus config and alert rules, the
Grafana dashboard and provisioning. Every metric they name must be one /metrics exposes."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import tomllib
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML (a dependency of the bridge extra, via kubernetes) is not installed")

from app.web.metrics import render_metrics  # noqa: E402
from tests.fleet import promtext  # noqa: E402
from tests.fleet.test_web import fed_view  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FAULTLINE_SERVICES = {"topics-init", "kubeconfig-init", "bridge", "demo", "worker"}


# One image name everywhere, built by `docker build -t faultline:<version> .` (README).
IMAGE = f"faultline:{tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']['version']}"


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@cache
def compose() -> dict[str, Any]:
    return load_yaml(ROOT / "docker-compose.yml")


@cache
def exposed() -> dict[str, str]:
    """Metric family -> type, as /metrics exposes them for a view with data in every family."""
    types, _ = promtext.parse(render_metrics(fed_view()))
    return types


def metric_names(expr: str) -> list[str]:
    return re.findall(r"\b(faultline_[a-z0-9_]+)", expr)


def is_exposed(name: str) -> bool:
    families = exposed()
    if name in families:
        return True
    for suffix in ("_sum", "_count", "_bucket"):
        base = name.removesuffix(suffix)
        if base != name and families.get(base) in ("summary", "histogram"):
            return True
    return False


def cli() -> argparse.ArgumentParser:
    """Every faultline command, whichever of them app/cli/__init__.py registers yet."""
    from app.cli import bridge, fleet, offline

    modules: list[Any] = [offline, bridge, fleet]
    try:
        from app.cli import streaming

        modules.append(streaming)
    except ImportError:  # pragma: no cover - without the stream extra
        pass
    parser = argparse.ArgumentParser(prog="faultline", exit_on_error=False)
    commands = parser.add_subparsers(dest="command", required=True)
    for module in modules:
        module.register(commands)
    return parser


# --- docker-compose.yml ------------------------------------------------------------------------


def test_compose_has_the_whole_local_stack() -> None:
    services = compose()["services"]
    assert set(services) == {"kafka", *FAULTLINE_SERVICES, "prometheus", "grafana"}
    for name, service in services.items():
        assert service.get("image"), f"service {name} names no image"
    for name in FAULTLINE_SERVICES:
        assert services[name]["build"] == "." and services[name]["image"] == IMAGE, name
    assert (ROOT / "Dockerfile").is_file()
    assert services["bridge"]["profiles"] == ["cluster"] and services["demo"]["profiles"] == ["demo"]


def test_compose_kafka_runs_in_kraft_mode_on_the_pinned_version() -> None:
    kafka = compose()["services"]["kafka"]
    pom = ET.parse(ROOT / "ops" / "kafka" / "pom.xml").getroot()
    version = pom.find("m:properties/m:kafka.version", {"m": "http://maven.apache.org/POM/4.0.0"})
    assert version is not None and kafka["image"] == f"apache/kafka:{version.text}"
    env = {k: str(v) for k, v in kafka["environment"].items()}
    assert not any("ZOOKEEPER" in key for key in env)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    listeners = dict(item.split("://") for item in env["KAFKA_LISTENERS"].split(","))
    protocols = dict(item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listeners) == set(protocols)
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    node, _, address = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].partition("@")
    assert node == env["KAFKA_NODE_ID"] and address == f"kafka{listeners[controller]}"
    advertised = dict(item.split("://") for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert controller not in advertised and set(advertised) <= set(listeners)
    assert advertised["PLAINTEXT"] == "kafka:9092" and env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "PLAINTEXT"
    assert advertised["EXTERNAL"].startswith("127.0.0.1:")
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1" and env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    external_port = advertised["EXTERNAL"].rsplit(":", 1)[1]
    assert f"127.0.0.1:{external_port}:{listeners['EXTERNAL'].lstrip(':')}" in kafka["ports"]
    assert "kafka-broker-api-versions.sh" in " ".join(kafka["healthcheck"]["test"])


def test_compose_services_start_in_order() -> None:
    services = compose()["services"]
    conditions = {"service_started", "service_healthy", "service_completed_successfully"}
    for name, service in services.items():
        for dependency, spec in service.get("depends_on", {}).items():
            assert dependency in services, f"{name} depends on unknown service {dependency}"
            assert spec["condition"] in conditions
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], f"{dependency} has no healthcheck"
    assert services["topics-init"]["depends_on"] == {"kafka": {"condition": "service_healthy"}}
    for name in ("bridge", "demo", "worker"):
        assert services[name]["depends_on"]["topics-init"] == {"condition": "service_completed_successfully"}
    assert services["bridge"]["depends_on"]["kubeconfig-init"] == {"condition": "service_completed_successfully"}

    def reaches(start: str, seen: tuple[str, ...] = ()) -> None:
        assert start not in seen, f"dependency cycle {' -> '.join((*seen, start))}"
        for dependency in services[start].get("depends_on", {}):
            reaches(dependency, (*seen, start))

    for name in services:
        reaches(name)


def test_compose_faultline_commands_and_settings_exist() -> None:
    from app import settings as kafka_settings
    from app.bridge import settings as bridge_settings

    known = {info.env for info in (*kafka_settings.describe(), *bridge_settings.describe())}
    parser = cli()
    services = compose()["services"]
    for name in FAULTLINE_SERVICES - {"kubeconfig-init"}:  # that one copies a file
        command = services[name]["command"]
        assert command[0] == "faultline"
        args = parser.parse_args(command[1:])
        assert callable(args.run), name
        for key in services[name].get("environment", {}):
            assert key in known, f"{name}: {key} is not a faultline setting"
        for arg in command[1:]:
            if arg.startswith("examples/"):
                assert (ROOT / arg).is_file(), f"{name}: {arg} is not in the repository (the image copies examples/)"
    assert services["bridge"]["command"] == ["faultline", "bridge", "--cluster", "local"]
    assert services["topics-init"]["command"] == ["faultline", "topics", "create"]
    assert services["worker"]["command"] == ["faultline", "worker"]


def test_compose_wires_the_bridge_kubeconfig_and_the_worker_web_port() -> None:
    services = compose()["services"]
    bridge = services["bridge"]
    assert bridge["volumes"] == ["kubeconfig:/kube:ro"] and bridge["environment"]["FAULTLINE_KUBECONFIG"] == "/kube/config"
    worker = services["worker"]
    port = worker["environment"]["FAULTLINE_WEB_PORT"]
    assert f"127.0.0.1:{port}:{port}" in worker["ports"]
    assert worker["environment"]["FAULTLINE_WEB_HOST"] == "0.0.0.0"  # inside its container, for Prometheus
    prometheus = load_yaml(ROOT / "ops" / "prometheus" / "prometheus.yml")
    [job] = prometheus["scrape_configs"]
    assert job["static_configs"][0]["targets"] == [f"worker:{port}"] and job["metrics_path"] == "/metrics"


def test_compose_mounts_only_files_that_exist() -> None:
    for name, service in compose()["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"


# --- Dockerfile ------------------------------------------------------------------------------------


def test_dockerfile_installs_the_extras_the_stack_needs() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert lines[0] == "FROM python:3.11-slim"
    text = "\n".join(lines)
    # At the versions app/stream/faust_fixes.py was written against (docs/streaming.md, Upgrading Faust).
    assert 'pip install -c constraints.txt ".[stream,bridge]"' in text and "constraints.txt" in text.split("RUN", 1)[0]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"stream", "bridge"} <= set(extras)
    copied = [shlex.split(line)[1] for line in lines if line.startswith("COPY")]
    for source in [s for line in lines if line.startswith("COPY") for s in shlex.split(line)[1:-1]]:
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    assert "app" in copied and "examples" in copied
    cmd = json.loads(next(line for line in lines if line.startswith("CMD")).removeprefix("CMD"))
    assert cmd[:2] == ["faultline", "serve"] and callable(cli().parse_args(cmd[1:]).run)
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored and "app" not in ignored


# --- Prometheus ---------------------------------------------------------------------------------------


def test_prometheus_loads_the_alert_rules() -> None:
    config = load_yaml(ROOT / "ops" / "prometheus" / "prometheus.yml")
    mount = next(v for v in compose()["services"]["prometheus"]["volumes"] if v.startswith("./ops/prometheus:"))
    target = mount.split(":")[1]
    for rule_file in config["rule_files"]:
        assert rule_file.startswith(target + "/")
        assert (ROOT / "ops" / "prometheus" / rule_file.removeprefix(target + "/")).is_file()


def test_every_alert_names_metrics_that_are_exposed() -> None:
    rules = load_yaml(ROOT / "ops" / "prometheus" / "alerts.yml")
    jobs = {job["job_name"] for job in load_yaml(ROOT / "ops" / "prometheus" / "prometheus.yml")["scrape_configs"]}
    alerts = {rule["alert"]: rule for group in rules["groups"] for rule in group["rules"]}
    assert {"FaultlineQuarantineCandidate", "FaultlineDeadLetters", "FaultlineConsumerLag"} <= set(alerts)
    for name, rule in alerts.items():
        expr = rule["expr"]
        assert rule["annotations"]["summary"] and rule["labels"]["severity"] in ("warning", "critical"), name
        names = metric_names(expr)
        if not names:  # only Prometheus' own `up` of our scrape job
            job = re.fullmatch(r'up\{job="([^"]+)"\} == 0', expr)
            assert job and job.group(1) in jobs, f"{name}: {expr}"
        for metric in names:
            assert is_exposed(metric), f"alert {name} uses {metric}, which /metrics does not expose"
    assert "faultline_quarantine_candidates" in alerts["FaultlineQuarantineCandidate"]["expr"]
    assert "faultline_dead_letters_total" in alerts["FaultlineDeadLetters"]["expr"]
    assert "faultline_consumer_lag" in alerts["FaultlineConsumerLag"]["expr"]


# --- Grafana ----------------------------------------------------------------------------------------------


def test_every_dashboard_panel_queries_exposed_metrics() -> None:
    dashboard = json.loads((ROOT / "ops" / "grafana" / "faultline-dashboard.json").read_text())
    assert dashboard["uid"] and dashboard["title"]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 8
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    seen: set[str] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, f"panel {panel['title']!r} queries no faultline metric"
            for metric in names:
                assert is_exposed(metric), f"panel {panel['title']!r} uses {metric}, which /metrics does not expose"
            seen.update(names)
            assert target["datasource"]["uid"] == "prometheus"
    # Every family on /metrics is on the dashboard.
    assert {n.removesuffix("_sum").removesuffix("_count") for n in seen} == set(exposed())


def test_grafana_provisioning_matches_the_dashboard_and_the_compose_mounts() -> None:
    grafana = compose()["services"]["grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"])
    assert mounts["./ops/grafana/provisioning"] == "/etc/grafana/provisioning"
    dashboard_target = mounts["./ops/grafana/faultline-dashboard.json"]
    provisioning = ROOT / "ops" / "grafana" / "provisioning"
    [datasource] = load_yaml(provisioning / "datasources" / "prometheus.yml")["datasources"]
    assert datasource["uid"] == "prometheus" and datasource["url"] == "http://prometheus:9090"
    [provider] = load_yaml(provisioning / "dashboards" / "faultline.yml")["providers"]
    assert dashboard_target.startswith(provider["options"]["path"] + "/")
    assert grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] == dashboard_target


def test_grafana_counts_failed_attempts_not_revisions() -> None:
    """The demo's failed attempts (11: a JobSet generation restarted in place counts on its
    own) make more verdict records (revisions): the panel shows 11."""
    dashboard = json.loads((ROOT / "ops" / "grafana" / "faultline-dashboard.json").read_text())
    [panel] = [p for p in dashboard["panels"] if p["type"] == "stat" and p["title"].startswith("Failed attempts")]
    assert [t["expr"] for t in panel["targets"]] == ["sum(faultline_failed_attempts)"]
    view = fed_view()
    _, samples = promtext.parse(render_metrics(view))
    attempts = sum(value for (name, _), value in samples.items() if name == "faultline_failed_attempts")
    from app.model.records import CLASSIFIED_FAILURES
    from app.embedded.pipeline import Pipeline
    from app.replay.trace import read_lines, replay

    mixed = ROOT / "examples" / "traces" / "mixed.jsonl"
    verdict_records = sum(e.topic == CLASSIFIED_FAILURES for e in replay(read_lines(mixed), Pipeline()))
    assert attempts == view.summary().totals.failures == 11 < verdict_records  # revisions count once


def test_compose_publishes_every_port_on_loopback_only() -> None:
    for name, service in compose()["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"


def test_compose_every_long_running_service_has_a_healthcheck() -> None:
    for name, service in compose()["services"].items():
        if service.get("restart") != "no":
            assert "healthcheck" in service, f"{name} has no healthcheck"
            assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name


def test_compose_worker_keeps_its_name_and_id_across_recreation() -> None:
    worker = compose()["services"]["worker"]
    assert worker["hostname"] == worker["environment"]["FAULTLINE_WORKER_ID"] == "worker-1"


def test_compose_hands_the_bridge_a_kubeconfig_its_uid_can_read() -> None:
    """A usual kubeconfig is 0600 and its owner's: the image's uid 10001 gets its own copy."""
    services = compose()["services"]
    uid = re.search(r"--uid (\d+)", (ROOT / "Dockerfile").read_text()).group(1)
    init = services["kubeconfig-init"]
    assert init["user"] == "0:0" and init["profiles"] == services["bridge"]["profiles"]
    command = init["command"]
    assert command[0] == "install" and command[command.index("-o") + 1] == uid and command[command.index("-g") + 1] == uid
    assert command[-1] == services["bridge"]["environment"]["FAULTLINE_KUBECONFIG"]
    assert "user" not in services["bridge"]  # the image's own uid


# --- ops/k8s: the workers' identity, scrape, disruption and network ---------------------------


def k8s(kind: str, name: str) -> dict[str, Any]:
    for path in sorted((ROOT / "ops" / "k8s").rglob("*.yaml")):  # the opt-in components' too
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == kind and doc["metadata"]["name"] == name:
                return doc
    raise AssertionError(f"no {kind} {name} in ops/k8s")


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_k8s_workers_are_a_statefulset_with_stable_ids_and_their_own_disks() -> None:
    workers = k8s("StatefulSet", "faultline-worker")["spec"]
    [container] = workers["template"]["spec"]["containers"]
    env = _env(container)
    assert env["FAULTLINE_WORKER_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["FAULTLINE_STORE"] == "rocksdb"
    [claim] = workers["volumeClaimTemplates"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == claim["metadata"]["name"])
    assert mount["mountPath"] == env["FAULTLINE_DATA_DIR"]
    assert claim["metadata"]["name"] not in {v["name"] for v in workers["template"]["spec"]["volumes"]}  # not an emptyDir
    assert env["FAULTLINE_WEB_HOST"] == "0.0.0.0" and workers["replicas"] >= 2


def test_k8s_service_and_scrape_annotations_reach_the_workers_metrics() -> None:
    workers = k8s("StatefulSet", "faultline-worker")["spec"]
    service = k8s("Service", "faultline-worker")
    [container] = workers["template"]["spec"]["containers"]
    port = _env(container)["FAULTLINE_WEB_PORT"]
    assert workers["serviceName"] == service["metadata"]["name"] and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == workers["selector"]["matchLabels"]
    assert [p["targetPort"] for p in service["spec"]["ports"]] == [c["name"] for c in container["ports"]]
    assert [c["containerPort"] for c in container["ports"]] == [int(port)]
    for scrape in (service["metadata"]["annotations"], workers["template"]["metadata"]["annotations"]):
        assert scrape == {"prometheus.io/scrape": "true", "prometheus.io/port": port, "prometheus.io/path": "/metrics"}


def test_k8s_a_drain_takes_one_worker_at_a_time() -> None:
    workers = k8s("StatefulSet", "faultline-worker")["spec"]
    budget = k8s("PodDisruptionBudget", "faultline-worker")["spec"]
    assert budget["selector"] == workers["selector"] and budget["maxUnavailable"] == 1 < workers["replicas"]


def test_k8s_network_policies_admit_only_prometheus_and_faultline() -> None:
    worker = k8s("NetworkPolicy", "faultline-worker")["spec"]
    assert worker["podSelector"] == k8s("StatefulSet", "faultline-worker")["spec"]["selector"]
    assert set(worker["policyTypes"]) == {"Ingress", "Egress"}
    [ingress] = worker["ingress"]
    assert [p["port"] for p in ingress["ports"]] == [6066]
    assert any(s.get("namespaceSelector", {}).get("matchLabels") == {"kubernetes.io/metadata.name": "monitoring"} for s in ingress["from"])
    assert any(9092 in [p["port"] for p in rule["ports"]] for rule in worker["egress"])
    broker = k8s("NetworkPolicy", "kafka-clients")
    assert broker["metadata"]["namespace"] == "kafka" and broker["spec"]["policyTypes"] == ["Ingress"]
    sources = [s for rule in broker["spec"]["ingress"] for s in rule["from"]]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "faultline"}}} in sources


def test_one_image_name_everywhere_and_its_build_command_is_documented() -> None:
    images = set()
    for path in sorted((ROOT / "ops" / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            pod = (doc or {}).get("spec", {}).get("template", {}).get("spec", {})
            images |= {c["image"] for c in pod.get("containers", [])}
    assert images == {IMAGE} == {compose()["services"][name]["image"] for name in FAULTLINE_SERVICES}
    assert f"docker build -t {IMAGE} ." in (ROOT / "README.md").read_text()
