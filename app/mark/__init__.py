"""`faultline mark` (SPEC R18): the one driver that writes to the cluster. It reads the
faults the rules published, asks the core whether each marks its pod
(app/core/actions/marking.py), and adds the pod condition through `pods/status`, with its own
ServiceAccount (ops/k8s/mark). kube.py talks to the API server, marker.py turns faults
into marks, consumer.py reads them from Kafka, server.py serves /metrics; `faultline run
--mark` uses marker.py without Kafka (app/run/marking.py). docs/mark.md."""
