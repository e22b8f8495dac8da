"""The bulk SQL a pass writes with: UPDATE, DELETE and INSERT of many rows in a fixed number of statements.

COPY on PostgreSQL; elsewhere (SQLite, the embedded default) one small parameterised statement run through
`executemany`, which the driver prepares once and steps through every row: one statement whatever the number
of rows, never one per 999 values (SQLite's variable limit, which `bulk_create` and `IN (...)` lists split
on). Each runs on the caller's connection, inside the caller's transaction (a pass holds its queue's row lock
meanwhile).
"""

from __future__ import annotations

import itertools
import json
import time
from datetime import datetime

from django.db import connection
from django.db.models import DateTimeField, JSONField, Model

_staging_names = itertools.count()


# At most this many rows, a PostgreSQL UPDATE carries its values in the statement (one round trip); more go
# through COPY into a temporary table, which costs four statements (create, copy, analyze, drop) whatever the rows.
SMALL_UPDATE_ROWS = 200


def rows_update(
    *,
    model: type[Model],
    fields: tuple[str, ...],
    rows: dict[int, dict],
    key: str = "id",
    where_null: str | None = None,
) -> None:
    """UPDATE many rows with per-row values, matched on `key` (a column: the id, or e.g. a job's id), in a fixed
    number of statements; `where_null` names a column that must be NULL for a row to change.

    A pass may rewrite thousands of pending reasons. Django's bulk_update builds one CASE per field whose
    cost grows with the square of the batch, so on PostgreSQL up to SMALL_UPDATE_ROWS rows go in one
    `UPDATE ... FROM (VALUES ...)` and more are streamed with COPY into a temporary table and applied with one
    UPDATE ... FROM; elsewhere one parameterised UPDATE per row runs through executemany.
    """
    if not rows:
        return
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    ids = sorted(rows)
    if connection.vendor == "postgresql":
        columns = {f.column: f for f in model._meta.concrete_fields}
        json_fields = {name for name in fields if isinstance(columns[name], JSONField)}
        assignments = ", ".join(f"{qn(name)} = v.{qn(name)}" for name in fields)
        condition = f"t.{qn(key)} = v.id" + (f" AND t.{qn(where_null)} IS NULL" if where_null else "")
        with connection.cursor() as cursor:
            if len(ids) <= SMALL_UPDATE_ROWS:
                # Every placeholder cast: a VALUES list takes its column types from its values, not the table.
                casts = ["%s::bigint", *(f"%s::{columns[name].db_type(connection)}" for name in fields)]
                line = f"({', '.join(casts)})"
                params = []
                for row_id in ids:
                    values = rows[row_id]
                    params.append(row_id)
                    params.extend(
                        json.dumps(values[name])
                        if name in json_fields and values[name] is not None
                        else values[name]
                        for name in fields
                    )
                names = ", ".join(["id", *(qn(name) for name in fields)])
                cursor.execute(
                    f"UPDATE {table} AS t SET {assignments} "
                    f"FROM (VALUES {', '.join([line] * len(ids))}) AS v ({names}) WHERE {condition}",
                    params,
                )
                return
            staging = qn(f"qp_update_{model._meta.model_name}_{next(_staging_names)}")
            definition = ", ".join(
                ["id bigint", *(f"{qn(n)} {columns[n].db_type(connection)}" for n in fields)]
            )
            cursor.execute(f"CREATE TEMPORARY TABLE {staging} ({definition}) ON COMMIT DROP")
            copy_rows(
                cursor,
                staging,
                ("id", *fields),
                ([row_id, *[rows[row_id][name] for name in fields]] for row_id in ids),
                json_at=[i + 1 for i, name in enumerate(fields) if name in json_fields],
            )
            cursor.execute(f"ANALYZE {staging}")  # a temporary table has no statistics until asked
            cursor.execute(f"UPDATE {table} AS t SET {assignments} FROM {staging} AS v WHERE {condition}")
            cursor.execute(f"DROP TABLE {staging}")
        return
    assignments = ", ".join(f"{qn(name)} = %s" for name in fields)
    condition = f"{qn(key)} = %s" + (f" AND {qn(where_null)} IS NULL" if where_null else "")
    fields_by_column = {f.column: f for f in model._meta.concrete_fields}
    values = _driver_rows(
        [fields_by_column[name] for name in fields],
        ([*(rows[row_id][name] for name in fields), row_id] for row_id in ids),
    )
    with connection.cursor() as cursor:
        cursor.executemany(f"UPDATE {table} SET {assignments} WHERE {condition}", values)


def rows_delete(model: type[Model], ids: list[int]) -> None:
    """DELETE many rows by primary key in one statement: `= ANY(array)` on PostgreSQL, executemany elsewhere."""
    if not ids:
        return
    table = connection.ops.quote_name(model._meta.db_table)
    pk = connection.ops.quote_name(model._meta.pk.column)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"DELETE FROM {table} WHERE {pk} = ANY(%s)", [ids])
            return
        cursor.executemany(f"DELETE FROM {table} WHERE {pk} = %s", [(row_id,) for row_id in sorted(ids)])


def rows_insert(model: type[Model], rows: list[dict]) -> None:
    """INSERT many new rows (dicts by attname) whose ids nobody needs back: one COPY on PostgreSQL.

    The primary key is written only when the rows carry it (a one-to-one key); an automatic one is left out.
    """
    if not rows:
        return
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    first = rows[0]
    concrete = [f for f in model._meta.concrete_fields if not f.primary_key or f.attname in first]
    defaults = [(f.attname, f.get_default()) for f in concrete]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            copy_rows(
                cursor,
                table,
                tuple(f.column for f in concrete),
                ([row.get(name, default) for name, default in defaults] for row in rows),
                json_at=[i for i, f in enumerate(concrete) if isinstance(f, JSONField)],
            )
            return
        # bulk_create would split the rows into batches of 999 values and build a model instance per row.
        values = _driver_rows(
            concrete, ([row.get(name, default) for name, default in defaults] for row in rows)
        )
        cursor.executemany(
            f"INSERT INTO {table} ({', '.join(qn(f.column) for f in concrete)}) "
            f"VALUES ({', '.join(['%s'] * len(concrete))})",
            values,
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


def _driver_rows(fields: list, lines) -> list[list]:
    """Lines of values (lists, one value per field of `fields`, any further values passed as they are) as the
    driver takes them outside PostgreSQL, converted column by column: a JSONField's value serialized as Django
    would store it, datetimes as the backend stores them (each distinct one adapted once: most of a pass's are
    its `now`); any other value goes as it is (a TextChoices member is a str to the driver)."""
    adapt = connection.ops.adapt_datetimefield_value
    adapted: dict[datetime, object] = {}

    def moment(item):
        found = adapted.get(item)
        if found is None:
            found = adapted[item] = adapt(item)
        return found

    columns = []
    for i, field in enumerate(fields):
        if isinstance(field, JSONField):
            columns.append((i, json.dumps))
        elif isinstance(field, DateTimeField):
            columns.append((i, moment))
    values = []
    for line in lines:
        for i, convert in columns:
            item = line[i]
            if item is not None:
                line[i] = convert(item)
        values.append(line)
    return values
