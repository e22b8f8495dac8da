"""Jobs are deleted in bulk (a queue's removal, retention): each reference to a job needs an index.

PostgreSQL checks every foreign key to a deleted row with a lookup on the referencing column; without an
index on it that lookup scans the whole table once per deleted job, so deleting n jobs costs n full scans of
the event log (a commit that ran for minutes at 12,000 jobs).
"""

from django.apps import apps

from scheduling.models import Job


def indexed(model, field) -> bool:
    if field.db_index or field.unique or field.primary_key:
        return True
    leading = [index.fields[0] for index in model._meta.indexes if index.fields]
    leading += [fields[0] for fields in model._meta.unique_together if fields]
    leading += [c.fields[0] for c in model._meta.constraints if getattr(c, "fields", None)]
    return field.name in leading


def test_every_reference_to_a_job_is_indexed():
    unindexed = [
        f"{model._meta.label}.{field.name}"
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if field.is_relation and field.related_model is Job and not indexed(model, field)
    ]
    assert unindexed == []
