#!/usr/bin/env python3
"""A real single-node Apache Kafka broker (KRaft, broker+controller in one JVM).

Standard library only, so it works without the project's virtualenv:

    python ops/kafka/local_broker.py start|stop|run|status|jars [--data-dir D] [--port P]

or from Python:

    with LocalBroker() as broker:
        use(broker.bootstrap)          # "127.0.0.1:<port>"

The broker jars come from Maven Central through ops/kafka/pom.xml and are cached
outside git in ${FAULTLINE_CACHE:-~/.cache/faultline}/kafka-<version>/libs.
"""
from __future__ import annotations

import argparse
import base64
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
HOST = "127.0.0.1"


class BrokerError(RuntimeError):
    """Something went wrong; the message says what and how to fix it."""


def kafka_version() -> str:
    """The pinned version: pom.xml's <kafka.version> is the single source of truth."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    node = ET.parse(POM).getroot().find("m:properties/m:kafka.version", ns)
    if node is None or not (node.text or "").strip():
        raise BrokerError(f"no <kafka.version> property in {POM}")
    return (node.text or "").strip()


def cache_root() -> Path:
    return Path(os.environ.get("FAULTLINE_CACHE") or Path.home() / ".cache" / "faultline")


def _tail(text: str, lines: int = 30) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # Maven 3.8 emits color codes even with -B
    return "\n".join(text.strip().splitlines()[-lines:])


def _file_tail(path: Path, lines: int = 30) -> str:
    try:
        return _tail(path.read_text(errors="replace"), lines)
    except OSError:
        return "(no output)"


def ensure_jars(version: str | None = None) -> Path:
    """Return the libs dir for `version`, running mvn only if it is not cached yet."""
    version = version or kafka_version()
    libs = cache_root() / f"kafka-{version}" / "libs"
    if (libs / ".complete").exists():  # marker written last: a half-copied dir never counts
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError("mvn not found: install Maven 3 (e.g. `apt-get install maven`) to fetch the Kafka jars")
    # Copy into a private dir then rename, so concurrent runs never see partial jars.
    tmp = libs.parent / f"libs.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    cmd = [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies", "-DincludeScope=runtime",
           f"-DoutputDirectory={tmp}", f"-Dkafka.version={version}"]
    res = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if res.returncode != 0 or not list(tmp.glob("kafka_2.13-*.jar")):
        shutil.rmtree(tmp, ignore_errors=True)
        raise BrokerError(f"mvn failed (exit {res.returncode}) resolving Kafka {version}; is Maven Central "
                          f"reachable?\n$ {' '.join(cmd)}\n{_tail(res.stdout + res.stderr)}")
    (tmp / ".complete").write_text(version + "\n")
    if libs.exists() and not (libs / ".complete").exists():
        shutil.rmtree(libs, ignore_errors=True)  # leftover of an interrupted older run
    try:
        os.rename(tmp, libs)
    except OSError:  # another process finished first; its copy is as good as ours
        shutil.rmtree(tmp, ignore_errors=True)
    return libs


def find_java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").exists() else shutil.which("java")
    if java is None:
        raise BrokerError("java not found: install Java 17+ (e.g. `apt-get install openjdk-17-jre-headless`) "
                          "or set JAVA_HOME")
    return java


def free_port() -> int:
    # The OS picks an unused port; there is a tiny race until Kafka binds it, acceptable locally.
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Java does: TIME_WAIT is no conflict
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _cluster_id() -> str:
    # Kafka's Uuid format: url-safe base64 of 16 random bytes, no padding; a leading '-' would read as a flag.
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by broker")
        buf += chunk
    return buf


def broker_ready(host: str, port: int, timeout: float = 2.0) -> bool:
    """True once the broker answers a Metadata request listing at least one live broker.

    Raw Metadata v4 (no topics) keeps this stdlib-only; the response lists only registered,
    unfenced brokers, so a non-empty list means clients can create topics and produce now.
    """
    client_id = b"faultline-probe"
    corr = 7
    header = struct.pack(">hhih", 3, 4, corr, len(client_id)) + client_id  # api_key=Metadata, v4
    body = struct.pack(">i?", 0, False)  # topics=[] (none), allow_auto_topic_creation=false
    msg = header + body
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(msg)) + msg)
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            resp = _recv_exact(sock, size)
        got_corr, _throttle_ms, n_brokers = struct.unpack_from(">iii", resp)
    except (OSError, struct.error):
        return False
    return bool(got_corr == corr and n_brokers >= 1)


def _pid_alive(pid: int) -> bool:
    """Alive and really a Kafka broker (guards against a stale pid file and pid reuse)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path(f"/proc/{pid}")
    if proc.exists():  # Linux: a zombie is dead, and a recycled pid is not ours
        try:
            if (proc / "stat").read_text().split(")")[-1].split()[0] == "Z":
                return False
            return b"kafka.Kafka" in (proc / "cmdline").read_bytes()
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class SaslSsl:
    """A second listener, SASL over TLS, beside the PLAINTEXT one.

    keystore_pem: one PEM file with the broker's unencrypted PKCS#8 private key and its
    certificate chain (the certificate must name 127.0.0.1 for clients that check it).
    users: name -> password, accepted by PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (the SCRAM
    credentials are written into the metadata log when the storage is formatted).
    """

    keystore_pem: Path
    users: dict[str, str] = field(default_factory=dict)

    MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

    def settings(self) -> dict[str, str]:
        plain_users = " ".join(f'user_{name}="{password}"' for name, password in self.users.items())
        return {
            "sasl.enabled.mechanisms": ",".join(self.MECHANISMS),
            "listener.name.sasl_ssl.plain.sasl.jaas.config":
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": str(self.keystore_pem),
        }

    def scram_arguments(self) -> list[str]:
        """`kafka-storage format --add-scram` arguments: the SCRAM users exist from the start."""
        args = []
        for mechanism in self.MECHANISMS[1:]:
            for name, password in self.users.items():
                args += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
        return args


class LocalBroker:
    """One single-node KRaft Kafka broker in a child JVM.

    data_dir: where config, pid file, logs and Kafka data live (default: a fresh temp dir,
    deleted by stop()). A given data_dir keeps its topics across restarts.
    port: broker listener port (default: a free one chosen at each start).
    detach: start the JVM in its own session so it outlives this process (the CLI's `start`).
    sasl_ssl: also listen with SASL_SSL on another free port (`sasl_ssl_bootstrap`).
    """

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, *, port: int | None = None,
                 version: str | None = None, start_timeout: float = 60.0, stop_timeout: float = 30.0,
                 heap: str = "512m", detach: bool = False, sasl_ssl: SaslSsl | None = None) -> None:
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="faultline-kafka-"))
        self.port = port
        self.version = version or kafka_version()
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.heap = heap
        self.detach = detach
        self.sasl_ssl = sasl_ssl
        self._proc: subprocess.Popen[bytes] | None = None

    # Files inside data_dir.
    @property
    def pid_file(self) -> Path:
        return self.data_dir / "broker.pid"

    @property
    def out_file(self) -> Path:  # JVM stdout/stderr: crashes and early errors land here
        return self.data_dir / "broker.out"

    @property
    def log_file(self) -> Path:  # the broker's own log4j2 log
        return self.data_dir / "logs" / "server.log"

    @property
    def bootstrap(self) -> str | None:
        """`127.0.0.1:<port>` while running, else None."""
        return self._address("bootstrap")

    @property
    def sasl_ssl_bootstrap(self) -> str | None:
        """`127.0.0.1:<port>` of the SASL_SSL listener while running, else None."""
        return self._address("sasl_ssl_bootstrap")

    def _address(self, name: str) -> str | None:
        if self.pid() is None:
            return None
        try:
            return (self.data_dir / name).read_text().strip() or None
        except OSError:
            return None

    def pid(self) -> int | None:
        """Pid of the running broker of this data_dir, or None."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _pid_alive(pid) else None

    def start(self) -> str:
        """Start (or reuse the already running) broker; return its bootstrap address."""
        running = self.bootstrap
        if running is not None:
            return running
        libs = ensure_jars(self.version)
        java = find_java()
        if self.port and not _port_free(self.port):
            raise BrokerError(f"port {self.port} on {HOST} is in use: stop whatever listens there, "
                              "or leave the port unset to get a free one")
        port = self.port or free_port()
        controller_port = free_port()
        while controller_port == port:
            controller_port = free_port()
        secure_port = None
        if self.sasl_ssl is not None:
            secure_port = free_port()
            while secure_port in (port, controller_port):
                secure_port = free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "logs").mkdir(exist_ok=True)
        props, log4j = self._write_config(port, controller_port, secure_port)
        jvm = [java, f"-Xmx{self.heap}", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
               f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*"]
        kraft = self.data_dir / "kraft"
        if not (kraft / "meta.properties").exists():  # format once; later starts keep the data
            scram = self.sasl_ssl.scram_arguments() if self.sasl_ssl is not None else []
            res = subprocess.run([*jvm, "kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(props), *scram],
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True)
            if res.returncode != 0:
                raise BrokerError(f"formatting {kraft} failed (exit {res.returncode}; Kafka 4 needs Java 17+):\n"
                                  f"{_tail(res.stdout + res.stderr)}")
        with open(self.out_file, "ab") as out:
            self._proc = subprocess.Popen([*jvm, "kafka.Kafka", str(props)], cwd=self.data_dir,
                                          stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=self.detach)
        self.pid_file.write_text(f"{self._proc.pid}\n")
        bootstrap = f"{HOST}:{port}"
        deadline = time.monotonic() + self.start_timeout
        while not broker_ready(HOST, port):
            code = self._proc.poll()
            if code is not None:
                self.pid_file.unlink(missing_ok=True)
                raise BrokerError(f"broker exited with code {code} during start; see {self.log_file} and "
                                  f"{self.out_file}\n{self._diagnostics()}")
            if time.monotonic() > deadline:
                self._terminate(self._proc.pid)
                raise BrokerError(f"broker did not answer within {self.start_timeout:.0f}s; see {self.log_file} "
                                  f"and {self.out_file}\n{self._diagnostics()}")
            time.sleep(0.2)
        (self.data_dir / "bootstrap").write_text(bootstrap + "\n")
        if secure_port is not None:
            (self.data_dir / "sasl_ssl_bootstrap").write_text(f"{HOST}:{secure_port}\n")
        return bootstrap

    def stop(self) -> None:
        """Stop the broker of this data_dir (SIGTERM, then SIGKILL after stop_timeout). No-op if not running."""
        pid = self.pid()
        if pid is not None:
            self._terminate(pid)
        self.pid_file.unlink(missing_ok=True)
        (self.data_dir / "bootstrap").unlink(missing_ok=True)
        (self.data_dir / "sasl_ssl_bootstrap").unlink(missing_ok=True)
        self._proc = None
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _terminate(self, pid: int) -> None:
        for sig, wait in ((signal.SIGTERM, self.stop_timeout), (signal.SIGKILL, 10.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            if self._proc is not None and self._proc.pid == pid:
                try:  # our own child: wait() also reaps it
                    self._proc.wait(timeout=wait)
                    return
                except subprocess.TimeoutExpired:
                    continue
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if not _pid_alive(pid):
                    return
                time.sleep(0.1)
        raise BrokerError(f"could not stop broker pid {pid}")

    def _diagnostics(self) -> str:
        """JVM output if any (crash, bad Java version), else the broker log's errors or its tail."""
        out = _file_tail(self.out_file)
        if out != "(no output)" and out:
            return out
        try:
            errors = [ln for ln in self.log_file.read_text(errors="replace").splitlines() if " ERROR " in ln]
        except OSError:
            return "(no output)"
        return "\n".join(errors[-10:]) or _file_tail(self.log_file)

    def _write_config(self, port: int, controller_port: int, secure_port: int | None = None) -> tuple[Path, Path]:
        # Static voter set (controller.quorum.voters) rather than --standalone: the voter endpoint is
        # then read from config, not stored in the log, so a restart may pick new free ports.
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{HOST}:{controller_port}",
            "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir / "kraft"),
            "num.partitions": "1",
            # One node: every internal topic must accept replication factor / ISR 1.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",  # consumers join at once: fast tests
            "auto.create.topics.enable": "true",  # convenient locally; tests still create topics explicitly
        }
        if self.sasl_ssl is not None and secure_port is not None:
            settings["listeners"] += f",SASL_SSL://{HOST}:{secure_port}"
            settings["advertised.listeners"] += f",SASL_SSL://{HOST}:{secure_port}"
            settings["listener.security.protocol.map"] += ",SASL_SSL:SASL_SSL"
            settings.update(self.sasl_ssl.settings())
        props = self.data_dir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        logs = self.data_dir / "logs"
        log4j = self.data_dir / "log4j2.properties"
        log4j.write_text(f"""status = error
appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = {logs}/server.log
appender.file.filePattern = {logs}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 50MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
""")
        return props, log4j

    def __enter__(self) -> LocalBroker:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a local single-node Kafka broker (KRaft).")
    parser.add_argument("command", choices=["start", "stop", "run", "status", "jars"],
                        help="start: in the background; run: in the foreground until Ctrl-C; jars: only fetch jars")
    parser.add_argument("--data-dir", type=Path, default=cache_root() / "broker",
                        help="config, pid file, logs and data (default: %(default)s)")
    parser.add_argument("--port", type=int, default=None, help="broker port (default: a free one)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the broker to answer")
    args = parser.parse_args(argv)
    broker = LocalBroker(args.data_dir, port=args.port, start_timeout=args.timeout, detach=args.command == "start")
    try:
        if args.command == "jars":
            print(ensure_jars(broker.version))
        elif args.command == "start":
            print(broker.start())
        elif args.command == "stop":
            pid = broker.pid()
            broker.stop()
            print(f"stopped (pid {pid})" if pid else "not running")
        elif args.command == "status":
            bootstrap = broker.bootstrap
            if bootstrap is None:
                print("not running")
                return 1
            print(f"running {bootstrap} (pid {broker.pid()}, data {broker.data_dir})")
        else:  # run
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # SIGTERM -> finally -> stop()
            signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored
            try:
                print(broker.start(), flush=True)
                while broker.pid() is not None:
                    time.sleep(1)
                print(f"broker exited; see {broker.log_file}", file=sys.stderr)
                return 1
            except KeyboardInterrupt:
                return 0
            finally:
                broker.stop()
    except BrokerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
