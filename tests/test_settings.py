"""Settings: LIBFLOW_* variables, runner overrides, the generated secret key."""

from __future__ import annotations

import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from settings import Settings, SettingsError, settings_from_env


def test_env_values_are_converted_to_their_types(tmp_path: Path) -> None:
    settings = settings_from_env(
        {
            "LIBFLOW_DATA_DIR": str(tmp_path),
            "LIBFLOW_PORT": "9001",
            "LIBFLOW_MAX_UPLOAD_BYTES": "1048576",
            "LIBFLOW_API_KEY_CACHE_SECONDS": "0.5",
            "LIBFLOW_HTTP_ALLOW_PRIVATE": "true",
            "LIBFLOW_STORAGE": "s3",
            "LIBFLOW_REDIS_URL": "redis://127.0.0.1:6379/3",
        }
    )
    assert settings.data_dir == tmp_path
    assert settings.port == 9001
    assert settings.max_upload_bytes == 1024 * 1024
    assert settings.api_key_cache_seconds == 0.5
    assert settings.http_allow_private is True
    assert settings.storage == "s3"
    assert settings.redis_url == "redis://127.0.0.1:6379/3"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("1", True), ("yes", True), ("false", False), ("0", False), ("no", False)],
)
def test_booleans_read_the_usual_spellings(raw: str, expected: bool) -> None:
    settings = settings_from_env({"LIBFLOW_HTTP_ALLOW_PRIVATE": raw})
    assert settings.http_allow_private is expected


def test_defaults_apply_without_variables() -> None:
    settings = settings_from_env({})
    assert settings == Settings()
    assert settings.max_upload_bytes == 512 * 1024 * 1024
    assert settings.http_allow_private is False
    assert settings.redis_url is None
    assert settings.storage == "local"


def test_empty_variables_mean_unset() -> None:
    settings = settings_from_env({"LIBFLOW_PORT": "", "LIBFLOW_REDIS_URL": ""})
    assert settings.port == 8080
    assert settings.redis_url is None


def test_other_variables_are_ignored() -> None:
    # The CLI's own variables share the prefix; they are not server settings.
    settings = settings_from_env(
        {"LIBFLOW_URL": "http://x", "LIBFLOW_API_KEY": "lf_x", "PORT": "1", "HOME": "/root"}
    )
    assert settings == Settings()


def test_overrides_win_over_the_environment(tmp_path: Path) -> None:
    settings = settings_from_env(
        {"LIBFLOW_PORT": "9001", "LIBFLOW_HOST": "0.0.0.0"}, port=9100, data_dir=tmp_path
    )
    assert settings.port == 9100
    assert settings.data_dir == tmp_path
    assert settings.host == "0.0.0.0"


def test_unset_overrides_keep_the_environment() -> None:
    # Runner flags that were not given arrive as None.
    settings = settings_from_env({"LIBFLOW_PORT": "9001"}, port=None, host=None)
    assert settings.port == 9001
    assert settings.host == "127.0.0.1"


def test_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIBFLOW_JOB_CONCURRENCY", "7")
    assert settings_from_env().job_concurrency == 7


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LIBFLOW_PORT", "eighty"),
        ("LIBFLOW_PORT", "70000"),
        ("LIBFLOW_MAX_UPLOAD_BYTES", "0"),
        ("LIBFLOW_HTTP_ALLOW_PRIVATE", "maybe"),
        ("LIBFLOW_STORAGE", "ftp"),
        ("LIBFLOW_JOB_CONCURRENCY", "1.5"),
        ("LIBFLOW_EVENT_LOOP", "trio"),
        ("LIBFLOW_LOG_LEVEL", "verbose"),
        ("LIBFLOW_REDIS_URL", "http://cache:6379/0"),
        ("LIBFLOW_DATABASE_URL", "mysql://db/libflow"),
    ],
)
def test_invalid_values_raise_settings_error_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        settings_from_env({name: value})


def test_a_log_level_is_read_in_any_case() -> None:
    assert settings_from_env({"LIBFLOW_LOG_LEVEL": " warning"}).log_level == "WARNING"


def test_invalid_override_names_its_variable() -> None:
    with pytest.raises(SettingsError, match="LIBFLOW_PORT"):
        settings_from_env({}, port=-1)


def test_secret_key_is_generated_once_into_the_data_dir(tmp_path: Path) -> None:
    key = Settings(data_dir=tmp_path).signing_key()
    path = tmp_path / "secret_key"
    assert path.read_bytes() == key
    assert len(key) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # Another process (a fresh Settings) on the same data dir signs with the same key.
    assert settings_from_env({"LIBFLOW_DATA_DIR": str(tmp_path)}).signing_key() == key


def _start_at_once(data_dir: Path, starters: int = 8) -> set[bytes]:
    """The signing keys of ``starters`` settings objects racing on one data dir."""
    barrier = threading.Barrier(starters)

    def start(_: int) -> bytes:
        barrier.wait()
        return Settings(data_dir=data_dir).signing_key()

    with ThreadPoolExecutor(starters) as pool:
        return set(pool.map(start, range(starters)))


def test_processes_starting_at_once_share_one_secret_key(tmp_path: Path) -> None:
    # Each round races fresh starters on an empty data dir, as an API and workers do.
    for round_ in range(20):
        data_dir = tmp_path / str(round_)
        keys = _start_at_once(data_dir)
        assert keys == {(data_dir / "secret_key").read_bytes()}
        assert b"" not in keys
        assert [p.name for p in data_dir.iterdir()] == ["secret_key"]


def test_an_empty_secret_key_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret_key").write_bytes(b"")
    with pytest.raises(SettingsError, match="secret_key"):
        Settings(data_dir=tmp_path).signing_key()


def test_each_data_dir_gets_its_own_secret_key(tmp_path: Path) -> None:
    first = Settings(data_dir=tmp_path / "a").signing_key()
    second = Settings(data_dir=tmp_path / "b").signing_key()
    assert first != second


def test_configured_secret_key_is_used_and_nothing_is_written(tmp_path: Path) -> None:
    settings = settings_from_env(
        {"LIBFLOW_SECRET_KEY": "configured-secret", "LIBFLOW_DATA_DIR": str(tmp_path)}
    )
    assert settings.signing_key() == b"configured-secret"
    assert not (tmp_path / "secret_key").exists()


def test_database_defaults_to_sqlite_in_the_data_dir(tmp_path: Path) -> None:
    settings = settings_from_env({"LIBFLOW_DATA_DIR": str(tmp_path)})
    assert settings.resolved_database_url == f"sqlite://{tmp_path.resolve()}/libflow.sqlite3"


def test_relative_data_dir_gives_an_absolute_sqlite_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = settings_from_env({"LIBFLOW_DATA_DIR": "data"})
    assert settings.resolved_database_url == f"sqlite://{tmp_path.resolve()}/data/libflow.sqlite3"


def test_database_url_wins_over_the_default() -> None:
    url = "postgres://libflow@db.internal:5432/libflow"
    assert settings_from_env({"LIBFLOW_DATABASE_URL": url}).resolved_database_url == url
