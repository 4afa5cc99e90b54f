"""The bundled policy corpus and its BM25 search (pure Python)."""
from __future__ import annotations

import json

import pytest

from capabilities.demo import search
from capabilities.demo.functions import get_document as get_document_capability
from capabilities.demo.functions import search_documents as search_capability
from capabilities.kinds.python.executor import PythonExecutor
from runs.runtime.observation import ErrorCode


def test_the_corpus_has_fifty_distinct_documents():
    documents = json.loads(search.CORPUS_PATH.read_text())["documents"]
    assert [d["id"] for d in documents] == [f"POL-{i}" for i in range(1, 51)]
    assert len({d["title"] for d in documents}) == 50
    assert all(d["department"] and d["body"].count(".") >= 2 for d in documents)


@pytest.mark.parametrize("query, expected_first", [
    ("travel", "POL-7"),
    ("business travel flights", "POL-7"),
    ("expense receipts", "POL-4"),
    ("multi-factor authentication password", "POL-2"),
    ("how long do we keep personal data retention", "POL-8"),
    ("report a security incident", "POL-9"),
    ("parental leave", "POL-14"),
])
def test_it_ranks_the_most_relevant_policy_first(query, expected_first):
    result = search.search_documents(query)
    assert result["documents"][0]["id"] == expected_first


def test_it_returns_scores_in_descending_order_with_snippets():
    result = search.search_documents("leave", limit=10)
    scores = [d["score"] for d in result["documents"]]
    assert scores == sorted(scores, reverse=True)
    assert result["total"] >= 3
    assert all("leave" in d["snippet"].lower() for d in result["documents"][:3])
    assert set(result["documents"][0]) == {"id", "title", "score", "snippet"}


def test_it_limits_the_documents_but_counts_every_match():
    result = search.search_documents("security", limit=2)
    assert len(result["documents"]) == 2
    assert result["total"] > 2


def test_an_empty_or_stopword_query_finds_nothing():
    assert search.search_documents("") == {"documents": [], "total": 0}
    assert search.search_documents("the of and") == {"documents": [], "total": 0}


def test_an_unknown_word_finds_nothing():
    assert search.search_documents("zeppelin")["total"] == 0


def test_it_refuses_a_limit_out_of_range():
    with pytest.raises(ValueError):
        search.search_documents("travel", limit=0)


def test_it_gets_a_document_by_id():
    doc = search.get_document("pol-7")
    assert doc["title"] == "Business Travel Policy"
    assert doc["department"] == "Finance"


def test_an_unknown_document_is_not_found():
    with pytest.raises(LookupError):
        search.get_document("POL-999")


def test_the_registered_capabilities_run_through_the_executor(tmp_path):
    executor = PythonExecutor()
    spec = search_capability.__capability__.to_spec()
    found = executor.execute(spec, {"q": "travel"}, idempotency_key=None, timeout_s=5, trace_id="", span_id="")
    assert found.output["documents"][0]["id"] == "POL-7"
    missing = executor.execute(get_document_capability.__capability__.to_spec(), {"id": "POL-404"},
                               idempotency_key=None, timeout_s=5, trace_id="", span_id="")
    assert missing.error_code == ErrorCode.NOT_FOUND
    too_many = executor.execute(spec, {"q": "travel", "limit": 500}, idempotency_key=None, timeout_s=5,
                                trace_id="", span_id="")
    assert too_many.error_code == ErrorCode.INVALID_ARGUMENTS
