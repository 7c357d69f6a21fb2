"""The Kafka side of `faultline replay --from-kafka` and `faultline diff kafka:TOPIC`."""

from __future__ import annotations

import argparse
import asyncio
import sys

import msgspec
from kafka import TopicPartition
from kafka.errors import KafkaError

from app.cli.common import KAFKA, CommandError, close_out, finish_run, load_settings, open_out, report_dead_letter
from app.core.base.rules import Rules
from app.kafka import clients
from app.kafka.topics import TopicError
from app.core.engine.topology import OUTPUT_TOPICS
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, ClassifiedFailure
from app.replay.diff import Verdict, final_verdicts
from app.replay.kafka_history import HistoryError, KafkaHistory
from app.replay.kafka_replay import Progress, TopicSink, replay_history
from app.embedded.pipeline import Pipeline
from app.replay.trace import encode_output


def run_replay_from_kafka(args: argparse.Namespace, rules: Rules) -> int:
    settings = load_settings(args, KAFKA)
    pipeline = Pipeline(rules)
    try:
        sink = TopicSink(settings, rules, OUTPUT_TOPICS) if args.to_topics else None  # the derived topics too
    except (TopicError, KafkaError) as exc:
        raise CommandError(str(exc)) from None
    out = None if sink else open_out(args.out)

    async def replay() -> None:
        history = KafkaHistory(settings, since=args.since, until=args.until, rules=rules)
        await history.open()
        progress = Progress(history.total)
        try:
            async for emits in replay_history(history, pipeline):
                for emit in emits:
                    if emit.topic == DEAD_LETTER:
                        report_dead_letter(emit)
                    if sink is not None:
                        sink.write(emit)
                    else:
                        out.write(encode_output(emit) + b"\n")
                progress.tick(pipeline.counts["records"])
        finally:
            await history.close()

    try:
        asyncio.run(replay())
    except (HistoryError, KafkaError, TopicError) as exc:
        raise CommandError(str(exc)) from None
    finally:
        if sink is not None:
            sink.close()
        else:
            close_out(out)
    where = ", ".join(sink.names.values()) if sink else str(args.out)
    print(f"replayed {pipeline.counts['records']} records with {rules.version} into {where}", file=sys.stderr)
    return finish_run(pipeline.counts) if pipeline.counts["records"] else 0


_VERDICT = msgspec.json.Decoder(Verdict)  # v2, or v1 from before workload attempts (SPEC R13.3)


def verdicts_from_topic(topic: str, args: argparse.Namespace) -> dict[str, ClassifiedFailure]:
    """The latest verdict per key in `topic`, read to its current end."""
    settings = load_settings(args, KAFKA)
    try:
        consumer = clients.consumer(settings, group_id=None, enable_auto_commit=False)
        numbers = consumer.partitions_for_topic(topic)
        if not numbers:
            raise CommandError(f"topic {topic} does not exist on {settings.bootstrap}")
        tps = [TopicPartition(topic, n) for n in sorted(numbers)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        records = []
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for tp, messages in consumer.poll(timeout_ms=1_000).items():
                for message in messages:
                    if message.offset < ends[tp] and message.value:
                        key = message.key.decode("utf-8", "replace") if message.key is not None else ""
                        records.append((CLASSIFIED_FAILURES, key, _VERDICT.decode(message.value)))
        consumer.close()
    except KafkaError as exc:
        raise CommandError(f"reading {topic} from {settings.bootstrap} failed: {exc}") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise CommandError(f"{topic} holds something other than faultline.ClassifiedFailure records ({exc})") from None
    return final_verdicts(records)
