"""Which requests the proxy takes for the control plane's canary: only those carrying its
admin token; any other value (or a proxy without a token) is forged, and measured."""

from connector.canary import DECODE_HEADER, HEADER, PREFILL_HEADER, mark, pair_headers


def test_only_the_admin_token_marks_a_canary():
    assert mark({}, "s3cret") is None
    assert mark({HEADER: "s3cret"}, "s3cret") == "canary"
    assert mark({HEADER: "1"}, "s3cret") == "forged"
    assert mark({HEADER: ""}, "s3cret") == "forged"
    assert mark({HEADER: "1"}, None) == "forged"  # no token: nobody can mark a canary
    assert mark({HEADER: ""}, None) == "forged"


def test_the_pair_goes_in_the_answer_headers():
    assert pair_headers("http://p", "http://d") == {
        PREFILL_HEADER: "http://p",
        DECODE_HEADER: "http://d",
    }
    assert pair_headers(None, "http://c")[PREFILL_HEADER] == ""
