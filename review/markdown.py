"""Comments as markdown, rendered safely: markdown-it (raw HTML off), then nh3 (Ammonia) on the result.

Two locks, so that neither alone has to be right: the parser never passes HTML through and refuses
javascript:/data: links, and the sanitizer keeps only the tags, attributes and URL schemes listed
here. @mentions of known users become a highlighted span (never inside code).
"""
from __future__ import annotations

import re
from collections.abc import Iterable

import nh3
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.token import Token

# A Django username's characters, less '@'; a trailing '.' ends the sentence, not the name.
MENTION = re.compile(r"(?<![\w@.+-])@([\w.+-]*[\w+-])")

TAGS = {"p", "br", "hr", "strong", "em", "del", "s", "code", "pre", "blockquote", "ul", "ol", "li", "a",
        "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "span"}
ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"align"}, "td": {"align"}}
URL_SCHEMES = {"http", "https", "mailto"}

_parser = MarkdownIt("js-default", {"html": False, "linkify": False, "typographer": False})


def mentioned_names(text: str) -> list[str]:
    """The @names written in `text`, in order, each once (who they are is the caller's business)."""
    return list(dict.fromkeys(MENTION.findall(text or "")))


def _with_mentions(children: list[Token], known: frozenset[str]) -> list[Token]:
    out: list[Token] = []
    for child in children:
        if child.type != "text" or "@" not in child.content:
            out.append(child)
            continue
        position = 0
        for match in MENTION.finditer(child.content):
            if match.group(1) not in known:
                continue
            if match.start() > position:
                out.append(Token("text", "", 0, content=child.content[position:match.start()]))
            out.append(Token("html_inline", "", 0,
                             content=f'<span class="mention">@{escape(match.group(1))}</span>'))
            position = match.end()
        if position < len(child.content):
            out.append(Token("text", "", 0, content=child.content[position:]))
    return out


def markdown_html(text: str, *, mentions: Iterable[str] = ()) -> SafeString:
    """`text` as sanitized HTML; the names in `mentions` (users who exist) are highlighted where written."""
    tokens = _parser.parse(text or "")
    known = frozenset(mentions)
    if known:
        for token in tokens:
            if token.type == "inline" and token.children:
                token.children = _with_mentions(token.children, known)
    html = _parser.renderer.render(tokens, _parser.options, {})
    clean = nh3.clean(html, tags=TAGS, attributes=ATTRIBUTES, url_schemes=URL_SCHEMES,
                      link_rel="noopener noreferrer nofollow", allowed_classes={"span": {"mention"}})
    return mark_safe(clean)  # noqa: S308 - sanitized by nh3 just above
