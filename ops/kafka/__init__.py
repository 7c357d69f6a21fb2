"""Local Apache Kafka (KRaft) for development, the tests and the benchmarks: run as a script or imported."""
