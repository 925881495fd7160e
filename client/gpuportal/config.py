"""Where the portal's URL and token come from, first found wins:

1. arguments (``Portal(url, token)``, ``gpuportal --url … --token …``);
2. environment variables ``GPUPORTAL_URL`` and ``GPUPORTAL_TOKEN``;
3. a TOML config file: ``GPUPORTAL_CONFIG`` if set, else ``$XDG_CONFIG_HOME/gpuportal/config.toml``
   (``~/.config/gpuportal/config.toml``), holding ``url = "…"`` and ``token = "…"``. ``gpuportal
   login`` writes it readable by its owner only.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuportal.errors import ConfigError

URL_ENV = "GPUPORTAL_URL"
TOKEN_ENV = "GPUPORTAL_TOKEN"
CONFIG_ENV = "GPUPORTAL_CONFIG"


@dataclass(frozen=True, slots=True)
class Settings:
    url: str
    token: str
    url_from: str  # "argument", "GPUPORTAL_URL" or the config file's path
    token_from: str


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """The config file's path (it need not exist)."""
    env = os.environ if env is None else env
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    base = Path(env["XDG_CONFIG_HOME"]).expanduser() if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "gpuportal" / "config.toml"


def read_config(path: Path) -> dict[str, str]:
    """``url`` and ``token`` from a config file; empty when the file does not exist."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc}") from exc
    return {key: str(data[key]) for key in ("url", "token") if isinstance(data.get(key), str)}


def resolve(
    url: str | None = None,
    token: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    config: str | Path | None = None,
) -> Settings:
    """The URL and token to use (see the module docstring); ``ConfigError`` says what is missing."""
    env = os.environ if env is None else env
    path = Path(config).expanduser() if config else config_path(env)
    found: dict[str, tuple[str, str]] = {}
    for key, given, variable in (("url", url, URL_ENV), ("token", token, TOKEN_ENV)):
        if given:
            found[key] = (given, "argument")
        elif env.get(variable):
            found[key] = (env[variable], variable)
    if len(found) < 2:
        from_file = read_config(path)
        for key in ("url", "token"):
            if key not in found and from_file.get(key):
                found[key] = (from_file[key], str(path))
    if "url" not in found:
        raise ConfigError(f'no portal URL: pass --url, set {URL_ENV}, or put url = "…" in {path}')
    if "token" not in found:
        raise ConfigError(
            f"no API token: pass --token, set {TOKEN_ENV}, or run `gpuportal login` "
            "(create a token on the portal's Tokens page, /account/tokens/)"
        )
    return Settings(
        url=found["url"][0], token=found["token"][0], url_from=found["url"][1], token_from=found["token"][1]
    )


def write_config(path: Path, *, url: str, token: str) -> None:
    """Write ``url`` and ``token`` to ``path``, readable and writable by its owner only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = f"url = {_toml_string(url)}\ntoken = {_toml_string(token)}\n"
    # Created 0600 before the token is written: never readable by others, not even for an instant.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT: tighten it


def _toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    if any(ord(ch) < 32 for ch in escaped):
        raise ConfigError("URL and token must not contain control characters")
    return f'"{escaped}"'
