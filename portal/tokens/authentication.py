"""DRF authentication by API token: ``Authorization: Token <key>`` (or ``Bearer <key>``).

Failed attempts are counted per client address; past ``API_THROTTLE_AUTH_FAILURES`` the address gets
429 with ``Retry-After`` before its next key is even looked at.
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
        failures.check()
        if len(parts) != 2:
            failures.record()
            raise AuthenticationFailed("invalid token header: expected 'Token <key>'")
        try:
            key = parts[1].decode("ascii")
        except UnicodeDecodeError:
            failures.record()
            raise AuthenticationFailed("invalid token header: the key is not ASCII") from None
        token = api_token_for_key(key=key)
        if token is None:
            failures.record()
            raise AuthenticationFailed("invalid, expired or revoked token")
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
