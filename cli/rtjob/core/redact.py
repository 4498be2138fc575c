"""Keep secrets out of everything rtjob prints: rendered requests, JSON, logs, errors.

Two kinds of masking, one boundary:

* **Structured fields** (an env value, an arg, a tag, a header, a token) are masked *whole* when their name
  says secret (on word boundaries: ``DB_PASS``, ``MYSQL_PWD``, ``SENTRY_DSN``, ``WANDB_API_KEY``; not
  ``TOKENIZERS_PARALLELISM``, ``AUTHOR``, ``SORT_KEY``, nor a path to one: ``AWS_SHARED_CREDENTIALS_FILE``), when
  their value has a secret's shape (AWS key id, JWT, ``Bearer ...``, ``sk-``, ``ghp_``, ``github_pat_``,
  ``xox*``, ``hf_``), when it is a URL with a password, or, in a job's environment, when ``RTJOB_NOTIFY`` names
  the variable as a notification target's URL.
* **Free text** (logs, messages, JSON strings, rendered files) passes ``REDACTOR``, the process-wide redactor
  that every secret value of this run is fed to as it becomes known. It hunts only values of ``HUNT_MIN`` or
  more characters (``false``, ``1``, ``alice`` are never masked), those shorter than ``ANYWHERE_MIN`` as whole
  tokens only (never inside a longer word), and masks secret shapes and URL passwords wherever they stand.

``commands/printing.py`` sends every byte rtjob prints through ``REDACTOR``.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import rtjob_contract as contract

MASK = "****"
HUNT_MIN = 6  # shorter values are masked in structured fields only: in free text they would hit ordinary words
ANYWHERE_MIN = 12  # values this long are masked even inside a longer word; shorter ones only as whole tokens

# Name words that make a value secret wherever they stand in the name.
_SECRET_WORDS = frozenset({
    "SECRET", "SECRETS", "TOKEN", "TOKENS", "PASSWORD", "PASSWORDS", "PASSWD", "PASS", "PASSPHRASE",
    "CREDENTIAL", "CREDENTIALS", "CREDS", "DSN", "AUTH", "AUTHORIZATION", "SESSION", "COOKIE", "COOKIES",
    "PRIVATE", "APIKEY", "ACCESSKEY", "SECRETKEY", "PRIVATEKEY", "SIGNATURE", "OTP",
})
# KEY is secret only with one of these before it (API_KEY, SECRET_KEY, ...) or as *_KEY_ID; SORT_KEY is not.
_KEY_QUALIFIERS = frozenset({"API", "SECRET", "ACCESS", "PRIVATE", "SIGNING", "ENCRYPTION", "MASTER", "CLIENT",
                             "LICENSE", "SSH", "GPG", "PGP", "SERVICE", "ACCOUNT", "WEBHOOK"})
# A name that ends in one of these holds where a secret is kept, not the secret (AWS_SHARED_CREDENTIALS_FILE,
# TOKEN_PATH, RTJOB_SECRET_REFS: a job's `secrets:` references): a path is shown, and hunting it would mask every
# "/dev/null" rtjob prints.
_LOCATION_WORDS = frozenset({"FILE", "FILES", "FILENAME", "PATH", "DIR", "FOLDER", "REF", "REFS", "REFERENCE",
                             "REFERENCES"})
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")

# Secret shapes, whole values (structured fields) and tokens in free text.
_SHAPES = [
    r"(?:AKIA|ASIA)[0-9A-Z]{16}",  # AWS access key ids
    r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",  # JWTs
    r"gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub tokens
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"xox[abprse]-[A-Za-z0-9-]{6,}",  # Slack
    r"sk-[A-Za-z0-9_-]{20,}",  # OpenAI-style keys
    r"aph0_[A-Za-z0-9_-]{10,}",  # Anyscale
    # Hugging Face user access tokens: hf_ + 34 letters (the shape gitleaks and detect-secrets match); 30+ letters
    # or digits here. An identifier (hf_sft, hf_token_path) has an underscore or is far shorter: never masked.
    r"hf_[A-Za-z0-9]{30,}",
]
_SHAPE_HINTS = ("AKIA", "ASIA", "eyJ", "gh", "xox", "sk-", "aph0_", "hf_")  # a fixed part of each shape (github_pat_: "gh")
_HINTS = re.compile("|".join(re.escape(h) for h in ("://", "Bearer", "Basic", *_SHAPE_HINTS)))
_SHAPE_VALUE = re.compile(r"^(?:(?:Bearer|Basic)\s+\S+|" + "|".join(_SHAPES) + r")$")
_SHAPE_TEXT = re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(_SHAPES) + r")(?![A-Za-z0-9_])")
_AUTH_TEXT = re.compile(r"\b(Bearer|Basic)(\s+)[A-Za-z0-9._~+/=-]{6,}")
# scheme://user:password@host — the password may hold '/', '#' or '@': it ends at the last '@' of the token.
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)(\S+)@(?=[A-Za-z0-9\[])")
# scheme://KEY@host with no password: the user part is the secret (Sentry DSNs, https://TOKEN@github.com).
_URL_USER_ONLY = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^\s:/@]{6,})@(?=[A-Za-z0-9\[])")
# Where a text can change but for the hunted values: a URL with a userinfo ('@'), an auth header, a shape's fixed part.
_MAYBE = re.compile("|".join(re.escape(h) for h in ("@", "Bearer", "Basic", *_SHAPE_HINTS)))
_SHORTEST_SECRET = HUNT_MIN  # nothing shorter holds a hunted value, a URL password, an auth header or a shape


def _words(name: str) -> list[str]:
    return [w.upper() for part in re.split(r"[^A-Za-z0-9]+", name) for w in _WORD.findall(part)]


def is_secret_name(name: str) -> bool:
    """Does a variable/flag/header/tag name say its value is secret (on word boundaries)?"""
    words = _words(name)
    if words and words[-1] in _LOCATION_WORDS:
        return False
    for i, word in enumerate(words):
        if word in _SECRET_WORDS:
            return True
        if word == "PWD" and i > 0:  # MYSQL_PWD, DB_PWD; the shell's own PWD is the working directory
            return True
        if word == "KEY" and i > 0 and (words[i - 1] in _KEY_QUALIFIERS or words[i + 1:i + 2] == ["ID"]):
            return True
    return False


def url_password(value: str) -> str | None:
    """The secret part of a URL's userinfo: the password, or a long user part standing alone (a key)."""
    match = _URL_USERINFO.search(value or "") or _URL_USER_ONLY.search(value or "")
    return match.group(2) if match else None


def is_secret(name: str, value: str) -> bool:
    """A secret by its name, by its shape, or a URL that carries a password (``DATABASE_URL=postgres://u:p@h``)."""
    value = value or ""
    return is_secret_name(name) or bool(_SHAPE_VALUE.match(value.strip())) or url_password(value) is not None


def notify_url_names(env: Mapping[str, Any]) -> frozenset[str]:
    """The variables of a job's environment that hold a notification target's URL (a secret whatever its name
    or shape: Slack and Discord keep theirs in the path), as the environment's RTJOB_NOTIFY names them."""
    raw = env.get(contract.ENV_NOTIFY)
    if not isinstance(raw, str) or not raw:
        return frozenset()
    try:
        targets = json.loads(raw).get("targets")
    except (ValueError, AttributeError):
        return frozenset()
    if not isinstance(targets, list):
        return frozenset()
    return frozenset(t["env"] for t in targets if isinstance(t, dict) and isinstance(t.get("env"), str))


def _secret_in(values: Mapping[str, Any]) -> Callable[[str, Any], bool]:
    """is_secret for the items of ``values`` (a notification URL counts: notify_url_names)."""
    urls = notify_url_names(values)
    return lambda key, value: key in urls or is_secret(key, _text(value))


def mask_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """A mapping with every secret value masked whole (env vars, tags, args)."""
    secret = _secret_in(values)
    return {k: (MASK if v not in (None, "") and secret(k, v) else v) for k, v in values.items()}


def _text(value: Any) -> str:
    return " ".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)


def secret_values(values: Mapping[str, Any]) -> list[str]:
    """The values in ``values`` that must never be shown: each secret value (each item of a list), and the
    password inside a URL."""
    found: list[str] = []
    secret = _secret_in(values)
    for key, value in values.items():
        if value in (None, "") or not secret(key, value):
            continue
        items = [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
        for item in items:
            found.append(item)
            password = url_password(item)
            if password:
                found.append(password)
    return [v for v in found if v]


def secret_arg_values(command: str) -> list[str]:
    """Values of secret flags inside a command line (``--api-key VALUE``, ``--token=VALUE``, every value of a
    list flag ``--tokens A B``), also inside a wrapped ``bash -c '...'`` payload; and values with a secret's
    shape whatever the flag."""

    def tokens(text: str, depth: int = 0) -> list[str]:
        try:
            parts = shlex.split(text)
        except ValueError:
            parts = text.split()
        out: list[str] = []
        for part in parts:
            out += tokens(part, depth + 1) if depth < 2 and " " in part else [part]
        return out

    found: list[str] = []
    secret_flag = False
    for word in tokens(command):
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            secret_flag = is_secret_name(name)
            if eq and value and is_secret(name, value):
                found.append(value)
            if eq:
                secret_flag = False
            continue
        if (secret_flag or is_secret("", word)) and word:
            found.append(word)
    return found


def mask_command(command: str) -> str:
    """A command line with every secret arg value masked whole, however short (a structured field), then
    through the process-wide redactor."""
    for value in sorted(set(secret_arg_values(command)), key=len, reverse=True):
        command = re.sub(rf"(?<=[\s='\"]){re.escape(value)}(?=[\s'\"]|$)", MASK, command)
    return REDACTOR.text(command)


def mask_url(text: str) -> str:
    """``http://user:pass@host`` → ``http://user:****@host`` (a password in an address is shown nowhere)."""
    return _URL_USER_ONLY.sub(rf"\g<1>{MASK}@", _URL_USERINFO.sub(rf"\g<1>{MASK}@", text))


class Redactor:
    """Masks known secret values (whole tokens) and secret shapes in free text and in JSON-able data."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None

    def add(self, values: Iterable[str | None]) -> None:
        """Secret values to hunt from now on (shorter than HUNT_MIN: masked in structured fields only)."""
        for value in values:
            for piece in {value or "", (value or "").strip()}:
                if len(piece) >= HUNT_MIN and piece not in self._values:
                    self._values.add(piece)
                    self._pattern = None

    def add_mapping(self, values: Mapping[str, Any]) -> None:
        self.add(secret_values(values))

    def clear(self) -> None:
        """Forget every value (a new command run in the same process, as the tests do)."""
        self._values = set()
        self._pattern = None

    def _compiled(self) -> re.Pattern[str] | None:
        if self._pattern is None and self._values:
            ordered = sorted(self._values, key=len, reverse=True)
            # Long values anywhere: a 12-character secret inside a longer word is still the secret (an escaped
            # key such as "\\u202e<secret>"). Shorter ones as whole tokens only: "falsetto" keeps its "false".
            anywhere = "|".join(re.escape(v) for v in ordered if len(v) >= ANYWHERE_MIN)
            tokens = "|".join(re.escape(v) for v in ordered if len(v) < ANYWHERE_MIN)
            parts = [f"(?:{anywhere})"] if anywhere else []
            parts += [rf"(?<![A-Za-z0-9_])(?:{tokens})(?![A-Za-z0-9_])"] if tokens else []
            self._pattern = re.compile("|".join(parts))
        return self._pattern

    def text(self, text: str, extra: Iterable[str] = ()) -> str:
        extra = [v for v in extra if v and len(v) >= HUNT_MIN and v not in self._values]
        if extra:
            scoped = Redactor()
            scoped._values = self._values | set(extra)
            return scoped.text(text)
        pattern = self._compiled()
        if pattern is not None:
            text = pattern.sub(MASK, text)
        # The patterns only where one's fixed part occurs: one search costs a fraction of four substitutions, and
        # a listing redacts tens of thousands of strings that hold none.
        if not _HINTS.search(text):
            return text
        if "://" in text and "@" in text:
            text = _URL_USERINFO.sub(rf"\g<1>{MASK}@", text)
            text = _URL_USER_ONLY.sub(rf"\g<1>{MASK}@", text)
        if "Bearer" in text or "Basic" in text:
            text = _AUTH_TEXT.sub(rf"\g<1>\g<2>{MASK}", text)
        if any(hint in text for hint in _SHAPE_HINTS):
            text = _SHAPE_TEXT.sub(MASK, text)
        return text

    def data(self, value: Any) -> Any:
        """``value`` as plain JSON data (any other object as its str, keys as JSON writes them) with every string,
        keys included, redacted. Each distinct string is redacted once per
        call: a listing repeats its keys and most values (10,000 runs: ~320,000 strings, ~40,000 distinct)."""
        seen: dict[str, str] = {}
        cached = seen.get

        def one(text: str) -> str:
            done = seen[text] = self.text(text) if len(text) >= _SHORTEST_SECRET else text
            return done

        def walk(item: Any) -> Any:
            if isinstance(item, str):
                return cached(item) or one(item)
            if isinstance(item, dict):
                out = {}
                for key, val in item.items():  # inlined: a listing is mostly dicts of strings seen before
                    key = (cached(key) or one(key)) if isinstance(key, str) else _json_key(key)
                    out[key] = (cached(val) or one(val)) if isinstance(val, str) else walk(val)
                return out
            if isinstance(item, (list, tuple)):
                return [walk(v) for v in item]
            if item is None or isinstance(item, (bool, int, float)):
                return item
            return one(str(item))  # what json.dumps(default=str) would print: a path, a date, an enum

        return walk(value)

    def rows(self, value: Any) -> list[dict[str, Any]] | None:
        """``data(value)`` for a listing (rows as ``listing_row`` says; else None), cheaper for 100,000 rows: the
        distinct strings found first, one search of them all joined says which ``text`` would change."""
        strings: dict[str, str] = {}
        if not isinstance(value, list) or not value or not all(
                type(row) is dict and self.listing_row(row, strings) for row in value):
            return None
        self._redact_all(strings)
        return [self._row(row, strings.__getitem__) for row in value]

    @staticmethod
    def listing_row(row: dict[Any, Any], strings: dict[str, str], nested: bool = True) -> bool:
        """Whether ``row`` is a listing's row (scalars, or dicts of scalars: the one rule), its strings collected."""
        for key, val in row.items():
            if isinstance(key, str):
                strings[key] = key
            if isinstance(val, str):
                strings[val] = val
            elif isinstance(val, (dict, list, tuple)) and not (nested and type(val) is dict
                                                               and Redactor.listing_row(val, strings, False)):
                return False
        return True

    def _row(self, row: dict[Any, Any], done: Callable[[str], str]) -> dict[str, Any]:
        new: dict[str, Any] = {}
        for key, val in row.items():
            name = done(key) if isinstance(key, str) else _json_key(key)
            if isinstance(val, str):
                new[name] = done(val)
            elif val is None or isinstance(val, (bool, int, float)):
                new[name] = val
            elif type(val) is dict:
                new[name] = self._row(val, done)
            else:  # what json.dumps(default=str) would print, as data() words it
                new[name] = self.text(str(val)) if len(str(val)) >= _SHORTEST_SECRET else str(val)
        return new

    def _redact_all(self, strings: dict[str, str]) -> None:
        """Each value of ``strings`` (text → itself) replaced by ``text(it)``, calling ``text`` only for those a
        search of them all, joined by a character that no hunted value and no fixed part holds, finds a reason in
        (the separator stands where a string starts or ends: a non-word character, as nothing is)."""
        pattern = self._compiled()
        sep = next((c for c in ("\n", "\x00", "\x1f") if not any(c in v for v in self._values)), None)
        texts = [t for t in strings if len(t) >= _SHORTEST_SECRET]
        if sep is None:
            for text in texts:
                strings[text] = self.text(text)
            return
        joined = sep.join(texts)
        starts = list(itertools.accumulate((len(t) + 1 for t in texts[:-1]), initial=0))  # each one's offset
        hits = [m.start() for m in _MAYBE.finditer(joined)]
        if pattern is not None:
            hits += [m.start() for m in pattern.finditer(joined)]
        for at in set(hits):
            text = texts[bisect.bisect_right(starts, at) - 1]
            strings[text] = self.text(text)


def _json_key(key: Any) -> str:
    """A dict key as JSON writes it: true/false/null, numbers as text."""
    import json

    return json.dumps(key) if key is None or isinstance(key, (bool, int, float)) else str(key)


# The process-wide boundary: every secret value rtjob learns is added here; printing passes through it.
REDACTOR = Redactor()


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Free text through the process-wide redactor, with ``secrets`` hunted too."""
    return REDACTOR.text(text, secrets)


def redact_data(value: Any, secrets: Iterable[str]) -> Any:
    """``redact`` through JSON-shaped data (strings, list items, keys and values), before it is serialised:
    JSON escaping would otherwise hide a secret from a search of the text."""
    secrets = list(secrets)
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, list):
        return [redact_data(item, secrets) for item in value]
    if isinstance(value, dict):
        return {redact_data(k, secrets): redact_data(v, secrets) for k, v in value.items()}
    return value
