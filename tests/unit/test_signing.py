"""Which secrets sign when: a replaced generated secret signs beside the new one until it expires."""

from __future__ import annotations

import base64

from hermes.domain.signing import check_secrets, generate_secret, signing_now


def test_the_previous_secret_signs_until_it_expires() -> None:
    secrets = ("whsec_new", "whsec_old")
    assert signing_now(secrets, 1_000, 999) == secrets
    assert signing_now(secrets, 1_000, 1_000) == ("whsec_new",)
    assert signing_now(secrets, 0, 10**13) == secrets  # set by the owner: no expiry
    assert signing_now(secrets[:1], 1_000, 2_000) == ("whsec_new",)


def test_a_generated_secret_is_32_random_bytes_the_field_accepts() -> None:
    first, second = generate_secret(), generate_secret()
    assert first != second and len(base64.b64decode(first.removeprefix("whsec_"))) == 32
    assert check_secrets([first, second], "signingSecrets") == (first, second)
