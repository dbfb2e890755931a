"""Unit tests of where a risk budget is stated: the ``--risk-budget`` flag (run, once, report, backtest), the
``podtailor.io/risk-budget`` annotation (parsed, and what an unusable one does in the engine) and the strategy
a VPA is served by."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import pytest

from recommender.__main__ import build_parser
from recommender.backtest.cli import _specs
from recommender.cli import build_strategy, strategy_at_risk
from recommender.kube.served import BUDGET_ANNOTATION, UnparsableVpa, VpaSpec, budget_annotation, read_vpa
from recommender.model.podtailor import PodtailorStrategy
from recommender.model.podtailor_budget import RiskBudget
from recommender.model.podtailor_state import PodtailorState
from recommender.model.registry import at_risk, get_strategy
from recommender.recommend import strategy_for
from tests.unit.test_engine_risk import NOW, Source, Store, engine, memory, warnings

BOTH = RiskBudget(cpu_over_share=0.01, oom_per_month=1.0)


def cli(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("command", ["run", "once", "report"])
def test_the_flag_sets_the_budget_beside_the_risk(command: str) -> None:
    args = cli(command, "--prometheus-url", "http://p", "--risk", "2", "--risk-budget", "cpu=0.01,oom=1")
    built = build_strategy(args)
    assert isinstance(built, PodtailorStrategy) and built.params.budget == BOTH and built.params.risk == 2.0
    plain = build_strategy(cli(command, "--prometheus-url", "http://p"))
    assert isinstance(plain, PodtailorStrategy) and plain.params.budget == RiskBudget()
    builder = strategy_at_risk(args)
    assert builder is not None
    at_4 = builder(4.0)  # a VPA with only a risk annotation keeps the recommender's own budget
    assert isinstance(at_4, PodtailorStrategy) and at_4.params.budget == BOTH and at_4.params.risk == 4.0
    own = builder(4.0, RiskBudget(oom_per_month=3.0))  # its own budget annotation wins
    assert isinstance(own, PodtailorStrategy) and own.params.budget == RiskBudget(oom_per_month=3.0)


def test_bad_flag_values_exit_2_with_what_is_wanted(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("cpu=2", "1%", "cpu=0.01,cpu=0.02", "oom=-1"):
        with pytest.raises(SystemExit) as exit_info:
            cli("run", "--prometheus-url", "http://p", "--risk-budget", bad)
        assert exit_info.value.code == 2
        assert "want cpu=SHARE" in capsys.readouterr().err
    from podtailor.runtime.cli import UsageError
    with pytest.raises(UsageError, match="--risk-budget is a setting of the podtailor strategy; vpa has none"):
        build_strategy(cli("run", "--prometheus-url", "http://p", "--strategy", "vpa", "--risk-budget", "cpu=0.01"))


def test_the_backtest_flag_budgets_podtailor_and_refuses_a_run_without_it() -> None:
    specs = _specs(cli("backtest", "t.csv", "--strategies", "podtailor,vpa", "--risk-budget", "cpu=0.02",
                       "--set", "podtailor.budget.cpu_eta_end=0.5"))
    [pod] = [s for s in specs if s.name == "podtailor"]
    built = get_strategy("podtailor", **dict(pod.overrides))
    assert isinstance(built, PodtailorStrategy)
    assert built.params.budget == RiskBudget(cpu_over_share=0.02, cpu_eta_end=0.5)
    with pytest.raises(ValueError, match="--risk-budget is a setting of podtailor"):
        _specs(cli("backtest", "t.csv", "--strategies", "vpa", "--risk-budget", "cpu=0.02"))


def test_the_annotation_is_parsed_or_said_why_not() -> None:
    assert budget_annotation({}) == (None, None)
    assert budget_annotation(None) == (None, None)
    assert budget_annotation({BUDGET_ANNOTATION: "cpu=0.01,oom=1"}) == (BOTH, None)
    budget, why = budget_annotation({BUDGET_ANNOTATION: "cpu=5%"})
    assert budget is None and why is not None and why.startswith(f"annotation {BUDGET_ANNOTATION}: risk budget")
    budget, why = budget_annotation({BUDGET_ANNOTATION: 0.01})
    assert budget is None and why is not None and "is not a string" in why


def spec(annotations: dict[str, str]) -> VpaSpec:
    out = read_vpa({"metadata": {"namespace": "ns", "name": "v", "uid": "u", "generation": 1,
                                 "annotations": annotations},
                    "spec": {"targetRef": {"kind": "Deployment", "name": "w"}}})
    assert isinstance(out, VpaSpec)
    return out


def test_a_vpa_with_only_a_budget_is_served_at_the_recommenders_risk_with_it() -> None:
    default = get_strategy("podtailor", risk=2.0)
    chosen = strategy_for(spec({BUDGET_ANNOTATION: "oom=1"}), default, at_risk("podtailor"))
    assert isinstance(chosen, PodtailorStrategy)
    assert chosen.params.risk == 2.0 and chosen.params.budget == RiskBudget(oom_per_month=1.0)
    assert strategy_for(spec({}), default, at_risk("podtailor")) is default
    assert strategy_for(spec({BUDGET_ANNOTATION: "nope"}), default, at_risk("podtailor")) is default


class BudgetStore(Store):
    """``Store`` with each value set as the ``podtailor.io/risk-budget`` annotation instead of the risk."""

    def list_vpas(self, namespaces: Sequence[str] = ()) -> list[VpaSpec | UnparsableVpa]:
        out = []
        for name, budget in self.annotations.items():
            meta: dict[str, Any] = {"namespace": "ns", "name": f"v-{name}", "uid": f"u-{name}", "generation": 1}
            if budget is not None:
                meta["annotations"] = {BUDGET_ANNOTATION: budget}
            out.append(read_vpa({"metadata": meta, "spec": {"targetRef": {"kind": "Deployment", "name": name},
                                                             "recommenders": [{"name": "podtailor"}]}}))
        return out


def test_an_unusable_budget_annotation_serves_the_vpa_and_warns_once() -> None:
    eng, events, _ = engine({})
    eng.store = BudgetStore({"plain": None, "typo": "cpu=lots", "budgeted": "oom=2"})
    eng.source = Source(["plain", "typo", "budgeted"])
    report = eng.run_pass(NOW)
    assert report.served == 3 and memory(report, "typo") == memory(report, "plain") is not None
    [(vpa, reason, message, _)] = warnings(events)
    assert (vpa, reason) == ("v-typo", "RiskAnnotationIgnored")
    assert message == (f"annotation {BUDGET_ANNOTATION}: risk budget 'cpu=lots': want cpu=SHARE (0 to 1, of time "
                       "over the request) and/or oom=KILLS (per container-month), e.g. cpu=0.01,oom=1; served at "
                       "the recommender's own risk setting (--risk-budget)")
    eng.run_pass(NOW + 60)
    assert len(warnings(events)) == 1  # not repeated every pass
    # the budgeted VPA was served with its budget: its container's memory margin is armed (at the fleet's, 1),
    # the others' are not
    for uid, armed in (("u-budgeted", True), ("u-plain", False), ("u-typo", False)):
        [state] = eng.served[uid].states.values()
        assert isinstance(state, PodtailorState) and (state.budget.memory_log_margin == 0.0) is armed
