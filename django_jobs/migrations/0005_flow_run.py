# The admin's flows pages: an unmanaged model (no table), as Queue, Task, Worker and Schedule.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0004_outbox"),
    ]

    operations = [
        migrations.CreateModel(
            name="FlowRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
            ],
            options={
                "verbose_name": "flow run",
                "managed": False,
                "default_permissions": (),
            },
        ),
    ]
