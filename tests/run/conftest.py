"""`faultline run`'s tests watch the bridge's list/watch protocol double (tests/bridge)."""

from tests.bridge.conftest import kube, kube_factory, no_threads_left_behind  # noqa: F401  (fixtures)
