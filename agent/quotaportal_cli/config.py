"""Where qp finds the portal and its token: flags, then QUOTAPORTAL_URL / QUOTAPORTAL_TOKEN, then the config
file `qp login` writes (readable by its owner only: it holds the token)."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

URL_VARIABLE, TOKEN_VARIABLE, CONFIG_VARIABLE = "QUOTAPORTAL_URL", "QUOTAPORTAL_TOKEN", "QUOTAPORTAL_CONFIG"


class ConfigError(Exception):
    """Something qp cannot work without, said so a person can fix it."""


def config_path() -> Path:
    if os.environ.get(CONFIG_VARIABLE):
        return Path(os.environ[CONFIG_VARIABLE]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "quotaportal" / "config.json"


@dataclass(frozen=True)
class Settings:
    url: str
    token: str


def url_check(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"--url: {url!r} is not an http:// or https:// address of the portal")
    return url.rstrip("/")


def read_file(path: Path) -> dict:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigError(f"{path} is not JSON: run `qp login` again") from None
    return data if isinstance(data, dict) else {}


def settings_from(*, url: str | None, token: str | None) -> Settings:
    stored = read_file(config_path())
    url = url or os.environ.get(URL_VARIABLE) or stored.get("url")
    token = token or os.environ.get(TOKEN_VARIABLE) or stored.get("token")
    if not url:
        raise ConfigError(f"no portal address: run `qp login`, set {URL_VARIABLE}, or pass --url")
    if not token:
        raise ConfigError(f"no API token: run `qp login`, set {TOKEN_VARIABLE}, or pass --token")
    return Settings(url=url_check(url), token=token.strip())


def write_file(path: Path, *, url: str, token: str) -> None:
    """Write the config file with mode 0600 (its folder 0700), never readable by others even for a moment."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(descriptor, stat.S_IRUSR | stat.S_IWUSR)  # a file that existed keeps its old mode otherwise
        os.write(descriptor, (json.dumps({"url": url, "token": token}, indent=2) + "\n").encode())
    finally:
        os.close(descriptor)
