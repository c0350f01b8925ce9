import pytest

from hermes.consumers.sender.oauth import TokenRequestDelay, parse_token_response, token_form
from hermes.consumers.sender.result import SendResult, judge
from hermes.domain.oauth import OAuthProvider
from hermes.domain.subscription import OAuthPolicy
from hermes.errors import OAuthTokenUnavailable

pytestmark = pytest.mark.unit

PROVIDER = OAuthProvider("p", "http://auth/token", "client", "s3cret")


def test_the_delay_doubles_from_initial_to_maximum_and_resets() -> None:
    delay = TokenRequestDelay(1.0, 5.0)
    assert delay.wait(100.0) == 0.0, "the first request goes out at once"
    waits = []
    now = 100.0
    for _ in range(5):
        delay.requested(now)
        waits.append(delay.wait(now))
        now += waits[-1]
    assert waits == [1.0, 2.0, 4.0, 5.0, 5.0]
    delay.requested(now)
    assert delay.wait(now) == 5.0
    delay.reset()  # the subscriber accepted a token
    assert delay.wait(now) == 1.0
    assert delay.wait(now + 3.0) == 0.0


def test_the_client_credentials_form() -> None:
    assert token_form(PROVIDER, OAuthPolicy("clientCredentials", "p")) == {
        "grant_type": "client_credentials",
        "client_id": "client",
        "client_secret": "s3cret",
    }


def test_the_password_form_carries_client_and_owner_credentials() -> None:
    form = token_form(PROVIDER, OAuthPolicy("password", "p", "read", "alice", "pw"))
    assert form == {
        "grant_type": "password",
        "client_id": "client",
        "client_secret": "s3cret",
        "username": "alice",
        "password": "pw",
        "scope": "read",
    }


def test_a_token_response_is_parsed() -> None:
    body = b'{"access_token": "abc.DEF-1_2~3+4/5=", "token_type": "Bearer", "expires_in": 60}'
    assert parse_token_response("p", 200, body) == "abc.DEF-1_2~3+4/5="
    assert parse_token_response("p", 200, b'{"access_token": "t"}') == "t", "token_type may be left out"


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (401, b'{"error": "invalid_client"}', "the token endpoint of provider p answered 401 (invalid_client)"),
        (500, b"<html>secret=s3cret</html>", "the token endpoint of provider p answered 500"),
        (400, b'{"error": "has spaces and s3cret"}', "the token endpoint of provider p answered 400"),
        (200, b"not json", "the token endpoint of provider p answered 200 without a JSON object"),
        (200, b'["access_token"]', "the token endpoint of provider p answered 200 without a JSON object"),
        (200, b'{"access_token": ""}', "the token endpoint of provider p answered 200 without a valid access_token"),
        (200, b'{"access_token": 7}', "the token endpoint of provider p answered 200 without a valid access_token"),
        (200, b'{"access_token": "a\\r\\nX: y"}', "the token endpoint of provider p answered 200 without a valid"),
        (200, b'{"access_token": "t", "token_type": "mac"}', "issued a token that is not a Bearer token"),
    ],
)
def test_a_bad_token_response_is_a_clear_error_quoting_nothing_it_received(
    status: int, body: bytes, message: str
) -> None:
    with pytest.raises(OAuthTokenUnavailable) as error:
        parse_token_response("p", status, body)
    assert message in error.value.message
    assert "s3cret" not in error.value.message


def test_a_401_with_an_oauth_policy_is_retried_whatever_retry_client_errors_says() -> None:
    assert judge(SendResult.of_status(401), retry_client_errors=False).retry is False
    verdict = judge(SendResult(status=401, reauthorize=True), retry_client_errors=False)
    assert verdict.retry is True and verdict.slow_down is False
