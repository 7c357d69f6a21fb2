"""The streaming path: Faust workers on Kafka, running the same core folds as the offline replay."""
