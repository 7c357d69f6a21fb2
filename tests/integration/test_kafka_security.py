"""Kafka security on the real broker: a SASL_SSL listener (TLS with a CA made here, users
for PLAIN and SCRAM-SHA-256/512 written at format time), and every command that talks to
Kafka configured by the FAULTLINE_SECURITY_* / SASL_* / SSL_* settings alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest
from conftest import stop_process
from tls import CertAuthority, make_ca

from app.bridge.resources import KINDS
from app.model.records import CLASSIFIED_FAILURES
from ops.kafka import local_broker
from tests.bridge.apiserver import FakeKube
from tests.bridge.helpers import apply_story, wait_for

ROOT = Path(__file__).resolve().parents[2]
MIXED = ROOT / "examples" / "traces" / "mixed.jsonl"
USERS = {"alice": "alice-secret", "bob": "bob-secret"}


class SecureBroker:
    def __init__(self, bootstrap: str, ca: CertAuthority, plaintext: str) -> None:
        self.bootstrap, self.ca, self.plaintext = bootstrap, ca, plaintext

    def env(self, prefix: str, mechanism: str = "SCRAM-SHA-512", user: str = "alice", password: str | None = None, **extra: str) -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_")}
        return {
            **clean,
            "FAULTLINE_BOOTSTRAP": self.bootstrap,
            "FAULTLINE_TOPIC_PREFIX": prefix,
            "FAULTLINE_PARTITIONS": "2",
            "FAULTLINE_SECURITY_PROTOCOL": "SASL_SSL",
            "FAULTLINE_SASL_MECHANISM": mechanism,
            "FAULTLINE_SASL_USERNAME": user,
            "FAULTLINE_SASL_PASSWORD": USERS[user] if password is None else password,
            "FAULTLINE_SSL_CAFILE": str(self.ca.ca_pem),
            **extra,
        }


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    ca = make_ca(tmp_path_factory.mktemp("ca"))
    broker = local_broker.LocalBroker(tmp_path_factory.mktemp("kafka-sasl-ssl"), sasl_ssl=local_broker.SaslSsl(ca.broker_keystore, USERS))
    plaintext = broker.start()
    try:
        assert broker.sasl_ssl_bootstrap is not None
        yield SecureBroker(broker.sasl_ssl_bootstrap, ca, plaintext)
    finally:
        broker.stop()


def faultline(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT, stdin=subprocess.DEVNULL)


def prefix() -> str:
    return f"s{uuid.uuid4().hex[:8]}."


def tail_keys(env: dict[str, str], topic: str, idle: float = 3.0) -> dict[str, dict]:
    res = faultline("tail", topic, "--from-beginning", "--idle-timeout", str(idle), env=env)
    assert res.returncode == 0, res.stderr
    latest: dict[str, dict] = {}
    for line in res.stdout.splitlines():
        record = orjson.loads(line)
        latest[record["key"]] = record["value"]
    return latest


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_topics_publish_and_tail_over_sasl_ssl_with_each_mechanism(secure_broker: SecureBroker, mechanism: str) -> None:
    env = secure_broker.env(prefix(), mechanism, user="bob")
    created = faultline("topics", "create", env=env)
    assert created.returncode == 0, created.stderr
    published = faultline("publish", str(MIXED), env=env)
    assert published.returncode == 0, published.stderr
    res = faultline("tail", "k8s.pods", "--from-beginning", "--max", "5", env=env)
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == 5


def test_worker_and_tail_classify_over_sasl_ssl(secure_broker: SecureBroker, tmp_path: Path) -> None:
    """`topics create`, `worker`, `publish`, `tail` and `replay --from-kafka`, all over SASL_SSL
    with SCRAM-SHA-512; the verdicts are those of the offline replay."""
    env = secure_broker.env(prefix())
    assert faultline("topics", "create", env=env).returncode == 0
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen([sys.executable, "-m", "app", "worker", "--store", "memory", "--data-dir", str(tmp_path / "data"),
                                   "--web-port", "0"], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        assert faultline("publish", str(MIXED), env=env).returncode == 0
        classify = faultline("classify", str(MIXED), env=env)
        table = classify.stdout.split("\n\n", 1)[0].splitlines()[1:]  # the verdicts, before the gang transitions
        expected = {line.split()[0]: line.split()[1] for line in table if line.startswith("prod-a/")}
        assert len(expected) == 10

        def verdicts() -> dict[str, str] | None:
            assert worker.poll() is None, f"the worker exited:\n{log.read_text()[-3000:]}"
            got = {key: value["code"] for key, value in tail_keys(env, CLASSIFIED_FAILURES).items()}
            return got if got == expected else None

        wait_for(verdicts, timeout=180, what="the worker's verdicts over SASL_SSL")
        out = tmp_path / "replayed.jsonl"
        replayed = faultline("replay", "--from-kafka", "--out", str(out), env=env)
        assert replayed.returncode == 0, replayed.stderr
        latest = {r["key"]: r["value"]["code"] for r in map(orjson.loads, out.read_text().splitlines()) if r["topic"] == CLASSIFIED_FAILURES}
        assert latest == expected
    finally:
        stop_process(worker)
    assert worker.returncode == 0, log.read_text()[-3000:]


def test_bridge_publishes_over_sasl_ssl(secure_broker: SecureBroker, tmp_path: Path) -> None:
    from tests.unit import builders, stories

    kube = FakeKube().start()
    env = secure_broker.env(prefix(), FAULTLINE_CLUSTER="sec-a", FAULTLINE_KUBECONFIG=str(kube.write_kubeconfig(tmp_path / "kubeconfig")))
    assert faultline("topics", "create", env=env).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "app", "bridge"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: len(kube.watches) == len(KINDS), timeout=60, what="the bridge's watches")
        builders.reset_ids()
        apply_story(kube, stories.pod_task_nvlink(t0=datetime.now(timezone.utc) - timedelta(minutes=2)))
        wait_for(lambda: len(tail_keys(env, "k8s.pods", idle=1.0)) >= 1, timeout=60, what="pods on k8s.pods over SASL_SSL")
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        kube.stop()
    assert proc.returncode == 0, stderr.decode()
    assert b"Traceback" not in stderr


def test_a_certificate_from_another_ca_fails_within_5s_naming_the_cafile_setting(secure_broker: SecureBroker, tmp_path: Path) -> None:
    other = make_ca(tmp_path / "other", "another CA")
    env = secure_broker.env(prefix(), FAULTLINE_SSL_CAFILE=str(other.ca_pem))
    for command in (["topics", "create"], ["tail", "k8s.pods"], ["publish", str(MIXED)]):
        started = time.monotonic()
        res = faultline(*command, env=env)
        assert time.monotonic() - started < 5 + 2, command  # the interpreter's start-up on a loaded machine
        assert res.returncode == 1 and "certificate" in res.stderr and "FAULTLINE_SSL_CAFILE" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr


def test_a_wrong_password_is_an_error_that_names_the_sasl_settings(secure_broker: SecureBroker) -> None:
    env = secure_broker.env(prefix(), password="not-the-password")
    res = faultline("topics", "create", env=env)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "FAULTLINE_SASL" in res.stderr, res.stderr


def test_plaintext_to_the_tls_listener_is_said_quickly(secure_broker: SecureBroker) -> None:
    env = secure_broker.env(prefix(), FAULTLINE_SECURITY_PROTOCOL="PLAINTEXT", FAULTLINE_SSL_CAFILE="")
    started = time.monotonic()
    res = faultline("topics", "create", env=env)
    assert res.returncode == 1 and "Traceback" not in res.stderr and "--security-protocol" in res.stderr, res.stderr
    assert time.monotonic() - started < 25
