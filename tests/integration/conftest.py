"""Integration tests run against a real Kafka broker (ops/kafka/local_broker.py), never mocks.

Set FAULTLINE_KAFKA_BOOTSTRAP=host:port to use an already running broker instead.
"""
from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ops.kafka.local_broker import LocalBroker

HERE = Path(__file__).resolve().parent




def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs a real Kafka broker (tests/integration)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees the whole session's items: mark only those under tests/integration.
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """bootstrap.servers of a real broker: $FAULTLINE_KAFKA_BOOTSTRAP, else one LocalBroker per test run."""
    external = os.environ.get("FAULTLINE_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    # A pytest-managed dir (not deleted by stop()) so the broker logs survive a failed run.
    broker = LocalBroker(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker.start()
    finally:
        broker.stop()


@pytest.fixture
def topic_prefix() -> str:
    """A unique prefix per test, e.g. 't1a2b3c4d.', so tests never share topics or groups."""
    return f"t{uuid.uuid4().hex[:8]}."


# --- The streaming path: workers as subprocesses on the real broker (tests/integration/test_stream_*.py)

import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

STREAM_PARTITIONS = 4


def _worker_env() -> dict[str, str]:
    """The caller's environment minus FAULTLINE_* settings (a stray FAULTLINE_RULES or
    FAULTLINE_STORE must not change what a test runs); the tests pass every setting."""
    keep = {"FAULTLINE_KAFKA_BOOTSTRAP", "FAULTLINE_CACHE"}
    return {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_") or k in keep}


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@dataclass
class WorkerProcess:
    """One `faultline worker` subprocess and its log file."""

    proc: subprocess.Popen[bytes]
    log: Path
    worker_id: str

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def counters(self) -> dict[str, int]:
        """The worker's counters, as its last expiry sweep logged them."""
        found = re.findall(r"faultline: ((?:\w+=\d+ ?)+)$", self.log_text(), re.MULTILINE)
        return {k: int(v) for k, v in (item.split("=") for item in found[-1].split())} if found else {}


@dataclass
class StreamStack:
    """The streaming path for one test: its own topic prefix (so its own topics, consumer
    group and changelogs), its own data dirs, its workers. All through the CLI."""

    bootstrap: str
    prefix: str
    workdir: Path
    partitions: int = STREAM_PARTITIONS
    workers: list[WorkerProcess] = field(default_factory=list)

    @property
    def app_id(self) -> str:
        return f"{self.prefix}faultline"

    def topic(self, logical: str) -> str:
        return self.prefix + logical

    def flags(self) -> list[str]:
        return ["--bootstrap", self.bootstrap, "--topic-prefix", self.prefix, "--partitions", str(self.partitions)]

    def faultline(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        res = subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL, env=_worker_env())
        if check and res.returncode != 0:
            raise AssertionError(f"faultline {' '.join(args)} exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
        return res

    def create_topics(self) -> str:
        return self.faultline("topics", "create", *self.flags()).stdout

    def publish(self, trace: Path) -> str:
        return self.faultline("publish", str(trace), *self.flags()).stdout

    def start_worker(self, worker_id: str = "w1", *, store: str = "rocksdb", sweep_interval: float = 60.0,
                     extra: tuple[str, ...] = (), env: dict[str, str] | None = None) -> WorkerProcess:
        """`env`: more environment variables (a fault-injection seam)."""
        log = self.workdir / f"worker-{worker_id}-{len(self.workers)}.log"
        cmd = [sys.executable, "-m", "app", "worker", *self.flags(), "--store", store, "--worker-id", worker_id,
               "--data-dir", str(self.workdir / f"data-{worker_id}"), "--web-port", "0",
               "--sweep-interval", str(sweep_interval), *extra]
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env={**_worker_env(), **(env or {})})
        worker = WorkerProcess(proc, log, worker_id)
        self.workers.append(worker)
        return worker

    def kill(self, worker: WorkerProcess) -> None:
        """SIGKILL: no shutdown hook runs, nothing is flushed or committed."""
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait(timeout=30)

    def stop_all(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.proc.terminate()
        for worker in self.workers:
            try:
                worker.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait(timeout=10)

    # --- reading the broker ---------------------------------------------------------------------

    def _tps(self, consumer: Any, logical: str) -> list[Any]:
        from kafka import TopicPartition

        from app.kafka.topics import TOPICS

        fixed = {spec.logical: spec.partitions for spec in TOPICS}
        return [TopicPartition(self.topic(logical), p) for p in range(fixed.get(logical) or self.partitions)]

    def backlog(self) -> dict[str, int]:
        """Per input topic of the workers: records not yet committed by the consumer group.
        Zero everywhere means every record was processed and its outputs acknowledged (a
        worker commits an offset only after that)."""
        from kafka import KafkaConsumer

        from app.model.envelope import SOURCE_TOPICS
        from app.model.facts import ATTEMPT_FACTS, FLEET_INPUTS, GANG_INPUTS

        # stage order, upstream first
        inputs = [*SOURCE_TOPICS, ATTEMPT_FACTS, GANG_INPUTS, FLEET_INPUTS]
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.app_id, enable_auto_commit=False)
        try:
            left: dict[str, int] = {}
            for logical in inputs:
                tps = self._tps(consumer, logical)
                committed = {tp: consumer.committed(tp) or 0 for tp in tps}
                ends = consumer.end_offsets(tps)
                left[logical] = sum(max(0, ends[tp] - committed[tp]) for tp in tps)
            return left
        finally:
            consumer.close()

    def wait_settled(self, timeout: float = 180.0, poll: float = 0.5) -> None:
        """Until every input record of every stage was processed (polled, no fixed sleep).
        Upstream topics are read first, so once they are drained the re-key topics' end
        offsets are final when read."""
        deadline = time.monotonic() + timeout
        left: dict[str, int] = {}
        while time.monotonic() < deadline:
            for worker in self.workers:
                code = worker.proc.poll()
                if code is not None and code != -signal.SIGKILL:
                    raise AssertionError(f"worker {worker.worker_id} exited with {code}:\n{worker.log_tail()}")
            left = self.backlog()
            if not any(left.values()):
                return
            time.sleep(poll)
        logs = "\n".join(w.log_tail() for w in self.workers if w.proc.poll() is None)
        raise AssertionError(f"not settled after {timeout:.0f}s, backlog {left}\n{logs}")

    def read(self, logical: str, *, full_name: bool = False) -> list[Any]:
        """Every record of a topic, from the beginning to its current end."""
        from kafka import KafkaConsumer, TopicPartition

        name = logical if full_name else self.topic(logical)
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        try:
            partitions = consumer.partitions_for_topic(name) or set()
            tps = [TopicPartition(name, p) for p in sorted(partitions)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            ends = consumer.end_offsets(tps)
            records: list[Any] = []
            deadline = time.monotonic() + 60
            while any(consumer.position(tp) < ends[tp] for tp in tps):
                assert time.monotonic() < deadline, f"could not read {name} to its end"
                for batch in consumer.poll(timeout_ms=500).values():
                    records.extend(batch)
            return records
        finally:
            consumer.close()

    def poll(self, condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not after {timeout:.0f}s")
            time.sleep(0.3)

    def wait_for(self, logical: str, predicate: Callable[[list[Any]], bool], timeout: float = 120.0) -> list[Any]:
        deadline = time.monotonic() + timeout
        while True:
            records = self.read(logical)
            if predicate(records):
                return records
            if time.monotonic() > deadline:
                raise AssertionError(f"condition on {logical} not met after {timeout:.0f}s ({len(records)} records)")
            time.sleep(0.3)


@pytest.fixture
def stream_stack(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[StreamStack]:
    """Topics created under this test's prefix; workers started by the test are stopped after it."""
    stack = StreamStack(kafka_bootstrap, topic_prefix, tmp_path)
    stack.create_topics()
    try:
        yield stack
    finally:
        stack.stop_all()


# --- What the streaming path must agree on with the offline replay -------------------------------


@dataclass
class Outputs:
    """The final state of the output topics, as a consumer keeping the latest record per
    key sees it, plus every dead letter.

    `revision` (classified failures) counts emissions per key; how many there are depends
    on how pod and event records (different topics and partitions) interleave before the
    attempt stage, which Kafka does not fix: it is left out of the comparison. Gang
    transitions are emitted once each, in the same order whatever the interleaving (SPEC
    R9.11, R12.4), so the streamed ones must also chain (each `from` the previous `to`,
    starting at Pending) and `transitions` holds them all. Everything else must be equal. Dead letters are compared as (source topic, key,
    reason, value): their partition and offset name the Kafka record in one path and the
    trace line in the other.
    """

    latest: dict[str, dict[str, Any]]
    dead_letters: list[tuple[str, str | None, str, str]]
    broken_chains: list[str] = field(default_factory=list)
    # Every gang transition per key, in order, repeats (a redelivery) taken out.
    transitions: dict[str, list[bytes]] = field(default_factory=dict)

    @staticmethod
    def _transitions(records: list[tuple[str, str, bytes]]) -> dict[str, list[bytes]]:
        from app.model.records import GANG_TRANSITIONS

        out: dict[str, list[bytes]] = {}
        for topic, key, value in records:
            if topic == GANG_TRANSITIONS:
                seen = out.setdefault(key, [])
                if value not in seen:
                    seen.append(value)
        return out

    @staticmethod
    def _latest(records: list[tuple[str, str, bytes]]) -> dict[str, dict[str, Any]]:
        import orjson

        from app.model.records import DEAD_LETTER, OUTPUT_TOPICS

        latest: dict[str, dict[str, Any]] = {t: {} for t in OUTPUT_TOPICS if t != DEAD_LETTER}
        for topic, key, value in records:
            if topic not in latest:
                continue  # dead letters are compared apart; derived records in test_stream_fleet
            decoded = orjson.loads(value)
            decoded.pop("revision", None)
            latest[topic][key] = decoded
        return latest

    @staticmethod
    def _broken_chains(records: list[tuple[str, str, bytes]]) -> list[str]:
        import orjson

        from app.model.records import GANG_TRANSITIONS

        last: dict[str, str] = {}
        seen: set[tuple[str, bytes]] = set()
        broken = []
        for topic, key, value in records:
            if topic != GANG_TRANSITIONS:
                continue
            if (key, value) in seen:
                # An at-least-once repeat: a batch folded again after a crash repeats its
                # transitions byte for byte. A re-fold that went another way is new bytes.
                continue
            seen.add((key, value))
            t = orjson.loads(value)
            expected_from = last.get(key, "Pending")
            if t["from"] != expected_from:
                broken.append(f"{key}: {expected_from} then {t['from']} -> {t['to']}")
            last[key] = t["to"]
        return broken

    @staticmethod
    def _letters(values: list[bytes], prefix: str = "") -> list[tuple[str, str | None, str, str]]:
        import orjson

        out = []
        for value in values:
            letter = orjson.loads(value)
            topic = letter["topic"][len(prefix):] if prefix and letter["topic"].startswith(prefix) else letter["topic"]
            out.append((topic, letter["key"], letter["reason"], letter["value"]))
        return sorted(out, key=repr)

    @classmethod
    def offline(cls, trace: Path, rules_file: Path | None = None) -> Outputs:
        """The oracle: `faultline replay [--rules FILE]`'s pipeline over the same trace, in one process."""
        from app.embedded.pipeline import Pipeline
        from app.model.envelope import SOURCE_TOPICS
        from app.model.records import DEAD_LETTER
        from app.replay.trace import read_lines, replay
        from app.rulefile import load_rules
        from app.stream.codecs import encode

        emits = list(replay(read_lines(trace), Pipeline(load_rules(rules_file))))
        records = [(e.topic, e.key, encode(e.value)) for e in emits]
        # A line that is no trace record or names no source topic cannot be published.
        letters = [v for t, _, v in records if t == DEAD_LETTER]
        letters = [v for v in letters if _letter_topic(v) in SOURCE_TOPICS]
        return cls(cls._latest(records), cls._letters(letters), transitions=cls._transitions(records))

    @classmethod
    def streamed(cls, stack: StreamStack) -> Outputs:
        from app.model.records import DEAD_LETTER, OUTPUT_TOPICS

        records = []
        for topic in OUTPUT_TOPICS:
            records += [(topic, r.key.decode(), r.value) for r in stack.read(topic)]
        letters = [v for t, _, v in records if t == DEAD_LETTER]
        return cls(cls._latest(records), cls._letters(letters, stack.prefix), cls._broken_chains(records), cls._transitions(records))

    def assert_equal(self, other: Outputs, *, redelivered: bool = False) -> None:
        """self is the stream, other the oracle; a readable diff on failure. After a crash
        (`redelivered`) a bad record may be dead-lettered twice: compare them as a set."""
        problems = []
        for topic, expected in other.latest.items():
            got = self.latest.get(topic, {})
            missing = sorted(set(expected) - set(got))
            extra = sorted(set(got) - set(expected))
            differ = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])
            if missing:
                problems.append(f"{topic}: {len(missing)} keys missing, e.g. {missing[:3]}")
            if extra:
                problems.append(f"{topic}: {len(extra)} unexpected keys, e.g. {extra[:3]}")
            for key in differ[:3]:
                diff = {f: (got[key].get(f), expected[key].get(f)) for f in expected[key] if got[key].get(f) != expected[key].get(f)}
                problems.append(f"{topic}[{key}] differs (stream, offline): {diff}")
            if len(differ) > 3:
                problems.append(f"{topic}: {len(differ)} keys differ in all")
        if self.broken_chains:
            problems.append(f"gang transitions not chained: {self.broken_chains[:3]}")
        mine, theirs = self.dead_letters, other.dead_letters
        if redelivered:
            mine, theirs = sorted(set(mine), key=repr), sorted(set(theirs), key=repr)
        if mine != theirs:
            problems.append(f"dead letters differ: stream {len(mine)} {mine[:2]}... offline {len(theirs)} {theirs[:2]}...")
        assert not problems, "\n".join(problems)


def _letter_topic(value: bytes) -> str:
    import orjson

    return orjson.loads(value)["topic"]


@pytest.fixture
def outputs() -> type[Outputs]:
    """`outputs.offline(trace)` (the oracle) and `outputs.streamed(stack)`."""
    return Outputs
