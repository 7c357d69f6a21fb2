"""The watch bridge: Kubernetes list+watch → source and progress records → a sink (Kafka,
a trace file, or the in-process pipeline composed in `app.cli`).

Only `app.bridge.client` talks to the Kubernetes API and only `app.bridge.kafka_sink`
talks to Kafka; the watches and the bridge in between (`watch`, `bridge`, `relist`,
`progress`, `retry`) know neither HTTP nor Kafka, and hold no domain logic (DESIGN.md,
"bridge"). The bridge imports neither the stream workers nor the embedded runner. See
docs/bridge.md.
"""
