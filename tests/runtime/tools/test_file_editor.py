"""The file editor: each command, the unique-match rule, undo, and refusal outside the workspace."""

import os
from pathlib import Path

import pytest

from treadle.runtime.tools import ToolCallError, ToolContext, ToolResult, ToolSet


def edit(tools: ToolSet, context: ToolContext, **arguments: object) -> ToolResult:
    return tools.call("file_editor", arguments, context)


def test_create_then_view_with_line_numbers(tools: ToolSet, context: ToolContext) -> None:
    created = edit(tools, context, command="create", path="pkg/a.py", file_text="x = 1\ny = 2\n")
    assert created.content == "Created pkg/a.py (2 lines)."
    assert (context.workspace.root / "pkg" / "a.py").read_text() == "x = 1\ny = 2\n"

    viewed = edit(tools, context, command="view", path="pkg/a.py")
    assert viewed.content == "pkg/a.py, lines 1-2 of 2:\n     1\tx = 1\n     2\ty = 2"
    assert viewed.data == {"command": "view", "path": "pkg/a.py"}


def test_view_range_and_its_errors(tools: ToolSet, context: ToolContext) -> None:
    (context.workspace.root / "f.txt").write_text("".join(f"l{n}\n" for n in range(1, 11)))
    assert edit(tools, context, command="view", path="f.txt", view_range=[3, 4]).content == (
        "f.txt, lines 3-4 of 10:\n     3\tl3\n     4\tl4"
    )
    to_end = edit(tools, context, command="view", path="f.txt", view_range=[9, -1])
    assert to_end.content.splitlines()[1:] == ["     9\tl9", "    10\tl10"]
    with pytest.raises(ToolCallError, match=r"start 11 is outside f\.txt, which has 10 lines"):
        edit(tools, context, command="view", path="f.txt", view_range=[11, 12])


def test_view_folder_lists_two_levels_without_hidden(tools: ToolSet, context: ToolContext) -> None:
    root = context.workspace.root
    (root / "src" / "deep" / "deeper").mkdir(parents=True)
    (root / "src" / "deep" / "deeper" / "x.py").write_text("")
    (root / "src" / "main.py").write_text("")
    (root / ".git").mkdir()
    (root / "README").write_text("")
    listing = edit(tools, context, command="view", path=".").content.splitlines()
    assert listing[1:] == ["README", "src/", "src/deep/", "src/main.py"]


def test_create_refuses_to_overwrite_unless_asked(tools: ToolSet, context: ToolContext) -> None:
    target = context.workspace.root / "keep.txt"
    target.write_text("original\n")
    with pytest.raises(ToolCallError, match=r"keep\.txt already exists") as caught:
        edit(tools, context, command="create", path="keep.txt", file_text="new\n")
    assert caught.value.reason == "tool_error"
    assert target.read_text() == "original\n"

    result = edit(
        tools, context, command="create", path="keep.txt", file_text="new\n", overwrite=True
    )
    assert result.content == "Overwrote keep.txt (1 lines)."
    assert target.read_text() == "new\n"
    edit(tools, context, command="undo_edit", path="keep.txt")
    assert target.read_text() == "original\n"


def test_str_replace_requires_exactly_one_match(tools: ToolSet, context: ToolContext) -> None:
    target = context.workspace.root / "m.py"
    target.write_text("a = 1\nb = 2\na = 1\nc = 3\n")
    with pytest.raises(ToolCallError) as several:
        edit(tools, context, command="str_replace", path="m.py", old_str="a = 1", new_str="a = 9")
    assert several.value.message == (
        "No replacement made: old_str was found 2 times in m.py (starting at lines 1, 3); "
        "include more surrounding lines to make it unique."
    )
    with pytest.raises(ToolCallError, match=r"old_str was found 0 times in m\.py"):
        edit(tools, context, command="str_replace", path="m.py", old_str="  b = 2", new_str="")
    assert target.read_text() == "a = 1\nb = 2\na = 1\nc = 3\n"

    result = edit(
        tools, context, command="str_replace", path="m.py", old_str="b = 2\na = 1", new_str="b = 5"
    )
    assert target.read_text() == "a = 1\nb = 5\nc = 3\n"
    assert result.content == (
        "Edited m.py. Lines 1-3 now read:\n     1\ta = 1\n     2\tb = 5\n     3\tc = 3\n"
        "Check the change (undo_edit reverts it)."
    )


def test_str_replace_with_omitted_new_str_deletes(tools: ToolSet, context: ToolContext) -> None:
    target = context.workspace.root / "d.txt"
    target.write_text("keep\ndrop me\nkeep too\n")
    edit(tools, context, command="str_replace", path="d.txt", old_str="drop me\n")
    assert target.read_text() == "keep\nkeep too\n"


def test_insert_after_line_and_at_top(tools: ToolSet, context: ToolContext) -> None:
    target = context.workspace.root / "i.txt"
    target.write_text("one\ntwo")  # no final newline
    edit(tools, context, command="insert", path="i.txt", insert_line=1, new_str="one and a half")
    assert target.read_text() == "one\none and a half\ntwo"
    edit(tools, context, command="insert", path="i.txt", insert_line=0, new_str="zero\n")
    edit(tools, context, command="insert", path="i.txt", insert_line=4, new_str="three")
    assert target.read_text() == "zero\none\none and a half\ntwo\nthree\n"
    with pytest.raises(
        ToolCallError, match=r"insert_line 9 is past the end of i\.txt, which has 5"
    ):
        edit(tools, context, command="insert", path="i.txt", insert_line=9, new_str="x")


def test_undo_walks_back_per_file_history(tools: ToolSet, context: ToolContext) -> None:
    target = context.workspace.root / "u.txt"
    edit(tools, context, command="create", path="u.txt", file_text="v1\n")
    edit(tools, context, command="str_replace", path="u.txt", old_str="v1", new_str="v2")
    edit(tools, context, command="insert", path="u.txt", insert_line=1, new_str="v3")
    edit(tools, context, command="create", path="other.txt", file_text="x\n")
    assert target.read_text() == "v2\nv3\n"

    edit(tools, context, command="undo_edit", path="u.txt")
    assert target.read_text() == "v2\n"
    edit(tools, context, command="undo_edit", path="u.txt")
    assert target.read_text() == "v1\n"
    removed = edit(tools, context, command="undo_edit", path="u.txt")
    assert removed.content == "Undid the creation of u.txt: the file was removed."
    assert not target.exists()
    assert (context.workspace.root / "other.txt").read_text() == "x\n"
    with pytest.raises(ToolCallError, match=r"no edit of u\.txt to undo"):
        edit(tools, context, command="undo_edit", path="u.txt")


def test_crlf_and_unicode_are_kept(tools: ToolSet, context: ToolContext) -> None:
    target = context.workspace.root / "w.txt"
    target.write_bytes("héllo\r\nwörld\r\n".encode())
    edit(tools, context, command="str_replace", path="w.txt", old_str="wörld", new_str="welt")
    assert target.read_bytes() == "héllo\r\nwelt\r\n".encode()


def test_binary_and_missing_files_are_refused(tools: ToolSet, context: ToolContext) -> None:
    (context.workspace.root / "b.bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ToolCallError, match=r"b\.bin looks binary"):
        edit(tools, context, command="view", path="b.bin")
    with pytest.raises(ToolCallError, match=r"nope\.txt does not exist"):
        edit(tools, context, command="view", path="nope.txt")


@pytest.mark.parametrize(
    "path",
    ["../outside.txt", "sub/../../outside.txt", "/etc/passwd"],
)
def test_paths_outside_the_workspace_are_refused(
    tools: ToolSet, context: ToolContext, path: str
) -> None:
    (context.workspace.root / "sub").mkdir()
    with pytest.raises(ToolCallError, match="is outside the workspace") as caught:
        edit(tools, context, command="create", path=path, file_text="escaped\n")
    assert caught.value.reason == "tool_error"
    assert not (context.workspace.root.parent / "outside.txt").exists()


def test_symlink_escape_is_refused(tools: ToolSet, context: ToolContext, tmp_path: Path) -> None:
    secret_dir = tmp_path / "private"
    secret_dir.mkdir()
    (secret_dir / "key.txt").write_text("top secret\n")
    os.symlink(secret_dir, context.workspace.root / "link")
    with pytest.raises(ToolCallError) as caught:
        edit(tools, context, command="view", path="link/key.txt")
    assert "a symlink inside it leads to" in caught.value.message
    assert "top secret" not in caught.value.message
    with pytest.raises(ToolCallError, match="outside the workspace"):
        edit(tools, context, command="create", path="link/new.txt", file_text="x")
    assert not (secret_dir / "new.txt").exists()


def test_view_folder_does_not_follow_symlinks_that_lead_out(
    tools: ToolSet, context: ToolContext, tmp_path: Path
) -> None:
    private = tmp_path / "private"
    (private / "inner").mkdir(parents=True)
    (private / "secret-name.txt").write_text("")
    root = context.workspace.root
    (root / "src").mkdir()
    (root / "real").mkdir()
    os.symlink(private, root / "out")
    os.symlink(private, root / "src" / "deep-out")
    os.symlink(root / "real", root / "alias")  # inside: followed as before
    (root / "real" / "f.txt").write_text("")
    listing = edit(tools, context, command="view", path=".").content
    assert "secret-name" not in listing
    assert "inner" not in listing
    assert listing.splitlines()[1:] == [
        "alias/",
        "alias/f.txt",
        "out@ (a symlink leading outside the workspace: not followed)",
        "real/",
        "real/f.txt",
        "src/",
        "src/deep-out@ (a symlink leading outside the workspace: not followed)",
    ]


def test_symlink_inside_the_workspace_is_fine(tools: ToolSet, context: ToolContext) -> None:
    root = context.workspace.root
    (root / "real").mkdir()
    (root / "real" / "f.txt").write_text("inside\n")
    os.symlink(root / "real", root / "alias")
    assert "inside" in edit(tools, context, command="view", path="alias/f.txt").content


def test_missing_command_fields_are_invalid_arguments(tools: ToolSet, context: ToolContext) -> None:
    with pytest.raises(ToolCallError) as caught:
        edit(tools, context, command="insert", path="x.txt", new_str="a")
    assert caught.value.reason == "invalid_arguments"
    assert caught.value.message.startswith(
        "Invalid arguments for file_editor: command insert needs insert_line."
    )


def test_risk_and_parallel_flags(tools: ToolSet) -> None:
    editor = tools["file_editor"]
    assert editor.parallel_safe is True
    assert editor.risky(editor.arguments_model(command="view", path="a")) is False
    assert editor.risky(editor.arguments_model(command="create", path="a", file_text="")) is True
