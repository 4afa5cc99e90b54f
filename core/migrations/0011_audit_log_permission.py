"""The audit log's own permission (agentops.view_audit_log), and the role groups re-synced:
the lead operator role holds it, and the new auditor role (a viewer who also reads the log)."""

from django.db import migrations

from core.roles import sync_role_groups


class Migration(migrations.Migration):

    dependencies = [
        ('agentops', '0010_audit_slack_account_links'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='auditevent',
            options={'ordering': ['-created_at', '-id'],
                     'permissions': [('view_audit_log', "Can view the audit log of every user's changes")]},
        ),
        migrations.RunPython(sync_role_groups, migrations.RunPython.noop),
    ]
