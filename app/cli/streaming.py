"""Commands that talk to Kafka: topics create, worker, publish, tail.

Every setting is a flag here, generated from `app.settings` (flag > FAULTLINE_* env >
default), so a setting is declared in one place only. Kafka libraries are imported when
a command runs, after `need` has checked the install has them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import msgspec

from app import settings as settings_mod
from app.cli.common import KAFKA, CommandError, add_fleet_flags, fail, load_settings, need, require_trace, rules_from_args, settings_parent
from app.model.decode import BadRecord, parse_trace_line
from app.model.envelope import BOOKMARK, SOURCE_TOPICS
from app.replay.trace import read_lines

SHAPE = [*KAFKA, "partitions", "replication"]
PUBLISH = [*KAFKA, "partitions"]  # the partition count the source topics are checked against
WORKER = [info.name for info in settings_mod.describe()]


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("topics", help="manage the Kafka topics")
    sub = p.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    c = sub.add_parser("create", parents=[settings_parent(SHAPE)], help="create the source, output and internal topics (idempotent)")
    c.set_defaults(run=run_topics_create)

    p = commands.add_parser("worker", parents=[settings_parent(WORKER)], help="run a stream worker (Faust) until SIGTERM")
    add_fleet_flags(p)  # over the rule file's [fleet] (setting rules), as every command that takes one
    p.set_defaults(run=run_worker)

    p = commands.add_parser("publish", parents=[settings_parent(PUBLISH)], help="publish a trace's records into the source topics, in order")
    p.add_argument("trace", type=Path, help="trace file (JSON Lines of {topic, key, value})")
    p.set_defaults(run=run_publish)

    p = commands.add_parser("tail", parents=[settings_parent(KAFKA)], help="print a topic's records as JSON Lines as they arrive")
    p.add_argument("topic", help="logical topic name, e.g. faultline.classified-failures (the prefix is added)")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest record (default: only new ones)")
    p.add_argument("--max", type=int, default=None, metavar="N", help="stop after N records")
    p.add_argument("--idle-timeout", type=float, default=None, metavar="S", help="stop after S seconds without a new record (default: run until Ctrl-C)")
    p.set_defaults(run=run_tail)


def run_topics_create(args: argparse.Namespace) -> int:
    need("topics create", "stream", "kafka")
    from app.kafka.topics import TopicError, create_topics

    settings = load_settings(args, SHAPE)
    try:
        lines = create_topics(settings)
    except TopicError as exc:
        raise CommandError(str(exc)) from None
    try:
        print("\n".join(lines))
    except BrokenPipeError:  # e.g. `| head`
        pass
    return 0


def run_worker(args: argparse.Namespace) -> int:
    need("worker", "stream", "faust", "kafka")
    from app.kafka.topics import TopicError, check_topics

    settings = load_settings(args, WORKER)
    rules = rules_from_args(args)  # the file of setting rules, as `replay --rules` reads it
    try:
        check_topics(settings)
    except TopicError as exc:
        raise CommandError(str(exc)) from None
    use_event_loop(settings.event_loop)
    from app.stream.app import build_app, run_worker as run  # imports Faust: only here
    from app.web.faust_mount import mount

    app, stages, fleet = build_app(settings, rules)
    from app.stream import logs

    logs.install()  # a broker outage in a few lines, not an ERROR per attempt (app/stream/logs.py)
    if settings.web_port != 0:
        mount(app, fleet)  # the fleet page under /fleet/, Prometheus /metrics
    print(f"faultline: worker {settings.app_id} with rules {rules.version}", file=sys.stderr, flush=True)
    return run(app, stages, settings)


def use_event_loop(name: str) -> None:
    """The worker's event loop, chosen before Faust creates it (setting event_loop)."""
    if name != "uvloop":
        return
    try:
        import uvloop
    except ImportError:
        raise CommandError(
            "event_loop is 'uvloop' but uvloop is not installed: pip install -e '.[stream]' "
            "(or --event-loop asyncio / FAULTLINE_EVENT_LOOP=asyncio where uvloop does not build)"
        ) from None
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


class _Change(msgspec.Struct):
    type: str = ""
    cluster: object = ""  # any JSON: a progress record whose cluster is no string still goes to every partition


_CHANGE = msgspec.json.Decoder(_Change)


def _progress_cluster(value: bytes) -> str | None:
    """The cluster of a progress record (SPEC R12.1), which goes to every partition of its
    topic ("" when it names none as a string); None for any other record."""
    try:
        change = _CHANGE.decode(value)
    except (msgspec.DecodeError, RecursionError):
        return None  # published as it is: the worker dead-letters what it cannot read
    if change.type != BOOKMARK:
        return None
    return change.cluster if isinstance(change.cluster, str) else ""  # the worker dead-letters it


def progress_gaps(progressed: dict[str, set[str]]) -> dict[str, list[str]]:
    """Per cluster with progress on some source topics, the source topics without any: a
    worker's stages that hear them wait for it, with no stream time (R12.5)."""
    gaps = {cluster: [t for t in SOURCE_TOPICS if t not in topics] for cluster, topics in sorted(progressed.items())}
    return {cluster: missing for cluster, missing in gaps.items() if missing}


def run_publish(args: argparse.Namespace) -> int:
    """Keys and order are kept: one producer, records sent in file order, idempotent with
    acks=all, so each partition receives its records in the order of the file. A progress
    record (BOOKMARK, SPEC R12.2) goes to every partition of its topic, after everything
    the file held before it."""
    need("publish", "stream", "kafka")
    from kafka.errors import KafkaError

    from app.kafka import clients
    from app.kafka.topics import TopicError, check_topics

    require_trace(args.trace)
    settings = load_settings(args, PUBLISH)
    try:
        check_topics(settings)
        producer = clients.producer(settings, acks="all", enable_idempotence=True, linger_ms=5, client_id="faultline-publish")
    except (TopicError, KafkaError) as exc:
        raise CommandError(str(exc)) from None
    sent, progress, skipped, pending = 0, 0, 0, []
    progressed: dict[str, set[str]] = {}  # cluster -> source topics with a progress record
    try:
        for number, line in read_lines(args.trace):
            try:
                record = parse_trace_line(line)
            except BadRecord as exc:
                skipped += 1
                print(f"faultline: line {number}: {exc}; skipped", file=sys.stderr)
                continue
            if record.topic not in SOURCE_TOPICS:
                skipped += 1
                print(f"faultline: line {number}: topic {record.topic!r} is not a source topic; skipped", file=sys.stderr)
                continue
            topic, key, value = settings.topic(record.topic), record.key.encode(), bytes(record.value)
            cluster = _progress_cluster(value)
            if cluster is not None:
                for partition in sorted(producer.partitions_for(topic) or ()):
                    pending.append(producer.send(topic, key=key, value=value, partition=partition))
                progress += 1
                if cluster:  # "": no cluster a worker could read (it dead-letters the record)
                    progressed.setdefault(cluster, set()).add(record.topic)
                continue
            pending.append(producer.send(topic, key=key, value=value))
            sent += 1
        producer.flush()
        for future in pending:
            future.get(timeout=60)  # raises if any record was not written
    except KafkaError as exc:
        return fail(f"publishing to {settings.bootstrap} failed after {sent} records: {exc}")
    finally:
        producer.close()
    for cluster, missing in progress_gaps(progressed).items():
        print(
            f"faultline: warning: cluster {cluster!r} has progress records on {', '.join(sorted(progressed[cluster]))} but none on "
            f"{', '.join(missing)}: a worker's stages that read those wait for them and expire, settle and close nothing (SPEC R12.5); "
            "add a BOOKMARK line for each, as `faultline record` and the bridge write",
            file=sys.stderr,
        )
    also = f" and {progress} progress records (each to every partition)" if progress else ""
    print(f"published {sent} records{also} from {args.trace} to {settings.topic('k8s.*')}" + (f"; skipped {skipped} lines" if skipped else ""))
    return 0 if sent or progress or not skipped else 1


class TailLine(msgspec.Struct, frozen=True):
    topic: str
    partition: int
    offset: int
    key: str | None
    value: msgspec.Raw | str | None


def _value_of(raw: bytes | None) -> msgspec.Raw | str | None:
    if raw is None:
        return None
    try:
        msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):  # shown as text, as any value that is not JSON
        return raw.decode("utf-8", "replace")
    return msgspec.Raw(raw)


def run_tail(args: argparse.Namespace) -> int:
    need("tail", "stream", "kafka")
    from kafka import TopicPartition
    from kafka.errors import KafkaError

    from app.kafka import clients

    settings = load_settings(args, KAFKA)
    topic = settings.topic(args.topic)
    try:
        consumer = clients.consumer(settings, enable_auto_commit=False, client_id="faultline-tail")
    except KafkaError as exc:
        raise CommandError(str(exc)) from None
    encoder = msgspec.json.Encoder()
    out = sys.stdout.buffer
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            return fail(f"topic {topic} does not exist; run `faultline topics create` (prefix {settings.topic_prefix!r})")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        if args.from_beginning:
            consumer.seek_to_beginning(*tps)
        else:
            consumer.seek_to_end(*tps)
        printed = 0
        last = time.monotonic()
        while args.max is None or printed < args.max:
            batches = consumer.poll(timeout_ms=200, max_records=(args.max - printed) if args.max is not None else None)
            for records in batches.values():
                for rec in records:
                    key = rec.key.decode("utf-8", "replace") if rec.key is not None else None
                    out.write(encoder.encode(TailLine(args.topic, rec.partition, rec.offset, key, _value_of(rec.value))) + b"\n")
                    printed += 1
            if batches:
                out.flush()
                last = time.monotonic()
            elif args.idle_timeout is not None and time.monotonic() - last >= args.idle_timeout:
                break
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:  # e.g. `| head`
        return 0
    except KafkaError as exc:
        return fail(f"reading {topic} from {settings.bootstrap} failed: {exc}")
    finally:
        consumer.close()
    out.flush()
    return 0
