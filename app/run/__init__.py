"""The embedded live driver (`faultline run`): the watch bridge (app/bridge) feeding the
embedded runner (app/replay) in one process, with the storage that the streaming path
keeps in Kafka kept in a state folder instead: the event log (event_log.py), the watch
positions and the lock (run_state.py), and the sink where the watch meets the rules
(pipeline_sink.py). It composes two drivers, so it sits above both (pyproject.toml's
layers); the command line prints what it emits."""
