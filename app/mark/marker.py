"""From faults to marks (SPEC R18.1, R18.2): for each `faultline.faults` record, read its
pod, ask the core's rule (`app.core.actions.marking.decide`) and patch what it answers, through
`PodApi`. The same code serves `faultline mark` (faults read from Kafka, app/mark/consumer.py)
and `faultline run --mark` (faults the embedded pipeline emits, app/run/marking.py).

A batch of faults is done when each was marked or skipped: the caller commits its input
position only then, so a restart reads again what it had not finished and skips what is
already marked. One pod's faults are handled in order by one thread; pods in parallel.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TypeVar

from app.bridge.errors import Transient
from app.bridge.retry import Backoff, Outage
from app.core.actions.marking import Mark, Skip, SkipReason, decide, screen
from app.core.base.rules import Rules
from app.mark.kube import PodApi, Refused, Unreadable
from app.mark.metrics import MarkMetrics
from app.model.records import Fault

log = logging.getLogger("faultline.mark")

T = TypeVar("T")
# Reads and patches of one fault before it is given up as refused: each conflict means the
# pod changed between the read and the patch (a kubelet writing its status), so the next
# read, after a short wait that doubles each time (CONFLICT_BACKOFF: ~5 s over all tries),
# sees the newer pod.
MAX_TRIES = 10
CONFLICT_BACKOFF = (0.05, 1.0)  # first wait and the longest, in seconds (with jitter)


class Stopped(Exception):
    """A stop was asked for while a call waited to be retried: the batch is not done."""


class Marker:
    def __init__(
        self,
        api: PodApi,
        *,
        cluster: str,
        condition_type: str,
        rules: Rules,
        metrics: MarkMetrics,
        stop: threading.Event,
        concurrency: int = 8,
        remembered: int = 100_000,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        give_up_after: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api, self.cluster, self.condition_type, self.rules = api, cluster, condition_type, rules
        self.metrics, self.stop, self.clock = metrics, stop, clock
        self._backoff = (backoff_initial, backoff_max, give_up_after)
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="mark") if concurrency > 1 else None
        # Pod uid -> a skip no later state of that pod can undo (`Skip.final`), so that
        # the further faults of a marked or ended pod cost no request (bounded: oldest out).
        self._final: OrderedDict[str, SkipReason] = OrderedDict()
        self._remembered = remembered
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    # --- a batch --------------------------------------------------------------------------

    def handle(self, faults: Sequence[Fault]) -> None:
        """Mark or skip every fault of `faults`; returns when all are done. Raises what
        stops the mark (`Stopped`; a fatal `MarkApiError`, `Unreachable`), after which
        the batch counts as not done."""
        by_pod: dict[str, list[Fault]] = {}
        for fault in faults:
            if fault.cluster != self.cluster:
                self.metrics.other_cluster()  # another cluster's mark, if any, marks it
                continue
            by_pod.setdefault(fault.fault.pod.uid, []).append(fault)
        groups = list(by_pod.values())
        if self._pool is None or len(groups) <= 1:
            for group in groups:
                self._pod_faults(group)
            return
        for done in [self._pool.submit(self._pod_faults, group) for group in groups]:
            done.result()  # the first failure is raised, once every pod was tried

    def _pod_faults(self, faults: list[Fault]) -> None:
        for fault in faults:
            self.mark(fault)

    # --- one fault ------------------------------------------------------------------------

    def mark(self, fault: Fault) -> bool:
        """Mark the pod of `fault`, or skip it; True when this call marked it."""
        early = screen(fault, self.rules)
        if early is not None:
            self._skipped(fault, early)
            return False
        uid = fault.fault.pod.uid
        known = self._known(uid)
        if known is not None:
            self.metrics.skipped(known)
            log.debug("not marked: pod %s/%s was seen %s (fault %s)", fault.namespace, fault.fault.pod.name, known, fault.key)
            return False
        namespace, name = fault.namespace, fault.fault.pod.name
        again = Backoff(*CONFLICT_BACKOFF)
        for attempt in range(MAX_TRIES):
            if attempt and self.stop.wait(again.next()):
                raise Stopped(f"mark pod {namespace}/{name}")
            try:
                fetched = self._retrying(lambda: self.api.get(namespace, name), f"get pod {namespace}/{name}")
                decision = decide(fault, fetched.pod if fetched is not None else None, self.condition_type, self.rules)
            except (Unreadable, ValueError, TypeError, OverflowError, RecursionError) as exc:
                # A pod the rule cannot read (everything in it may be a tenant's) is not
                # marked; it never stops the others.
                self.metrics.unreadable()
                log.error("not marked: pod %s/%s could not be read (fault %s): %s", namespace, name, fault.key, exc)
                return False
            if isinstance(decision, Skip):
                self._skipped(fault, decision)
                if decision.final:
                    self._remember(uid, decision.reason)
                return False
            assert fetched is not None and isinstance(decision, Mark)
            version, condition, at = fetched.resource_version, decision.condition, datetime.fromtimestamp(self.clock(), timezone.utc)
            try:
                result = self._retrying(
                    lambda: self.api.add_condition(namespace, name, version, condition, at), f"patch pod {namespace}/{name} status"
                )
            except Refused as exc:
                self.metrics.refused()
                log.error("not marked: the API server refused the mark of pod %s/%s (fault %s): %s", namespace, name, fault.key, exc)
                return False
            if result == "patched":
                delay = self.clock() - fault.fault.last_seen.timestamp()
                self.metrics.marked(delay)
                self._remember(uid, "already_marked")
                log.info(
                    "marked pod %s/%s (uid %s, node %s) %s: %s %s %.2fs after the fault was last seen (fault %s)",
                    namespace, name, uid, fault.fault.node, condition.type, condition.reason, condition.message, delay, fault.key,
                )  # fmt: skip
                return True
            if result == "conflict":  # changed since it was read; deleted ("gone"): the next read says so
                self.metrics.conflict()
        self.metrics.refused()
        log.error("not marked: pod %s/%s changed under every one of %d tries to mark it (fault %s)", namespace, name, MAX_TRIES, fault.key)
        return False

    def _skipped(self, fault: Fault, skip: Skip) -> None:
        self.metrics.skipped(skip.reason)
        where = f"pod {fault.namespace}/{fault.fault.pod.name} (uid {fault.fault.pod.uid})"
        if skip.reason == "untrusted":
            log.warning("not marked: an untrusted fault for %s: %s (fault %s)", where, skip.detail, fault.key)
        elif skip.reason == "ended":  # R18.1: counted and logged
            log.info("not marked: %s: %s (fault %s)", where, skip.detail, fault.key)
        else:
            log.debug("not marked (%s): %s: %s (fault %s)", skip.reason, where, skip.detail, fault.key)

    def _known(self, uid: str) -> SkipReason | None:
        with self._lock:
            return self._final.get(uid)

    def _remember(self, uid: str, reason: SkipReason) -> None:
        if not self._remembered:
            return
        with self._lock:
            self._final[uid] = reason
            self._final.move_to_end(uid)
            while len(self._final) > self._remembered:
                self._final.popitem(last=False)

    def _retrying(self, call: Callable[[], T], what: str) -> T:
        """`call`, again after a backoff while it fails in a way that can heal (the API
        server unreachable, 5xx, 429), until it succeeds, the outage outlasts
        `give_up_after` (Unreachable) or a stop is asked for (Stopped)."""
        initial, cap, give_up_after = self._backoff
        backoff, outage = Backoff(initial, cap), Outage(what, give_up_after)
        while True:
            try:
                result = call()
            except Transient as exc:
                outage.failed(exc.cause)
                if self.stop.wait(backoff.next()):
                    raise Stopped(what) from None
                continue
            outage.recovered()
            return result
