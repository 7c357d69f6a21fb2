"""Commands that need no broker: replay, classify, schemas."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

import msgspec

from app import schemas
from app.core.emit import Emit
from app.core.rules import Rules
from app.model.records import (
    CLASSIFIED_FAILURES,
    DEAD_LETTER,
    GANG_TRANSITIONS,
    ClassifiedFailure,
    DeadLetter,
    Fault,
    GangTransition,
)
from app.replay.diff import Diff, diff, final_verdicts
from app.replay.pipeline import Pipeline
from app.replay.trace import OutputLine, encode_output, read_lines, replay
from app.rulefile import RuleFileError, load_rules, rules_document
from app.core.fleet_view import LiveFleet


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "replay",
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
    kafka.add_argument("--bootstrap", help="Kafka bootstrap servers (default: FAULTLINE_BOOTSTRAP or 127.0.0.1:9092)")
    kafka.add_argument("--topic-prefix", help="topic prefix (default: FAULTLINE_TOPIC_PREFIX or none)")
    kafka.add_argument("--since", type=_timestamp, help="first record time to read, RFC 3339 (default: the beginning)")
    kafka.add_argument("--until", type=_timestamp, help="last record time to read, RFC 3339 (default: the end when the replay starts)")
    add_rules_option(p)
    p.set_defaults(run=run_replay)

    p = commands.add_parser("classify", help="print the final verdict of every failed attempt in a trace")
    p.add_argument("trace", type=Path, help="trace file (JSON Lines of source records)")
    p.add_argument("--fleet", action="store_true", help="also print the fleet-health summary (as `faultline fleet`)")
    add_rules_option(p)
    p.set_defaults(run=run_classify)

    p = commands.add_parser("rules", help="show a rule set (the default, or --rules FILE) with its rules_version")
    p.add_argument("action", choices=["show"], help="show: print the rule set as JSON")
    add_rules_option(p)
    p.set_defaults(run=run_rules)

    p = commands.add_parser("diff", help="list the attempts whose verdict differs between two replays")
    p.add_argument("--base", required=True, help="replay output: a JSON Lines file from `faultline replay`, or kafka:TOPIC")
    p.add_argument("--candidate", required=True, help="replay output to compare with the base (file or kafka:TOPIC)")
    p.add_argument("--bootstrap", help="for kafka:TOPIC: Kafka bootstrap servers (default: FAULTLINE_BOOTSTRAP)")
    p.add_argument("--format", choices=["text", "json"], default="text", help="text for people (default), json for machines")
    p.set_defaults(run=run_diff)

    p = commands.add_parser("schemas", help="write (or --check) the JSON Schemas of every output record")
    p.add_argument("--dir", type=Path, default=Path("schemas"), help="schema folder (default: schemas)")
    p.add_argument("--check", action="store_true", help="exit 1 if the files differ from the types")
    p.set_defaults(run=run_schemas)


def add_rules_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rules", type=Path, default=None, metavar="FILE", help="rule file (.toml or .json); default: the built-in rules")


def rules_from_args(args: argparse.Namespace) -> Rules:
    try:
        return load_rules(args.rules)
    except RuleFileError as exc:
        raise SystemExit(f"faultline: {exc}") from None


def require_trace(path: Path) -> None:
    if not path.is_file():
        raise SystemExit(f"faultline: trace file {path} does not exist (give the path of a .jsonl trace)")


def report_dead_letter(emit: Emit) -> None:
    letter = emit.value
    # A record a later stage refused (an internal record) has no line of its own.
    where = f"line {letter.offset}" if letter.offset is not None else f"{letter.topic} record {letter.key}"
    print(f"faultline: {where}: skipped ({letter.reason})", file=sys.stderr)


def finish_run(pipeline: Pipeline) -> int:
    """Non-zero only when nothing at all could be read (R11.1: bad lines are skipped)."""
    records, bad = pipeline.counts["records"], pipeline.counts["dead_letters"]
    if bad:
        print(f"faultline: {bad} of {records} records could not be used and were skipped (dead letters)", file=sys.stderr)
    if records == bad:
        print("faultline: no record could be read", file=sys.stderr)
        return 1
    return 0


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
        from app.cli.kafka_replay import run_replay_from_kafka  # needs the stream extra

        return run_replay_from_kafka(args, rules_from_args(args))
    if args.to_topics:
        raise SystemExit("faultline: --to-topics goes with --from-kafka; for a trace, give --out FILE")
    require_trace(args.trace)
    pipeline = Pipeline(rules_from_args(args))
    out = sys.stdout.buffer if str(args.out) == "-" else args.out.open("wb")
    try:
        for emit in replay(read_lines(args.trace), pipeline):
            if emit.topic == DEAD_LETTER:
                report_dead_letter(emit)
            out.write(encode_output(emit) + b"\n")
    finally:
        if out is not sys.stdout.buffer:
            out.close()
    return finish_run(pipeline)


def describe_fault(v: ClassifiedFailure) -> str:
    fault = v.gpu_fault
    if fault is None:
        return "-"
    label = "SXid" if fault.kind == "SXID" else "Xid"
    gpu = f"/gpu{fault.gpu_index}" if fault.gpu_index is not None else ""
    return f"{label} {fault.code} {fault.severity} {fault.node or '?'}{gpu}"


def verdict_rows(verdicts: list[ClassifiedFailure]) -> list[str]:
    """One aligned line per attempt, then its reasons indented beneath it."""
    header = ("ATTEMPT", "CODE", "KIND", "GPU FAULT", "POD", "")
    rows = [header]
    for v in verdicts:
        state = "" if v.terminal else f"restarted in place (generation {v.generation})"
        rows.append((v.key, v.code, v.kind, describe_fault(v), v.faulted_pod.name if v.faulted_pod else "-", state))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for row, v in zip(rows, [None, *verdicts]):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        lines.extend(f"    {reason}" for reason in (v.reasons if v is not None else []))
    return lines


def describe_transition(t: GangTransition) -> str:
    detail = f"  {t.code} retry={t.retry}" if t.code else ""
    waited = f"  waited {t.waited_seconds:g}s" if t.waited_seconds is not None else ""
    return f"{t.key}  {t.from_} -> {t.to}{detail}{waited}  {t.reason}"


def run_classify(args: argparse.Namespace) -> int:
    require_trace(args.trace)
    pipeline = Pipeline(rules_from_args(args))
    verdicts: dict[str, ClassifiedFailure] = {}
    transitions: list[GangTransition] = []
    fleet = LiveFleet()
    for emit in fleet.watch(replay(read_lines(args.trace), pipeline)):
        if emit.topic == CLASSIFIED_FAILURES:
            verdicts[emit.key] = emit.value  # a later revision supersedes (R7.2)
        elif emit.topic == GANG_TRANSITIONS:
            transitions.append(emit.value)
        elif emit.topic == DEAD_LETTER:
            report_dead_letter(emit)
    if verdicts:
        print("\n".join(verdict_rows(list(verdicts.values()))))
    if transitions:
        print("\nGANG TRANSITIONS")
        for transition in transitions:
            print(describe_transition(transition))
    if not verdicts and not transitions:
        print("no failed attempt in this trace")
    if args.fleet:
        from app.cli.fleet import fleet_lines  # app.cli.fleet imports this module

        print("\n" + "\n".join(fleet_lines(fleet.summary())))
    return finish_run(pipeline)


def run_rules(args: argparse.Namespace) -> int:
    sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(rules_document(rules_from_args(args))), indent=2) + b"\n")
    return 0


_OUTPUT_LINE = msgspec.json.Decoder(OutputLine[ClassifiedFailure | Fault | GangTransition | DeadLetter])


def _replay_output(source: str, args: argparse.Namespace) -> dict[str, ClassifiedFailure]:
    if source.startswith("kafka:"):
        from app.cli.kafka_replay import verdicts_from_topic  # needs the stream extra

        return verdicts_from_topic(source.removeprefix("kafka:"), args)
    path = Path(source)
    if not path.is_file():
        raise SystemExit(f"faultline: replay output {path} does not exist (write one with `faultline replay --trace T --out {path}`)")
    records = []
    for number, line in read_lines(path):
        try:
            record = _OUTPUT_LINE.decode(line)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise SystemExit(f"faultline: {path} line {number}: not a `faultline replay` output record ({exc})") from None
        records.append((record.topic, record.key, record.value))
    return final_verdicts(records)


def describe_diff(result: Diff) -> list[str]:
    lines = [
        f"base rules: {', '.join(result.base_rules) or '-'}    candidate rules: {', '.join(result.candidate_rules) or '-'}",
        f"{len(result.changes)} of {result.attempts_compared} attempts changed",
    ]
    if result.transitions:
        lines.append("")
        width = max(len(t) for t in result.transitions)
        lines.append(f"{'VERDICT CHANGE'.ljust(width)}  COUNT")
        lines.extend(f"{t.ljust(width)}  {n}" for t, n in result.transitions.items())
    for change in result.changes:
        lines.append("")
        lines.append(change.key)
        for side, v in (("base", change.base), ("candidate", change.candidate)):
            text = "(no verdict)" if v is None else f"{v.code} {v.kind}  {v.fault or 'no GPU fault'}" + (f"  pod {v.faulted_pod}" if v.faulted_pod else "")
            lines.append(f"  {side:<9}  {text}")
        lines.append(f"  because    {change.because}")
    return lines


def run_diff(args: argparse.Namespace) -> int:
    result = diff(_replay_output(args.base, args), _replay_output(args.candidate, args))
    if args.format == "json":
        sys.stdout.buffer.write(msgspec.json.encode(result) + b"\n")
    else:
        print("\n".join(describe_diff(result)))
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
