from django.contrib.auth.decorators import permission_required
from django.shortcuts import render

from capabilities.models import Capability


@permission_required("capabilities.view_capability", raise_exception=True)
def capability_list(request):
    capabilities = Capability.objects.select_related("current_version").order_by("name")
    return render(request, "capabilities/list.html", {"capabilities": capabilities})
