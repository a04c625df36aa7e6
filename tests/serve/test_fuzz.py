"""Schema-driven fuzzing (schemathesis) of the server's OpenAPI spec: no request may cause a 5xx.

The model is weightless and scripted (fast); a short request timeout keeps huge max_tokens cheap
(504 there is the documented timeout, not a crash, so only 500-class codes other than 504 fail)."""

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from k3.defaults import default_model
from k3.engine import LLM
from k3.serve.app import Server, build_app
from k3.serve.async_engine import AsyncEngine
from k3.testing.scripted import ScriptedModel


@pytest.fixture(scope="module")
def app_schema():
    tok = LLM(str(default_model()), cache_memory="8MiB").tokenizer
    script = tok.encode("Fine, thank you.") + [tok.end_of_msg_id]
    llm = LLM(ScriptedModel(script, tok.vocab_size, tok.end_of_msg_id), tokenizer=tok, cache_memory="1MiB")
    engine = AsyncEngine(llm.engine, max_queued=64)
    app = build_app(Server(engine, tok, "default-model", request_timeout=2.0))
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    engine.shutdown()


def test_no_request_crashes_the_server(app_schema):
    # schemathesis' pytest plugin does not support pytest 9; drive its strategies with hypothesis.
    operations = [result.ok() for result in app_schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/chat/completions", "/v1/completions", "/tokenize"}
    for op in operations:
        @given(case=op.as_strategy())
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def fuzz(case):
            # Pin the model name, or nearly every generated body stops at the 404 for an unknown model.
            if isinstance(case.body, dict) and "model" in case.body:
                case.body["model"] = "default-model"
            response = case.call()
            assert response.status_code < 500 or response.status_code == 504, \
                (op.path, response.status_code, response.text[:300])

        fuzz()
