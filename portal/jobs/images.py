"""Container image references: the grammar of the OCI distribution reference (Docker's
``distribution/reference``), which container runtimes and Kubernetes parse an ``image`` with::

    reference        := name [ ":" tag ] [ "@" digest ]
    name             := [ domain "/" ] path-component [ "/" path-component ]*
    domain           := host [ ":" port ]
    host             := domain-component [ "." domain-component ]* | "[" IPv6 "]"
    domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/
    path-component   := /[a-z0-9]+/ [ separator /[a-z0-9]+/ ]*
    separator        := /[_.]|__|[-]+/
    tag              := /[\\w][\\w.-]{0,127}/
    digest           := algorithm ":" /[0-9a-fA-F]{32,}/
    algorithm        := /[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*/

The name is at most 255 characters. As Docker normalizes a name, the first component is a registry
only when it holds a ``.`` or a ``:`` or is ``localhost``; otherwise it is part of the path, which
must be lower case (``Ubuntu`` is refused, ``Registry.example.com/x`` is not).

Pure: no Django, no I/O.
"""

from __future__ import annotations

import re

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"(?P<name>(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*))"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?",
    re.ASCII,
)
NAME_MAX = 255


def image_reference_problem(reference: str) -> str | None:
    """Why ``reference`` is not an image reference a container runtime accepts (None when it is)."""
    if not reference:
        return "an image is required"
    if reference != reference.strip() or any(c.isspace() for c in reference):
        return f"{reference!r} is not an image reference: it holds white space"
    lower_case = f"{reference!r} is not an image reference: the repository name must be lower case"
    match = _REFERENCE.fullmatch(reference)
    if match is None:
        if _REFERENCE.fullmatch(reference.lower()):
            return lower_case
        return (
            f"{reference!r} is not an image reference like registry.example.com/team/image:tag "
            "(lower-case path components separated by '/', an optional :tag and @sha256:digest)"
        )
    domain = match.group("domain")
    if domain and domain != "localhost" and "." not in domain and ":" not in domain and domain.lower() != domain:
        return lower_case
    if len(match.group("name")) > NAME_MAX:
        return f"the repository name is longer than {NAME_MAX} characters"
    return None
