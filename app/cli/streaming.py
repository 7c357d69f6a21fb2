"""Commands that talk to Kafka: topics create, worker, publish, tail.

Every setting is a flag here, generated from `app.settings` (flag > FAULTLINE_* env >
default), so a setting is declared in one place only.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import msgspec
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from app import settings as settings_mod
from app.model.decode import BadRecord, parse_trace_line
from app.model.envelope import BOOKMARK, SOURCE_TOPICS
from app.replay.trace import read_lines
from app.rulefile import RuleFileError, load_rules
from app.settings import Settings, SettingsError
from app.cli.settings_flags import settings_flags
from app.stream.topics import TopicError, check_topics, create_topics

CONNECT = ["bootstrap", "topic_prefix"]
SHAPE = [*CONNECT, "partitions", "replication"]
WORKER = [info.name for info in settings_mod.describe()]


def _flags(names: list[str]) -> argparse.ArgumentParser:
    return settings_flags(settings_mod.describe(), names)


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("topics", help="manage the Kafka topics")
    sub = p.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    c = sub.add_parser(
        "create",
        parents=[_flags(SHAPE)],
        help="create the source, output and internal topics (idempotent)",
    )
    c.set_defaults(run=run_topics_create, settings_names=SHAPE)

    p = commands.add_parser("worker", parents=[_flags(WORKER)], help="run a stream worker (Faust) until SIGTERM")
    p.set_defaults(run=run_worker, settings_names=WORKER)

    p = commands.add_parser(
        "publish", parents=[_flags(SHAPE)], help="publish a trace's records into the source topics, in order"
    )
    p.add_argument("trace", type=Path, help="trace file (JSON Lines of {topic, key, value})")
    p.set_defaults(run=run_publish, settings_names=SHAPE)

    p = commands.add_parser("tail", parents=[_flags(CONNECT)], help="print a topic's records as JSON Lines as they arrive")
    p.add_argument("topic", help="logical topic name, e.g. faultline.classified-failures (the prefix is added)")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest record (default: only new ones)")
    p.add_argument("--max", type=int, default=None, metavar="N", help="stop after N records")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="stop after S seconds without a new record")
    p.set_defaults(run=run_tail, settings_names=CONNECT)


def _load(args: argparse.Namespace) -> Settings:
    return settings_mod.load({name: getattr(args, name) for name in args.settings_names})


def _fail(message: str, code: int = 1) -> int:
    print(f"faultline: {message}", file=sys.stderr)
    return code


def run_topics_create(args: argparse.Namespace) -> int:
    try:
        lines = create_topics(_load(args))
    except SettingsError as exc:
        return _fail(str(exc), 2)
    except TopicError as exc:
        return _fail(str(exc))
    try:
        print("\n".join(lines))
    except BrokenPipeError:  # e.g. `| head`
        pass
    return 0


def run_worker(args: argparse.Namespace) -> int:
    try:
        settings = _load(args)
        rules = load_rules(Path(settings.rules) if settings.rules else None)
        check_topics(settings)
    except SettingsError as exc:
        return _fail(str(exc), 2)
    except RuleFileError as exc:
        return _fail(f"{exc} (setting rules: --rules / FAULTLINE_RULES)", 2)
    except TopicError as exc:
        return _fail(str(exc))
    from app.stream.app import build_app, run_worker as run  # imports Faust: only here
    from app.web.faust_mount import mount

    app, stages, fleet = build_app(settings, rules)
    if settings.web_port != 0:
        mount(app, fleet)  # the fleet page under /fleet/, Prometheus /metrics
    print(f"faultline: worker {settings.app_id} with rules {rules.version}", file=sys.stderr, flush=True)
    return run(app, stages, settings)


class _Change(msgspec.Struct):
    type: str = ""


_CHANGE = msgspec.json.Decoder(_Change)


def _is_progress(value: bytes) -> bool:
    try:
        return _CHANGE.decode(value).type == BOOKMARK
    except (msgspec.DecodeError, RecursionError):
        return False  # published as it is; the stages dead-letter it


def run_publish(args: argparse.Namespace) -> int:
    """Keys and order are kept: one producer, records sent in file order, idempotent with
    acks=all, so each partition receives its records in the order of the file. A progress
    record (BOOKMARK, SPEC R12.2) goes to every partition of its topic, after everything
    the file held before it."""
    if not args.trace.is_file():
        return _fail(f"trace file {args.trace} does not exist (give the path of a .jsonl trace)")
    try:
        settings = _load(args)
        check_topics(settings)
    except SettingsError as exc:
        return _fail(str(exc), 2)
    except TopicError as exc:
        return _fail(str(exc))
    producer = KafkaProducer(
        bootstrap_servers=settings.bootstrap.split(","), acks="all", enable_idempotence=True, linger_ms=5, client_id="faultline-publish"
    )
    sent, skipped, pending = 0, 0, []
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
            topic, value = settings.topic(record.topic), bytes(record.value)
            if _is_progress(value):
                for partition in sorted(producer.partitions_for(topic)):
                    pending.append(producer.send(topic, key=record.key.encode(), value=value, partition=partition))
            else:
                pending.append(producer.send(topic, key=record.key.encode(), value=value))
            sent += 1
        producer.flush()
        for future in pending:
            future.get(timeout=60)  # raises if any record was not written
    except KafkaError as exc:
        return _fail(f"publishing to {settings.bootstrap} failed after {sent} records: {exc}")
    finally:
        producer.close()
    print(f"published {sent} records from {args.trace} to {settings.topic('k8s.*')}" + (f"; skipped {skipped} lines" if skipped else ""))
    return 0 if sent or not skipped else 1


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
    try:
        settings = _load(args)
    except SettingsError as exc:
        return _fail(str(exc), 2)
    topic = settings.topic(args.topic)
    try:
        consumer = KafkaConsumer(bootstrap_servers=settings.bootstrap.split(","), enable_auto_commit=False, client_id="faultline-tail")
    except KafkaError as exc:
        return _fail(f"cannot reach Kafka at {settings.bootstrap} ({exc}); set --bootstrap / FAULTLINE_BOOTSTRAP")
    encoder = msgspec.json.Encoder()
    out = sys.stdout.buffer
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            return _fail(f"topic {topic} does not exist; run `faultline topics create` (prefix {settings.topic_prefix!r})")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        if args.from_beginning:
            consumer.seek_to_beginning(*tps)
        else:
            consumer.seek_to_end(*tps)
        printed = 0
        last = time.monotonic()
        while args.max is None or printed < args.max:
            batches = consumer.poll(timeout_ms=200)
            for records in batches.values():
                for rec in records:
                    key = rec.key.decode("utf-8", "replace") if rec.key is not None else None
                    line = TailLine(args.topic, rec.partition, rec.offset, key, _value_of(rec.value))
                    out.write(encoder.encode(line) + b"\n")
                    printed += 1
                    if args.max is not None and printed >= args.max:
                        break
                if args.max is not None and printed >= args.max:
                    break
            if batches:
                out.flush()
                last = time.monotonic()
            elif args.timeout is not None and time.monotonic() - last >= args.timeout:
                break
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:  # e.g. `| head`
        return 0
    finally:
        consumer.close()
    out.flush()
    return 0
