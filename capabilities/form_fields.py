"""Form fields the registry's forms share (the capability form and each kind's config fields)."""
from __future__ import annotations

import json
from typing import Any

from django import forms

from core import jsonlimits


class LinesField(forms.CharField):
    """A textarea of one value per line; cleans to a list of the non-blank lines."""

    def prepare_value(self, value):
        return "\n".join(value) if isinstance(value, (list, tuple)) else value

    def clean(self, value):
        return [line.strip() for line in (super().clean(value) or "").splitlines() if line.strip()]


class JSONTextField(forms.CharField):
    """A textarea holding JSON; cleans to the parsed value (or `empty` when blank)."""

    def __init__(self, *, empty: Any = None, **kw):
        self.empty = empty
        kw.setdefault("widget", forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}))
        super().__init__(**kw)

    def prepare_value(self, value):
        if isinstance(value, (dict, list)):
            return json.dumps(value, indent=2)
        return value

    def clean(self, value):
        value = super().clean(value)
        if not (value or "").strip():
            return self.empty
        try:
            return jsonlimits.loads(value)
        except jsonlimits.JSONLimitError as exc:
            raise forms.ValidationError(str(exc)) from None
