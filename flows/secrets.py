"""Which environment values are secrets, how they are kept out of files, and where they come from.

Records are meant to be committed and evidence folders are shared, so a secret (an `HF_TOKEN`,
an API key, the boot token of a rendezvous) must never be written by sparkgate. A value is secret
when its key (an env name, a build argument, an engine option, a `--flag`) looks like one (it
contains TOKEN, KEY, SECRET, PASSWORD, AUTH or CREDENTIAL, in any case) or when the cluster file
lists the key in `secret_keys`. Writers redact by key where a mapping or argv names the key, and
replace the literal secret values wherever they appear in other text (a command line, `docker
inspect` JSON) as a second line of defence.

Every rule lives here, once: a command line (`Secrets.argv`: a secret `--flag VALUE` whatever
VALUE starts with, `--flag=VALUE`, `NAME=VALUE`, an HTTP header item such as `Authorization:
Bearer ...` after `-H`, the same forms inside a shell string such as `sh -c '...'`), any text
(`Secrets.text`: the literal values, the password of `scheme://user:password@host`, a bearer
token, an `Authorization:` header), and a spec dump (`Secrets.spec`: every list of strings is
read as a command line). `collect` and `argv_values` gather the literal values of mappings and
command lines by the same rules, so that a value echoed elsewhere (a log, `docker inspect`) is
scrubbed too.

Secrets need not be YAML literals: an env value written as exactly `{env:NAME}` is read from
sparkgate's own environment, `{file:PATH}` from a file inside the project, both at launch time
(`resolve_env`); specs, plans and records keep the reference, never the resolved value.

This module is pure apart from `resolve_env` (which reads the environment and files) and
`explicit_env` (which only builds shell text).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows.errors import SpecError

REDACTED = "<redacted>"
# TOKEN but not TOKENS/TOKENIZER or a token count (max_tokens, vLLM's
# --long-prefill-token-threshold and VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD are settings, and a
# record that hid them would lose launch evidence); AUTH but not AUTHOR.
SECRET_NAME = re.compile(
    r"TOKEN(?!S|IZ|[_-]?(?:THRESHOLD|LIMIT|COUNT|SIZE|LEN|BUDGET))|KEY|SECRET|PASSWORD|PASSWD"
    r"|AUTH(?!OR)|CREDENTIAL",
    re.IGNORECASE,
)
MIN_SCRUBBED = 8
"""Shorter values are redacted by key only: replacing "1" or "true" everywhere would corrupt
numbers and words in records that have nothing to do with the secret."""
REFERENCE = re.compile(r"^\{(env|file):([^{}]*)\}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLACEHOLDER_ONLY = re.compile(r"^\{[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_.-]+)?\}$")
_ENV_ITEM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_FLAG = re.compile(r"^--?([A-Za-z0-9][A-Za-z0-9_.-]*)(?:=(.*))?$", re.DOTALL)
_HEADER = re.compile(r"^\s*([A-Za-z0-9_-]+)\s*:\s*(\S.*)$", re.DOTALL)
"""One argv item that is an HTTP header (`curl -H 'X-Api-Key: ...'`)."""
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
"""Headers whose value is a secret though their name does not say so (AUTHOR is not AUTH)."""
_WORD = r"(?:'[^']*'|\"[^\"]*\"|[^\s'\"]+)"
_INLINE_FLAG = re.compile(rf"(?<![\w-])(--?[A-Za-z0-9][A-Za-z0-9_.-]*)(=|\s+)({_WORD})")
_INLINE_PAIR = re.compile(rf"(?<![\w-])([A-Za-z_][A-Za-z0-9_]*)=({_WORD})")
_INLINE_HEADER = re.compile(r"(?<![\w-])([A-Za-z0-9_-]+):[ \t]*([^'\"\n]+)")
# every pattern starts only where a word starts (a look-behind), so a long run of letters is
# scanned once, not once per position (a 1 MB line of base64 took minutes)
_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@'\"]*:)([^/\s@'\"]+)@"
)
_AUTHORIZATION = re.compile(
    r"((?:Proxy-)?Authorization\s*:\s*(?:(?:Bearer|Basic|Digest|Token)\s+)?)([^\s'\"]+)",
    re.IGNORECASE,
)
_SCHEME = re.compile(r"^(?:Bearer|Basic|Digest|Token)\s+", re.IGNORECASE)
_BEARER = re.compile(r"(\bBearer\s+)([A-Za-z0-9._~+/=-]{4,})")
ENV_CONTAINERS = frozenset({"env", "args", "options"})
"""Keys of a spec dump whose mapping holds env values, build arguments or engine options."""

EXPLICIT_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
    "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "LC_TIME", "LC_COLLATE", "LC_MONETARY", "LC_MESSAGES",
    "LC_PAPER", "LC_NAME", "LC_ADDRESS", "LC_TELEPHONE", "LC_MEASUREMENT", "LC_IDENTIFICATION",
)  # fmt: skip
"""What a rank or a release test keeps of the environment it is started from; everything else
(SSH_AUTH_SOCK, HF_TOKEN, AWS_*, the operator's PYTHONPATH ...) is dropped."""


def is_secret(name: str, extra: Iterable[str] = ()) -> bool:
    """Whether the value of `name` (env key, build arg, option, flag) is a secret."""
    return bool(SECRET_NAME.search(name)) or name in set(extra)


def is_reference(value: str) -> bool:
    """Whether `value` is an `{env:NAME}` or `{file:PATH}` reference."""
    return REFERENCE.match(value) is not None


def is_indirect(value: str) -> bool:
    """Whether `value` only points at a secret (a reference, or one unfilled placeholder such as
    `{boot_token}` in a spec): it holds none and is shown as written."""
    return is_reference(value) or _PLACEHOLDER_ONLY.match(value) is not None


@dataclass(frozen=True)
class Secrets:
    """The secret key names of one setting and the literal secret values to scrub from text."""

    names: frozenset[str] = frozenset()
    values: tuple[str, ...] = field(default=())

    def secret(self, name: str) -> bool:
        """Whether the value of `name` is a secret here."""
        return is_secret(name, self.names)

    def merged(self, other: Secrets) -> Secrets:
        """Both sets of names and values."""
        return Secrets(self.names | other.names, _longest_first([*self.values, *other.values]))

    def mapping(self, values: Mapping[str, str]) -> dict[str, str]:
        """`values` with every secret's value replaced (references are kept: they hold none)."""
        return {k: self._value(k, v) for k, v in values.items()}

    def argv(self, argv: Sequence[str]) -> list[str]:
        """A command line with its secrets redacted (the forms in the module docstring)."""
        return [shown for shown, _ in self._argv(argv)]

    def argv_values(self, argv: Sequence[str]) -> list[str]:
        """The secret values a command line holds, by the same rules as `argv`."""
        return [value for _, hidden in self._argv(argv) for value in hidden]

    def text(self, text: str) -> str:
        """`text` with every literal secret value (of at least MIN_SCRUBBED characters), URL
        password, bearer token and Authorization header value replaced."""
        for value in self.values:
            if len(value) >= MIN_SCRUBBED and value in text:
                text = text.replace(value, REDACTED)
        return _free_text(text, [])

    def json(self, data: Any, *, by_key: bool = True) -> Any:
        """A JSON-like value with secrets redacted: every string scrubbed of secret values;
        with `by_key`, also every secret-named key's scalar value and `NAME=VALUE` string.
        Without it (stage results, whose keys are data like `first_token_s`) values only."""
        if isinstance(data, Mapping):
            return {
                key: REDACTED
                if by_key and isinstance(key, str) and _scalar(item) and self._hide(key, item)
                else self.json(item, by_key=by_key)
                for key, item in data.items()
            }
        if isinstance(data, list | tuple):
            return [self.json(item, by_key=by_key) for item in data]
        if isinstance(data, str):
            pair = _ENV_ITEM.match(data) if by_key else None
            if pair and self.secret(pair.group(1)):
                return f"{pair.group(1)}={self._value(pair.group(1), pair.group(2))}"
            return self.text(data)
        return data

    def spec(self, data: Any) -> Any:
        """A spec dump (release, cluster, engine profile as JSON) with the values of secret keys
        in env, build args and options redacted, and every string scrubbed of secret values."""
        if isinstance(data, Mapping):
            return {
                key: self.mapping(item)
                if key in ENV_CONTAINERS and _str_mapping(item)
                else self.spec(item)
                for key, item in data.items()
            }
        if isinstance(data, list | tuple):
            if all(isinstance(item, str) for item in data):
                return self.argv(data)  # serve_args, launch argv, model_prepare ...
            return [self.spec(item) for item in data]
        return self.json(data, by_key=False)

    def _argv(self, argv: Sequence[str]) -> list[tuple[str, list[str]]]:
        """Each item as shown, with the secret values it hid."""
        out: list[tuple[str, list[str]]] = []
        hide_next = False
        for item in argv:
            if hide_next:  # the value of a secret flag, even one starting with a dash
                hide_next = False
                out.append((REDACTED, [item]) if _holds(item) else (item, []))
                continue
            flag = _FLAG.match(item)
            pair = _ENV_ITEM.match(item)
            header = _HEADER.match(item)
            if flag and self.secret(flag.group(1)):
                hide_next = flag.group(2) is None
                shown = item if hide_next else f"{item.split('=', 1)[0]}={REDACTED}"
                out.append((shown, [] if hide_next else [flag.group(2)]))
            elif pair and self.secret(pair.group(1)):
                shown = f"{pair.group(1)}={self._value(pair.group(1), pair.group(2))}"
                out.append((shown, [pair.group(2)] if shown != item else []))
            elif header and self._secret_header(header.group(1)):
                out.append((f"{header.group(1)}: {REDACTED}", [_credential(header.group(2))]))
            else:
                out.append(self._command_text(item))
        return out

    def _secret_header(self, name: str) -> bool:
        return self.secret(name) or name.lower() in SECRET_HEADERS

    def _command_text(self, text: str) -> tuple[str, list[str]]:
        """One argv item that may be a whole shell command (`sh -c '...'`): the rules of
        `argv` applied to the words inside it, then those of `text`."""
        hidden: list[str] = []

        def flag(match: re.Match[str]) -> str:
            name = match.group(1).lstrip("-")
            if not self.secret(name) or not _holds(_unquoted(match.group(3))):
                return match.group(0)
            hidden.append(_unquoted(match.group(3)))
            return f"{match.group(1)}{match.group(2)}{REDACTED}"

        def pair(match: re.Match[str]) -> str:
            if not self.secret(match.group(1)) or not _holds(_unquoted(match.group(2))):
                return match.group(0)
            hidden.append(_unquoted(match.group(2)))
            return f"{match.group(1)}={REDACTED}"

        def header(match: re.Match[str]) -> str:
            if not self._secret_header(match.group(1)):
                return match.group(0)
            hidden.append(_credential(match.group(2).strip()))
            return f"{match.group(1)}: {REDACTED}"

        shown = _INLINE_FLAG.sub(flag, text)
        shown = _INLINE_PAIR.sub(pair, shown)
        shown = _INLINE_HEADER.sub(header, shown)
        for value in self.values:
            if len(value) >= MIN_SCRUBBED and value in shown:
                shown = shown.replace(value, REDACTED)
        return _free_text(shown, hidden), hidden

    def _value(self, name: str, value: str) -> str:
        if self.secret(name) and not is_indirect(value) and value != "":
            return REDACTED
        return self.text(value)

    def _hide(self, key: str, value: object) -> bool:
        return (
            self.secret(key)
            and not (isinstance(value, str) and is_indirect(value))
            and (value not in ("", None))
        )


def collect(
    mappings: Iterable[Mapping[str, str]],
    names: Iterable[str] = (),
    argvs: Iterable[Sequence[str]] = (),
) -> Secrets:
    """The secrets of env/argument mappings and command lines: their secret values and, for
    references, the value they resolve to now (so that a resolved value echoed into text is
    scrubbed too)."""
    extra = frozenset(names)
    by_name = Secrets(extra)
    values: list[str] = [v for argv in argvs for v in by_name.argv_values(argv)]
    for mapping in mappings:
        for key, value in mapping.items():
            if not is_secret(key, extra) or value == "":
                continue
            if is_reference(value):
                resolved = _try_resolve(value)
                if resolved:
                    values.append(resolved)
            elif not is_indirect(value):
                values.append(value)
    return Secrets(extra, _longest_first(values))


def resolve(value: str, *, key: str = "", root: Path | None = None) -> str:
    """The value of an `{env:NAME}` / `{file:PATH}` reference, or `value` itself; SpecError
    (naming the key and the reference, never a value) when it cannot be resolved."""
    match = REFERENCE.match(value)
    if match is None:
        return value
    kind, target = match.groups()
    if kind == "env":
        if not ENV_NAME.match(target):
            raise SpecError(f"bad reference {value}", key=key, expected="{env:NAME}")
        found = os.environ.get(target)
        if found is None:
            raise SpecError(f"{value}: {target} is not set in sparkgate's environment", key=key)
        return found
    return _read_file(value, target, key, root)


def resolve_env(env: Mapping[str, str], root: Path | None = None) -> dict[str, str]:
    """An environment with every reference resolved (at launch time, never stored)."""
    return {name: resolve(value, key=f"env.{name}", root=root) for name, value in env.items()}


def reference_problem(value: str) -> str | None:
    """Why `value` is a malformed reference, or None (also for plain values)."""
    match = REFERENCE.match(value)
    if match is None:
        return None
    kind, target = match.groups()
    if kind == "env" and not ENV_NAME.match(target):
        return f"{value}: not an environment variable name"
    if kind == "file" and (not target or Path(target).is_absolute() or ".." in Path(target).parts):
        return f"{value}: want a relative path inside the project"
    return None


def explicit_env(names: Iterable[str] = ()) -> str:
    """Shell text (`env -i ...`) that, followed by a command, runs it with only `names` (and
    EXPLICIT_ENV) of the shell's environment.

    Each name is kept only when set (`${NAME+"NAME=$NAME"}`), so the values are taken on the
    node itself and never appear in a command line; names are checked to be plain identifiers.
    """
    kept = dict.fromkeys([*EXPLICIT_ENV, *names])
    bad = [name for name in kept if not ENV_NAME.match(name)]
    if bad:
        raise SpecError(f"invalid environment variable name {bad[0]!r}")
    words = " ".join(f'${{{name}+"{name}=${name}"}}' for name in kept)
    return f"env -i {words}"


def _read_file(value: str, target: str, key: str, root: Path | None) -> str:
    problem = reference_problem(value)
    if problem:
        raise SpecError(problem, key=key)
    from flows.settings import project_root  # noqa: PLC0415 - settings read the environment

    base = (root or project_root()).resolve()
    path = (base / target).resolve()
    if not path.is_relative_to(base):
        raise SpecError(f"{value}: leads outside the project", key=key)
    try:
        return path.read_text().strip()
    except OSError as error:
        raise SpecError(f"{value}: cannot read ({error.strerror})", key=key) from None


def _free_text(text: str, hidden: list[str]) -> str:
    """The rules for any text: a URL's password, an Authorization header, a bearer token."""

    def keep(match: re.Match[str]) -> str:
        if match.group(2) == REDACTED:
            return match.group(0)
        hidden.append(match.group(2))
        return f"{match.group(1)}{REDACTED}"

    text = _USERINFO.sub(lambda m: f"{keep(m)}@", text)
    text = _AUTHORIZATION.sub(keep, text)
    return _BEARER.sub(keep, text)


def credential(value: str) -> str:
    """A secret header's value without its scheme word (`Bearer X` -> X): what to scrub."""
    return _credential(value)


def _credential(value: str) -> str:
    """A header's secret without its scheme word (`Bearer X` -> X), to scrub it anywhere."""
    return _SCHEME.sub("", value)


def _holds(value: str) -> bool:
    """Whether a value found after a secret name is one (not empty, not only a reference)."""
    return value != "" and not is_indirect(value)


def _unquoted(word: str) -> str:
    return word[1:-1] if len(word) >= 2 and word[0] == word[-1] and word[0] in "'\"" else word


def _try_resolve(value: str) -> str:
    try:
        return resolve(value)
    except SpecError:
        return ""


def _longest_first(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(values), key=lambda v: (-len(v), v)))


def _scalar(value: object) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _str_mapping(value: object) -> bool:
    return isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values())
