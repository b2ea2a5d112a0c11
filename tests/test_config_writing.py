"""`set_default_model`: the first run's one edit to the user's config.toml keeps everything the user wrote."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from code_puppy.config import ConfigError, ModelEndpoint
from code_puppy.config.writing import set_default_model

LOCAL = ModelEndpoint(name="qwen2.5-coder:7b", base_url="http://127.0.0.1:11434/v1", input_price=0, output_price=0)


def test_a_missing_file_is_created_private_in_a_private_folder(tmp_path: Path) -> None:
    config = tmp_path / "code-puppy" / "config.toml"
    set_default_model(config, "anthropic:claude-sonnet-5-5")
    assert config.read_text() == 'model = "anthropic:claude-sonnet-5-5"\n'
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700


def test_the_model_goes_before_the_first_table_and_comments_and_tables_stay(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        "# my code-puppy settings\n"
        "# (keep this)\n"
        "\n"
        "[permissions]\n"
        'allow = ["pytest *"]  # tests run freely\n'
        "\n"
        "[models.fast]\n"
        'name = "gpt-6-luna"\n'
    )
    os.chmod(config, 0o640)
    set_default_model(config, "fast")
    assert config.read_text() == (
        "# my code-puppy settings\n"
        "# (keep this)\n"
        "\n"
        'model = "fast"\n'
        "\n"
        "[permissions]\n"
        'allow = ["pytest *"]  # tests run freely\n'
        "\n"
        "[models.fast]\n"
        'name = "gpt-6-luna"\n'
    )
    assert stat.S_IMODE(config.stat().st_mode) == 0o640  # the user's own mode is kept


def test_an_existing_model_line_is_replaced_in_place(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('# default\nmodel = "openai:gpt-6-luna"   # cheap\n[sessions]\nauto_title = false\n')
    set_default_model(config, "anthropic:claude-haiku-5-5")
    assert config.read_text() == '# default\nmodel = "anthropic:claude-haiku-5-5"\n[sessions]\nauto_title = false\n'


def test_a_model_key_inside_a_table_is_not_the_default(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    text = '[history]\nsummary_model = "cheap"\n[plugins.review]\nmodel = "cheap"\n'
    config.write_text(text)
    set_default_model(config, "fast")
    assert config.read_text() == 'model = "fast"\n\n' + text


def test_a_local_server_gets_its_entry_appended(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[sessions]\nauto_title = false\n")
    set_default_model(config, "qwen2.5-coder-7b", LOCAL)
    assert config.read_text() == (
        'model = "qwen2.5-coder-7b"\n'
        "\n"
        "[sessions]\n"
        "auto_title = false\n"
        "\n"
        '[models."qwen2.5-coder-7b"]\n'
        'name = "qwen2.5-coder:7b"\n'
        'base_url = "http://127.0.0.1:11434/v1"\n'
        "input_price = 0\n"
        "output_price = 0\n"
    )


def test_a_top_level_array_starting_a_line_with_a_bracket_still_gets_the_model_at_the_top_level(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.toml"
    text = 'notes = [\n  ["a", "b"],\n]\n[sessions]\nauto_title = false\n'
    config.write_text(text)
    set_default_model(config, "fast")
    assert config.read_text() == 'model = "fast"\n' + text


def test_a_symlinked_config_is_edited_where_it_lives(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "config.toml"
    real.parent.mkdir()
    real.write_text("# from my dotfiles\n")
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    set_default_model(link, "fast")
    assert link.is_symlink()
    assert real.read_text() == '# from my dotfiles\nmodel = "fast"\n'


def test_invalid_toml_is_refused_and_left_alone(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("model = \n")
    with pytest.raises(ConfigError, match=r"config\.toml: .*fix it first, then choose the model again$"):
        set_default_model(config, "fast")
    assert config.read_text() == "model = \n"


def test_crlf_line_endings_are_kept(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(b"# written on Windows\r\n[sessions]\r\nauto_title = false\r\n")
    set_default_model(config, "qwen2.5-coder-7b", LOCAL)
    assert config.read_bytes() == (
        b'# written on Windows\r\nmodel = "qwen2.5-coder-7b"\r\n\r\n[sessions]\r\nauto_title = false\r\n\r\n'
        b'[models."qwen2.5-coder-7b"]\r\nname = "qwen2.5-coder:7b"\r\nbase_url = "http://127.0.0.1:11434/v1"\r\n'
        b"input_price = 0\r\noutput_price = 0\r\n"
    )


@pytest.mark.parametrize("through_a_symlink", [False, True])
def test_a_read_only_config_is_refused_and_left_alone(tmp_path: Path, through_a_symlink: bool) -> None:
    """Refused even for root, whom the file's mode does not stop: a read-only config.toml is the user's "don't"."""
    real = tmp_path / "dotfiles" / "config.toml"
    real.parent.mkdir()
    real.write_text("# mine\n")
    os.chmod(real, 0o444)
    config = tmp_path / "config.toml"
    if through_a_symlink:
        config.symlink_to(real)
    else:
        config = real
    with pytest.raises(ConfigError) as raised:
        set_default_model(config, "anthropic:claude-haiku-5-5")
    assert str(raised.value) == f'{real} is read-only; add model = "anthropic:claude-haiku-5-5" yourself'
    assert real.read_text() == "# mine\n"
    assert stat.S_IMODE(real.stat().st_mode) == 0o444
    assert sorted(path.name for path in real.parent.iterdir()) == ["config.toml"]


def test_a_read_only_config_names_the_local_servers_entry_to_add(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("")
    os.chmod(config, 0o444)
    with pytest.raises(ConfigError) as raised:
        set_default_model(config, "qwen2.5-coder-7b", LOCAL)
    assert str(raised.value) == (
        f'{config} is read-only; add model = "qwen2.5-coder-7b" and [models."qwen2.5-coder-7b"] with '
        'name = "qwen2.5-coder:7b", base_url = "http://127.0.0.1:11434/v1", input_price = 0, output_price = 0 yourself'
    )


def test_an_inline_models_table_gets_the_exact_entry_to_add(tmp_path: Path) -> None:
    """An inline table cannot be extended by a `[models.NAME]` table: the message gives the entry, inline."""
    config = tmp_path / "config.toml"
    text = 'models = { fast = { name = "gpt-6-luna" } }\n'
    config.write_text(text)
    with pytest.raises(ConfigError) as raised:
        set_default_model(config, "qwen2.5-coder-7b", LOCAL)
    assert str(raised.value) == (
        f"{config}: models = {{ … }} is an inline table, which cannot take another entry here; "
        'add model = "qwen2.5-coder-7b" and "qwen2.5-coder-7b" = { name = "qwen2.5-coder:7b", '
        'base_url = "http://127.0.0.1:11434/v1", input_price = 0, output_price = 0 } inside models = { … } yourself'
    )
    assert config.read_text() == text
