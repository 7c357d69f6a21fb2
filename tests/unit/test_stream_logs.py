"""The worker's log during a broker outage, a coordinator election and Faust's checks that
cannot see (app/stream/logs.py): the client libraries' per-attempt errors are counted and
said in a few lines; what an operator must act on still passes as written."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from app.stream.logs import KafkaLogs


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def client(clock: Clock) -> Iterator[tuple[logging.Logger, KafkaLogs]]:
    """A client library's logger with the filter, as install() puts it on aiokafka's."""
    logger = logging.getLogger("aiokafka.under-test")
    logs = KafkaLogs(clock=clock, still_every=60, quiet=10)
    logger.addFilter(logs)
    yield logger, logs
    logger.removeFilter(logs)


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records]


def refused(logger: logging.Logger, n: int, clock: Clock, every: float = 0.01) -> None:
    for _ in range(n):
        logger.error("Unable connect to node with id %s: %s", 1, "[Errno 111] Connection refused")
        clock.now += every


def test_an_outage_is_one_line_when_it_starts_one_a_minute_while_it_lasts_and_one_when_it_ends(client, clock, caplog):
    caplog.set_level(logging.INFO)
    logger, logs = client
    refused(logger, 3000, clock, every=0.03)  # 90 s of refused connections
    logger.info("Discovered coordinator 1 for group faultline")  # the broker answers
    assert len(lines(caplog)) == 2  # over once what follows the answer has settled
    clock.now += 10
    logs.tick()
    said = lines(caplog)
    assert [level for level, _ in said] == ["WARNING", "WARNING", "INFO"], said
    assert said[0][1].startswith("Kafka is unreachable: Unable connect to node with id 1: [Errno 111] Connection refused.")
    assert said[1][1].startswith("Kafka still unreachable after 60s: ") and "failed attempt(s) so far" in said[1][1]
    assert said[2][1].startswith("Kafka reachable again (the broker answered): unreachable for 90.0s, 3000 failed attempt(s), 0 producer retries")
    assert logs.outages == 1


def test_the_producer_s_retries_while_the_broker_comes_back_are_counted_into_the_last_line(client, clock, caplog):
    """After a broker crash its partitions have no leader for a moment: aiokafka's producer
    writes a WARNING for each batch it retries (~115 after a crash, issue 37)."""
    caplog.set_level(logging.INFO)
    logger, logs = client
    refused(logger, 50, clock, every=0.1)
    logger.info("Discovered coordinator 1 for group faultline")
    for _ in range(115):
        logger.warning("Got error produce response on topic-partition %s, retrying. Error: %s", "TopicPartition(topic='t', partition=0)",
                       "<class 'aiokafka.errors.NotLeaderForPartitionError'>")  # fmt: skip
        clock.now += 0.02
    clock.now += 6.7
    logs.tick()
    assert len(lines(caplog)) == 1  # answered 9 s ago: still settling
    clock.now += 1.1
    logs.tick()
    said = lines(caplog)
    assert [level for level, _ in said] == ["WARNING", "INFO"], said
    assert said[1][1].startswith("Kafka reachable again (the broker answered): unreachable for 5.0s, 50 failed attempt(s), 115 producer retries")
    clock.now += 10
    logger.warning("Got error produce response on topic-partition %s, retrying. Error: %s", "tp", "KafkaTimeoutError")
    assert lines(caplog)[-1][0] == "WARNING"  # without an outage, a retry is said as written


def test_an_outage_is_over_when_nothing_failed_for_a_while(client, clock, caplog):
    caplog.set_level(logging.INFO)
    logger, _ = client
    refused(logger, 100, clock)
    clock.now += 10
    logs = client[1]
    logs.tick()
    assert [m for _, m in lines(caplog)][-1].startswith("Kafka reachable again (nothing failed for 10s): unreachable for 1.0s, 100 failed")


def test_the_reconnections_echoes_are_not_a_new_outage_but_a_later_outage_is(client, clock, caplog):
    caplog.set_level(logging.INFO)
    logger, logs = client
    refused(logger, 10, clock)
    logger.info("Discovered coordinator 1 for group faultline")
    logger.warning("Marking the coordinator dead (node 1)for group faultline.")  # the reconnection settling
    refused(logger, 5, clock)
    logger.info("Discovered coordinator 1 for group faultline")
    clock.now += 10
    logs.tick()
    assert len(lines(caplog)) == 2 and logs.outages == 1
    clock.now += 30
    refused(logger, 5, clock)
    assert logs.outages == 2 and lines(caplog)[-1][1].startswith("Kafka is unreachable")


def test_a_coordinator_being_elected_at_a_first_start_is_information_not_an_error(client, clock, caplog):
    caplog.set_level(logging.INFO)
    logger, logs = client
    logger.error("Group Coordinator Request failed: %s", "[Error 15] GroupCoordinatorNotAvailableError")
    clock.now += 0.5
    logger.error("Group Coordinator Request failed: %s", "[Error 15] GroupCoordinatorNotAvailableError")
    logger.info("Discovered coordinator 1 for group faultline")
    clock.now += 10
    logs.tick()
    said = lines(caplog)
    assert [level for level, _ in said] == ["INFO", "INFO"], said
    assert "Kafka is electing one" in said[0][1] and said[1][1].startswith("the consumer group's coordinator is available")
    assert logs.outages == 0


def test_what_faust_says_without_its_monitor_is_debug(clock, caplog):
    caplog.set_level(logging.INFO)
    logs = KafkaLogs(clock=clock)
    for name, text in (("faust.transport.drivers.aiokafka", "Stream has not started processing TP(topic='faultline.fleet-inputs', partition=3) (started 15.02 minutes ago)."),
                       ("faust.app.base", "[^-App]: Missing sensor state for rebalance #1")):  # fmt: skip
        logger = logging.getLogger(name)
        logger.addFilter(logs)
        try:
            logger.error(text) if "Stream" in text else logger.warning(text)
        finally:
            logger.removeFilter(logs)
    assert lines(caplog) == []


@pytest.mark.parametrize(
    "text",
    [
        "Topic faultline.k8s.pods not found in cluster metadata",
        "Unexpected error in fetcher routine",
        "Heartbeat failed for group faultline because it is rebalancing",
        "Marking the coordinator dead (node 1)for group faultline.",  # without an outage: as written
    ],
)
def test_anything_else_passes_as_written(client, caplog, text):
    caplog.set_level(logging.INFO)
    logger, _ = client
    logger.error(text)
    assert lines(caplog) == [("ERROR", text)]
