"""Webhook signatures: HMAC-SHA256 over ``"<timestamp>.<body>"`` with the user's secret.

Headers of every delivery::

    X-Portal-Event: job.succeeded
    X-Portal-Delivery: 1234            (the notification's id: the same on every retry)
    X-Portal-Timestamp: 1764012345     (Unix seconds when this try was signed)
    X-Portal-Signature: sha256=<hex>   (HMAC-SHA256(secret, timestamp + "." + raw body))

A receiver recomputes the HMAC over the raw body, compares in constant time, and refuses a timestamp
far from its clock (a replayed old delivery). Pure: no Django, no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

EVENT_HEADER = "X-Portal-Event"
DELIVERY_HEADER = "X-Portal-Delivery"
TIMESTAMP_HEADER = "X-Portal-Timestamp"
SIGNATURE_HEADER = "X-Portal-Signature"
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A new webhook secret: 256 random bits, URL-safe."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Portal-Signature`` value of ``body`` signed at ``timestamp``."""
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def signature_valid(
    secret: str, *, timestamp: str, body: bytes, header: str, now: float, tolerance_s: float = 300
) -> bool:
    """What a receiver checks: the signature matches and the timestamp is within ``tolerance_s``."""
    if not timestamp.isdigit() or abs(now - int(timestamp)) > tolerance_s:
        return False
    return hmac.compare_digest(signature(secret, int(timestamp), body), header)
