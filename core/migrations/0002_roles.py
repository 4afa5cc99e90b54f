from django.db import migrations

from core.roles import sync_role_groups


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("runs", "0001_initial"),
        ("capabilities", "0001_initial"),
        ("authtoken", "0004_alter_tokenproxy_options"),
    ]

    operations = [migrations.RunPython(sync_role_groups, migrations.RunPython.noop)]
