"""The bulk SQL a pass writes with: UPDATE, DELETE and INSERT of many rows in a fixed number of statements.

COPY on PostgreSQL, executemany or bulk_create elsewhere. Each runs on the caller's connection, inside the
caller's transaction (a pass holds its queue's row lock meanwhile).
"""

from __future__ import annotations

import itertools
import json
import time
from datetime import datetime

from django.db import connection
from django.db.models import JSONField, Model

_staging_names = itertools.count()


def rows_update(*, model: type[Model], fields: tuple[str, ...], rows: dict[int, dict]) -> None:
    """UPDATE many rows by id with per-row values, in a fixed number of statements on PostgreSQL.

    A pass may rewrite thousands of pending reasons. Django's bulk_update builds one CASE per field whose
    cost grows with the square of the batch, so on PostgreSQL the values are streamed with COPY into a
    temporary table and applied with one UPDATE ... FROM; elsewhere one parameterised UPDATE per row runs
    through executemany.
    """
    if not rows:
        return
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    ids = sorted(rows)
    if connection.vendor == "postgresql":
        columns = {f.column: f for f in model._meta.concrete_fields}
        staging = qn(f"qp_update_{model._meta.model_name}_{next(_staging_names)}")
        definition = ", ".join(["id bigint", *(f"{qn(n)} {columns[n].db_type(connection)}" for n in fields)])
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE TEMPORARY TABLE {staging} ({definition}) ON COMMIT DROP")
            copy_rows(
                cursor,
                staging,
                ("id", *fields),
                ([row_id, *[rows[row_id][name] for name in fields]] for row_id in ids),
                json_at=[i + 1 for i, name in enumerate(fields) if isinstance(columns[name], JSONField)],
            )
            cursor.execute(f"ANALYZE {staging}")  # a temporary table has no statistics until asked
            assignments = ", ".join(f"{qn(name)} = v.{qn(name)}" for name in fields)
            cursor.execute(f"UPDATE {table} AS t SET {assignments} FROM {staging} AS v WHERE t.id = v.id")
            cursor.execute(f"DROP TABLE {staging}")
        return
    assignments = ", ".join(f"{qn(name)} = %s" for name in fields)
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {table} SET {assignments} WHERE id = %s",
            [[*(_db_value(rows[row_id][name]) for name in fields), row_id] for row_id in ids],
        )


def rows_delete(model: type[Model], ids: list[int]) -> None:
    """DELETE many rows by primary key: one statement on PostgreSQL, chunks under SQLite's variable limit."""
    if not ids:
        return
    table = connection.ops.quote_name(model._meta.db_table)
    pk = connection.ops.quote_name(model._meta.pk.column)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"DELETE FROM {table} WHERE {pk} = ANY(%s)", [ids])
            return
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            cursor.execute(f"DELETE FROM {table} WHERE {pk} IN ({', '.join(['%s'] * len(chunk))})", chunk)


def rows_insert(model: type[Model], rows: list[dict]) -> None:
    """INSERT many new rows (dicts by attname) whose ids nobody needs back: one COPY on PostgreSQL.

    The primary key is written only when the rows carry it (a one-to-one key); an automatic one is left out.
    """
    if not rows:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_create([model(**row) for row in rows], batch_size=500)
        return
    first = rows[0]
    concrete = [f for f in model._meta.concrete_fields if not f.primary_key or f.attname in first]
    defaults = [(f.attname, f.get_default()) for f in concrete]
    with connection.cursor() as cursor:
        copy_rows(
            cursor,
            connection.ops.quote_name(model._meta.db_table),
            tuple(f.column for f in concrete),
            ([row.get(name, default) for name, default in defaults] for row in rows),
            json_at=[i for i, f in enumerate(concrete) if isinstance(f, JSONField)],
        )


def copy_rows(cursor, table: str, columns: tuple[str, ...], rows, *, json_at: list[int]) -> None:
    """Stream rows (lists) into a PostgreSQL table with COPY, logged like any query so query budgets count it.

    Values go to the driver as they are (a TextChoices member is a str to it) except at the `json_at`
    positions, which are serialized.
    """
    qn = connection.ops.quote_name
    sql = f"COPY {table} ({', '.join(qn(c) for c in columns)}) FROM STDIN"
    started = time.perf_counter()
    with cursor.cursor.copy(sql) as copy:
        for row in rows:
            for i in json_at:
                if row[i] is not None:
                    row[i] = json.dumps(row[i])
            copy.write_row(row)
    if connection.queries_logged:
        connection.queries_log.append({"sql": sql, "time": f"{time.perf_counter() - started:.3f}"})


def _db_value(value):
    if isinstance(value, list | dict):
        return json.dumps(value)  # a JSONField's value, as Django would store it
    if isinstance(value, str):
        return str(value)  # TextChoices members become plain strings for the driver
    if isinstance(value, datetime) and connection.vendor != "postgresql":
        return connection.ops.adapt_datetimefield_value(value)
    return value
