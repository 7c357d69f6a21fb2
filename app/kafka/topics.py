"""Every topic faultline reads or writes: its logical name, its role, its Kafka config;
and their creation with kafka-python's admin client (idempotent).

The Kafka name is the configured prefix + the logical name (`Settings.topic`).
Source and internal topics must all have the same partition count: the stages join
records of several topics in one table partition (k8s.pods and k8s.events by pod uid),
and Faust keeps each table partition with the same-numbered input partitions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import msgspec
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import KafkaError, TopicAlreadyExistsError

from app.model.envelope import SOURCE_TOPICS
from app.model.facts import ATTEMPT_FACTS, FLEET_INPUTS, GANG_INPUTS
from app.model.fleet_records import DERIVED_TOPICS, GANG_QUEUES, QUARANTINE_CANDIDATES
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, FAULTS, GANG_TRANSITIONS, IDLE_QUOTA, STUCK_READMISSIONS
from app.core.engine.topology import STAGES
from app.kafka import clients
from app.kafka.config import KafkaUnreachable
from app.settings import Settings


Role = Literal["source", "output", "internal", "changelog"]
CURRENT_ONLY = (QUARANTINE_CANDIDATES, GANG_QUEUES)

# The worker's tables: one per stage that keeps state (app/core/engine/topology.py), with the
# `partitions` setting. Their changelog topics are created with the others: Faust would
# create them itself at start-up, and a worker that looked before its own creation
# reached the metadata stopped ("changelog topic has 0 partitions").
TABLES: tuple[str, ...] = tuple(stage.name for stage in STAGES if stage.state is not None)


class TopicSpec(msgspec.Struct, frozen=True):
    logical: str
    role: Role
    config: dict[str, str] = {}
    partitions: int | None = None  # fixed; None: the `partitions` setting

    @property
    def co_partitioned(self) -> bool:
        return self.role != "output" and self.partitions is None

    def partition_count(self, settings: Settings) -> int:
        return self.partitions or settings.partitions

    def name(self, settings: Settings) -> str:
        """The Kafka name: the prefix and the logical name; a changelog is Faust's
        `<app id>-<table>-changelog`."""
        if self.role == "changelog":
            return f"{settings.app_id}-{self.logical}"
        return settings.topic(self.logical)


TOPICS: tuple[TopicSpec, ...] = (
    *(TopicSpec(name, "source") for name in SOURCE_TOPICS),
    TopicSpec(FAULTS, "output"),
    # The latest verdict per attempt key supersedes the earlier ones (DESIGN.md, R7.2).
    TopicSpec(CLASSIFIED_FAILURES, "output", {"cleanup.policy": "compact"}),
    TopicSpec(GANG_TRANSITIONS, "output"),
    # A gang stuck waiting for readmission now: its latest record is current (SPEC R15.4).
    TopicSpec(STUCK_READMISSIONS, "output", {"cleanup.policy": "compact"}),
    # Quota idle now, and when it ended: the latest per attempt is current (SPEC R17.3).
    TopicSpec(IDLE_QUOTA, "output", {"cleanup.policy": "compact"}),
    TopicSpec(DEAD_LETTER, "output"),
    TopicSpec(ATTEMPT_FACTS, "internal"),
    TopicSpec(GANG_INPUTS, "internal"),
    TopicSpec(FLEET_INPUTS, "internal"),
    # Derived records are re-emitted whole when they change: the latest per key is current.
    *(TopicSpec(name, "output", {"cleanup.policy": "compact,delete"}) for name in DERIVED_TOPICS if name not in CURRENT_ONLY),
    # A candidate or a queue now: its latest record is current however old it is.
    *(TopicSpec(name, "output", {"cleanup.policy": "compact"}) for name in CURRENT_ONLY),
    *(TopicSpec(f"{table}-changelog", "changelog", {"cleanup.policy": "compact"}) for table in TABLES),
)


class TopicError(RuntimeError):
    """A topic is missing or shaped wrong; the message says which and how to fix it."""


@contextmanager
def admin_client(settings: Settings) -> Iterator[KafkaAdminClient]:
    try:
        admin = clients.admin(settings, client_id="faultline-admin", request_timeout_ms=30_000)
    except KafkaUnreachable as exc:
        raise TopicError(str(exc)) from None
    except KafkaError as exc:
        raise TopicError(
            f"cannot reach Kafka at {settings.bootstrap} ({exc}): start a broker (python ops/kafka/local_broker.py start) "
            "or point --bootstrap / FAULTLINE_BOOTSTRAP at one; with TLS or SASL check --security-protocol and the "
            "FAULTLINE_SASL_* / FAULTLINE_SSL_* settings"
        ) from None
    try:
        yield admin
    finally:
        admin.close()


def _partition_counts(admin: KafkaAdminClient, names: list[str]) -> dict[str, int]:
    """Kafka name -> partition count, for the topics among `names` that exist."""
    existing = set(admin.list_topics())
    wanted = [n for n in names if n in existing]
    if not wanted:
        return {}
    return {t["name"]: len(t["partitions"]) for t in admin.describe_topics(wanted) if not t.get("error_code")}


def _mismatch(spec: TopicSpec, name: str, found: int, settings: Settings) -> str:
    return (
        f"topic {name} has {found} partitions but partitions = {settings.partitions}: every source and internal "
        "topic must have the same count (the stages join them partition by partition); recreate it or set "
        "--partitions / FAULTLINE_PARTITIONS to match"
    )


def _fixed_mismatch(spec: TopicSpec, name: str, found: int) -> str:
    return f"topic {name} has {found} partitions but must have {spec.partitions}: delete and recreate it with `faultline topics create`"


def create_topics(settings: Settings) -> list[str]:
    """Create the missing topics; one line per topic saying what happened. Idempotent:
    existing topics are kept, but a co-partitioned one with the wrong partition count is
    an error (raised after every topic was looked at)."""
    lines: list[str] = []
    problems: list[str] = []
    with admin_client(settings) as admin:
        names = {spec.logical: spec.name(settings) for spec in TOPICS}
        counts = _partition_counts(admin, list(names.values()))
        missing = [spec for spec in TOPICS if names[spec.logical] not in counts]
        if missing:
            request = {
                names[spec.logical]: {
                    "num_partitions": spec.partition_count(settings),
                    "replication_factor": settings.replication,
                    "configs": dict(spec.config),
                }
                for spec in missing
            }
            try:
                result = admin.create_topics(request, raise_errors=False, wait_for_metadata=True)
            except KafkaError as exc:
                raise TopicError(f"creating topics failed: {exc}") from None
            for topic in result["topics"]:
                code = topic.get("error_code", 0)
                if code and code != TopicAlreadyExistsError.errno:  # a concurrent create is fine
                    problems.append(f"creating {topic['name']} failed: {topic.get('error_message') or code}")
        created = {names[s.logical] for s in missing}
        counts = _partition_counts(admin, list(names.values()))
        for spec in TOPICS:
            name = names[spec.logical]
            found = counts.get(name)
            if found is None:
                continue
            verb = "created" if name in created else "exists "
            config = " ".join(f"{k}={v}" for k, v in spec.config.items())
            lines.append(f"{verb} {name:<45} {found} partitions  {spec.role}{'  ' + config if config else ''}")
            if spec.co_partitioned and found != settings.partitions:
                problems.append(_mismatch(spec, name, found, settings))
            elif spec.partitions is not None and found != spec.partitions:
                problems.append(_fixed_mismatch(spec, name, found))
        problems += _config_drift(admin, names, created)
    if problems:
        raise TopicError("\n".join([*lines, *problems]))
    return lines


def _config_drift(admin: KafkaAdminClient, names: dict[str, str], created: set[str]) -> list[str]:
    """A pre-existing topic whose config differs from ours (e.g. not compacted)."""
    specs = [s for s in TOPICS if s.config and names[s.logical] not in created]
    if not specs:
        return []
    resources = [ConfigResource(ConfigResourceType.TOPIC, names[s.logical]) for s in specs]
    try:
        described = admin.describe_configs(resources, config_filter="all")
    except KafkaError:
        return []  # best effort: an old broker may not describe configs
    found = described.get("topic", {})
    drift = []
    for spec in specs:
        name = names[spec.logical]
        configs = found.get(name, {})
        for key, value in spec.config.items():
            actual = configs.get(key, {})
            actual = actual.get("value") if isinstance(actual, dict) else actual
            if actual is not None and actual != value:
                drift.append(f"topic {name} has {key}={actual}, expected {value}: alter it with kafka-configs.sh")
    return drift


def check_topics(settings: Settings) -> None:
    """Before a worker starts: every topic exists and the co-partitioned ones have
    `partitions` partitions (else Kafka would auto-create them with the broker default)."""
    with admin_client(settings) as admin:
        counts = _partition_counts(admin, [s.name(settings) for s in TOPICS])
    problems = []
    for spec in TOPICS:
        name = spec.name(settings)
        if name not in counts:
            problems.append(f"topic {name} does not exist")
        elif spec.co_partitioned and counts[name] != settings.partitions:
            problems.append(_mismatch(spec, name, counts[name], settings))
        elif spec.partitions is not None and counts[name] != spec.partitions:
            problems.append(_fixed_mismatch(spec, name, counts[name]))
    if problems:
        problems.append("run `faultline topics create` with the same --topic-prefix and --partitions first")
        raise TopicError("\n".join(problems))
