"""max_tokens ending a constrained output (emit.close_at_length): a whole answer ends as "stop" with what the
grammar forces written out (K3's closing frame, and a framed message's end token), so a chat reader finds a
whole message; a cut one ends as "length" with a warning. (Found by tests/engine/test_tool_schemas.py's
generated schemas: a framed tool call whose grammar was complete at max_tokens came back as "stop" without
its <|end_of_msg|>, and the parser called the message cut off.)"""

from k3.engine.emit import close_at_length
from k3.engine.request import Request, SamplingParams

EOS, CLOSE = 99, 50


class Grammar:
    def __init__(self, frame, frame_token):
        self.frame, self.frame_token = frame, frame_token

    def closing_frame(self):
        return self.frame


def _request(frame, frame_token=CLOSE, output=(7, 8)) -> Request:
    req = Request("r", [1, 2], SamplingParams(max_tokens=len(output)), 0, 0, output_ids=list(output))
    req.constraint = Grammar(frame, frame_token)
    return req


def test_a_complete_framed_answer_gets_its_end_token():
    req = _request([])
    assert close_at_length(req, [8], EOS) == ("stop", [8, EOS]) and req.output_ids[-1] == EOS and req.warning is None


def test_only_the_closing_frame_left_writes_the_frame_and_the_end():
    req = _request([CLOSE, 51])
    assert close_at_length(req, [8], EOS) == ("stop", [8, CLOSE, 51, EOS]) and req.all_ids[-3:] == [CLOSE, 51, EOS]


def test_a_frame_that_ends_with_the_end_token_gets_no_second_one():
    req = _request([CLOSE, EOS])
    assert close_at_length(req, [], EOS) == ("stop", [CLOSE, EOS])


def test_an_unframed_output_gets_no_end_token():
    req = _request([], frame_token=None)
    assert close_at_length(req, [8], EOS) == ("stop", [8]) and req.output_ids == [7, 8]


def test_a_cut_answer_is_length_with_a_warning():
    req = _request(None)
    reason, new = close_at_length(req, [8], EOS)
    assert (reason, new, req.output_ids) == ("length", [8], [7, 8]) and "raise max_tokens" in req.warning
