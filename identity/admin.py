"""Which provider account each user signs in with: shown, never edited (the link is made by signing in)."""
from django.contrib import admin

from core.admin import ReadOnlyAdmin
from identity.models import OidcIdentity


@admin.register(OidcIdentity)
class OidcIdentityAdmin(ReadOnlyAdmin):
    list_display = ("user", "issuer", "subject", "created_at", "last_sign_in_at")
    search_fields = ("user__username", "subject")
