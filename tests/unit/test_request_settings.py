"""RequestSettings: what a run's requests asked of the target, stored in its manifest, read
back, derived for runs stored before it was recorded, and shown."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from moeperf.collectors.errors import CollectorError
from moeperf.collectors.manifest import RunManifest, run_request_settings
from moeperf.collectors.request_settings import (
    GREEDY,
    LEGACY_SAMPLING,
    RequestSettings,
    Sampling,
    legacy_request_settings,
)
from moeperf.collectors.store import RunReader, RunStore
from moeperf.reports.request_view import DERIVED_NOTE, request_facts
from moeperf.specs import load_spec
from moeperf.suites.serving.load.plan import WorkerConfig
from moeperf.suites.serving.load.request_settings import request_settings

BASELINES = Path(__file__).resolve().parents[2] / "reports/baselines/nightly"

SET = RequestSettings(
    api="completions",
    sampling=Sampling(temperature=None, top_p=0.9, top_k=None, seed=7),
    include_usage=True,
    continuous_usage=False,
    ignore_eos=False,
    min_tokens=4,
    max_tokens_field="max_completion_tokens",
    extra_body={"min_p": 0.05},
    scrape_interval_s=0.5,
)


def config(**fields: object) -> WorkerConfig:
    base: dict = dict(
        base_url="http://127.0.0.1:1", api="chat", model="m", prompts=(), anchor_ns=0,
        request_timeout_s=1.0, stall_timeout_s=1.0, continuous_usage=True, ignore_eos=True,
    )  # fmt: skip
    return WorkerConfig(**{**base, **fields})


def test_the_record_round_trips_through_a_dict_and_the_manifest():
    assert RequestSettings.from_dict(SET.to_dict()) == SET
    # Unset sampling fields are stored as null: the server's default.
    stored = SET.to_dict()["sampling"]
    assert stored == {"temperature": None, "top_p": 0.9, "top_k": None, "seed": 7}
    manifest = RunManifest("r", "serving", 0, "2025-01-01T00:00:00+00:00", {}, request_settings=SET)
    again = RunManifest.from_dict(json.loads(manifest.to_json()))
    assert again.request_settings == SET and again == manifest


def test_the_store_writes_it_before_the_run_ends_and_reads_it_back(tmp_path):
    run = RunStore(tmp_path).create("serving")
    run.record_request_settings(SET)
    # On disk at once, as the run starts (a run that dies keeps it).
    assert RunReader(run.directory).manifest.request_settings == SET
    run.complete()
    assert RunReader(run.directory).manifest.request_settings == SET


def test_a_malformed_record_names_itself(tmp_path):
    broken = {k: v for k, v in SET.to_dict().items() if k != "sampling"}
    with pytest.raises(CollectorError, match=r"m.json: request_settings is malformed.*sampling"):
        RequestSettings.from_dict(broken, "m.json")


def test_the_settings_come_from_the_worker_config_as_sent():
    got = request_settings(
        config(
            api="completions", sampling=SET.sampling, continuous_usage=True, ignore_eos=False,
            include_usage=True, max_tokens_field="max_completion_tokens", min_tokens=4,
            extra_body={"min_p": 0.05},
        ),
        0.5,
    )  # fmt: skip
    assert got == dataclasses.replace(SET, continuous_usage=True)
    # No stream_options at all without include_usage: continuous_usage_stats is not sent.
    assert request_settings(config(include_usage=False), None).continuous_usage is False


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_committed_baselines_get_theirs_from_the_spec(version):
    manifest = RunReader(BASELINES / version).manifest
    assert manifest.request_settings is None  # stored before the settings were recorded
    derived = run_request_settings(manifest)
    # v1 and v2 predate include_usage, max_tokens_field and min_tokens: the behaviour of then.
    assert derived == RequestSettings(
        api="chat", sampling=LEGACY_SAMPLING, include_usage=True, continuous_usage=True,
        ignore_eos=True, min_tokens=None, max_tokens_field="max_tokens", extra_body={},
        scrape_interval_s=2.0,
    )  # fmt: skip


def test_an_old_run_of_a_spec_matches_a_new_run_of_it():
    # What the runner records for a spec's defaults equals what is derived from the same
    # resolved spec for a run that did not record it: the gate of a new nightly run
    # against an old baseline sees no request difference.
    spec = load_spec("nightly").serving
    recorded = request_settings(
        config(
            api=spec.target.api, continuous_usage=spec.target.continuous_usage,
            ignore_eos=spec.target.ignore_eos, include_usage=spec.target.include_usage,
            max_tokens_field=spec.target.max_tokens_field, min_tokens=spec.target.min_tokens,
            extra_body=dict(spec.target.extra_body), sampling=spec.sampling.as_sent(),
        ),
        spec.export.scrape_interval_s,
    )  # fmt: skip
    assert legacy_request_settings(spec.model_dump(mode="json")) == recorded
    assert recorded.sampling == GREEDY == LEGACY_SAMPLING


def test_derivation_follows_the_spec_switches():
    derived = legacy_request_settings(
        {"target": {"include_usage": False, "continuous_usage": True, "min_tokens": 3},
         "export": {"scrape_target": False, "scrape_interval_s": 5.0}}
    )  # fmt: skip
    assert (derived.include_usage, derived.continuous_usage) == (False, False)
    assert (derived.min_tokens, derived.scrape_interval_s) == (3, None)
    # An empty spec is the defaults.
    empty = legacy_request_settings({})
    assert (empty.api, empty.sampling, empty.scrape_interval_s) == ("completions", GREEDY, 2.0)


def test_runs_of_other_suites_have_none():
    manifest = RunManifest("r", "training", 0, "2025-01-01T00:00:00+00:00", {})
    assert run_request_settings(manifest) is None and request_facts(manifest) == []


def test_the_facts_list_sampling_as_sent_and_unset_fields_as_server_default():
    manifest = RunManifest("r", "serving", 0, "t", {}, request_settings=SET)
    facts = dict(request_facts(manifest))
    assert facts["sampling (as sent)"] == (
        "temperature=server default, top_p=0.9, top_k=server default, seed=7"
    )
    assert "min_tokens=4" in facts["request settings"]
    assert 'extra_body={"min_p": 0.05}' in facts["request settings"]
    assert "scrape_interval_s=0.5" in facts["request settings"]
    assert "request settings from" not in facts
    old = dict(request_facts(RunReader(BASELINES / "v2").manifest))
    assert old["sampling (as sent)"].startswith("temperature=0, top_p=server default")
    assert old["request settings from"] == DERIVED_NOTE
