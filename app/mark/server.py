"""`faultline mark`'s /metrics (Prometheus text format 0.0.4, as the worker's: app/web/metrics.py)
on a small threaded HTTP server of the standard library: the mark has no event loop."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from app.mark.metrics import BUCKETS, MarkMetrics
from app.web.metrics import CONTENT_TYPE, family


def render(metrics: MarkMetrics) -> str:
    s = metrics.snapshot()
    lines: list[str] = []
    family(lines, "faultline_mark_records_total", "counter", "faultline.faults records read.", [({}, s.records)])
    family(lines, "faultline_mark_marks_total", "counter", "Pods marked with the GPU fault condition (SPEC R18.1).", [({}, s.marks)])
    family(lines, "faultline_mark_skips_total", "counter",
           "Faults that marked nothing, by reason: not_critical, untrusted, not_a_candidate, ended, already_marked.",
           [({"reason": reason}, n) for reason, n in s.skips.items()])  # fmt: skip
    family(lines, "faultline_mark_refused_total", "counter",
           "Marks the API server refused (admission, validation) or that kept conflicting: the pod was not marked.", [({}, s.refused)])  # fmt: skip
    family(lines, "faultline_mark_conflicts_total", "counter", "Patches answered 409 Conflict, read again and decided anew.", [({}, s.conflicts)])
    family(lines, "faultline_mark_unreadable_total", "counter", "faultline.faults records that are no fault record, and pods the rule could not read (skipped).", [({}, s.unreadable)])
    family(lines, "faultline_mark_other_cluster_total", "counter", "Faults of another cluster than --cluster (skipped).", [({}, s.other_cluster)])
    name = "faultline_mark_seconds"
    family(lines, name, "histogram", "From a fault's last_seen (its Event's time, at most when the bridge saw it) to its mark acknowledged.", [])
    buckets = [({"le": repr(bound)}, n) for bound, n in zip(BUCKETS, s.buckets)] + [({"le": "+Inf"}, s.seconds_count)]
    family(lines, name, "histogram", "", buckets, "_bucket")
    family(lines, name, "histogram", "", [({}, round(s.seconds_sum, 6))], "_sum")
    family(lines, name, "histogram", "", [({}, s.seconds_count)], "_count")
    return "\n".join(lines) + "\n"


class MetricsServer:
    """GET /metrics, and /healthz (200 while the process serves: its liveness probe)."""

    def __init__(self, metrics: MarkMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="mark-metrics", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        metrics = self.metrics

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, render(metrics).encode(), CONTENT_TYPE)
                elif path == "/healthz":
                    self._send(200, b"ok\n", "text/plain; charset=utf-8")
                else:
                    self._send(404, b"not found: /metrics and /healthz are served\n", "text/plain; charset=utf-8")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a scrape every few seconds is no news

        return Handler
