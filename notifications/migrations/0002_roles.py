from django.db import migrations

from core.roles import sync_role_groups


class Migration(migrations.Migration):
    # The role groups get this app's permissions once its tables exist.
    dependencies = [("notifications", "0001_initial"), ("agentops", "0002_roles")]

    operations = [migrations.RunPython(sync_role_groups, migrations.RunPython.noop)]
