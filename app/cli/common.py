"""What every command shares: exits, options, settings from flags, the extras it needs."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

import msgspec

from app import settings as settings_mod
from app.cli.settings_flags import settings_flags
from app.core.base.emit import Emit
from app.core.base.rules import Rules
from app.rulefile import RuleFileError, load_rules
from app.settings import Settings, SettingsError

# Settings groups, each declared once in app/settings.py.
CONNECT = ["bootstrap", "topic_prefix"]
SECURITY = [
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_check_hostname",
]
KAFKA = [*CONNECT, *SECURITY]
RULES_ENV = settings_mod.ENV_PREFIX + "RULES"  # the worker's setting `rules`; every command reads it


class CommandError(Exception):
    """A command cannot go on: `main` prints `faultline: <message>` and exits with `code`
    (2 for a bad argument, setting or install, 1 for a failure)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def need(command: str, extra: str, *modules: str) -> None:
    """Exit 2 naming the extra to install when a module `command` needs is missing."""
    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise CommandError(
            f"`faultline {command}` needs {', '.join(missing)}, which this install lacks: pip install 'faultline[{extra}]' "
            "(from a checkout: pip install -e '.[all]', every command)",
            2,
        )


def fail(message: str, code: int = 1) -> int:
    print(f"faultline: {message}", file=sys.stderr)
    return code


def settings_parent(names: Sequence[str], title: str = "settings") -> argparse.ArgumentParser:
    return settings_flags(settings_mod.describe(), list(names), title)


def load_settings(args: argparse.Namespace, names: Sequence[str]) -> Settings:
    """The settings `names` from their flags, else the environment, else the defaults."""
    try:
        return settings_mod.load({name: getattr(args, name, None) for name in names})
    except SettingsError as exc:
        raise CommandError(str(exc), 2) from None


def add_rules_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rules", type=Path, default=None, metavar="FILE", help=f"rule file (.toml or .json) [{RULES_ENV}; default: the built-in rules]"
    )


def add_fleet_options(parser: argparse.ArgumentParser) -> None:
    """--rules and the fleet settings that override the rule file's: what every command
    that takes a rule file takes (read by `rules_from_args`)."""
    add_rules_option(parser)
    add_fleet_flags(parser)


FLEET_PRECEDENCE = "flag > environment variable > the rule file's [fleet] > default"


def add_fleet_flags(parser: argparse.ArgumentParser) -> None:
    """A flag per fleet setting (declared once, app.core.base.rules.FleetSettings). A flag not
    given and a variable not set leave the rule file's value (SPEC R10.1)."""
    group = parser.add_argument_group(f"fleet settings ({FLEET_PRECEDENCE})")
    for info in settings_mod.FLEET_SETTINGS:
        group.add_argument(
            info.flag,
            dest=info.name,
            default=None,
            type=info.type,
            metavar="DURATION" if info.duration else info.name.upper(),
            help=f"{info.doc} [{info.env}, else fleet.{info.field} of the rule file, else {info.default}]",
        )


def rules_from(path: Path | None, where: str = "") -> Rules:
    try:
        return load_rules(path)
    except RuleFileError as exc:
        raise CommandError(f"{exc}{where}", 2) from None


def rules_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Rules:
    """The rule set a command runs, the same in every command that takes a rule file
    (SPEC R10.1): the file of --rules, else of FAULTLINE_RULES, else the built-in rules,
    with the fleet settings the user set by flag or variable over the file's [fleet]
    (FLEET_PRECEDENCE). `rules_version` covers the result."""
    env = os.environ if env is None else env
    if getattr(args, "rules", None):
        path, where = Path(args.rules), " (from --rules)"
    elif env.get(RULES_ENV):
        path, where = Path(env[RULES_ENV]), f" (from {RULES_ENV}; unset it or give --rules)"
    else:
        path, where = None, ""
    rules = rules_from(path, where)
    if rules.fleet is None:  # a rule file that derives no fleet health
        return rules
    flags = {info.name: getattr(args, info.name, None) for info in settings_mod.FLEET_SETTINGS}
    try:
        fleet = settings_mod.fleet_settings(rules.fleet, flags, env)
    except SettingsError as exc:
        raise CommandError(str(exc), 2) from None
    return rules if fleet == rules.fleet else msgspec.structs.replace(rules, fleet=fleet)


def require_trace(path: Path) -> None:
    if path.is_dir():
        raise CommandError(f"{path} is a directory: give the path of a .jsonl trace file in it (e.g. {path / 'trace.jsonl'})", 2)
    if not path.exists():
        raise CommandError(f"trace file {path} does not exist: give the path of a .jsonl trace (examples/traces/ has some)", 2)
    if path.is_char_device() or path.is_block_device():  # a pipe (`<(zcat t.jsonl.gz)`) is read as a file
        raise CommandError(f"{path} is a device, not a trace file: give the path of a .jsonl trace (examples/traces/ has some)", 2)


def open_out(path: Path) -> IO[bytes]:
    """`path` for writing, or stdout for '-'."""
    if str(path) == "-":
        return sys.stdout.buffer
    try:
        return path.open("wb")
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror}") from None


def close_out(out: IO[bytes] | None) -> None:
    if out is not None and out is not sys.stdout.buffer:
        out.close()


def report_dead_letter(emit: Emit) -> None:
    letter = emit.value
    # A record a later stage refused (an internal record) has no line of its own.
    where = f"line {letter.offset}" if letter.offset is not None else f"{letter.topic} record {letter.key}"
    print(f"faultline: {where}: skipped ({letter.reason})", file=sys.stderr)


def finish_run(counts: Mapping[str, int]) -> int:
    """Non-zero only when nothing at all could be read (R11.1: bad lines are skipped);
    `counts` are a Pipeline's."""
    records, bad = counts["records"], counts["dead_letters"]
    if bad:
        print(f"faultline: {bad} of {records} records could not be used and were skipped (dead letters)", file=sys.stderr)
    if records == bad:
        print("faultline: no record could be read", file=sys.stderr)
        return 1
    return 0
