"""Which provider account a user signs in with: the issuer and the subject, never the e-mail address.

An e-mail address can be changed at the provider or reused; (issuer, sub) is the one identifier
OpenID Connect promises is stable, so a first sign-in never takes over a local account that
happens to share an address or a username."""
from django.conf import settings
from django.db import models


class OidcIdentity(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities")
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)
    # The groups of the last sign-in, as the provider sent them (what the roles were mapped from).
    groups = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="oidc_identity_unique_subject")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
