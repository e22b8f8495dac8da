"""docs/grafana-dashboard.json parses, and every metric and label it reads exists in a /metrics scrape."""

from __future__ import annotations

import json
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduling.passes import run as passes
from tests.api.support import P5
from tests.factories import job_in
from tests.ops.support import BASE_DIR

pytestmark = pytest.mark.django_db

DASHBOARD = BASE_DIR / "docs" / "grafana-dashboard.json"
METRIC = re.compile(r"\b(quotaportal_[a-z_]+)\b")
SELECTOR = re.compile(r"\b(quotaportal_[a-z_]+)\{([^}]*)\}")
GROUPING = re.compile(r"\b(?:by|on)\s*\(([^)]*)\)")


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    queries += [
        variable["query"]["query"]
        for variable in dashboard["templating"]["list"]
        if isinstance(variable.get("query"), dict)
    ]
    return queries


def scraped_labels(client) -> dict[str, set[str]]:
    """Sample name -> label names, from a real scrape."""
    response = client.get("/metrics")
    assert response.status_code == 200
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


def test_the_dashboard_is_grafana_json_with_panels_and_a_queue_variable():
    dashboard = json.loads(DASHBOARD.read_text())

    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 30
    panels = [panel for panel in dashboard["panels"] if panel["type"] != "row"]
    assert len(panels) >= 8
    assert all(panel["targets"] and panel["gridPos"]["w"] <= 24 for panel in panels)
    assert {"datasource", "queue", "share"} <= {v["name"] for v in dashboard["templating"]["list"]}
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


def test_every_metric_and_label_the_dashboard_reads_is_in_a_metrics_scrape(world, client):
    job_in(world.nlp, [(P5, 2)])
    passes.queue_pass_run(job_queue_id=world.queue.pk, trigger="test")  # the pass histogram has a sample
    labels = scraped_labels(client)

    used = set()
    for query in dashboard_queries():
        names = METRIC.findall(query)
        used.update(names)
        for name in names:
            assert name in labels, f"{name} (in {query}) is not in /metrics"
        for name, matchers in SELECTOR.findall(query):
            for label in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers):
                assert label in labels[name], f"{name} has no label {label}"
        for grouping in GROUPING.findall(query):
            for label in filter(None, (part.strip() for part in grouping.split(","))):
                assert any(label in labels[name] for name in names), f"no metric of {query} has label {label}"
    expected = {
        "quotaportal_share_usage",
        "quotaportal_share_limit",
        "quotaportal_share_borrowed",
        "quotaportal_share_lent",
        "quotaportal_share_pending_jobs",
        "quotaportal_preemptions_total",
        "quotaportal_pass_duration_seconds_bucket",
        "quotaportal_queue_capacity",
        "quotaportal_training_plan_in_use",
    }
    assert expected <= used
