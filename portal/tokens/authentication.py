"""DRF authentication by API token: ``Authorization: Token <key>`` (or ``Bearer <key>``).

Failed attempts are counted per client address; past ``API_THROTTLE_AUTH_FAILURES`` the address gets
429 with ``Retry-After`` for whatever key it sends next, valid or not (one Redis round trip: a valid
key's also takes the request's throttle logs, ``AuthFailureThrottle.admit``).
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed

from portal.api.throttling import AuthFailureThrottle
from portal.tokens.selectors import api_token_for_key
from portal.tokens.services import api_token_touch

KEYWORDS = (b"token", b"bearer")


class ApiTokenAuthentication(BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() not in KEYWORDS:
            return None
        failures = AuthFailureThrottle(request)
        if len(parts) != 2:
            failures.refuse()
            raise AuthenticationFailed("invalid token header: expected 'Token <key>'")
        try:
            key = parts[1].decode("ascii")
        except UnicodeDecodeError:
            failures.refuse()
            raise AuthenticationFailed("invalid token header: the key is not ASCII") from None
        token = api_token_for_key(key=key)
        if token is None:
            failures.refuse()
            raise AuthenticationFailed("invalid, expired or revoked token")
        failures.admit(request, token.user)  # past the limit: 429 for a valid key as for any other
        api_token_touch(token=token)
        return (token.user, token)

    def authenticate_header(self, request) -> str:
        return self.keyword


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema describes the token header."""

    target_class = "portal.tokens.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token <key>` (or `Bearer <key>`); create keys on the API tokens page.",
        }
