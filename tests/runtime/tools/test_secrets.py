"""Secrets: masked in tool output (content, data, error messages); available to the terminal."""

import pytest

from treadle.runtime.secrets import SecretError, Secrets
from treadle.runtime.tools import TerminalTool, ToolCallError, ToolContext, ToolSet

API_KEY = "sk-test-4f9a8b7c6d5e"


def test_mask_replaces_every_value_longest_first() -> None:
    secrets = Secrets({"API_KEY": API_KEY, "PREFIX": "sk-test"})
    assert secrets.mask(f"key={API_KEY} and sk-test alone") == (
        "key=<secret:API_KEY> and <secret:PREFIX> alone"
    )
    assert secrets.mask_json({"a": [API_KEY, 3], API_KEY: None}) == {
        "a": ["<secret:API_KEY>", 3],
        "<secret:API_KEY>": None,
    }
    assert API_KEY not in repr(secrets)
    assert secrets.names() == ["API_KEY", "PREFIX"]


def test_bad_names_and_short_values_are_refused() -> None:
    secrets = Secrets()
    with pytest.raises(SecretError, match="not a valid environment variable name"):
        secrets.add("1BAD", API_KEY)
    with pytest.raises(SecretError, match="shorter than 4 characters"):
        secrets.add("SHORT", "ab")


def test_terminal_gets_secrets_as_env_and_output_is_masked(
    tools: ToolSet, context: ToolContext
) -> None:
    context.secrets.add("API_KEY", API_KEY)
    result = tools.call("terminal", {"command": 'echo "key is $API_KEY"; pwd'}, context)
    assert result.content.splitlines()[0] == "key is <secret:API_KEY>"
    assert API_KEY not in result.content


def test_secret_added_later_reaches_the_running_shell(tools: ToolSet, context: ToolContext) -> None:
    tools.call("terminal", {"command": "true"}, context)
    context.secrets.add("LATE_TOKEN", "late-token-value")
    result = tools.call("terminal", {"command": "echo ${#LATE_TOKEN} $LATE_TOKEN"}, context)
    assert result.content.splitlines()[0] == "16 <secret:LATE_TOKEN>"
    context.secrets.remove("LATE_TOKEN")
    gone = tools.call("terminal", {"command": 'echo "[$LATE_TOKEN]"'}, context)
    assert gone.content.splitlines()[0] == "[]"


def test_secrets_are_masked_in_data_and_error_messages(
    tools: ToolSet, context: ToolContext
) -> None:
    context.secrets.add("API_KEY", API_KEY)
    (context.workspace.root / "conf.txt").write_text(f"token = {API_KEY}\n")
    viewed = tools.call("file_editor", {"command": "view", "path": "conf.txt"}, context)
    assert viewed.content.endswith("token = <secret:API_KEY>")

    tools.call(
        "task_tracker",
        {"command": "plan", "task_list": [{"title": f"rotate {API_KEY}"}]},
        context,
    )
    view = tools.call("task_tracker", {"command": "view"}, context)
    assert view.data["tasks"][0]["title"] == "rotate <secret:API_KEY>"

    with pytest.raises(ToolCallError) as caught:
        tools.call("file_editor", {"command": "view", "path": f"{API_KEY}.txt"}, context)
    assert (
        caught.value.message
        == "<secret:API_KEY>.txt does not exist: check the path (view '.' lists the workspace)"
    )

    with pytest.raises(ToolCallError) as invalid:
        tools.call("think", {"thought": ["x" * 60, API_KEY]}, context)
    assert invalid.value.message.startswith(
        "Invalid arguments for think: thought: Input should be a valid string (got ['xxx"
    )
    assert API_KEY[:6] not in invalid.value.message  # masked before the quote was shortened


def test_a_secret_split_by_a_cut_is_masked_on_both_sides() -> None:
    secrets = Secrets({"API_KEY": API_KEY})
    before, after = secrets.mask_around_cut("text sk-test-4f", "a8b7c6d5e more")
    assert (before, after) == ("text <secret:API_KEY>", "<secret:API_KEY> more")
    # Fragments shorter than the minimum length are ordinary text.
    assert secrets.mask_around_cut("ends with sk-", "5e") == ("ends with sk-", "5e")


def test_truncated_terminal_output_never_shows_part_of_a_secret(context: ToolContext) -> None:
    context.secrets.add("API_KEY", API_KEY)
    tools = ToolSet([TerminalTool(max_output_bytes=2000)])
    try:
        # 995 bytes, then the key: the 1000-byte head ends with its first 5 characters.
        result = tools.call(
            "terminal",
            {"command": "head -c 995 /dev/zero | tr '\\0' x; echo \"$API_KEY\"; seq 3000"},
            context,
        )
    finally:
        tools.close()
    head = result.content.split("\n[... ")[0]
    assert head == "x" * 995 + "<secret:API_KEY>"
    assert "sk-te" not in result.content
