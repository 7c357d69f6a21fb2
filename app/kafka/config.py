"""Settings -> the connection arguments of each Kafka library, and a quick reachability probe.

One TLS context (`ssl_context`) serves every library, so a CA, client certificate or
hostname check is configured once. SCRAM and PLAIN both take `sasl_plain_username` /
`sasl_plain_password` in kafka-python and aiokafka.
"""

from __future__ import annotations

import socket
import ssl
import time
from typing import Any

from kafka.errors import KafkaError

from app.settings import Settings

# How long a client waits for a first broker before it gives up (kafka-python's default is
# 30 s of silence); the probe answers sooner for a refused port or a rejected certificate.
BOOTSTRAP_TIMEOUT_MS = 15_000
PROBE_TIMEOUT = 5.0


class KafkaUnreachable(KafkaError):
    """No bootstrap server could be reached; the message says why and what to change.
    A KafkaError, so every handler of Kafka failures handles it too."""

    def __str__(self) -> str:  # kafka-python prefixes the class name; the message says enough
        return str(self.args[0]) if self.args else "Kafka is unreachable"


def servers(settings: Settings) -> list[str]:
    return settings.bootstrap.split(",")


def uses_tls(settings: Settings) -> bool:
    return settings.security_protocol in ("SSL", "SASL_SSL")


def uses_sasl(settings: Settings) -> bool:
    return settings.security_protocol.startswith("SASL_")


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context of every client, or None without TLS."""
    if not uses_tls(settings):
        return None
    context = ssl.create_default_context(cafile=settings.ssl_cafile or None)
    context.check_hostname = settings.ssl_check_hostname
    if settings.ssl_certfile:
        context.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile or None)
    return context


def _sasl(settings: Settings) -> dict[str, Any]:
    if not uses_sasl(settings):
        return {}
    return {
        "sasl_mechanism": settings.sasl_mechanism,
        "sasl_plain_username": settings.sasl_username,
        "sasl_plain_password": settings.sasl_password,
    }


def kafka_python_kwargs(settings: Settings) -> dict[str, Any]:
    """Connection arguments of kafka-python's KafkaProducer, KafkaConsumer and KafkaAdminClient."""
    kwargs: dict[str, Any] = {
        "bootstrap_servers": servers(settings),
        "security_protocol": settings.security_protocol,
        "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS,
        **_sasl(settings),
    }
    context = ssl_context(settings)
    if context is not None:
        kwargs["ssl_context"] = context
    return kwargs


def aiokafka_kwargs(settings: Settings) -> dict[str, Any]:
    """Connection arguments of aiokafka's AIOKafkaConsumer and AIOKafkaProducer."""
    kwargs: dict[str, Any] = {"bootstrap_servers": servers(settings), "security_protocol": settings.security_protocol, **_sasl(settings)}
    context = ssl_context(settings)
    if context is not None:
        kwargs["ssl_context"] = context
    return kwargs


def faust_kwargs(settings: Settings) -> dict[str, Any]:
    """`broker` and `broker_credentials` of a faust.App (Faust hands them to aiokafka)."""
    import faust

    context = ssl_context(settings)
    credentials: Any = None
    if uses_sasl(settings):
        credentials = faust.SASLCredentials(
            username=settings.sasl_username, password=settings.sasl_password, mechanism=settings.sasl_mechanism, ssl_context=context
        )
    elif context is not None:
        credentials = faust.SSLCredentials(context)
    return {"broker": [f"kafka://{server}" for server in servers(settings)], "broker_credentials": credentials}


def probe(settings: Settings, timeout: float = PROBE_TIMEOUT) -> None:
    """Raise KafkaUnreachable within about `timeout` seconds when no bootstrap server
    accepts a connection (and, with TLS, a handshake): a refused port, an unknown host or
    a rejected certificate is said at once instead of after the client's long retry."""
    context = ssl_context(settings)
    problems: list[str] = []
    deadline = time.monotonic() + timeout
    for server in servers(settings):
        host, _, port = server.rpartition(":")
        left = max(0.5, deadline - time.monotonic())
        try:
            with socket.create_connection((host, int(port)), timeout=left) as sock:
                if context is None:
                    return
                with context.wrap_socket(sock, server_hostname=host):
                    return
        except ssl.SSLCertVerificationError as exc:
            raise KafkaUnreachable(
                f"the certificate of the Kafka broker {server} was rejected ({exc.verify_message}): set --ssl-cafile / "
                "FAULTLINE_SSL_CAFILE to the CA that signed it"
                + (" and check that the certificate names this host" if exc.verify_code == 62 else "")
            ) from None
        except ssl.SSLError as exc:
            problems.append(f"{server}: TLS handshake failed ({exc.reason or exc}); does this listener speak {settings.security_protocol}?")
        except socket.gaierror as exc:
            problems.append(f"{server}: unknown host ({exc.strerror})")
        except OSError as exc:
            problems.append(f"{server}: {exc.strerror or 'timed out'}")
    raise KafkaUnreachable(
        f"cannot reach Kafka at {settings.bootstrap} ({'; '.join(problems)}): start a broker "
        "(python ops/kafka/local_broker.py start) or point --bootstrap / FAULTLINE_BOOTSTRAP at one"
    )
