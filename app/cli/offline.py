"""Commands that need no broker: replay, classify, rules, diff, schemas."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

import msgspec

from app import schemas
from app.cli import render
from app.cli.common import (
    KAFKA,
    CommandError,
    add_fleet_options,
    close_out,
    finish_run,
    need,
    open_out,
    report_dead_letter,
    require_trace,
    rules_from_args,
    settings_parent,
)
from app.model.records import (
    CLASSIFIED_FAILURES,
    DEAD_LETTER,
    GANG_TRANSITIONS,
    ClassifiedFailure,
    GangTransition,
)
from app.core.fleet.goodput_rows import GoodputRow
from app.replay.diff import ReplayRecord, cost_of, diff, final_verdicts, goodput_totals
from app.embedded.pipeline import Pipeline
from app.replay.trace import OutputLine, encode_output, read_lines, replay
from app.rulefile import rules_document
from app.core.fleet.view import LiveFleet
from app.core.base.rules import DEFAULT_FLEET


def register(commands: argparse._SubParsersAction) -> None:
    kafka_flags = settings_parent(KAFKA, "Kafka settings (with --from-kafka or kafka:TOPIC)")
    p = commands.add_parser(
        "replay",
        parents=[kafka_flags],
        help="run a trace (or the source topics' history) through the rules; write every output record",
        description="Replay history through a rule set. From a trace file or, with --from-kafka, from the source "
        "topics (own consumer, no group: the live worker is never disturbed), into --out FILE as JSON Lines or, "
        "with --to-topics, into replay topics named <topic>.replay.<rules name>-<hash>.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", type=Path, help="trace file (JSON Lines of source records)")
    source.add_argument("--from-kafka", action="store_true", help="read the source topics from Kafka instead")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", type=Path, help="output file, JSON Lines ('-' for stdout)")
    target.add_argument("--to-topics", action="store_true", help="with --from-kafka: write to the replay topics of the rule set")
    kafka = p.add_argument_group("with --from-kafka")
    kafka.add_argument("--since", type=_timestamp, help="first record time to read, RFC 3339 (default: the beginning)")
    kafka.add_argument("--until", type=_timestamp, help="last record time to read, RFC 3339 (default: the end when the replay starts)")
    add_fleet_options(p)
    p.set_defaults(run=run_replay)

    p = commands.add_parser("classify", help="print the final verdict of every failed attempt in a trace")
    p.add_argument("trace", type=Path, help="trace file (JSON Lines of source records)")
    p.add_argument("--fleet", action="store_true", help="also print the fleet-health summary (as `faultline fleet`)")
    add_fleet_options(p)
    p.set_defaults(run=run_classify)

    p = commands.add_parser("rules", help="show a rule set (the default, or --rules FILE) with its rules_version")
    p.add_argument("action", choices=["show"], help="show: print the rule set as JSON")
    add_fleet_options(p)
    p.set_defaults(run=run_rules)

    p = commands.add_parser("diff", parents=[kafka_flags], help="list the attempts whose verdict differs between two replays")
    p.add_argument("--base", required=True, help="replay output: a JSON Lines file from `faultline replay`, or kafka:TOPIC")
    p.add_argument("--candidate", required=True, help="replay output to compare with the base (file or kafka:TOPIC)")
    p.add_argument("--format", choices=["text", "json"], default="text", help="text for people (default), json for machines")
    p.add_argument("--cost", action="store_true", help="also say what the change is worth: the GPU-hours moving between USER and SYSTEM and between codes")
    p.add_argument("--top", type=int, default=10, metavar="N", help="with --cost: the N attempts moving the most GPU-hours (default 10)")
    p.set_defaults(run=run_diff)

    p = commands.add_parser("schemas", help="write (or --check) the JSON Schemas of every output record")
    p.add_argument("--dir", type=Path, default=Path("schemas"), help="schema folder (default: schemas)")
    p.add_argument("--check", action="store_true", help="exit 1 if the files differ from the types")
    p.set_defaults(run=run_schemas)


def _timestamp(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an RFC 3339 time, e.g. 2026-09-15T10:30:00Z") from None
    if at.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no zone: add Z or an offset, e.g. 2026-09-15T10:30:00Z")
    return at


def run_replay(args: argparse.Namespace) -> int:
    if args.from_kafka:
        need("replay --from-kafka", "stream", "aiokafka", "kafka")
        from app.cli.kafka_replay import run_replay_from_kafka

        return run_replay_from_kafka(args, rules_from_args(args))
    if args.to_topics:
        raise CommandError("--to-topics goes with --from-kafka; for a trace, give --out FILE", 2)
    require_trace(args.trace)
    pipeline = Pipeline(rules_from_args(args))
    out = open_out(args.out)
    try:
        for emit in replay(read_lines(args.trace), pipeline):
            if emit.topic == DEAD_LETTER:
                report_dead_letter(emit)
            out.write(encode_output(emit) + b"\n")
    finally:
        close_out(out)
    return finish_run(pipeline.counts)


def run_classify(args: argparse.Namespace) -> int:
    require_trace(args.trace)
    rules = rules_from_args(args)
    pipeline = Pipeline(rules if args.fleet else rules.without_fleet_stage())
    verdicts: dict[str, ClassifiedFailure] = {}
    transitions: list[GangTransition] = []
    fleet = LiveFleet(rules.fleet or DEFAULT_FLEET)
    for emit in fleet.watch(replay(read_lines(args.trace), pipeline)):
        if emit.topic == CLASSIFIED_FAILURES:
            verdicts[emit.key] = emit.value  # a later revision supersedes (R7.2)
        elif emit.topic == GANG_TRANSITIONS:
            transitions.append(emit.value)
        elif emit.topic == DEAD_LETTER:
            report_dead_letter(emit)
    if verdicts:
        print("\n".join(render.verdict_table(list(verdicts.values()))))
    if transitions:
        print("\nGANG TRANSITIONS")
        print("\n".join(render.transition_table(transitions)))
    if not verdicts and not transitions:
        print("no failed attempt in this trace")
    if args.fleet:
        print("\n" + "\n".join(render.fleet_lines(fleet.summary())))
    return finish_run(pipeline.counts)


def run_rules(args: argparse.Namespace) -> int:
    sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(rules_document(rules_from_args(args))), indent=2) + b"\n")
    return 0


_OUTPUT_LINE = msgspec.json.Decoder(OutputLine[ReplayRecord])  # v1 verdicts too (SPEC R13.3)


def _replay_output(source: str, args: argparse.Namespace) -> tuple[dict[str, ClassifiedFailure], GoodputRow | None]:
    """The final verdicts of a replay, and where its GPU-hours went where it says (R17.4)."""
    if source.startswith("kafka:"):
        need("diff kafka:TOPIC", "stream", "kafka")
        from app.cli.kafka_replay import verdicts_from_topic

        return verdicts_from_topic(source.removeprefix("kafka:"), args), None
    path = Path(source)
    if not path.is_file():
        raise CommandError(f"replay output {path} does not exist (write one with `faultline replay --trace T --out {path}`)", 2)
    records = []
    for number, line in read_lines(path):
        try:
            record = _OUTPUT_LINE.decode(line)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise CommandError(f"{path} line {number}: not a `faultline replay` output record ({exc})", 2) from None
        records.append((record.topic, record.key, record.value))
    return final_verdicts(records), goodput_totals(records)


def run_diff(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise CommandError(f"--top {args.top} is not valid: give the number of attempts to list, 1 or more", 2)
    (base, base_goodput), (candidate, candidate_goodput) = _replay_output(args.base, args), _replay_output(args.candidate, args)
    result = diff(base, candidate)
    if args.cost:
        cost = msgspec.structs.replace(cost_of(result, base, candidate, args.top), base_goodput=base_goodput, candidate_goodput=candidate_goodput)
        result = msgspec.structs.replace(result, cost=cost)
    if args.format == "json":
        sys.stdout.buffer.write(msgspec.json.encode(result) + b"\n")
    else:
        print("\n".join(render.diff_lines(result)))
    return 0


def run_schemas(args: argparse.Namespace) -> int:
    if args.check:
        stale = schemas.drift(args.dir)
        if stale:
            print(f"faultline: schemas out of date: {', '.join(stale)}; run `faultline schemas`", file=sys.stderr)
            return 1
        print("schemas up to date")
        return 0
    for path in schemas.write_schemas(args.dir):
        print(path)
    return 0
