"""The watch bridge: Kubernetes list+watch → source records → a sink (Kafka, a trace file,
or the in-process pipeline).

Only `app.bridge.client` talks to the Kubernetes API and only `app.bridge.kafka_sink`
talks to Kafka; the watcher in between knows neither HTTP nor Kafka, and holds no domain
logic (DESIGN.md, "bridge"). See docs/bridge.md.
"""
