"""Reading the Philly trace: rows are not sorted, the window is [start, end), errors name the line."""

from datetime import UTC, datetime

import pytest

from simulator.trace import TraceError, read_philly, read_philly_vcs

ROWS = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,1,2951.0,6214e9
2017-09-29 07:58:32,860662.0,1,860662.0,6c71a0
2017-10-10 00:00:00,10.0,8,80.0,6214e9
2017-10-09 06:13:03,5.0,2,10.0,b436b2
"""


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "philly.csv"
    path.write_text(ROWS)
    return path


def test_reader_sorts_unsorted_rows_by_time_then_file_line(trace):
    rows = read_philly(trace)

    assert [row.line for row in rows] == [4, 3, 6, 2, 5]
    assert [row.vc for row in rows] == ["6c71a0", "6214e9", "b436b2", "11cb48", "6214e9"]
    first = rows[1]
    assert first.submitted_at == datetime(2017, 10, 9, 6, 13, 3, tzinfo=UTC).timestamp()
    assert (first.duration, first.num_gpus) == (2951.0, 1)


def test_the_window_keeps_its_start_and_drops_its_end(trace):
    rows = read_philly(
        trace, start=datetime(2017, 10, 9, 6, 13, 3, tzinfo=UTC), end=datetime(2017, 10, 10, tzinfo=UTC)
    )

    assert [row.line for row in rows] == [3, 6, 2]


def test_a_window_in_another_timezone_is_read_in_utc(trace):
    rows = read_philly(trace, start=datetime.fromisoformat("2017-10-10T02:00:00+02:00"))

    assert [row.line for row in rows] == [5]


def test_a_bad_row_is_named_by_file_and_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(ROWS + "2017-10-11 00:00:00,ten,1,10,6214e9\n")

    with pytest.raises(TraceError, match=r"bad\.csv:7"):
        read_philly(path)


def test_missing_columns_are_named(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("time,length\n1,2\n")

    with pytest.raises(TraceError, match="expected the columns timestamp, duration, num_gpus, cluster"):
        read_philly(path)


def test_the_vc_file_gives_nodes_per_vc(tmp_path):
    path = tmp_path / "philly_vc.csv"
    path.write_text("vc,node num\n6214e9,64\n7f04ca,32\n")

    assert read_philly_vcs(path) == {"6214e9": 64, "7f04ca": 32}
