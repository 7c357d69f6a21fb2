import pytest


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python (imported by app.cli through the streaming commands) reads its protocol
    # schemas with importlib.resources' legacy API; the warning names importlib, so the
    # pyproject filter on `kafka.*` does not catch it.
    config.addinivalue_line("filterwarnings", r"ignore:.*is deprecated\. Use files\(\) instead:DeprecationWarning")
