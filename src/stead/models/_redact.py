"""Keeping credentials out of what stead records: model ids, reprs and error texts.

The journal stores a model's ``model_id`` with every model operation and the text of every
error that ends or delays a run, and events and messages repeat them. None of them may carry a
credential. Two tools here make sure of it:

:func:`public_url`
    A base URL as it may be shown: scheme, host, port and path only. Userinfo
    (``http://user:KEY@gateway/v1``), query (``?api-key=KEY``) and fragment are dropped, because
    gateways take keys in all three and stead cannot tell which part is secret.

:func:`redact`
    A text with every configured secret, and every token shaped like a credential, replaced by
    :data:`REDACTED`. The adapters pass every error text they build through it, with the API
    key, the key the SDK found in the environment and the parts of the base URL that
    :func:`url_secrets` lists as the configured secrets.

Key-shaped tokens (no configuration needed), each replaced whole:

* OpenAI-style keys: ``sk-`` then 8 or more of ``[A-Za-z0-9_*-]`` (so ``sk-proj-...``,
  ``sk-svcacct-...``, ``sk-ant-...``, ``sk-or-v1-...`` and masked echoes such as
  ``sk-proj-****abcd`` or ``sk-proj-abc...xyz``), not preceded by a letter, digit, ``_`` or
  ``-`` (so ``task-force`` is untouched);
* ``Bearer <token>`` and ``Basic <base64>`` (either case) when the token looks like a
  credential (see below); ``Basic authentication`` and ``the bearer of bad news`` are untouched;
* ``name=value`` where the name ends in ``key``, ``token``, ``secret``, ``password``,
  ``passwd``, ``pwd``, ``sig`` or ``signature`` (``?api-key=``, ``&key=``, ``token=``,
  ``OPENAI_API_KEY=``...): the value up to ``&``, ``#``, whitespace or a quote, if it holds a
  letter or digit (``pass api_key=...`` is left alone);
* ``x-api-key: <value>`` (also ``api-key``, ``api_key``, ``...token``, ``...secret``,
  ``password``, optionally quoted as in JSON) when the value looks like a credential;
* URL userinfo: ``scheme://<anything>@`` becomes ``scheme://[redacted]@`` (a user alone can
  be the key, as in ``https://KEY@gateway``);
* well-known prefixed tokens: GitHub (``ghp_``, ``gho_``, ``ghu_``, ``ghs_``, ``ghr_``,
  ``github_pat_``), Slack (``xox?-``), AWS access key ids (``AKIA``), Google API keys
  (``AIza``), Hugging Face (``hf_``), Groq (``gsk_``) and JSON web tokens (``eyJ...eyJ...``);
* generic high-entropy tokens, conservatively: a token of ``[A-Za-z0-9_+=-]`` that contains a
  run of at least 32 letters and digits mixing upper case, lower case and digits. English,
  model names (``Meta-Llama-3.1-70B-Instruct``), hex digests, UUIDs and provider request or
  completion ids (``req_...``, ``chatcmpl-...``: under 32 in a run) do not qualify.

A value "looks like a credential" when it is at least 8 characters long and holds a digit, a
symbol (``._~+/=-*``) or an upper-case letter after its first character; a plain word does not.

Configured secrets shorter than :data:`MIN_SECRET_LENGTH` are ignored, so a trivial value
(``x``, ``test``, a one-word user name) cannot blank out ordinary words; their URL-encoded forms
are redacted too. Both functions accept any input and never raise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from urllib.parse import quote, quote_plus, unquote, unquote_plus

__all__ = ["MIN_SECRET_LENGTH", "REDACTED", "public_url", "redact", "url_secrets"]

REDACTED = "[redacted]"
"""What a secret is replaced with."""

MIN_SECRET_LENGTH = 8
"""Configured secrets shorter than this are not redacted (they would match ordinary words)."""

_HOST_PORT = re.compile(r"(?:\[[^\[\]]*\]|[^:\[\]@]*)(?::[0-9]*)?")
_SYMBOLS = frozenset("._~+/=-*")

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#@\"'<>]+@")
_AUTH_SCHEME = re.compile(r"(?i)\b(bearer|basic)([ \t]+)([A-Za-z0-9._~+/\-]+=*)")
_COLON_FIELD = re.compile(
    r"(?i)(?<![A-Za-z0-9_\-])"
    r"((?:x-)?api[-_]?key|[a-z_\-]*token|[a-z_\-]*secret|password|passwd)"
    r"([\"']?[ \t]*:[ \t]*[\"']?)([^\s\"',;&]+)"
)
_EQUALS_FIELD = re.compile(
    r"(?i)(?<![A-Za-z0-9_\-])"
    r"([a-z0-9_\-]*?(?:key|token|secret|password|passwd|pwd|sig|signature))"
    r"=([^\s&#\"'<>]+)"
)
_OPENAI_STYLE = re.compile(
    r"(?<![A-Za-z0-9_\-])sk-([A-Za-z0-9_*\-]+(?:(?:\.{2,3}|\u2026)[A-Za-z0-9_*\-]+)*)"
)
_PREFIXED = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:"
    r"gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|AIza[0-9A-Za-z_\-]{30,}"
    r"|hf_[A-Za-z0-9]{20,}"
    r"|gsk_[A-Za-z0-9]{20,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"
    r")(?![A-Za-z0-9_\-])"
)
_GENERIC = re.compile(r"(?<![A-Za-z0-9_+=\-])[A-Za-z0-9_+=\-]{32,}(?![A-Za-z0-9_+=\-])")
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]{32,}")


def public_url(url: str) -> str:
    """``url`` with its userinfo, query string and fragment removed.

    Scheme, host (IPv6 in brackets too), port and path are kept as written, so the result is
    stable (``public_url(public_url(u)) == public_url(u)``) and names the same server. The
    authority starts after the first ``://`` (whatever precedes it) or a leading ``//``; text
    without either is read as ``[userinfo@]host[:port][/path]``; text that is not a URL at
    all comes back unchanged unless it holds ``@``, ``?`` or ``#``. A password must be
    percent-encoded as in any URL; an unencoded ``@`` or ``/`` in it is still removed when
    what precedes it cannot be a ``host[:port]``. Never raises: ``None`` gives ``""``, bytes
    are decoded, other objects are converted with ``str``.
    """
    try:
        return _public_url(_as_text(url))
    except Exception:  # pragma: no cover - defensive: the parsing above cannot raise
        return ""


def url_secrets(url: str | None) -> tuple[str, ...]:
    """The parts of ``url`` that :func:`public_url` removes, as secrets for :func:`redact`.

    The user and password of its userinfo and every value (or bare item) of its query string
    and fragment, each as written and percent-decoded. Empty parts are left out; short ones are
    returned but ignored by :func:`redact`. Never raises.
    """
    try:
        text = _as_text(url)
        found: dict[str, None] = {}
        for part in _url_parts(text):
            for form in (part, unquote(part), unquote_plus(part)):
                if form:
                    found[form] = None
        return tuple(found)
    except Exception:  # pragma: no cover - defensive
        return ()


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret in ``secrets`` and every key-shaped token replaced.

    A secret counts when it is a string of at least :data:`MIN_SECRET_LENGTH` characters
    (ignoring surrounding whitespace); it is replaced as written and URL-encoded. No configured
    secret survives: if replacing could not remove one (a secret made of pieces of the marker),
    the whole text is replaced. Key-shaped tokens are those listed in the module
    documentation. Redacting twice changes nothing more. Never raises.
    """
    try:
        value = _as_text(text)
        forms = _secret_forms(secrets)
        for _ in range(8):  # rules can overlap ("Basic Basic <token>"): run to a fixed point
            before = value
            value = _replace_secrets(value, forms)
            for pattern, replace in _RULES:
                value = pattern.sub(replace, value)
            if value == before:
                break
        if any(form in value for form in forms):
            return REDACTED
        return value
    except Exception:  # pragma: no cover - defensive: never let redaction leak by raising
        return REDACTED


# --- URLs ---------------------------------------------------------------------------------------


def _as_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _split(url: str) -> tuple[str, str, str, str, str]:
    """``(prefix, userinfo, host_port, path, after)``: ``prefix`` is ``scheme://``, ``//`` or
    ``""``; ``after`` is the query and fragment, with their ``?``/``#``."""
    cut = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=len(url))
    head, after = url[:cut], url[cut:]
    prefix, rest = "", head
    scheme_end = head.find("://")
    if scheme_end >= 0:  # even a malformed scheme ("ht tp://") marks where the authority starts
        prefix, rest = head[: scheme_end + 3], head[scheme_end + 3 :]
    elif head.startswith("//"):
        prefix, rest = "//", head[2:]
    authority, slash, path = rest.partition("/")
    userinfo, at, host_port = authority.rpartition("@")
    if not at and "@" in path and not _HOST_PORT.fullmatch(authority):
        # an unencoded "/" in the password: "user:ab/cd@host" cannot be read as host:port
        userinfo, _, rest = rest.rpartition("@")
        host_port, slash, path = rest.partition("/")
    return prefix, userinfo, host_port, slash + path, after


def _public_url(url: str) -> str:
    # Stripping only removes characters; repeat until nothing changes, so that the result is
    # stable even for garbage whose first strip exposes another userinfo ("@//@" -> "//@").
    while True:
        prefix, _, host_port, path, _ = _split(url)
        stripped = prefix + host_port + path
        if stripped == url:
            return stripped
        url = stripped


def _url_parts(url: str) -> Iterator[str]:
    while True:  # every layer _public_url strips
        prefix, userinfo, host_port, path, after = _split(url)
        if userinfo:
            user, _, password = userinfo.partition(":")
            yield user
            yield password
        for item in re.split(r"[?#&;]", after):
            name, equals, value = item.partition("=")
            yield value if equals else name
        stripped = prefix + host_port + path
        if stripped == url:
            return
        url = stripped


# --- text ---------------------------------------------------------------------------------------


def _secret_forms(secrets: Iterable[str]) -> tuple[str, ...]:
    if isinstance(secrets, str):  # one secret passed bare: do not iterate its characters
        secrets = (secrets,)
    forms: dict[str, None] = {}
    for secret in secrets:
        if not isinstance(secret, str) or len(secret.strip()) < MIN_SECRET_LENGTH:
            continue
        for form in (secret, quote(secret, safe=""), quote(secret), quote_plus(secret)):
            forms[form] = None
    return tuple(sorted(forms, key=len, reverse=True))


def _replace_secrets(text: str, forms: tuple[str, ...]) -> str:
    for _ in range(4):  # a replacement can, in theory, form a new occurrence with the marker
        changed = False
        for form in forms:
            if form in text:
                text = text.replace(form, REDACTED)
                changed = True
        if not changed:
            break
    return text


def _looks_like_credential(token: str) -> bool:
    if len(token) < MIN_SECRET_LENGTH or token == REDACTED:
        return False
    return any(char.isdigit() or char in _SYMBOLS for char in token) or any(
        char.isupper() for char in token[1:]
    )


def _userinfo(match: re.Match[str]) -> str:
    return f"{match[1]}{REDACTED}@"


def _auth_scheme(match: re.Match[str]) -> str:
    if not _looks_like_credential(match[3]):
        return match[0]
    return f"{match[1]}{match[2]}{REDACTED}"


def _colon_field(match: re.Match[str]) -> str:
    if not _looks_like_credential(match[3]):
        return match[0]
    return f"{match[1]}{match[2]}{REDACTED}"


def _equals_field(match: re.Match[str]) -> str:
    if not any(char.isalnum() for char in match[2]):  # "pass api_key=...": a hint, not a key
        return match[0]
    return f"{match[1]}={REDACTED}"


def _openai_style(match: re.Match[str]) -> str:
    body = match[1].replace(".", "").replace("\u2026", "")
    return REDACTED if len(body) >= MIN_SECRET_LENGTH else match[0]


def _whole(match: re.Match[str]) -> str:
    return REDACTED


def _generic(match: re.Match[str]) -> str:
    for run in _ALNUM_RUN.findall(match[0]):
        has_upper = any(char.isupper() for char in run)
        has_lower = any(char.islower() for char in run)
        has_digit = any(char.isdigit() for char in run)
        if has_upper and has_lower and has_digit:
            return REDACTED
    return match[0]


_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_USERINFO, _userinfo),
    (_AUTH_SCHEME, _auth_scheme),
    (_PREFIXED, _whole),
    (_OPENAI_STYLE, _openai_style),
    (_COLON_FIELD, _colon_field),
    (_EQUALS_FIELD, _equals_field),
    (_GENERIC, _generic),
)
