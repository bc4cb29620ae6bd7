"""Tool argument schemas: made once per arguments model (pydantic builds one anew on each
call, and every model call sends every tool's), each caller given a copy of its own, and a
model's schema gone with its class."""

from __future__ import annotations

import gc

from pydantic import BaseModel, create_model

from treadle.runtime.tools import schema
from treadle.runtime.tools.file_editor import FileEditorArguments
from treadle.runtime.tools.schema import parameters_schema


def test_the_schema_is_made_once_and_each_caller_changes_only_its_copy(monkeypatch):
    first = parameters_schema(FileEditorArguments)
    assert "$defs" not in first
    assert "title" not in first

    def not_again(*_args, **_kwargs):
        raise AssertionError("the schema was built again")

    monkeypatch.setattr(FileEditorArguments, "model_json_schema", not_again)
    first["properties"]["command"]["changed"] = True
    second = parameters_schema(FileEditorArguments)
    assert "changed" not in second["properties"]["command"]
    assert second["required"] == first["required"]


def test_a_model_made_at_run_time_leaves_with_its_class():
    made: type[BaseModel] = create_model("Made", value=(int, ...))
    assert parameters_schema(made)["required"] == ["value"]
    before = len(schema._SCHEMAS)
    del made
    gc.collect()
    assert len(schema._SCHEMAS) == before - 1
