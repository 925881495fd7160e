"""``gpuportal.config``: arguments, then ``GPUPORTAL_URL``/``GPUPORTAL_TOKEN``, then the config file."""

from __future__ import annotations

import pytest

from gpuportal.config import config_path, read_config, resolve, write_config
from gpuportal.errors import ConfigError


def test_arguments_win_over_the_environment_which_wins_over_the_file(tmp_path):
    config = tmp_path / "config.toml"
    write_config(config, url="https://from-file", token="gpt_file")
    env = {"GPUPORTAL_CONFIG": str(config)}
    assert resolve(env=env).url == "https://from-file"
    env |= {"GPUPORTAL_URL": "https://from-env"}
    both = resolve(env=env)
    assert (both.url, both.url_from, both.token, both.token_from) == (
        "https://from-env",
        "GPUPORTAL_URL",
        "gpt_file",
        str(config),
    )
    given = resolve("https://given", "gpt_given", env=env)
    assert (given.url, given.token, given.url_from, given.token_from) == (
        "https://given",
        "gpt_given",
        "argument",
        "argument",
    )


def test_missing_url_or_token_says_where_it_looked(tmp_path):
    env = {"GPUPORTAL_CONFIG": str(tmp_path / "none.toml")}
    with pytest.raises(ConfigError, match="no portal URL: pass --url, set GPUPORTAL_URL"):
        resolve(env=env)
    with pytest.raises(ConfigError, match="Tokens page"):
        resolve("https://x", env=env)


def test_the_config_file_is_written_for_its_owner_only_and_survives_quotes(tmp_path):
    config = tmp_path / "deep" / "config.toml"
    config.parent.mkdir()
    config.write_text("old")
    config.chmod(0o644)
    write_config(config, url='https://x/"odd"\\path', token="gpt_abc")
    assert config.stat().st_mode & 0o777 == 0o600
    assert read_config(config) == {"url": 'https://x/"odd"\\path', "token": "gpt_abc"}
    with pytest.raises(ConfigError):
        write_config(config, url="https://x\n", token="t")


def test_an_unreadable_config_file_is_a_config_error(tmp_path):
    broken = tmp_path / "config.toml"
    broken.write_text("url = [unterminated")
    with pytest.raises(ConfigError, match="cannot read the config file"):
        read_config(broken)


def test_the_default_path_follows_xdg(tmp_path):
    assert config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "gpuportal" / "config.toml"
    assert config_path({"GPUPORTAL_CONFIG": "/etc/gp.toml"}).as_posix() == "/etc/gp.toml"
