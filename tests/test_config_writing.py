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
