"""The settings of the streaming commands, declared once.

Each field of `Settings` is one setting: its type and constraints, its default and its
doc live here and nowhere else. Its environment variable is `FAULTLINE_<NAME>` and its
command-line flag `--<name-with-dashes>`; a flag overrides the environment, which
overrides the default. `load()` validates everything and says which setting is wrong and
how to fix it.

(The rules the verdicts depend on are not settings of a process: they are
`app.core.base.rules.Rules`, versioned with every verdict, SPEC R10. A worker only names the
rule file it runs, the same file `faultline replay --rules` takes. The fleet settings are
rules too, declared once in `app.core.base.rules.FleetSettings`; `fleet_settings` lays the
ones a user set by flag or environment variable over a rule file's.)
"""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from app.core.base.rules import FleetSettings

ENV_PREFIX = "FAULTLINE_"

# Kafka topic and group names: at most 249 of [a-zA-Z0-9._-].
_KAFKA_NAME = r"^[A-Za-z0-9._-]*$"


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    bootstrap: Annotated[
        str,
        msgspec.Meta(
            pattern=r"^[^\s,:]+:[0-9]+(,[^\s,:]+:[0-9]+)*$",
            description="Kafka bootstrap servers, host:port[,host:port...]",
        ),
    ] = "127.0.0.1:9092"
    security_protocol: Annotated[
        Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
        msgspec.Meta(description="how every Kafka client connects: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL over TLS)"),
    ] = "PLAINTEXT"
    sasl_mechanism: Annotated[
        Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
        msgspec.Meta(description="SASL mechanism, with security_protocol SASL_PLAINTEXT or SASL_SSL"),
    ] = "PLAIN"
    sasl_username: Annotated[str, msgspec.Meta(description="SASL user name (with SASL_PLAINTEXT or SASL_SSL)")] = ""
    sasl_password: Annotated[
        str,
        msgspec.Meta(description="SASL password; environment only, never a flag (a flag shows in the process list)"),
    ] = ""
    ssl_cafile: Annotated[
        str, msgspec.Meta(description="PEM file of the CA(s) that signed the brokers' certificates ('' for the system's CAs)")
    ] = ""
    ssl_certfile: Annotated[
        str, msgspec.Meta(description="PEM client certificate, for brokers that authenticate clients by TLS ('' for none)")
    ] = ""
    ssl_keyfile: Annotated[str, msgspec.Meta(description="PEM private key of ssl_certfile ('' for none)")] = ""
    ssl_check_hostname: Annotated[
        bool, msgspec.Meta(description="check that a broker's certificate names the host connected to (keep true outside tests)")
    ] = True
    topic_prefix: Annotated[
        str,
        msgspec.Meta(
            pattern=_KAFKA_NAME,
            max_length=120,
            description="prefix of every topic and of the consumer group, e.g. 'staging.' ('' for none)",
        ),
    ] = ""
    partitions: Annotated[
        int,
        msgspec.Meta(ge=1, le=10_000, description="partitions of every topic faultline creates (source, output, internal, changelog)"),
    ] = 4
    replication: Annotated[
        int, msgspec.Meta(ge=1, le=32, description="replication factor of every topic faultline creates")
    ] = 1
    store: Annotated[
        Literal["rocksdb", "memory"],
        msgspec.Meta(description="where the worker keeps its tables: rocksdb (on disk, fast restart) or memory (rebuilt from the changelogs)"),
    ] = "rocksdb"
    data_dir: Annotated[
        str, msgspec.Meta(min_length=1, description="worker data directory (RocksDB tables); one per worker process")
    ] = ".faultline"
    event_loop: Annotated[
        Literal["uvloop", "asyncio"],
        msgspec.Meta(
            description="the worker's event loop: uvloop (in the stream extra; a live stream's verdicts come many times "
            "sooner, docs/benchmarks.md) or Python's asyncio (where uvloop does not build: Windows)"
        ),
    ] = "uvloop"
    web_port: Annotated[
        int, msgspec.Meta(ge=0, le=65535, description="port of the worker's Faust web server; 0 turns it off")
    ] = 6066
    web_host: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            description="address the worker's web server listens on; its pages have no authentication, so 127.0.0.1 "
            "by default: 0.0.0.0 in a pod (reached through its Service and NetworkPolicy)",
        ),
    ] = "127.0.0.1"
    web_faust_routes: Annotated[
        bool,
        msgspec.Meta(
            description="also serve Faust's own routes (/table/: raw stage state; /router/: hosts and partitions); "
            "for debugging only, they show every record's state to whoever reaches the port",
        ),
    ] = False
    app_name: Annotated[
        str,
        msgspec.Meta(
            pattern=r"^[A-Za-z0-9._-]+$",
            max_length=100,
            description="Faust app id after the prefix: names the consumer group and the changelog topics",
        ),
    ] = "faultline"
    worker_id: Annotated[
        str,
        msgspec.Meta(
            pattern=_KAFKA_NAME,
            max_length=100,
            description="stable id of this worker (Kafka static membership: a restarted worker gets its "
            "partitions back at once); unique per live worker; '' for dynamic membership",
        ),
    ] = ""
    sweep_interval: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            description="seconds between sweeps of expired state; the decision uses stream time, never this clock (SPEC R7.4)",
        ),
    ] = 60.0
    batch_max: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=100_000,
            description="most records a stage folds before it waits for Kafka to acknowledge their outputs and "
            "writes their state; a batch also ends when no record is waiting",
        ),
    ] = 500
    fetch_wait_ms: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=60_000,
            description="longest the broker holds a fetch that has less than --fetch-min-bytes, between rebalances: "
            "on a quiet stream, the most a record waits at each stage's fetch (one fetch per broker is in flight, "
            "so it delays every partition; Faust's 1500 ms applies during rebalances)",
        ),
    ] = 100
    fetch_min_bytes: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=1 << 20,
            description="least bytes the broker gathers before it answers a fetch, between rebalances (Kafka's "
            "fetch.min.bytes; it answers after --fetch-wait-ms anyway): a busy stream fills it at once, a quiet one "
            "is fetched once per --fetch-wait-ms instead of once per record (docs/streaming.md, Throughput); 1: at once",
        ),
    ] = 64 * 1024
    produce_linger_ms: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            le=1_000,
            description="how long the producer waits to fill a request with more records (Kafka's linger.ms): "
            "fewer, larger produce requests for at most this much more latency per stage",
        ),
    ] = 5
    fetch_partition_bytes: Annotated[
        int,
        msgspec.Meta(
            ge=65_536,
            le=1 << 30,
            description="most bytes fetched per partition per request (Faust's consumer_max_fetch_size; its default is 1 MiB)",
        ),
    ] = 4 << 20
    fleet_stage: Annotated[
        bool,
        msgspec.Meta(
            description="run the fleet stage (derived topics, the fleet page's data); the same on every worker "
            "of a group (their subscriptions must match); false saves its CPU where fleet health is not wanted",
        ),
    ] = True
    stop_timeout: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            le=3600,
            description="seconds a worker that decided to stop (an error, a hole in its input, SIGTERM) may take to "
            "shut down before it exits anyway; what was not committed is delivered again",
        ),
    ] = 30.0
    rocksdb_block_cache_bytes: Annotated[
        int,
        msgspec.Meta(ge=1 << 20, le=1 << 40, description="one RocksDB block cache shared by every table partition of the worker (bytes)"),
    ] = 32 << 20
    rocksdb_write_buffer_bytes: Annotated[
        int,
        msgspec.Meta(
            ge=1 << 20,
            le=1 << 40,
            description="most bytes of RocksDB write buffers (memtables) of all the worker's table partitions together",
        ),
    ] = 32 << 20
    rules: Annotated[
        str,
        msgspec.Meta(
            description="rule file (.toml or .json, as for `faultline replay --rules`); '' for the built-in rules",
        ),
    ] = ""
    log_level: Annotated[
        Literal["debug", "info", "warning", "error"], msgspec.Meta(description="worker log level")
    ] = "info"

    def __post_init__(self) -> None:
        self._check_security()

    def _check_security(self) -> None:
        if self.security_protocol.startswith("SASL_") and not (self.sasl_username and self.sasl_password):
            raise ValueError(
                f"security_protocol = {self.security_protocol} needs a SASL user and password: set --sasl-username / "
                "FAULTLINE_SASL_USERNAME and FAULTLINE_SASL_PASSWORD"
            )
        if not self.security_protocol.endswith("SSL"):
            given = [name for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile") if getattr(self, name)]
            if given:
                raise ValueError(
                    f"{', '.join(given)} given but security_protocol = {self.security_protocol} does not use TLS: "
                    "set --security-protocol / FAULTLINE_SECURITY_PROTOCOL to SSL or SASL_SSL"
                )
            return
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            path = getattr(self, name)
            if path and not os.access(path, os.R_OK):
                raise ValueError(
                    f"{name} = {path!r} cannot be read: fix --{name.replace('_', '-')} / FAULTLINE_{name.upper()}"
                )
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise ValueError("ssl_certfile and ssl_keyfile go together: give both (a client certificate and its key) or neither")

    def topic(self, logical: str) -> str:
        """The Kafka name of a logical topic (e.g. `k8s.pods`)."""
        return self.topic_prefix + logical

    @property
    def app_id(self) -> str:
        return self.topic_prefix + self.app_name

    @property
    def worker_dir(self) -> str:
        """This app's directory under data_dir (Faust's tables, the in-flight notes)."""
        return os.path.join(self.data_dir, self.app_id)


# Settings read from the environment only: a flag would show them in the process list.
SECRETS = frozenset({"sasl_password"})

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> int:
    """Seconds from `3600`, `90m`, `24h` or `1d`."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration: give seconds or a number with s, m, h or d (e.g. 24h)")
    return round(float(match.group(1)) * _UNIT[match.group(2)])


class SettingsError(ValueError):
    """A setting has a wrong value; the message names it and what would be right."""


class SettingInfo(msgspec.Struct, frozen=True):
    name: str
    env: str
    flag: str
    default: Any
    doc: str
    type: Any  # the annotation without its Meta (str for a duration)
    field: str = ""  # the Struct field; `name` differs where its Meta names the setting
    duration: bool = False  # given as a duration (`parse_duration`), held as seconds


SettingsT = TypeVar("SettingsT", bound=msgspec.Struct)


def _split(hint: Any) -> tuple[Any, list[msgspec.Meta]]:
    if typing.get_origin(hint) is Annotated:
        base, *extra = typing.get_args(hint)
        return base, [m for m in extra if isinstance(m, msgspec.Meta)]
    return hint, []


def describe(cls: type[msgspec.Struct] = Settings) -> list[SettingInfo]:
    """Every setting of `cls` with its env var, flag, default and doc (for --help and the docs)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    infos = []
    for field in msgspec.structs.fields(cls):
        base, metas = _split(hints[field.name])
        extra = next((m.extra for m in metas if m.extra), None) or {}
        name = extra.get("setting", field.name)
        infos.append(
            SettingInfo(
                name=name,
                env=ENV_PREFIX + name.upper(),
                flag="--" + name.replace("_", "-"),
                default=field.default,
                doc=next((m.description for m in metas if m.description), ""),
                type=str if extra.get("duration") else base,
                field=field.name,
                duration=bool(extra.get("duration")),
            )
        )
    return infos


def _expected(cls: type[msgspec.Struct], info: SettingInfo) -> str:
    _, metas = _split(typing.get_type_hints(cls, include_extras=True)[info.field or info.name])
    if info.duration:
        least = next((m.ge for m in metas if m.ge is not None), 0)
        return f"a duration of at least {least} s (seconds, or a number with s, m, h or d: 90m, 24h, 1d)"
    if typing.get_origin(info.type) is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(info.type))
    parts: list[str] = []
    for meta in metas:
        for bound, word in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(meta, bound) is not None:
                parts.append(f"{word} {getattr(meta, bound)}")
        if meta.min_length:
            parts.append("non-empty")
        if meta.pattern:
            parts.append(f"matching {meta.pattern}")
    return f"{info.type.__name__} " + " and ".join(parts) if parts else info.type.__name__


def load_struct(
    cls: type[SettingsT], overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> SettingsT:
    """Defaults, then FAULTLINE_* from `env` (default: os.environ), then `overrides`
    (flags; None means 'not given'). Raises SettingsError naming the bad setting."""
    env = os.environ if env is None else env
    infos = {info.name: info for info in describe(cls)}
    raw: dict[str, Any] = {}
    source: dict[str, str] = {}
    for name, info in infos.items():
        if info.env in env:
            raw[name], source[name] = env[info.env], f"environment variable {info.env}"
    for name, value in (overrides or {}).items():
        if name not in infos:
            raise SettingsError(f"unknown setting {name!r}; known: {', '.join(infos)}")
        if value is not None:
            raw[name], source[name] = value, f"flag {infos[name].flag}"
    try:
        # strict=False: the environment gives strings, "4" must read as 4.
        return msgspec.convert(raw, cls, strict=False)
    except msgspec.ValidationError as exc:
        name = _field_of(str(exc))
        if name is None or name not in infos:
            raise SettingsError(f"invalid settings: {exc}") from None
        info = infos[name]
        given = raw.get(name, info.default)
        raise SettingsError(
            f"setting {name} = {given!r} (from {source.get(name, 'the default')}) is invalid: "
            f"expected {_expected(cls, info)}; fix {info.flag} or {info.env} ({info.doc})"
        ) from None


def load(overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """The streaming commands' settings (see `load_struct`)."""
    return load_struct(Settings, overrides, env)


def _field_of(message: str) -> str | None:
    # msgspec ends a validation message with "- at `$.field`".
    marker = "at `$."
    if marker not in message:
        return None
    return message.rsplit(marker, 1)[1].split("`", 1)[0].split("[", 1)[0].split(".", 1)[0]


FLEET_SETTINGS = describe(FleetSettings)


def fleet_settings(
    base: FleetSettings, overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> FleetSettings:
    """`base` (a rule file's `[fleet]`, else the default) with the fleet settings the user
    set on top: a flag (`overrides` by setting name; None means 'not given'), else
    FAULTLINE_* in `env` (default: os.environ). What the user did not set stays the rule
    file's, so every command gives the same outputs from one file (SPEC R10.1). Raises
    SettingsError naming the setting, where its value came from and how to fix it."""
    env = os.environ if env is None else env
    given: dict[str, Any] = {}
    origin: dict[str, tuple[SettingInfo, Any, str]] = {}  # field -> (setting, value as given, where)
    for info in FLEET_SETTINGS:
        value = (overrides or {}).get(info.name)
        if value is not None:
            where = f"flag {info.flag}"
        elif info.env in env:
            value, where = env[info.env], f"environment variable {info.env}"
        else:
            continue
        origin[info.field] = (info, value, where)
        try:
            given[info.field] = parse_duration(str(value)) if info.duration else value
        except ValueError:
            raise _invalid(info, value, where) from None
    if not given:
        return base
    merged = {**msgspec.to_builtins(base), **given}
    try:
        return msgspec.convert(merged, FleetSettings, strict=False)  # strict=False: "4" from the environment is 4
    except msgspec.ValidationError as exc:
        field = _field_of(str(exc))
        if field in origin:
            raise _invalid(*origin[field]) from None
        if field is None:  # FleetSettings.__post_init__: the window outlasts the history kept

            def shown(field: str, unit: str) -> str:
                if field in origin:
                    return f"{origin[field][1]!r} (from {origin[field][2]})"
                return f"{merged[field]}{unit} (from the rule file)"

            raise SettingsError(
                f"quarantine_window = {shown('window_seconds', ' s')} is longer than fleet_history_hours = "
                f"{shown('history_hours', '')}: raise --fleet-history-hours / FAULTLINE_FLEET_HISTORY_HOURS or shorten "
                "--quarantine-window / FAULTLINE_QUARANTINE_WINDOW (in a rule file: fleet.history_hours, fleet.window_seconds)"
            ) from None
        raise SettingsError(f"invalid fleet settings: {exc}") from None


def _invalid(info: SettingInfo, value: Any, where: str) -> SettingsError:
    return SettingsError(
        f"setting {info.name} = {value!r} (from {where}) is invalid: expected {_expected(FleetSettings, info)}; "
        f"fix {info.flag} or {info.env} ({info.doc})"
    )
