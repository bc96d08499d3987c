"""The price catalog: shipped data, loading (ours and SkyPilot's), validation rules, import,
user override, and the `catalog` commands with their exit codes and one-line errors."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuaudit.cli.catalog import catalog_app
from gpuaudit.cost.catalog import (
    ISO_CURRENCIES,
    compose_price,
    expected_gpu_count,
    import_catalog,
    load_catalog,
    parse_key,
    problem_summary,
    read_catalog_file,
    shipped_catalog_path,
    validate,
    write_catalog,
)
from gpuaudit.errors import BadInputError
from gpuaudit.model.cost import BILLING_ASSUMPTION, Billing, Offer
from gpuaudit.model.finding import Severity
from gpuaudit.specs import load_catalog as load_specs
from tests.support.cli import gpuaudit

ROOT = Path(__file__).parent.parent
CATS = ROOT / "tests" / "fixtures" / "catalogs"
SKY = CATS / "skypilot"
TODAY = date(2026, 11, 30)  # the day the shipped prices were read
ALIBABA_DATE = date(2023, 6, 17)  # "as of 2023.06" in the post the Alibaba rows come from


@pytest.fixture(autouse=True)
def user_catalog(tmp_path, monkeypatch) -> Path:
    """Every test gets its own (absent) user catalog: never the real one in the data dir."""
    path = tmp_path / "user" / "catalog.csv"
    monkeypatch.setenv("GPUAUDIT_USER_CATALOG", str(path))
    return path


def shipped():
    return load_catalog(include_user=False)


# -- the shipped catalog -------------------------------------------------------------------


def test_shipped_catalog_loads_without_problems_and_covers_the_brief():
    cat = shipped()
    assert cat.problems == ()
    assert len(cat) == 57
    by_provider: dict[str, int] = {}
    for o in cat.offers:
        by_provider[o.provider] = by_provider.get(o.provider, 0) + 1
    assert by_provider == {"aws": 17, "gcp": 3, "azure": 4, "lambda": 7, "nebius": 7,
                           "runpod": 2, "alibaba": 11, "vast": 6}
    models = {o.gpu_model for o in cat.offers}
    assert {"v100-sxm2-16gb", "a100-sxm4-40gb", "h100-sxm", "h200-sxm", "b200"} <= models
    # Alibaba Cloud (named in the users' articles) is priced as published, in yuan.
    assert {o.currency for o in cat.offers if o.provider == "alibaba"} == {"CNY"}
    assert {o.currency for o in cat.offers if o.provider != "alibaba"} == {"USD"}
    assert not any(o.provider == "matpool" for o in cat.offers)  # no published price found


def test_shipped_rows_have_a_source_date_currency_and_known_gpu():
    specs = load_specs()
    for o in shipped().offers:
        assert o.source.startswith("https://"), o.key
        # Read on TODAY; Alibaba's rows carry the date their source says it read them.
        assert o.price_date == (ALIBABA_DATE if o.provider == "alibaba" else TODAY), o.key
        assert o.currency in ISO_CURRENCIES, o.key
        assert specs.get(o.gpu_model) is not None, o.key
        # No invented prices: every offer has at least one price, none is a placeholder.
        prices = [o.on_demand_price_per_hour, o.spot_price_per_hour]
        assert any(p is not None for p in prices), o.key
        assert all(p is None or p > 0.05 for p in prices), o.key


def test_shipped_catalog_passes_validation_on_its_date():
    # Only the Alibaba rows warn: their source is from 2023, so they are stale, as they say.
    findings = validate(shipped(), today=TODAY)
    assert {(f.code, f.severity) for f in findings} == {("catalog.stale", Severity.WARN)}
    assert sorted(f.evidence["offer"] for f in findings) == sorted(
        o.key for o in shipped().offers if o.provider == "alibaba")
    assert len(findings) == 11


def test_alibaba_rows_as_published():
    cat = shipped()
    gn7e = cat.get("alibaba/ecs.gn7e-c16g1.32xlarge@cn-shanghai")
    assert (gn7e.gpu_model, gn7e.gpu_count, gn7e.vcpus, gn7e.ram_gib) == (
        "a100-sxm4-80gb", 8, 128, 1000.0)
    assert (gn7e.currency, gn7e.on_demand_price_per_hour) == ("CNY", 277.93)
    assert gn7e.spot_price_per_hour is None and gn7e.reserved_1y_price_per_hour is None
    assert "subscription 133408 CNY/month" in gn7e.notes
    a10 = cat.get("alibaba/ecs.gn7i-c8g1.2xlarge@cn-shanghai")
    assert (a10.gpu_model, a10.on_demand_price_per_hour) == ("a10", 9.53)
    assert cat.get("alibaba/ecs.gn6v-c8g1.2xlarge@cn-shanghai").on_demand_price_per_hour == 26.46


def test_vast_rows_from_skypilot_snapshot():
    cat = shipped()
    h100 = cat.get("vast/1x-H100_SXM-32-65536")
    assert (h100.gpu_model, h100.gpu_count, h100.on_demand_price_per_hour) == (
        "h100-sxm", 1, 1.93)
    assert h100.spot_price_per_hour is None  # SkyPilot writes 0.00: no data, not free
    assert (h100.vcpus, h100.ram_gib) == (None, None)
    assert cat.get("vast/8x-H200-32-65536").on_demand_price_per_hour == 18.82


def test_shipped_catalog_goes_stale_after_a_year():
    findings = validate(shipped(), today=date(2027, 12, 1))
    assert {f.code for f in findings} == {"catalog.stale"}
    assert len(findings) == 57
    assert all(f.severity is Severity.WARN for f in findings)


def test_shipped_unpublished_prices_stay_empty():
    cat = shipped()
    p5e = cat.get("aws/p5e.48xlarge@us-east-2")
    assert p5e is not None
    assert p5e.on_demand_price_per_hour is None  # sold through Capacity Blocks only
    assert p5e.spot_price_per_hour == 18.7359
    assert all(o.reserved_1y_price_per_hour is None and o.reserved_3y_price_per_hour is None
               for o in cat.offers)


# -- GCP composition -----------------------------------------------------------------------


def test_gcp_instance_price_is_host_plus_n_gpus():
    cat = shipped()
    one = cat.get("gcp/a2-highgpu-1g@us-central1")
    eight = cat.get("gcp/a2-highgpu-8g@us-central1")
    h100 = cat.get("gcp/a3-highgpu-8g@us-east4")
    assert one.on_demand_price_per_hour == 3.67339  # 0.73948 + 1 × 2.93391
    assert one.spot_price_per_hour == 1.80385  # 0.36975 + 1 × 1.4341
    assert eight.on_demand_price_per_hour == 29.3871  # 5.91582 + 8 × 2.93391
    assert eight.spot_price_per_hour == 14.4308  # 2.958 + 8 × 1.4341
    assert h100.on_demand_price_per_hour == 87.83246  # 9.46006 + 8 × 9.79655
    assert h100.spot_price_per_hour is None  # the H100 part's spot price was not read
    assert "host 5.91582 + 8 × GPU 2.93391 = 29.3871" in eight.notes
    assert "spot: only the host part is known" in h100.notes
    # The on-demand parts stay on the offer, and they add up to its total.
    assert (one.host_price_per_hour, one.gpu_price_per_hour) == (0.73948, 2.93391)
    assert (eight.host_price_per_hour, eight.gpu_price_per_hour) == (5.91582, 2.93391)
    assert (h100.host_price_per_hour, h100.gpu_price_per_hour) == (9.46006, 9.79655)
    for o in (one, eight, h100):
        assert o.composed
        assert o.on_demand_price_per_hour == pytest.approx(
            o.host_price_per_hour + o.gpu_count * o.gpu_price_per_hour, rel=1e-12)
    # Offers priced as a whole have no parts.
    p5 = cat.get("aws/p5.48xlarge@us-east-1")
    assert (p5.host_price_per_hour, p5.gpu_price_per_hour, p5.composed) == (None, None, False)
    assert sorted(o.key for o in cat.offers if o.composed) == [
        "gcp/a2-highgpu-1g@us-central1", "gcp/a2-highgpu-8g@us-central1",
        "gcp/a3-highgpu-8g@us-east4"]


def test_composed_offer_round_trips_without_repeating_its_arithmetic(tmp_path):
    eight = shipped().get("gcp/a2-highgpu-8g@us-central1")
    out = tmp_path / "copy.csv"
    write_catalog([eight], out)
    [again] = read_catalog_file(out).offers
    assert again == eight
    assert again.notes.count("composed:") == 1
    header, row = out.read_text().splitlines()[1:3]
    cells = dict(zip(header.split(","), row.split(","), strict=False))
    assert (cells["host_on_demand_price_per_hour"], cells["gpu_on_demand_price_per_hour"]) == (
        "5.91582", "2.93391")


# -- billing granularity -------------------------------------------------------------------


@pytest.mark.parametrize("cell, expected", [
    ("", Billing.SECOND),  # as before the field could be unknown: old files load unchanged
    ("second", Billing.SECOND), ("Minute", Billing.MINUTE), ("hour", Billing.HOUR),
    ("unknown", None), ("UNKNOWN", None), ("none", None), ("?", None),
])
def test_billing_cell(tmp_path, cell, expected):
    f = tmp_path / "c.csv"
    f.write_text("provider,instance_type,gpu_model,gpu_count,on_demand_price_per_hour,billing,"
                 f"source,price_date\nx,i,l4,1,1.5,{cell},t,2026-11-01\n")
    [o] = load_catalog(f).offers
    assert o.billing is expected
    assert o.billing_known is (expected is not None)
    # Rounding code reads effective_billing: per second when the granularity is not known.
    assert o.effective_billing is (expected or Billing.SECOND)


def test_billing_column_absent_loads_as_per_second(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text("provider,instance_type,gpu_model,gpu_count,on_demand_price_per_hour,source,"
                 "price_date\nx,i,l4,1,1.5,t,2026-11-01\n")
    assert load_catalog(f).offers[0].billing is Billing.SECOND


def test_unknown_billing_round_trips_as_unknown(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text("provider,instance_type,gpu_model,gpu_count,on_demand_price_per_hour,billing,"
                 "source,price_date\nx,i,l4,1,1.5,unknown,t,2026-11-01\n")
    offers = load_catalog(f).offers
    out = tmp_path / "out.csv"
    write_catalog(offers, out)
    assert ",unknown," in out.read_text()
    assert read_catalog_file(out).offers == offers
    assert offers[0].billing is None


def test_offer_defaults_stay_per_second_without_parts():
    o = Offer(provider="x", instance_type="i", gpu_model="l4", gpu_count=1,
              source="t", price_date=date(2026, 11, 1))
    assert (o.billing, o.host_price_per_hour, o.gpu_price_per_hour) == (Billing.SECOND, None, None)
    assert "per second" in BILLING_ASSUMPTION


def test_compose_price():
    assert compose_price(0.73948, 2.93391, 1) == 3.67339
    assert compose_price(1.0, 2.5, 4) == 11.0
    assert compose_price(None, 2.5, 4) is None
    assert compose_price(1.0, None, 4) is None


def test_stated_total_that_contradicts_its_parts_is_a_problem(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text("provider,instance_type,region,gpu_model,gpu_count,on_demand_price_per_hour,"
                 "host_on_demand_price_per_hour,gpu_on_demand_price_per_hour,source,price_date\n"
                 "gcp,a2-highgpu-2g,us-central1,a100-sxm4-40gb,2,7.34,1.0,3.0,t,2026-01-01\n"
                 "gcp,a2-highgpu-4g,us-central1,a100-sxm4-40gb,4,13.0,1.0,3.0,t,2026-01-01\n")
    cat = load_catalog(f)
    assert [o.key for o in cat.offers] == ["gcp/a2-highgpu-4g@us-central1"]
    assert [(p.line, p.code) for p in cat.problems] == [(2, "composition")]
    assert "7.34 is not host 1 + 2 × GPU 3 = 7" in cat.problems[0].message


# -- malformed rows ------------------------------------------------------------------------


def test_malformed_rows_are_reported_with_file_and_line_and_the_rest_loads():
    cat = load_catalog(CATS / "malformed.csv")
    assert [o.key for o in cat.offers] == ["x/ok-1@r1", "x/ok-2@r1"]
    ok2 = cat.get("x/ok-2@r1")
    assert ok2.on_demand_price_per_hour == 5.0  # 1 + 2 × 2, composed
    assert ok2.billing.value == "hour"
    got = [(p.line, p.code, p.message) for p in cat.problems]
    assert [(line, code) for line, code, _ in got] == [
        (3, "malformed"), (4, "malformed"), (5, "malformed"), (6, "malformed"),
        (7, "bad-price"), (8, "duplicate"), (9, "malformed"), (12, "composition"),
        (13, "malformed")]
    messages = [m for _, _, m in got]
    assert messages[0] == "on_demand_price_per_hour 'abc' is not a number"
    assert messages[1] == "gpu_count is empty"
    assert "'2026-13-01' is not a date" in messages[2]
    assert "14 cells but the header has 13 columns" in messages[3]
    assert messages[4] == "on_demand_price_per_hour -2.50 is negative"
    assert messages[5] == "x/ok-1@r1 repeats line 2; this row is ignored"
    assert messages[8] == "gpu_count is zero"
    assert str(cat.problems[0]).startswith(f"{CATS / 'malformed.csv'}:3: ")
    # The first copy of a duplicated key is the one kept.
    assert cat.get("x/ok-1@r1").on_demand_price_per_hour == 2.5


def test_load_problems_are_error_findings():
    findings = validate(load_catalog(CATS / "malformed.csv"), today=TODAY)
    loads = [f for f in findings if f.code == "catalog.load"]
    assert [f.evidence["line"] for f in loads] == [3, 4, 5, 6, 7, 8, 9, 12, 13]
    assert all(f.severity is Severity.FAIL for f in loads)


@pytest.mark.parametrize("content, needle", [
    ("", "empty (no header row)"),
    ("# only a comment\n", "empty (no header row)"),
    ("a,b,c\n1,2,3\n", "unknown format"),
    ("provider,instance_type\nx,y\n", "lacks column(s) gpu_model, gpu_count, source"),
])
def test_unusable_files_are_bad_input(tmp_path, content, needle):
    f = tmp_path / "c.csv"
    f.write_text(content)
    with pytest.raises(BadInputError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_catalog(f)


def test_missing_and_binary_files_are_bad_input(tmp_path):
    with pytest.raises(BadInputError, match="no such file"):
        load_catalog(tmp_path / "absent.csv")
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00\x81garbage")
    with pytest.raises(BadInputError, match="binary file, not text"):
        load_catalog(binary)
    with pytest.raises(BadInputError, match="is a directory"):
        load_catalog(tmp_path)


# -- validation rules, each on a planted row ----------------------------------------------


def test_each_rule_fires_on_its_planted_row_and_nowhere_else():
    findings = validate(load_catalog(CATS / "planted.csv"), today=TODAY)
    got = sorted((f.code.removeprefix("catalog."), f.severity.value, f.evidence["offer"],
                  f.evidence["line"]) for f in findings)
    assert got == sorted([
        ("spot-not-cheaper", "FAIL", "x/spot-above@r1", 6),
        ("spot-not-cheaper", "WARN", "x/spot-equal@r1", 7),
        ("placeholder-price", "FAIL", "x/placeholder@r1", 8),
        ("per-gpu-outlier", "WARN", "x/outlier@r1", 9),
        ("gpu-count", "FAIL", "aws/p5.48xlarge@us-east-1", 10),
        ("stale", "WARN", "x/stale@r1", 11),
        ("future-date", "FAIL", "x/future@r1", 12),
        ("unknown-currency", "FAIL", "x/currency@r1", 13),
        ("unknown-gpu", "WARN", "x/mystery@r1", 14),
        ("repeated-price", "WARN", "y/rep-a@r1", 15),
        ("repeated-price", "WARN", "y/rep-b@r1", 16),
    ])


def test_outlier_message_states_the_median_and_peer_count():
    [f] = [f for f in validate(load_catalog(CATS / "planted.csv"), today=TODAY)
           if f.code == "catalog.per-gpu-outlier"]
    # Per-GPU on-demand of the 9 priced USD h100-sxm rows (the 0.01 placeholder excluded),
    # one vote per provider: x's 2.40 2.45 2.48 2.50 2.52 2.55 2.60 30 → its median 2.51;
    # aws's 5.50 → the median of the two providers 4.005; 30 > 3 × 4.005.
    assert f.evidence["median"] == 4.005
    assert f.evidence["per_gpu"] == 30.0
    assert "median 4.005 of 9 h100-sxm offers (2 providers, one vote each)" in f.message


def test_stale_limit_and_date_are_parameters():
    cat = load_catalog(CATS / "planted.csv")
    stale = [f for f in validate(cat, today=date(2026, 6, 2), stale_days=365)
             if f.code == "catalog.stale"]
    assert [f.evidence["offer"] for f in stale] == ["x/stale@r1"]
    assert stale[0].evidence["age_days"] == 883
    stale = [f for f in validate(cat, today=date(2026, 6, 3), stale_days=1)
             if f.code == "catalog.stale"]
    assert len(stale) == 13  # the 12 rows of 2026-06-01 and the 2024 one; not the 2027 one


def test_a_zero_price_is_a_data_error_and_its_row_is_skipped(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text("provider,instance_type,region,gpu_model,gpu_count,on_demand_price_per_hour,"
                 "spot_price_per_hour,source,price_date\nx,i,r,l4,1,0.9,0,t,2026-11-01\n"
                 "x,j,r,l4,1,,,t,2026-11-01\nx,k,r,l4,1,0.8,,t,2026-11-01\n")
    cat = load_catalog(f)
    assert [o.key for o in cat.offers] == ["x/k@r"]
    assert [(p.line, p.code) for p in cat.problems] == [(2, "zero-price"), (3, "no-price")]
    [line] = problem_summary(cat.problems)
    assert line.startswith(f"{f}: skipped 2 rows (1 zero price (a placeholder), 1 no price);")
    assert "line 2: spot_price_per_hour is zero" in line
    findings = validate(cat, today=TODAY)
    assert [(x.code, x.evidence["kind"]) for x in findings] == [("catalog.load", "zero-price"),
                                                                ("catalog.load", "no-price")]


def test_many_bad_rows_are_one_summary_line(tmp_path):
    f = tmp_path / "c.csv"
    rows = "".join(f"x,i{i},r,l4,1,0.9,t,2026-11-01,a,b\n" for i in range(5000))
    f.write_text("provider,instance_type,region,gpu_model,gpu_count,on_demand_price_per_hour,"
                 "source,price_date\nx,ok,r,l4,1,0.9,t,2026-11-01\n" + rows)
    cat = load_catalog(f)
    assert len(cat.problems) == 5000 and len(cat.offers) == 1
    [line] = problem_summary(cat.problems)
    assert "skipped 5,000 rows (5,000 malformed); first: line 3: 10 cells" in line
    res = cli("list", "--catalog", str(f))
    assert res.exit_code == 0
    assert res.stderr.count("skipped") == 1, res.stderr


@pytest.mark.parametrize("value", ["0.01", "700", "9999"])
def test_placeholder_values(tmp_path, value):
    f = tmp_path / "c.csv"
    f.write_text("provider,instance_type,region,gpu_model,gpu_count,spot_price_per_hour,"
                 f"source,price_date\nx,i,r,l4,1,{value},t,2026-11-01\n")
    [finding] = validate(load_catalog(f), today=TODAY)
    assert finding.code == "catalog.placeholder-price"
    assert finding.severity is Severity.FAIL


def test_outliers_need_peers(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text("provider,instance_type,region,gpu_model,gpu_count,on_demand_price_per_hour,"
                 "source,price_date\nx,a,r,l4,1,0.80,t,2026-11-01\nx,b,r,l4,1,9.00,t,2026-11-01\n")
    assert validate(load_catalog(f), today=TODAY) == []  # two offers: no median to judge by
    # With two allowed, the median is 4.9 and 0.80 is more than 3× below it.
    got = validate(load_catalog(f), today=TODAY, min_peers=2)
    assert [(x.code, x.evidence["offer"]) for x in got] == [("catalog.per-gpu-outlier", "x/a@r")]


@pytest.mark.parametrize("provider, instance, count", [
    ("aws", "p5.48xlarge", 8), ("aws", "p4d.24xlarge", 8), ("aws", "p4de.24xlarge", 8),
    ("aws", "p5en.48xlarge", 8), ("aws", "g5.xlarge", 1), ("aws", "g5.12xlarge", 4),
    ("aws", "g6.48xlarge", 8), ("aws", "p3.8xlarge", 4), ("gcp", "a2-highgpu-4g", 4),
    ("gcp", "a3-ultragpu-8g", 8), ("gcp", "a2-megagpu-16g", 16), ("gcp", "g2-standard-48", 4),
    ("azure", "Standard_ND96isr_H100_v5", 8), ("azure", "standard_nc24ads_a100_v4", 1),
    ("lambda", "gpu_8x_h100_sxm5", 8), ("runpod", "2x_A100-80GB_SECURE", 2),
    ("nebius", "gpu-h200-sxm_8gpu-128vcpu-1600gb", 8), ("aws", "m5.large", None),
    ("vast", "8x-H200-32-65536", 8), ("alibaba", "ecs.gn7i-c32g1.32xlarge", 4),
    ("alibaba", "ecs.gn7e-c16g1.4xlarge", 1), ("alibaba", "ecs.unknown", None),
    ("gcp", "n1-standard-8", None), ("vast", "anything", None),
])
def test_expected_gpu_count(provider, instance, count):
    assert expected_gpu_count(provider, instance) == count


def test_azure_h100_with_twelve_gpus_is_caught(tmp_path):
    # The SkyPilot Azure catalog lists Standard_ND96isr_H100_v5 with 12 GPUs (research §1.2).
    f = tmp_path / "c.csv"
    f.write_text("provider,instance_type,region,gpu_model,gpu_count,on_demand_price_per_hour,"
                 "spot_price_per_hour,source,price_date\n"
                 "azure,Standard_ND96isr_H100_v5,eastus,h100-sxm,12,98.32,98.32,t,2026-11-01\n")
    codes = sorted((x.code, x.severity.value) for x in validate(load_catalog(f), today=TODAY))
    assert codes == [("catalog.gpu-count", "FAIL"), ("catalog.spot-not-cheaper", "WARN")]


# -- SkyPilot's format ---------------------------------------------------------------------


def test_skypilot_aws_zones_fold_into_one_offer_per_region():
    cat = load_catalog(SKY / "aws" / "vms.csv")
    assert [o.key for o in cat.offers] == ["aws/p4d.24xlarge@us-east-1",
                                           "aws/p5e.48xlarge@us-east-2",
                                           "aws/p5en.48xlarge@us-east-1"]
    p4d = cat.get("aws/p4d.24xlarge@us-east-1")
    assert (p4d.gpu_model, p4d.gpu_count, p4d.gpu_memory_gib) == ("a100-sxm4-40gb", 8, 40.0)
    assert (p4d.vcpus, p4d.ram_gib, p4d.currency) == (96, 1152.0, "USD")
    assert p4d.on_demand_price_per_hour == 21.957642
    assert p4d.spot_price_per_hour == 2.4655  # the cheapest of 4 zones
    assert "cheapest of 4 zones (2.4655-8.1915)" in p4d.notes
    p5e = cat.get("aws/p5e.48xlarge@us-east-2")
    assert (p5e.gpu_model, p5e.on_demand_price_per_hour, p5e.spot_price_per_hour) == (
        "h200-sxm", None, 18.7359)
    assert cat.get("aws/p5en.48xlarge@us-east-1").spot_price_per_hour == 16.5551
    # The CPU-only m5a row is skipped silently; the short last row is a problem.
    assert [(p.line, p.code) for p in cat.problems] == [(13, "malformed")]
    assert "9 cells but the header has 11 columns" in cat.problems[0].message


# The machine type → (accelerator, count) table, written out here from GCP's machine-type
# pages (and SkyPilot's table), not imported from the code under test.
GCP_TYPES = {
    "a2-highgpu-4g": ("A100", 4), "a2-highgpu-8g": ("A100", 8), "a2-megagpu-16g": ("A100", 16),
    "a2-ultragpu-1g": ("A100-80GB", 1), "a2-ultragpu-2g": ("A100-80GB", 2),
    "a2-ultragpu-4g": ("A100-80GB", 4), "a2-ultragpu-8g": ("A100-80GB", 8),
    "a3-highgpu-1g": ("H100", 1), "a3-highgpu-2g": ("H100", 2), "a3-highgpu-4g": ("H100", 4),
    "a3-highgpu-8g": ("H100", 8), "a3-megagpu-8g": ("H100-MEGA", 8),
    "a3-ultragpu-8g": ("H200", 8), "a4-highgpu-8g": ("B200", 8),
}


def _gcp_expected(path):
    """Every GCP offer of a SkyPilot file, computed from its rows: host + the accelerator row
    of the same GPU, count and zone; on-demand the highest composed zone, spot the cheapest;
    N1 hosts for attachable GPUs by SkyPilot's rule (default vCPUs, 4 GiB each, the cheapest)
    within GCP's limits. Rows with a 0.0 price are data errors (no offer)."""
    hosts, accs = defaultdict(dict), defaultdict(dict)
    spec = {}
    with open(path) as fh:
        for row in csv.DictReader(ln for ln in fh if not ln.startswith("#")):
            if row["AcceleratorName"].startswith("tpu"):
                continue
            od, sp = float(row["Price"]), float(row["SpotPrice"])
            if od == 0 or sp == 0:
                continue
            if row["InstanceType"]:
                hosts[(row["InstanceType"], row["Region"])][row["AvailabilityZone"]] = (od, sp)
                spec[row["InstanceType"]] = (float(row["vCPUs"]), float(row["MemoryGiB"]))
            else:
                key = (row["AcceleratorName"], int(row["AcceleratorCount"]), row["Region"])
                accs[key][row["AvailabilityZone"]] = (od, sp)

    def both(h, a):
        zones = h.keys() & a.keys()
        return (round(max(h[z][0] + a[z][0] for z in zones), 6),
                round(min(h[z][1] + a[z][1] for z in zones), 6))

    out = {}
    for (it, region), h in hosts.items():
        if it in GCP_TYPES and (GCP_TYPES[it] + (region,)) in accs:
            out[f"gcp/{it}@{region}"] = both(h, accs[GCP_TYPES[it] + (region,)])
    defaults = {"T4": {1: 4, 2: 8, 4: 48}, "P100": {1: 8, 2: 16, 4: 32},
                "P4": {1: 8, 2: 16, 4: 32}}
    limits = {"T4": {1: (48, 312), 2: (48, 312), 4: (96, 624)},
              "P100": {1: (16, 104), 2: (32, 208), 4: (96, 624)},
              "P4": {1: (24, 156), 2: (48, 312), 4: (96, 624)}}
    for (acc, n, region), a in accs.items():
        if acc not in defaults:
            continue
        need, (top_cpu, top_mem) = defaults[acc][n], limits[acc][n]
        fit = [(min(p[0] for p in hosts[(it, region)].values()), it) for it, (c, m) in spec.items()
               if it.startswith("n1-") and (it, region) in hosts
               and need <= c <= top_cpu and need * 4 <= m <= top_mem]
        if fit:
            it = min(fit)[1]
            out[f"gcp/{it}+{n}x{acc}@{region}"] = both(hosts[(it, region)], a)
    return out


def test_skypilot_gcp_every_offer_is_host_plus_the_matching_accelerator_row():
    path = SKY / "gcp" / "vms.csv"
    cat = load_catalog(path)
    got = {o.key: (o.on_demand_price_per_hour, o.spot_price_per_hour) for o in cat.offers}
    expected = _gcp_expected(path)
    assert len(expected) == 48
    assert got == expected  # every offer, both prices: 0 mismatches
    # The worked figure of docs/cost-catalog.md: host 9.46006 + the 8 × H100 row 78.37241.
    a3 = cat.get("gcp/a3-highgpu-8g@us-east4")
    assert (a3.on_demand_price_per_hour, a3.gpu_count, a3.gpu_model) == (87.83247, 8,
                                                                         "h100-sxm")
    assert (a3.host_price_per_hour, a3.gpu_price_per_hour) == (9.46006, 9.796551)
    assert a3.gpu_memory_gib == 80.0 and a3.composed
    t4 = cat.get("gcp/n1-highmem-4+1xT4@us-central1")
    assert (t4.gpu_model, t4.gpu_count, t4.vcpus, t4.ram_gib) == ("t4", 1, 4, 26.0)
    # a4-highgpu-8g's host rows are 0.0: data errors, counted, never a cheaper offer.
    assert [(p.line, p.code) for p in cat.problems] == [(81, "zero-price"), (82, "zero-price"),
                                                        (83, "zero-price")]
    assert not [o for o in cat.offers if o.instance_type.startswith("a4")]


def test_skypilot_runpod_pcie_name_and_memory_written_in_gib():
    cat = load_catalog(SKY / "runpod" / "vms.csv")
    o = cat.get("runpod/1x_A100-80GB_SECURE@CA")
    # 4 zones of CA fold into one offer; GpuInfo says "A100 PCIe" and SizeInMiB: 80 (GiB).
    assert (o.gpu_model, o.gpu_memory_gib, o.on_demand_price_per_hour) == (
        "a100-pcie-80gb", 80.0, 1.39)
    assert "80 read as GiB" in o.notes
    assert sorted(x.key for x in cat.offers) == [
        f"runpod/{n}x_A100-80GB_SECURE@{r}" for n in (1, 2) for r in ("CA", "IN", "US")]
    findings = validate(cat, today=date.today())
    # SkyPilot writes spot = on-demand for RunPod (no spot data): a doubt, not an error.
    assert {(f.code, f.severity.value) for f in findings} == {
        ("catalog.spot-not-cheaper", "WARN")}


def test_skypilot_provider_from_option_when_the_path_does_not_say(tmp_path):
    f = tmp_path / "prices.csv"
    f.write_text((SKY / "aws" / "vms.csv").read_text())
    assert {o.provider for o in read_catalog_file(f).offers} == {"skypilot"}
    assert {o.provider for o in read_catalog_file(f, provider="aws").offers} == {"aws"}


# -- user catalog: import and override -----------------------------------------------------


def test_the_newest_dated_source_wins_and_the_loser_is_kept(user_catalog, tmp_path):
    result = import_catalog(CATS / "user.csv")
    assert result.dest == user_catalog
    assert result.added == ("aws/p5.48xlarge@us-east-1", "matpool/a100-80g-1")
    assert (result.replaced, result.skipped, result.total) == ((), (), 2)
    cat = load_catalog()
    assert len(cat) == 58  # 57 shipped, one new; the contract row lost to a newer one
    # The contract row is dated 2026-07-01, the shipped list price 2026-11-30: the newer wins,
    # and the older one is kept beside it, not dropped silently.
    p5 = cat.get("aws/p5.48xlarge@us-east-1")
    assert (p5.on_demand_price_per_hour, p5.price_date) == (55.04, date(2026, 11, 30))
    [lost] = cat.superseded_by(p5.key)
    assert (lost.offer.source, lost.location.file) == ("contract 2026-07", str(user_catalog))
    assert lost.why == "newer prices (2026-11-30 over 2026-07-01)"
    res = cli("show", "aws/p5.48xlarge@us-east-1")
    assert res.exit_code == 0
    assert "replaces" in res.stdout and "contract 2026-07" in res.stdout
    doc = json.loads(cli("show", "aws/p5.48xlarge@us-east-1", "--json").stdout)
    assert doc["offers"][0]["replaces"][0]["source"] == "contract 2026-07"
    # Dated later, the contract price wins.
    newer = tmp_path / "contract.csv"
    newer.write_text((CATS / "user.csv").read_text().replace("2026-07-01", "2026-12-01"))
    import_catalog(newer)
    p5 = load_catalog().get("aws/p5.48xlarge@us-east-1")
    assert (p5.on_demand_price_per_hour, p5.reserved_1y_price_per_hour) == (41.28, 30.0)
    assert load_catalog().superseded_by(p5.key)[0].offer.price_date == date(2026, 11, 30)
    assert load_catalog().get("aws/p5.48xlarge@us-east-2").on_demand_price_per_hour == 55.04
    mp = cat.get("matpool/a100-80g-1")
    assert (mp.currency, mp.on_demand_price_per_hour, mp.region) == ("CNY", 9.8, None)
    assert load_catalog(include_user=False).get(
        "aws/p5.48xlarge@us-east-1").on_demand_price_per_hour == 55.04


def test_reimport_replaces_and_the_file_round_trips(user_catalog):
    import_catalog(CATS / "user.csv")
    again = import_catalog(CATS / "user.csv")
    assert again.added == ()
    assert again.replaced == ("aws/p5.48xlarge@us-east-1", "matpool/a100-80g-1")
    first = read_catalog_file(CATS / "user.csv").offers
    assert read_catalog_file(user_catalog).offers == first


def test_import_of_skypilot_file_merges_its_good_rows(user_catalog):
    result = import_catalog(SKY / "aws" / "vms.csv")
    assert len(result.added) == 3
    assert [p.line for p in result.skipped] == [13]
    assert load_catalog().get("aws/p4d.24xlarge@us-east-1").spot_price_per_hour == 2.4655


@pytest.mark.parametrize("name, needle", [
    ("negative-price.csv", "negative-price.csv:2: on_demand_price_per_hour -2.10 is negative"),
    ("unknown-currency.csv", "unknown-currency.csv:3: unknown currency 'XYZ'"),
])
def test_import_refuses_wrong_numbers_and_writes_nothing(user_catalog, name, needle):
    with pytest.raises(BadInputError, match="import refused") as info:
        import_catalog(CATS / name)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)
    assert not user_catalog.exists()


def test_import_skips_zero_price_rows_with_a_count(user_catalog):
    result = import_catalog(CATS / "zero-price.csv")
    assert result.added == ("mycloud/box-1@dc1",)
    assert [(p.line, p.code) for p in result.skipped] == [(3, "zero-price")]
    res = cli("import", str(CATS / "zero-price.csv"))
    assert res.exit_code == 0
    assert "1 rows skipped" in res.stdout
    assert "skipped 1 row (1 zero price (a placeholder))" in " ".join(res.stderr.split())


def test_write_catalog_round_trip(tmp_path):
    offers = shipped().offers
    out = tmp_path / "copy.csv"
    write_catalog(offers, out)
    assert read_catalog_file(out).offers == offers


def test_parse_key():
    assert parse_key("aws/p5.48xlarge@us-east-1") == ("aws", "p5.48xlarge", "us-east-1")
    assert parse_key("lambda/gpu_8x_h100_sxm5") == ("lambda", "gpu_8x_h100_sxm5", None)
    with pytest.raises(BadInputError, match="PROVIDER/INSTANCE"):
        parse_key("p5.48xlarge")


def test_shipped_path_is_package_data():
    assert shipped_catalog_path() == ROOT / "src" / "gpuaudit" / "data" / "catalog.csv"


# -- the commands (CliRunner on catalog_app; subprocess once it is registered) -----------

runner = CliRunner()


def cli(*args: str):
    return runner.invoke(catalog_app, list(args), env={"COLUMNS": "200"})


def assert_bad_input(result, *needles: str):
    """Bad input: one stderr line and exit 2 (cli/common.py maps it, for each sub-app too)."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpuaudit: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0]


def test_list_json_filters_and_sorts_per_gpu():
    res = cli("list", "--gpu", "h200-sxm", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    keys = [o["key"] for o in doc["offers"]]
    assert keys == ["vast/8x-H200-32-65536", "vast/1x-H200-32-65536",
                    "nebius/gpu-h200-sxm_1gpu-16vcpu-200gb@eu-north1",
                    "nebius/gpu-h200-sxm_8gpu-128vcpu-1600gb@eu-north1",
                    "nebius/gpu-h200-sxm_8gpu-128vcpu-1600gb@us-central1",
                    "aws/p5en.48xlarge@us-east-1", "aws/p5en.48xlarge@us-east-2",
                    "aws/p5en.48xlarge@us-west-2", "aws/p5e.48xlarge@us-east-2"]
    assert doc["offers"][5]["on_demand_price_per_gpu_hour"] == 7.912
    assert all(o["currency"] == "USD" for o in doc["offers"])


def test_list_sort_by_instance_price_and_max_price():
    res = cli("list", "--provider", "lambda", "--max-price", "16", "--sort", "price", "--json")
    keys = [o["key"] for o in json.loads(res.stdout)["offers"]]
    assert keys == ["lambda/gpu_1x_a100_sxm4", "lambda/gpu_8x_v100", "lambda/gpu_1x_b200_sxm6",
                    "lambda/gpu_2x_b200_sxm6", "lambda/gpu_8x_a100"]


def test_list_table_states_the_currency():
    res = cli("list", "--provider", "azure")
    assert res.exit_code == 0, res.output
    assert "currency" in res.stdout
    assert res.stdout.count("USD") == 4
    assert "azure/Standard_ND96asr_v4@eastus" in res.stdout


@pytest.mark.parametrize("args, needle", [
    (("list", "--sort", "cheap"), "--sort 'cheap'"),
    (("list", "--max-price", "0"), "--max-price '0': must be more than zero"),
    (("list", "--catalog", str(CATS / "unknown-currency.csv")), "unknown currency 'XYZ'"),
    (("list", "--catalog", str(CATS / "negative-price.csv")), "-2.10 is negative"),
    (("list", "--catalog", str(CATS / "absent.csv")), "no such file"),
    (("show", "aws/nope.48xlarge"), "not in the catalog"),
    (("show", "p5.48xlarge"), "expected PROVIDER/INSTANCE"),
    (("validate", str(CATS / "absent.csv")), "no such file"),
    (("validate", "--today", "yesterday"), "--today 'yesterday'"),
    (("import", str(CATS / "negative-price.csv")), "import refused"),
    (("import", str(CATS / "unknown-currency.csv")), "unknown currency"),
])
def test_bad_input_is_one_line_exit_2(args, needle):
    assert_bad_input(cli(*args), needle)


def test_show_one_region_and_all_regions():
    res = cli("show", "aws/p5.48xlarge@us-east-1", "--json")
    [offer] = json.loads(res.stdout)["offers"]
    assert (offer["on_demand_price_per_hour"], offer["spot_price_per_hour"]) == (55.04, 17.63)
    assert offer["from"].endswith("catalog.csv:12")
    res = cli("show", "aws/p5.48xlarge", "--json")
    assert [o["region"] for o in json.loads(res.stdout)["offers"]] == [
        "us-east-1", "us-east-2", "us-west-2"]
    text = cli("show", "gcp/a2-highgpu-8g@us-central1").stdout
    assert "29.3871 USD/h" in text
    assert "host 5.91582 + 8 × GPU 2.93391 = 29.3871" in " ".join(text.split())


def test_validate_exit_codes_and_json():
    res = cli("validate", str(CATS / "planted.csv"), "--today", "2026-11-30", "--json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert (doc["offers_checked"], doc["errors"], doc["warnings"]) == (14, 5, 6)
    res = cli("validate", "--today", "2026-11-30")
    assert res.exit_code == 0, res.output
    assert "57 offers checked: 0 errors, 11 warnings" in res.stdout  # Alibaba: stale
    res = cli("validate", "--today", "2028-01-01")
    assert res.exit_code == 0  # stale is a warning
    assert "57 warnings" in res.stdout
    res = cli("validate", str(CATS / "malformed.csv"), "--today", "2026-11-30")
    assert res.exit_code == 1
    assert "malformed.csv:3" in res.stdout


def test_import_command_then_list_uses_it(user_catalog):
    res = cli("import", str(CATS / "user.csv"))
    assert res.exit_code == 0, res.output
    assert "imported 2 offers" in res.stdout
    assert "2 new, 0 replaced, 0 rows skipped" in res.stdout
    doc = json.loads(cli("list", "--provider", "matpool", "--json").stdout)
    assert [(o["key"], o["currency"]) for o in doc["offers"]] == [("matpool/a100-80g-1", "CNY")]


# The same through `python -m gpuaudit`, once cli/app.py registers catalog_app.

def _registered() -> bool:
    from gpuaudit.cli.app import COMMANDS

    return "catalog" in COMMANDS


needs_registration = pytest.mark.skipif(not _registered(),
                                        reason="catalog_app not yet added to cli/app.py")


@needs_registration
def test_cli_validate_exit_1_on_errors():
    proc = gpuaudit("catalog", "validate", str(CATS / "planted.csv"), "--today", "2026-11-30")
    assert proc.returncode == 1, proc.stderr
    assert "5 errors, 6 warnings" in proc.stdout


@needs_registration
@pytest.mark.parametrize("args, needle", [
    (("catalog", "import", str(CATS / "negative-price.csv")), "is negative"),
    (("catalog", "validate", str(CATS / "absent.csv")), "no such file"),
    (("catalog", "show", "aws/nope"), "not in the catalog"),
])
def test_cli_bad_input_one_line_exit_2(tmp_path, args, needle):
    proc = gpuaudit(*args, env={"GPUAUDIT_USER_CATALOG": str(tmp_path / "u.csv")})
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("gpuaudit: error: ") and needle in lines[0]


# -- SkyPilot imports: zones, billing, form factors (real rows, tests/fixtures/catalogs) -------

ZONES = SKY / "zones" / "aws" / "vms.csv"  # every p5.48xlarge row of SkyPilot's AWS file
LAMBDA = SKY / "lambda" / "vms.csv"


def test_aws_local_zone_prices_are_left_out_and_counted():
    cat = load_catalog(ZONES)
    p5 = cat.get("aws/p5.48xlarge@us-east-1")
    # us-east-1's cheapest zone is use1-az6 (17.6289); the Atlanta Local Zone's 10.2397 is not
    # a price of the region and must not become its spot price.
    assert p5.spot_price_per_hour == 17.6289
    assert "spot: cheapest of 6 zones (17.6289-55.04)" in p5.notes
    assert cat.get("aws/p5en.48xlarge@us-east-1").spot_price_per_hour == 16.5551
    assert not any("atl" in o.key for o in cat.offers)
    # Two GPU rows left out (p5 and p5en in use1-atl2-az1); the CPU-only row of the Los
    # Angeles Local Zone is skipped like every CPU row and not counted.
    [left] = cat.left_out
    assert (left.kind, left.rows, left.zones) == ("local-zone", 2, ("use1-atl2-az1",))
    assert "left out 2 rows priced in AWS Local Zones (use1-atl2-az1)" in str(left)
    assert cat.problems == ()


def test_local_zones_on_request_are_offers_of_their_own_location():
    cat = load_catalog(ZONES, include_local_zones=True)
    assert cat.left_out == ()
    atl = cat.get("aws/p5.48xlarge@us-east-1-atl-2")
    assert atl.spot_price_per_hour == 10.2397 and atl.on_demand_price_per_hour == 55.04
    assert "AWS Local Zone use1-atl2-az1 of us-east-1, priced on its own" in atl.notes
    # The region keeps its own zones' price either way.
    assert cat.get("aws/p5.48xlarge@us-east-1").spot_price_per_hour == 17.6289
    assert cat.get("aws/p5en.48xlarge@us-east-1-atl-2").spot_price_per_hour == 17.2074


def test_recommends_first_pick_is_no_longer_a_local_zone_price():
    from gpuaudit.cost.recommend import TrainTask, recommend

    task = TrainTask(params=1e9, tokens=20e9, layers=16, hidden=2048)
    first = recommend(task, load_catalog(ZONES).offers, top=1).ranked[0]
    # With the Atlanta zone folded into us-east-1 (before), us-east-1 at 10.2397 came first.
    assert (first.offer.key, first.pricing.value, first.price_per_hour) == (
        "aws/p5.48xlarge@us-east-2", "spot", 11.2543)
    asked = recommend(task, load_catalog(ZONES, include_local_zones=True).offers, top=1)
    assert asked.ranked[0].offer.key == "aws/p5.48xlarge@us-east-1-atl-2"


@pytest.mark.parametrize("zone, kind, location", [
    ("use1-az6", "az", None), ("us-east-1a", "az", None), ("us-gov-west-1a", "az", None),
    ("apse4-az1", "az", None), ("", "az", None),
    ("use1-atl2-az1", "local-zone", "us-east-1-atl-2"),
    ("usw2-lax1-az1", "local-zone", "us-west-2-lax-1"),
    ("us-west-2-lax-1a", "local-zone", "us-west-2-lax-1"),
    # Wavelength Zone ids and names as AWS's "Available Wavelength Zones" page lists them.
    ("use1-wl1-bos-wlz1", "wavelength-zone", "us-east-1-wl1-bos-wlz-1"),
    ("us-east-1-wl1-bos-wlz-1", "wavelength-zone", "us-east-1-wl1-bos-wlz-1"),
])
def test_aws_zone_kinds_and_locations(zone, kind, location):
    from gpuaudit.cost.catalog.skypilot import zone_kind, zone_location

    region = "us-west-2" if "usw2" in zone or "west-2" in zone else "us-east-1"
    assert zone_kind(zone) == kind
    if location is not None:
        assert zone_location(region, zone) == location


def test_wavelength_zone_rows_are_left_out_under_their_own_kind(tmp_path):
    # A real row of the zones fixture, moved to a Wavelength Zone id: the count and the words
    # follow the zone's kind.
    lines = [ln for ln in ZONES.read_text().splitlines() if not ln.startswith("#")]
    header = lines[0]
    [row] = [ln for ln in lines if ln.startswith("p5.48xlarge") and "use1-az6" in ln]
    f = tmp_path / "aws" / "vms.csv"
    f.parent.mkdir()
    f.write_text(header + "\n" + row + "\n" + row.replace("use1-az6", "use1-wl1-bos-wlz1")
                 + "\n")
    cat = load_catalog(f)
    [left] = cat.left_out
    assert (left.kind, left.rows) == ("wavelength-zone", 1)
    assert "AWS Wavelength Zones (use1-wl1-bos-wlz1)" in str(left)
    assert [o.key for o in cat.offers] == ["aws/p5.48xlarge@us-east-1"]


def test_imported_aws_and_gcp_rows_bill_per_second_after_a_minute():
    for path in (ZONES, SKY / "aws" / "vms.csv", SKY / "gcp" / "vms.csv"):
        offers = load_catalog(path).offers
        assert offers and {(o.billing, o.billing_minimum_s) for o in offers} == {
            (Billing.SECOND, 60.0)}, path
        assert all("60 s minimum" in o.notes or "1 min minimum" in o.notes for o in offers)
    # Providers whose billing is not in SkyPilot's file nor published here keep the default.
    runpod = load_catalog(SKY / "runpod" / "vms.csv").offers
    assert {(o.billing, o.billing_minimum_s) for o in runpod} == {(Billing.SECOND, 0.0)}


def test_lambda_pcie_h100_is_the_pcie_part():
    cat = load_catalog(LAMBDA)
    models = {o.instance_type: o.gpu_model for o in cat.offers}
    # SkyPilot calls both H100 (AcceleratorName and GpuInfo); only the name tells them apart.
    assert models == {"gpu_1x_h100_pcie": "h100-pcie", "gpu_1x_h100_sxm5": "h100-sxm",
                      "gpu_8x_a100_80gb_sxm4": "a100-sxm4-80gb"}
    pcie = cat.get("lambda/gpu_1x_h100_pcie@us-east-1")
    assert "the instance name says PCIe" in pcie.notes
    assert not any(f.code == "catalog.gpu-form-factor" for f in validate(cat, today=TODAY))


@pytest.mark.parametrize("name, form", [
    ("gpu_1x_h100_pcie", "pcie"), ("gpu_8x_h100_sxm5", "sxm"), ("gpu_1x_b200_sxm6", "sxm"),
    ("1x-A100_PCIE-32-65536", "pcie"), ("1x-H100_SXM-32-65536", "sxm"),
    ("gpu-h100-sxm_8gpu-128vcpu-1600gb", "sxm"), ("A100 PCIe", "pcie"),
    ("p5.48xlarge", None), ("Standard_ND96isr_H100_v5", None), ("1x_A100-80GB_SECURE", None),
    ("gpu_8x_a100", None),
])
def test_form_factor_a_name_states(name, form):
    from gpuaudit.cost.catalog.families import stated_form_factor

    assert stated_form_factor(name) == form


def test_a_name_that_contradicts_the_gpu_part_is_an_error(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text("provider,instance_type,region,gpu_model,gpu_count,on_demand_price_per_hour,"
                 "source,price_date\n"
                 "lambda,gpu_1x_h100_pcie,,h100-sxm,1,2.49,t,2026-11-01\n"
                 "vast,1x-H100_SXM-32-65536,,h100-pcie,1,1.93,t,2026-11-01\n"
                 "lambda,gpu_1x_h100_sxm5,,h100-sxm,1,3.29,t,2026-11-01\n"
                 "azure,Standard_NC40ads_H100_v5,eastus,h100-nvl,1,6.98,t,2026-11-01\n")
    got = [(x.evidence["offer"], x.severity.value, x.advice) for x in
           validate(load_catalog(f), today=TODAY) if x.code == "catalog.gpu-form-factor"]
    assert got == [("lambda/gpu_1x_h100_pcie", "FAIL", "use h100-pcie"),
                   ("vast/1x-H100_SXM-32-65536", "FAIL", "use h100-sxm")]


def test_regional_prices_that_coincide_are_not_repeated_prices():
    cat = load_catalog(ZONES)
    # Real, and equal: AWS prices ca-central-1 at 1.15 × us-east-1 (63.296 = 1.15 × 55.04).
    h100 = cat.get("aws/p5.48xlarge@ca-central-1")
    h200 = cat.get("aws/p5en.48xlarge@us-east-1")
    assert h100.on_demand_price_per_hour == h200.on_demand_price_per_hour == 63.296
    assert h100.gpu_model != h200.gpu_model
    assert not [f for f in validate(cat) if f.code == "catalog.repeated-price"]


def test_repeated_price_for_other_gpu_counts_in_one_region(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text("provider,instance_type,region,gpu_model,gpu_count,on_demand_price_per_hour,"
                 "source,price_date\n"
                 "y,one,r1,l4,1,0.80,t,2026-11-01\ny,eight,r1,l4,8,0.80,t,2026-11-01\n"
                 "y,one,r2,l4,1,0.80,t,2026-11-01\ny,other,r2,l4,1,0.80,t,2026-11-01\n")
    got = [f for f in validate(load_catalog(f), today=TODAY) if f.code == "catalog.repeated-price"]
    # r1: one price for 1 and 8 GPUs (a copied cell); r2: two 1-GPU instances at one price
    # (the same hardware sold twice): not suspicious.
    assert sorted(x.evidence["offer"] for x in got) == ["y/eight@r1", "y/one@r1"]
    assert "other GPU counts (1 × l4, 8 × l4) in r1" in got[0].message


def test_one_providers_many_regions_do_not_set_the_outlier_median(user_catalog):
    import statistics

    import_catalog(ZONES)  # AWS's p5.48xlarge in 12 regions beside the shipped rows
    cat = load_catalog()
    h100 = [o.on_demand_price_per_hour / o.gpu_count for o in cat.offers
            if o.gpu_model == "h100-sxm" and o.currency == "USD" and o.on_demand_price_per_hour]
    vast = cat.get("vast/1x-H100_SXM-32-65536").on_demand_price_per_hour
    # Counting rows, AWS's regions set the median so high that Vast's 1.93 would be "3× below".
    assert vast < statistics.median(h100) / 3
    # The imported rows are dated the day of the import: judged from the real today.
    findings = validate(cat, today=date.today())
    assert not [f for f in findings if f.code == "catalog.per-gpu-outlier"]
    # One vote per provider: AWS, GCP, Lambda, Nebius, Vast → Lambda's 3.99 is the median.
    assert not [f for f in findings if f.severity is Severity.FAIL]


def test_import_says_how_many_rows_were_left_out(user_catalog):
    res = cli("import", str(ZONES))
    assert res.exit_code == 0, res.output
    assert ("left out 2 rows priced in AWS Local Zones (use1-atl2-az1); --local-zones keeps "
            "them as their own locations") in res.stderr
    assert "imported 13 offers" in res.stdout
    res = cli("import", str(ZONES), "--json")
    doc = json.loads(res.stdout)
    assert doc["left_out"] == [{"file": str(ZONES), "kind": "local-zone", "rows": 2,
                                "zones": ["use1-atl2-az1"]}]
    res = cli("import", str(ZONES), "--local-zones", "--json")
    doc = json.loads(res.stdout)
    assert doc["left_out"] == [] and "aws/p5.48xlarge@us-east-1-atl-2" in doc["added"]


def test_validate_reports_left_out_rows_as_information():
    res = cli("validate", str(ZONES), "--json")
    assert res.exit_code == 0, res.output  # INFO and WARN only
    infos = [f for f in json.loads(res.stdout)["findings"] if f["code"] == "catalog.left-out"]
    assert [(f["severity"], f["evidence"]["rows"]) for f in infos] == [("INFO", 2)]
    res = cli("validate", str(ZONES), "--local-zones", "--json")
    assert not [f for f in json.loads(res.stdout)["findings"] if f["code"] == "catalog.left-out"]
