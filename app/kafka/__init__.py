"""Every Kafka client faultline opens, built from `app.settings.Settings` in one place.

`config` turns the settings (bootstrap servers and security: TLS, SASL) into the keyword
arguments of kafka-python, aiokafka and Faust, so security is set once; `clients` builds
the clients; `topics` names every topic and creates or checks them.
"""
