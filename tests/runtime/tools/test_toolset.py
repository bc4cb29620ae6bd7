"""The call boundary: validation errors the model can act on, ValueError vs other failures,
OpenAI schemas, events built from results, and the built-in tool set by name."""

import pytest
from pydantic import Field

from treadle.events.model import ActionEvent
from treadle.runtime.tools import (
    Tool,
    ToolArguments,
    ToolCallError,
    ToolContext,
    ToolResult,
    ToolSet,
    builtin_tools,
)


class DivideArguments(ToolArguments):
    numerator: int = Field(description="What to divide.")
    denominator: int = Field(default=1, description="What to divide by.")


class DivideTool(Tool[DivideArguments]):
    name = "divide"
    description = "Divide two integers."
    arguments_model = DivideArguments

    def run(self, arguments: DivideArguments, context: ToolContext) -> ToolResult:
        if arguments.denominator == 0:
            raise ValueError("denominator is 0: division by zero is undefined; pick another")
        if arguments.denominator < 0:
            raise RuntimeError("disk on fire")
        return ToolResult(content=str(arguments.numerator // arguments.denominator))


@pytest.fixture
def divide() -> ToolSet:
    return ToolSet([DivideTool()])


def test_unknown_tool_lists_the_valid_ones(tools: ToolSet) -> None:
    with pytest.raises(ToolCallError) as caught:
        tools.validate("bash", {"command": "ls"})
    assert caught.value.reason == "unknown_tool"
    assert caught.value.tool_name == "bash"
    assert caught.value.message == (
        "Unknown tool 'bash'. Available tools: terminal, file_editor, task_tracker, think, "
        "finish. Call one of these by its exact name."
    )


def test_missing_argument(divide: ToolSet) -> None:
    with pytest.raises(ToolCallError) as caught:
        divide.validate("divide", {})
    assert caught.value.reason == "invalid_arguments"
    assert caught.value.message == (
        "Invalid arguments for divide: numerator: required parameter is missing. "
        "Parameters: numerator*, denominator (* = required)."
    )


def test_wrong_type_and_unknown_parameter(divide: ToolSet) -> None:
    with pytest.raises(ToolCallError) as caught:
        divide.validate("divide", {"numerator": "ten", "denominatr": 2})
    assert caught.value.message == (
        "Invalid arguments for divide: numerator: Input should be a valid integer, unable to "
        "parse string as an integer (got 'ten'); denominatr: unknown parameter. "
        "Parameters: numerator*, denominator (* = required)."
    )


def test_unparseable_arguments_quote_the_raw_text(divide: ToolSet) -> None:
    with pytest.raises(ToolCallError) as caught:
        divide.validate("divide", None, '{"numerator": 1,')
    assert caught.value.message == (
        "The arguments of this divide call are not a JSON object (got '{\"numerator\": 1,'). "
        "Send one JSON object with the parameters: numerator*, denominator (* = required)."
    )
    with pytest.raises(ToolCallError, match=r"not a JSON object \(got \[1, 2\]\)"):
        divide.validate("divide", [1, 2])  # type: ignore[arg-type]


def test_frozen_event_arguments_validate(tools: ToolSet) -> None:
    action = ActionEvent(
        llm_response_id="r1",
        tool_call_id="c1",
        tool_name="file_editor",
        arguments={"command": "view", "path": "a", "view_range": [1, 2]},
        raw_arguments='{"command": "view", "path": "a", "view_range": [1, 2]}',
    )
    arguments = tools.validate(action.tool_name, action.arguments, action.raw_arguments)
    assert arguments.model_dump()["view_range"] == [1, 2]


def test_value_error_becomes_tool_call_error(divide: ToolSet, context: ToolContext) -> None:
    with pytest.raises(ToolCallError) as caught:
        divide.call("divide", {"numerator": 1, "denominator": 0}, context)
    assert caught.value.reason == "tool_error"
    assert caught.value.message == "denominator is 0: division by zero is undefined; pick another"
    assert isinstance(caught.value.__cause__, ValueError)


def test_other_exceptions_propagate_unchanged(divide: ToolSet, context: ToolContext) -> None:
    with pytest.raises(RuntimeError, match="disk on fire"):
        divide.call("divide", {"numerator": 1, "denominator": -1}, context)


def test_events_from_result_and_error_link_to_the_action(
    divide: ToolSet, context: ToolContext
) -> None:
    action = ActionEvent(
        llm_response_id="r1",
        tool_call_id="call-7",
        tool_name="divide",
        arguments={"numerator": 9, "denominator": 2},
        raw_arguments='{"numerator": 9, "denominator": 2}',
    )
    result = divide.call(action.tool_name, action.arguments, context)
    observation = result.to_observation(action, parent_id=action.id)
    assert (observation.action_id, observation.tool_call_id, observation.tool_name) == (
        action.id,
        "call-7",
        "divide",
    )
    assert (observation.content, observation.parent_id) == ("4", action.id)

    bad = action.model_copy(update={"arguments": {"numerator": 1, "denominator": 0}})
    with pytest.raises(ToolCallError) as caught:
        divide.call(bad.tool_name, bad.arguments, context)
    error_event = caught.value.to_agent_error(bad, parent_id=bad.id)
    assert (error_event.tool_call_id, error_event.action_id, error_event.tool_name) == (
        "call-7",
        bad.id,
        "divide",
    )
    assert error_event.error.startswith("denominator is 0")


def test_openai_schema_shape(tools: ToolSet) -> None:
    schema = tools["terminal"].openai_schema()
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "terminal"
    assert function["description"].startswith("Run a bash command in a persistent shell")
    parameters = function["parameters"]
    assert parameters["type"] == "object"
    assert parameters["required"] == ["command"]
    assert set(parameters["properties"]) == {"command", "timeout", "reset"}
    assert parameters["properties"]["command"]["type"] == "string"
    assert parameters["additionalProperties"] is False
    assert "title" not in parameters
    assert "title" not in parameters["properties"]["command"]


def test_nested_models_are_inlined_without_refs(tools: ToolSet) -> None:
    parameters = tools["task_tracker"].openai_schema()["function"]["parameters"]
    assert "$defs" not in parameters
    assert "$ref" not in str(parameters)
    task_list = parameters["properties"]["task_list"]["anyOf"][0]
    assert task_list["type"] == "array"
    item = task_list["items"]
    assert set(item["properties"]) == {"title", "status", "notes"}  # a property named title stays
    assert item["properties"]["status"]["enum"] == ["todo", "in_progress", "done"]


def test_every_builtin_schema_is_listed_in_order(tools: ToolSet) -> None:
    names = [entry["function"]["name"] for entry in tools.openai_schemas()]
    assert names == ["terminal", "file_editor", "task_tracker", "think", "finish"]


def test_builtin_tools_by_name() -> None:
    chosen = builtin_tools(["think", "finish"])
    assert list(chosen) == ["think", "finish"]
    with pytest.raises(ValueError, match="unknown built-in tool\\(s\\) browser"):
        builtin_tools(["think", "browser"])
    with pytest.raises(ValueError, match="two tools are named 'divide'"):
        ToolSet([DivideTool(), DivideTool()])


def test_think_and_finish(tools: ToolSet, context: ToolContext) -> None:
    thought = tools.call("think", {"thought": "first check the tests"}, context)
    assert (thought.content, thought.ends_turn) == ("Your thought has been recorded.", False)
    finished = tools.call("finish", {"message": "All tests pass."}, context)
    assert (finished.content, finished.ends_turn) == ("All tests pass.", True)
    assert tools["finish"].risky(tools["finish"].arguments_model(message="x")) is False


def test_is_risky_counts_unknown_tools_as_risky(tools: ToolSet) -> None:
    assert tools.is_risky("nope", ToolArguments()) is True
    assert tools.is_risky("think", tools["think"].arguments_model(thought="t")) is False
