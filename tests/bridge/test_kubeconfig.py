"""A kubeconfig of any shape: either `shape_problem` names what is wrong, or the
`kubernetes` client's loader fails only with its own ConfigException (a message the
bridge passes on), never a TypeError from deep inside it (issue 29 item 8)."""

from __future__ import annotations

import tempfile
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from app.bridge.kubeconfig import shape_problem

KEYS = st.sampled_from(["clusters", "contexts", "users", "current-context", "name", "cluster", "context", "user", "server", "token"])
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=6))
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=4)), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_a_kubeconfig_the_check_passes_fails_in_the_client_only_with_its_own_message(document: Any) -> None:
    text = yaml.safe_dump(document)
    problem = shape_problem(text)
    if problem is not None:
        assert problem.startswith(("is empty", "is not a kubeconfig", "is not valid YAML")), problem
        return
    with tempfile.NamedTemporaryFile("w", suffix=".kubeconfig") as file:  # read as the bridge does: through the file merger
        file.write(text)
        file.flush()
        try:
            config.load_kube_config(config_file=file.name, client_configuration=client.Configuration(), persist_config=False)
        except ConfigException:
            pass


@given(st.text(max_size=200))
def test_any_text_gets_an_answer_not_an_exception(text: str) -> None:
    problem = shape_problem(text)
    assert problem is None or isinstance(problem, str)
