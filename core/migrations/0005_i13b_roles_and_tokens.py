"""Re-sync the role groups (the new runs.manage_all_runs) and hash the old plaintext tokens.

DRF's authtoken stored keys in clear. Each one becomes an ApiToken holding only its
hash, so clients keep working until the token expires; the clear rows are deleted.
"""
import hashlib
from datetime import timedelta

from django.db import migrations
from django.utils import timezone

from core.roles import sync_role_groups


def hash_legacy_tokens(apps, schema_editor):
    Token = apps.get_model("authtoken", "Token")
    ApiToken = apps.get_model("agentops", "ApiToken")
    expires = timezone.now() + timedelta(days=90)
    for token in Token.objects.all():
        ApiToken.objects.create(user_id=token.user_id, name="migrated token", prefix=token.key[:10],
                                key_hash=hashlib.sha256(token.key.encode()).hexdigest(), expires_at=expires)
    Token.objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0004_i13b_api_tokens"),
        ("runs", "0006_i13b_manage_all_runs"),
        ("authtoken", "0004_alter_tokenproxy_options"),
    ]

    operations = [
        migrations.RunPython(sync_role_groups, migrations.RunPython.noop),
        migrations.RunPython(hash_legacy_tokens, migrations.RunPython.noop),
    ]
