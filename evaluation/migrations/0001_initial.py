"""The evaluation models, moved here from the runs app: their tables stay (runs_evaluation*), only
Django's state moves (runs 0010 removes them from the runs app's state)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('runs', '0009_i15_goal_trigram_index'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.CreateModel(
                name='EvaluationSuite',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(max_length=120, unique=True)),
                    ('description', models.TextField(blank=True)),
                    ('tasks', models.JSONField(help_text="A list of scenario objects (design.md, 'Scenario files').")),
                    ('planning_mode', models.CharField(default='scripted', help_text='The planner its evaluations use unless told otherwise.', max_length=20)),
                    ('bundled', models.BooleanField(default=False)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                    ('updated_at', models.DateTimeField(auto_now=True)),
                ],
                options={
                    'db_table': 'runs_evaluationsuite',
                    'ordering': ['name'],
                },
            ),
            migrations.CreateModel(
                name='Evaluation',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('label', models.CharField(blank=True, help_text="e.g. 'before the retry policy change'", max_length=200)),
                    ('planning_mode', models.CharField(default='scripted', help_text='The planner used in planning mode (scripted, rules, llm).', max_length=20)),
                    ('planner_config', models.JSONField(blank=True, default=dict, help_text='Settings of that planner (llm: base_url, model, api_key_env...).')),
                    ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('completed', 'Completed'), ('failed', 'Failed')], default='queued', max_length=20)),
                    ('tasks_total', models.PositiveIntegerField(default=0)),
                    ('tasks_done', models.PositiveIntegerField(default=0)),
                    ('summary', models.JSONField(blank=True, default=dict)),
                    ('error', models.TextField(blank=True)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                    ('started_at', models.DateTimeField(blank=True, null=True)),
                    ('finished_at', models.DateTimeField(blank=True, null=True)),
                    ('started_by', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ('suite', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='evaluations', to='evaluation.evaluationsuite')),
                ],
                options={
                    'db_table': 'runs_evaluation',
                    'ordering': ['-created_at', '-id'],
                    'permissions': [('run_evaluation', 'Can start evaluations')],
                },
            ),
            migrations.CreateModel(
                name='EvaluationResult',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('task', models.CharField(max_length=200)),
                    ('mode', models.CharField(choices=[('direct', 'Direct'), ('planning', 'Planning')], max_length=10)),
                    ('verified_success', models.BooleanField()),
                    ('status', models.CharField(max_length=20)),
                    ('stop_reason', models.CharField(blank=True, max_length=40)),
                    ('tool_calls', models.PositiveIntegerField(default=0)),
                    ('repeated_actions', models.PositiveIntegerField(default=0)),
                    ('revisions', models.PositiveIntegerField(default=0)),
                    ('retries', models.PositiveIntegerField(default=0)),
                    ('failed_observations', models.PositiveIntegerField(default=0)),
                    ('recovered', models.BooleanField(default=False, help_text='Completed after at least one failed observation.')),
                    ('tokens', models.PositiveIntegerField(default=0)),
                    ('cost', models.FloatField(default=0.0)),
                    ('simulated_latency_s', models.FloatField(default=0.0)),
                    ('wall_latency_s', models.FloatField(default=0.0)),
                    ('details', models.JSONField(blank=True, default=dict)),
                    ('evaluation', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='results', to='evaluation.evaluation')),
                    ('run', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='runs.run')),
                ],
                options={
                    'db_table': 'runs_evaluationresult',
                    'ordering': ['evaluation', 'task', 'mode'],
                    'constraints': [models.UniqueConstraint(fields=('evaluation', 'task', 'mode'), name='evaluation_result_unique'), models.CheckConstraint(condition=models.Q(('mode__in', ['direct', 'planning'])), name='evaluation_result_mode_valid')],
                },
            ),
            migrations.AddIndex(
                model_name='evaluation',
                index=models.Index(fields=['suite', '-created_at'], name='evaluation_suite_created_idx'),
            ),
            migrations.AddConstraint(
                model_name='evaluation',
                constraint=models.CheckConstraint(condition=models.Q(('status__in', ['queued', 'running', 'completed', 'failed'])), name='evaluation_status_valid'),
            ),
            migrations.AddConstraint(
                model_name='evaluation',
                constraint=models.CheckConstraint(condition=models.Q(('tasks_done__lte', models.F('tasks_total'))), name='evaluation_progress_bounded'),
            ),
        ]),
    ]
