"""The pure runtime core: plans, observations, decisions, budgets, the controller.

Nothing in this package imports Django, Celery or the capability executors; the
Django app converts its rows into these dataclasses at the edge.
"""
