"""Configuration files: the schema, several configurations in one file, `base: philly`, clear errors."""

import json

import pytest

from engine import Ordering, Strategy
from simulator import ConfigurationError, load_configurations
from simulator import philly as philly_mapping

from .builders import T0

TWO = """
configurations:
  - name: today
    strategy: LEND
    capacity: {ml.p5.48xlarge: 10, ml.g5.xlarge: 4}
    shares:
      - {name: nlp, limits: {ml.p5.48xlarge: 6}}
      - name: vision
        strategy: LEND_AND_BORROW
        borrow_limit: 100
        limits: {ml.p5.48xlarge: 4, ml.g5.xlarge: 4}
        in_share_preemption: true
    plans:
      - {name: dec-p5, instance_type: ml.p5.48xlarge, instance_count: 2, start: 2017-10-10,
         end: "2017-10-12T12:00:00Z", shares: [nlp]}
  - name: strict
    ordering: STRICT_FIFO
    plan_drain_seconds: 600
    instance_types: {ml.custom.xlarge: 2}
    shares:
      - {name: nlp, strategy: RESERVE, limits: {ml.custom.xlarge: 3}}
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_yaml_file_holds_several_named_configurations(tmp_path):
    today, strict = load_configurations(write(tmp_path, "what-if.yaml", TWO))

    assert today.name == "today" and today.capacity == {"ml.p5.48xlarge": 10, "ml.g5.xlarge": 4}
    nlp, vision = today.shares
    assert (nlp.strategy, nlp.borrow_limit, nlp.in_share_preemption) == (Strategy.LEND, -1, False)
    assert (vision.strategy, vision.borrow_limit, vision.in_share_preemption) == (
        Strategy.LEND_AND_BORROW,
        100,
        True,
    )
    [plan] = today.plans
    assert (plan.start, plan.end, plan.shares) == (1507593600.0, 1507809600.0, ("nlp",))
    assert strict.ordering == Ordering.STRICT_FIFO and strict.plan_drain_seconds == 600
    assert strict.capacity == {"ml.custom.xlarge": 3}  # no capacity given: the sum of the limits
    assert strict.gpus_of("ml.custom.xlarge") == 2 and today.gpus_of("ml.p5.48xlarge") == 8


def test_a_json_file_holds_one_configuration(tmp_path):
    path = write(tmp_path, "one.json", json.dumps({"shares": [{"name": "a", "limits": {"ml.g5.xlarge": 2}}]}))

    [config] = load_configurations(path)

    assert (config.name, config.capacity) == ("one", {"ml.g5.xlarge": 2})


def test_base_philly_sizes_the_vc_shares_and_the_file_overrides_some(tmp_path):
    bases = {
        "philly": philly_mapping.philly_base(
            vcs={"a": 4, "b": 4},
            mix={"a": {"ml.g5.xlarge": 1.0}, "b": {"ml.g5.xlarge": 1.0}},
            capacity_scale=0.5,
            start=T0,
            end=T0 + 86400,
            seed=1,
        )
    }
    text = """
base: philly
name: mostly-borrowing
strategy: LEND_AND_BORROW
capacity_scale: 1
shares:
  - {name: b, strategy: RESERVE, borrow_limit: -1}
"""

    [config] = load_configurations(write(tmp_path, "philly.yaml", text), bases=bases)

    a, b = config.shares
    assert (a.strategy, a.limits) == (Strategy.LEND_AND_BORROW, {"ml.g5.xlarge": 32})
    assert (b.strategy, b.limits) == (Strategy.RESERVE, {"ml.g5.xlarge": 32})
    assert config.capacity == {"ml.g5.xlarge": 64}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "shares: [{name: a, limits: {t: 3}}]\ncapacity: {t: 2}",
            "t: the share limits total 3 but the capacity is 2",
        ),
        (
            "shares: [{name: a, strategy: RESERVE, borrow_limit: 50, limits: {t: 1}}]",
            "borrow_limit applies only to LEND_AND_BORROW shares",
        ),
        ("shares: [{name: a, limits: {t: 1}}]\nshare_typo: 1", "unknown key share_typo"),
        ("shares: [{name: a}]", "a new share needs limits"),
        ("shares: [{name: 'a b', limits: {t: 1}}]", "a name is 1 to 128 letters"),
        (
            "shares: [{name: a, limits: {t: 1}}]\nplans: [{name: p, instance_type: t, instance_count: 1, "
            "start: 2017-10-10, end: 2017-10-11, shares: [z]}]",
            "plan p: no share named z",
        ),
        ("base: nowhere", "unknown base 'nowhere'"),
    ],
)
def test_a_bad_configuration_is_refused_naming_what_is_wrong(tmp_path, text, message):
    with pytest.raises(ConfigurationError, match="configuration 1") as caught:
        load_configurations(write(tmp_path, "bad.yaml", text))

    assert message in str(caught.value)


LENDING_AND_FAIRNESS = """
name: beyond
idle_capacity_assignment: FAIR_SHARE
preemption_min_runtime_seconds: 600
capacity: {ml.p5.48xlarge: 10}
shares:
  - {name: nlp, strategy: LEND, limits: {ml.p5.48xlarge: 6}, lending_limits: {ml.p5.48xlarge: 2}}
  - {name: vision, strategy: LEND_AND_BORROW, limits: {ml.p5.48xlarge: 4}, fair_share_weight: 2.5}
"""


def test_a_file_sets_lending_limits_weights_fair_share_and_protection(tmp_path):
    from decimal import Decimal

    from engine import IdleCapacityAssignment
    from simulator.shortcuts import shortcuts_cover

    path = tmp_path / "beyond.yaml"
    path.write_text(LENDING_AND_FAIRNESS)

    [config] = load_configurations(path)

    assert config.idle_capacity_assignment == IdleCapacityAssignment.FAIR_SHARE
    assert config.preemption_min_runtime_seconds == 600
    assert config.share("nlp").lending_limits == {"ml.p5.48xlarge": 2}
    assert config.share("vision").fair_share_weight == Decimal("2.5")
    assert not shortcuts_cover(config)


def test_a_lending_limit_on_a_reserve_share_or_above_its_limit_is_refused(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(LENDING_AND_FAIRNESS.replace("strategy: LEND,", "strategy: RESERVE,"))
    with pytest.raises(ConfigurationError, match="a RESERVE share lends nothing"):
        load_configurations(path)
    path.write_text(LENDING_AND_FAIRNESS.replace("{ml.p5.48xlarge: 2}", "{ml.p5.48xlarge: 7}"))
    with pytest.raises(ConfigurationError, match="must be between 0 and its limit 6"):
        load_configurations(path)
