"""Files the pages hand out (exports, traces, stored outputs): one way to name them."""
from __future__ import annotations

from django.http import HttpResponseBase
from django.utils.http import content_disposition_header


def as_download(response: HttpResponseBase, filename: str, *, inline: bool = False) -> HttpResponseBase:
    """The response named `filename`: saved as a file, or (inline) shown in the browser under that name."""
    response["Content-Disposition"] = content_disposition_header(not inline, filename)
    return response
