from django.conf import settings
from django.utils.functional import SimpleLazyObject

from portal.whatif.selectors import whatif_allowed


def portal_context(request):
    user = getattr(request, "user", None)
    return {
        "cluster_backend": settings.CLUSTER_BACKEND,
        "api_docs": settings.API_DOCS != "off",
        # Read only when a page's navigation asks (one query for a team admin, none for anyone else).
        "whatif_link": SimpleLazyObject(
            lambda: bool(user is not None and user.is_authenticated and whatif_allowed(user=user))
        ),
    }
