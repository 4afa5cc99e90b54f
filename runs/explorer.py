"""The tool-call explorer: every attempt across runs, filtered, searched and keyset-paginated.

Full-text search reads one search document per attempt: its signature (capability and canonical
arguments), error message and output (or the preview of an output stored by reference), the
first SEARCH_CHARS characters of them (the migration's SQL holds the same number). The database
keeps it in step on every write, whatever writes the row (the worker's one-statement pass
included): on PostgreSQL a stored generated tsvector column with a GIN index (stored, so checking
a match never parses the text again), on SQLite an FTS5 table kept by triggers (runs migration
0020). A query is words and "quoted phrases", all of which must match; the same query means the
same thing on both databases.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime

from django.db import connection
from django.db.models import BooleanField, Prefetch, Q, QuerySet
from django.db.models.expressions import RawSQL

from core.errors import InvalidInput
from core.pagination import KeysetPage, Ordering, WalkFirst, keyset_page, planned_rows
from runs.labels import runs_with_labels
from runs.models import Attempt, Run, Step

SEARCH_CHARS = 4000
MAX_QUERY_CHARS = 200
MAX_TERMS = 8
ATTEMPTS_PER_PAGE = 50
# Calls are counted exactly up to this many (then PostgreSQL's estimate): counting the matches of a
# common word costs a recheck of each, and the first page needs only 51 of them.
COUNT_CAP = 1_000
ORDERING = Ordering.of(("-started_at", "-id"))
# How many calls, in the list's order, a search of several terms checks one by one (first the
# shorter walk, then the longer) before it asks the search index: ~10 and ~50 ms at 20M attempts.
SEARCH_WALKS = (2_000, 20_000)

# PostgreSQL keeps each attempt's document as a stored tsvector column (runs migration 0020: not a
# model field; the database fills it), GIN-indexed as attempt_search_gin_idx.
PG_VECTOR = "search_vector"
FTS_TABLE = "runs_attempt_fts"

_TERM = re.compile(r'"([^"]*)"|(\S+)')
_WORD = re.compile(r"\w")


def search_terms(query: str) -> list[str]:
    """A query's terms: each "quoted phrase" and each other word, in order. Raises InvalidInput
    (a 400 naming `q`) for a query too long or with too many terms; characters with a meaning in
    either database's query syntax are only text here (each term is passed as a phrase)."""
    query = (query or "").strip()
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(f"The search is too long (at most {MAX_QUERY_CHARS} characters).",
                           fields={"q": f"at most {MAX_QUERY_CHARS} characters"})
    terms = []
    for phrase, word in _TERM.findall(query.replace("\x00", "")):
        term = (phrase or word).strip()
        if _WORD.search(term):   # punctuation alone matches nothing on either database: left out
            terms.append(term)
    if len(terms) > MAX_TERMS:
        raise InvalidInput(f"Search for at most {MAX_TERMS} words or phrases.",
                           fields={"q": f"at most {MAX_TERMS} words or phrases"})
    return terms


def _fts5_phrase(term: str) -> str:
    # An FTS5 string: inside double quotes every character is text; a quote is doubled.
    return '"' + term.replace('"', '""') + '"'


def _condition(terms: list[str], table: str = "runs_attempt", *, indexed: bool = True) -> tuple[str, list[str]]:
    """SQL true for an attempt row (of `table`, an alias) whose search document holds every term;
    indexed=False writes it so that PostgreSQL checks it row by row (no index serves COALESCE)."""
    if connection.vendor == "postgresql":
        query = " && ".join(["phraseto_tsquery('simple'::regconfig, %s)"] * len(terms))
        match = f"\"{table}\".\"{PG_VECTOR}\" @@ ({query})"
        return (match if indexed else f"COALESCE({match}, false)"), list(terms)
    return (f"\"{table}\".\"id\" IN (SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s)",
            [" AND ".join(map(_fts5_phrase, terms))])


def matching(attempts: QuerySet[Attempt], terms: list[str], *, indexed: bool = True) -> QuerySet[Attempt]:
    """The attempts whose search document holds every term (each a phrase)."""
    if not terms:
        return attempts
    sql, params = _condition(terms, indexed=indexed)
    return attempts.extra(where=[sql], params=params)


def runs_matching(terms: list[str]) -> RawSQL:
    """Ids of runs with an attempt whose search document holds every term (the runs list's `q`)."""
    sql, params = _condition(terms)
    return RawSQL(f"SELECT \"runs_attempt\".\"run_id\" FROM \"runs_attempt\" WHERE {sql}", params)


# Up to this many matching attempts, their runs' ids are read first and the runs probed by id.
SELECTIVE_MATCHES = 5_000


def _common(terms: list[str]) -> bool:
    """Do the terms match more than SELECTIVE_MATCHES calls, by their share of the latest calls times
    the calls PostgreSQL plans for? Reading their run ids to find out would read every match the
    search index holds for each term (300 ms for a phrase of two common words at 20M attempts)."""
    if connection.vendor != "postgresql":
        return False   # the embedded default's tables are small: reading the ids costs little
    walk = SEARCH_WALKS[0]
    latest = Attempt.objects.order_by(*ORDERING.order_by()).values("pk")[:walk]
    found = matching(Attempt.objects.filter(pk__in=latest), terms, indexed=False).count()
    return found / walk * planned_rows(Attempt.objects.all()) > SELECTIVE_MATCHES


def run_text_search(runs: QuerySet[Run], query: str) -> QuerySet[Run]:
    """Runs whose goal or stop detail contains the query, or with an attempt matching its terms.

    While few attempts match, their run ids are read first (one index lookup, at most
    SELECTIVE_MATCHES rows) and the runs probed by id. Beyond that matches are common: each run
    in list order is probed for a matching attempt (EXISTS on its own attempts), which finds a
    page quickly; reading every match first would read most of the table."""
    terms = search_terms(query)
    if not terms:
        return runs
    text = Q()
    for term in terms:
        text &= Q(goal__icontains=term) | Q(stop_detail__icontains=term)
    if not _common(terms):
        matched = list(matching(Attempt.objects.all(), terms).order_by().values_list("run_id", flat=True)
                       [:SELECTIVE_MATCHES + 1])
        if len(matched) <= SELECTIVE_MATCHES:
            return runs.filter(text | Q(pk__in=set(matched)))
    sql, params = _condition(terms, table="q_attempt")
    if connection.vendor == "postgresql":
        # The run's own attempts (a few, along an index on the run), then their documents checked
        # one by one. The inner OFFSET 0 keeps the match out of the index scan: left to itself
        # PostgreSQL ANDs the run's index with the search index, reading every match of the GIN
        # index once per run probed (3.7 s for a two-word query at 400,000 attempts, 48 ms so);
        # it also keeps it from turning the probe into a hash of every match.
        own = ("(SELECT \"search_vector\" FROM \"runs_attempt\" WHERE \"runs_attempt\".\"run_id\" = "
               "\"runs_run\".\"id\" OFFSET 0) \"q_attempt\"")
        probe = RawSQL(f"EXISTS (SELECT 1 FROM {own} WHERE {sql})", params, output_field=BooleanField())
    else:
        probe = RawSQL(f"EXISTS (SELECT 1 FROM \"runs_attempt\" \"q_attempt\" WHERE \"q_attempt\".\"run_id\" = "
                       f"\"runs_run\".\"id\" AND {sql})", params, output_field=BooleanField())
    return runs.alias(q_attempt_matches=probe).filter(text | Q(q_attempt_matches=True))


@dataclass(frozen=True)
class AttemptFilters:
    capability: str = ""
    status: str = ""
    error_code: str = ""
    error_category: str = ""
    http_status: int | None = None
    latency_min_s: float | None = None
    latency_max_s: float | None = None
    side_effect_status: str = ""
    labels: tuple = ()
    owner: str = ""
    agent: str = ""
    started_from: datetime | None = None
    started_to: datetime | None = None
    q: str = ""
    run: int | None = None
    fingerprint: str = ""
    evaluation_runs: bool = False   # runs an evaluation made are left out unless asked for


_EXACT = {"capability": "capability_name", "status": "status", "error_code": "error_code",
          "error_category": "error_category", "http_status": "http_status", "latency_min_s": "latency_s__gte",
          "latency_max_s": "latency_s__lte", "side_effect_status": "side_effect_status",
          "owner": "run__owner__username", "agent": "run__gateway_session__agent__name",
          "started_from": "started_at__gte", "started_to": "started_at__lte", "run": "run_id",
          "fingerprint": "fingerprint"}


def attempt_page(*, filters: AttemptFilters, per_page: int | None = None, after: str | None = None,
                 before: str | None = None, number: int = 1) -> KeysetPage:
    """A page of attempt_list (the explorer's page and its API). A search of several terms is read
    along the list's order first: PostgreSQL estimates their matches as if the words were unrelated
    (core.pagination.WalkFirst)."""
    terms = search_terms(filters.q)
    walk_first = None
    if len(terms) > 1 and connection.vendor == "postgresql":
        attempts = attempt_list(filters=replace(filters, q=""))
        walk_first = WalkFirst(lambda queryset, indexed: matching(queryset, terms, indexed=indexed),
                               order=ORDERING.order_by(), walks=SEARCH_WALKS)
    else:
        attempts = attempt_list(filters=filters)
    return keyset_page(attempts, ordering=ORDERING, per_page=per_page or ATTEMPTS_PER_PAGE, after=after,
                       before=before, number=number, count_cap=COUNT_CAP, walk_first=walk_first)


def attempt_list(*, filters: AttemptFilters) -> QuerySet[Attempt]:
    """The attempts the filters select, newest first (keyset: ORDERING), light enough for a table."""
    # The step and revision (the row's r1·s1#1) are read for the page's rows only, after the LIMIT:
    # joined, PostgreSQL joins every match before it sorts when a search matches many.
    steps = Prefetch("step", queryset=Step.objects.select_related("revision").only("key", "revision__number"))
    attempts = (Attempt.objects.select_related("run").prefetch_related(steps)
                .only("id", "uid", "number", "kind", "capability_name", "started_at", "latency_s", "status",
                      "error_code", "error_category", "error_message", "http_status", "side_effect_status",
                      "step_id", "run__id", "run__goal", "run__owner_id"))
    for name, lookup in _EXACT.items():
        value = getattr(filters, name)
        if value not in (None, ""):
            attempts = attempts.filter(**{lookup: value})
    if filters.labels:
        attempts = attempts.filter(run__in=runs_with_labels(Run.objects.all(), filters.labels).values("pk"))
    if not filters.evaluation_runs and filters.run is None:
        attempts = attempts.filter(run__evaluation__isnull=True)
    attempts = matching(attempts, search_terms(filters.q))
    return attempts.order_by(*ORDERING.order_by())
