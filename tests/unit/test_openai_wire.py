"""The wire variants both targets share (targets/openai_wire.py): each response's shape,
and the strict servers' 422 for fields OpenAI does not document."""

from __future__ import annotations

import json

import pytest

from moeperf.suites.serving.load.openai_api import rejected_field_hint, request_body
from moeperf.targets.openai_wire import StreamShape, UnknownFields, WireVariant, unknown_fields


@pytest.mark.parametrize(
    ("variant", "continuous", "expected"),
    [
        # vLLM: as asked, a usage-only chunk at the end, [DONE].
        (WireVariant(), False, StreamShape(True, False, False, True, True, True)),
        (WireVariant(), True, StreamShape(True, True, False, True, True, True)),
        # SGLang / TGI / transformers serve: on the finish_reason chunk, never per chunk.
        (WireVariant(usage="end_only"), True, StreamShape(True, False, True, False, True, True)),
        # old llama.cpp: none anywhere.
        (WireVariant(usage="never"), True, StreamShape(True, False, False, False, False, True)),
        (
            WireVariant(send_done=False, role_chunk=False),
            False,
            StreamShape(False, False, False, True, True, False),
        ),
    ],
)
def test_each_variant_shapes_a_chat_stream(variant, continuous, expected):
    assert variant.shape(chat=True, include_usage=True, continuous_usage=continuous) == expected


def test_where_usage_lands_on_token_chunks():
    end_only = WireVariant(usage="end_only").shape(
        chat=True, include_usage=True, continuous_usage=True
    )
    assert (end_only.usage_on(finished=False), end_only.usage_on(finished=True)) == (False, True)
    # Not asked for: end_only sends none either.
    quiet = WireVariant(usage="end_only").shape(
        chat=True, include_usage=False, continuous_usage=False
    )
    assert not quiet.usage_on(finished=True) and not quiet.usage_chunk
    every = WireVariant().shape(chat=False, include_usage=False, continuous_usage=True)
    assert every.usage_on(finished=False) and not every.role_chunk  # completions: no role


def test_unknown_fields_are_the_bodys_own_first_then_stream_options():
    body = request_body(
        "chat", "m", "p", 8, continuous_usage=True, ignore_eos=True, min_tokens=2,
        extra={"top_k": 1, "user": "u"},
    )  # fmt: skip
    found = unknown_fields(body, chat=True)
    assert [loc for loc, _ in found] == [
        ("ignore_eos",),
        ("min_tokens",),
        ("top_k",),
        ("stream_options", "continuous_usage_stats"),
    ]
    # max_completion_tokens is chat's only; best_of is completions' only.
    assert unknown_fields({"max_completion_tokens": 8, "best_of": 1}, chat=True) == [
        (("best_of",), 1)
    ]
    assert unknown_fields({"max_completion_tokens": 8, "best_of": 1}, chat=False) == [
        (("max_completion_tokens",), 8)
    ]


def test_a_strict_variant_answers_422_in_fastapis_shape():
    body = {"model": "m", "messages": [], "ignore_eos": True}
    WireVariant().check_fields(body, chat=True)  # the default reads what it knows
    strict = WireVariant(reject_unknown_fields=True)
    strict.check_fields([1, 2], chat=True)  # not an object: the request parser refuses it
    with pytest.raises(UnknownFields) as info:
        strict.check_fields(body, chat=True)
    error = info.value
    assert error.status == 422 and error.param == "ignore_eos"
    assert json.loads(error.body()) == {
        "detail": [
            {
                "type": "extra_forbidden",
                "loc": ["body", "ignore_eos"],
                "msg": "Extra inputs are not permitted",
                "input": True,
            }
        ]
    }


def test_the_harness_names_the_first_rejected_field_of_the_422():
    sent = request_body("chat", "m", "p", 8, continuous_usage=True, ignore_eos=True)
    with pytest.raises(UnknownFields) as info:
        WireVariant(reject_unknown_fields=True).check_fields(sent, chat=True)
    hint = rejected_field_hint(sent, 422, info.value.body().decode())
    assert hint == "the target rejected 'ignore_eos' (HTTP 422); set target.ignore_eos = false"
