"""Ranked full-text search over the bundled policy corpus (BM25). Pure Python, no Django."""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

CORPUS_PATH = Path(__file__).with_name("corpus.json")
MAX_LIMIT = 50
SNIPPET_CHARS = 200
# BM25 parameters (the usual defaults) and how much more a title word counts than a body word.
K1, B = 1.2, 0.75
TITLE_WEIGHT = 3

STOPWORDS = frozenset([
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be",
    "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do",
    "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having",
    "he", "her", "here", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself",
    "just", "me", "more", "most", "my", "no", "nor", "not", "of", "off", "on", "once", "only", "or", "other",
    "our", "ours", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the",
    "their", "theirs", "them", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under",
    "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why",
    "will", "with", "would", "you", "your", "yours", "policy", "policies"
])


class DocumentNotFound(LookupError):
    pass


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    department: str
    body: str


def tokenize(text: str) -> list[str]:
    """Lowercased word stems without stopwords."""
    return [stem(word) for word in re.findall(r"[a-z0-9]+", text.lower()) if word not in STOPWORDS]


def stem(word: str) -> str:
    """A deliberately light stemmer: plurals only, so 'expenses' finds 'expense'."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


class Index:
    def __init__(self, documents: list[Document]) -> None:
        self.documents = documents
        self.by_id = {doc.id.upper(): doc for doc in documents}
        self.terms = [Counter(tokenize(doc.title) * TITLE_WEIGHT + tokenize(doc.body)) for doc in documents]
        self.lengths = [sum(terms.values()) for terms in self.terms]
        self.average_length = sum(self.lengths) / max(1, len(self.lengths))
        frequency = Counter(term for terms in self.terms for term in terms)
        n = len(documents)
        self.idf = {term: math.log(1 + (n - df + 0.5) / (df + 0.5)) for term, df in frequency.items()}

    def search(self, query: str, limit: int = 5) -> dict[str, Any]:
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_LIMIT}")
        query_terms = list(dict.fromkeys(tokenize(query)))
        scored = []
        for position, terms in enumerate(self.terms):
            score = self._score(query_terms, terms, self.lengths[position])
            if score > 0:
                scored.append((score, position))
        scored.sort(key=lambda item: (-item[0], item[1]))
        hits = []
        for score, position in scored[:limit]:
            doc = self.documents[position]
            hits.append({"id": doc.id, "title": doc.title, "score": round(score, 4),
                         "snippet": snippet(doc.body, query_terms)})
        return {"documents": hits, "total": len(scored)}

    def _score(self, query_terms: list[str], terms: Counter, length: int) -> float:
        score = 0.0
        for term in query_terms:
            tf = terms.get(term, 0)
            if tf:
                norm = K1 * (1 - B + B * length / self.average_length)
                score += self.idf[term] * tf * (K1 + 1) / (tf + norm)
        return score

    def get(self, document_id: str) -> Document:
        try:
            return self.by_id[document_id.strip().upper()]
        except KeyError:
            raise DocumentNotFound(f"no document with id {document_id!r}") from None


def snippet(body: str, query_terms: list[str]) -> str:
    """The sentence with the most query terms, shortened to SNIPPET_CHARS."""
    sentences = re.split(r"(?<=[.!?])\s+", body.strip())
    wanted = set(query_terms)
    best = max(sentences, key=lambda s: (len(wanted & set(tokenize(s))), -sentences.index(s)))
    return best if len(best) <= SNIPPET_CHARS else best[: SNIPPET_CHARS - 1].rsplit(" ", 1)[0] + "…"


@lru_cache(maxsize=1)
def default_index() -> Index:
    data = json.loads(CORPUS_PATH.read_text(encoding="utf-8"))
    return Index([Document(**doc) for doc in data["documents"]])


def search_documents(q: str, limit: int = 5) -> dict[str, Any]:
    return default_index().search(q, limit)


def get_document(document_id: str) -> dict[str, str]:
    doc = default_index().get(document_id)
    return {"id": doc.id, "title": doc.title, "department": doc.department, "body": doc.body}
