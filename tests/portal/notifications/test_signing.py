"""Webhook signatures as a receiver checks them."""

from portal.notifications.signing import new_secret, signature, signature_valid


def test_a_signature_verifies_only_for_the_same_secret_body_and_a_recent_timestamp():
    secret = new_secret()
    body = b'{"event":"job.succeeded"}'
    header = signature(secret, 1_700_000_000, body)
    assert header.startswith("sha256=")
    assert signature_valid(secret, timestamp="1700000000", body=body, header=header, now=1_700_000_100)
    assert not signature_valid(secret, timestamp="1700000000", body=body + b" ", header=header, now=1_700_000_100)
    assert not signature_valid(new_secret(), timestamp="1700000000", body=body, header=header, now=1_700_000_100)
    assert not signature_valid(secret, timestamp="1700000000", body=body, header=header, now=1_700_001_000)
    assert not signature_valid(secret, timestamp="17e8", body=body, header=header, now=1_700_000_100)
