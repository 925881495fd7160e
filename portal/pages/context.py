from django.conf import settings


def portal_context(request):
    return {"cluster_backend": settings.CLUSTER_BACKEND, "api_docs": settings.API_DOCS != "off"}
