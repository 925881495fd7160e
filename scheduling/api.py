"""REST API of the scheduling side: ``/api/v1/namespaces/``, the team namespaces kept in step."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.tenants.selectors import team_list_for_user
from scheduling.models import NamespaceObject
from scheduling.selectors import namespace_objects


class NamespaceObjectSerializer(serializers.ModelSerializer):
    class Meta:
        model = NamespaceObject
        fields = [
            "namespace",
            "kind",
            "name",
            "in_sync",
            "drift",
            "action",
            "checked_at",
            "repaired_at",
            "repairs",
            "wanted",
        ]
        read_only_fields = fields


class NamespaceObjectListView(APIView):
    """Each team namespace's ResourceQuota and LimitRange as the last namespace sync found them: in
    sync or how they had drifted, what the sync did, how often it repaired them, and the object the
    portal wants. Your teams' namespaces (every namespace for platform admins); empty on the
    simulated cluster, which has no namespaces."""

    @extend_schema(responses={200: NamespaceObjectSerializer(many=True)})
    def get(self, request):
        user = request.user
        namespaces = None if user.is_staff else team_list_for_user(user=user).values_list("namespace", flat=True)
        rows = namespace_objects(namespaces=namespaces)
        return Response({"results": NamespaceObjectSerializer(rows, many=True).data})
