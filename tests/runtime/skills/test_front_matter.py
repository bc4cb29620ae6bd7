"""A skill file's front matter: fields read, faults named with their line, and no input that
makes the parser fail other than with FrontMatterError."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from treadle.runtime.skills import FrontMatterError, split_front_matter
from treadle.runtime.skills.activation import mentions


def test_a_file_without_front_matter_is_all_body():
    parsed = split_front_matter("# Rules\n\nUse tabs.\n")
    assert parsed.body == "# Rules\n\nUse tabs."
    assert parsed.front_matter.name is None
    assert parsed.front_matter.triggers == ()


def test_fields_are_read_and_others_ignored():
    text = (
        "---\nname: docker\ndescription: Container rules\ntriggers:\n  - docker\n  - Container\n"
        "allowed-tools: [Bash]\ntype: knowledge\n---\n\nUse slim images.\n"
    )
    parsed = split_front_matter(text)
    meta = parsed.front_matter
    assert (meta.name, meta.description) == ("docker", "Container rules")
    assert meta.triggers == ("docker", "Container")
    assert parsed.body == "Use slim images."


def test_a_single_trigger_word_and_repeated_triggers():
    meta = split_front_matter("---\ntriggers: deploy\n---\nx").front_matter
    assert meta.triggers == ("deploy",)
    meta = split_front_matter("---\ntriggers: [Git, git, GIT, 42]\n---\nx").front_matter
    assert meta.triggers == ("Git", "42")


def test_an_empty_front_matter_is_no_fields():
    parsed = split_front_matter("---\n---\nbody")
    assert parsed.front_matter.name is None
    assert parsed.body == "body"


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ("---\nname: x\nbody without a closing fence\n", 1, "never closed"),
        ("---\nname: ok\ntriggers: [a, b\n---\nbody", 4, "bad YAML"),
        ('---\nname: ok\ndescription: "unterminated\n---\nbody', 4, "bad YAML"),
        ("---\n- a list\n- not a mapping\n---\nbody", 2, "mapping"),
        ("---\ndescription: fine\nname: [not, text]\n---\nbody", 3, "'name' should be text"),
        ("---\nname: ok\n\ntriggers: {a: 1}\n---\nbody", 4, "'triggers' should be a list"),
        ("---\ntriggers: [[nested]]\n---\nbody", 2, "not a word"),
        ("---\ntriggers: ['']\n---\nbody", 2, "a trigger is empty"),
        ('---\nname: "bell\\a"\n---\nbody', 2, "control"),
        ('---\nname: "\\u202eevil"\n---\nbody', 2, "control"),
        ("---\nname: '   '\n---\nbody", 2, "'name' is empty"),
        ("---\nname: " + "n" * 101 + "\n---\nbody", 2, "over 100"),
        ("---\ntriggers: [" + ", ".join(["w"] * 101) + "]\n---\nbody", 2, "over 100 items"),
        ("---\nname: !!python/object:os.system x\n---\nbody", 2, "bad YAML"),
    ],
)
def test_faults_name_their_line(text, line, says):
    with pytest.raises(FrontMatterError) as raised:
        split_front_matter(text)
    assert raised.value.line == line
    assert says in str(raised.value)
    assert str(raised.value).startswith(f"line {line}: ")


def _alias_bomb(levels: int) -> str:
    """YAML whose aliases nest ``levels`` deep, ten each: 10**(levels+1) elements when walked,
    a few hundred bytes as text (the "billion laughs")."""
    lines = ["l0: &l0 [" + ", ".join(["lol"] * 10) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("field", "says"),
    [
        ("triggers: {bomb: *l8}", "'triggers' should be a list of words, got a dict"),
        ("triggers: [*l8]", "trigger a list is not a word"),
        ("name: *l8", "'name' should be text"),
        ("description: *l8", "'description' should be text"),
    ],
)
def test_an_alias_bomb_is_refused_without_being_walked(field, says):
    # Its repr (once in the error message) would have 10**9 elements: it never ended.
    with pytest.raises(FrontMatterError) as raised:
        split_front_matter(f"---\n{_alias_bomb(9)}\n{field}\n---\nbody")
    assert says in str(raised.value)
    assert len(str(raised.value)) < 200


@given(st.text(alphabet=st.sampled_from("-:\n[]{}'\"&*!|>#%@` \tabc\x00\u202e"), max_size=80))
def test_any_text_parses_or_fails_with_a_front_matter_error(text):
    line = None
    try:
        parsed = split_front_matter(text)
    except FrontMatterError as error:
        line = error.line
    if line is None:
        assert isinstance(parsed.body, str)
    else:
        assert 1 <= line <= text.count("\n") + 2


names = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")),
    min_size=1,
    max_size=40,
).filter(lambda name: name.strip() == name and name)
words = st.text(alphabet=st.characters(categories=("L", "N")), min_size=1, max_size=20)


@given(name=names, triggers=st.lists(words, max_size=5, unique_by=str.casefold), body=st.text())
def test_fields_written_by_a_yaml_writer_are_read_back(name, triggers, body):
    front = yaml.safe_dump({"name": name, "triggers": triggers}, allow_unicode=True)
    parsed = split_front_matter(f"---\n{front}---\n{body}")
    assert parsed.front_matter.name == name
    assert parsed.front_matter.triggers == tuple(triggers)
    assert parsed.body == body.strip()


@pytest.mark.parametrize(
    ("trigger", "text", "matches"),
    [
        ("docker", "Build the Docker image", True),
        ("docker", "edit the dockerfile", False),
        ("docker", "docker-compose up", True),
        ("git", "digital", False),
        ("c++", "a C++ question", True),
        ("/deploy", "please /deploy now", True),
        ("café", "au CAFÉ", True),
        ("two words", "say Two  Words", False),
        ("two words", "say two words!", True),
        ("straße", "die STRASSE hier", True),
        ("docker", "dockerdocker docker_x then Docker.", True),
        ("docker", "dockerdocker docker_x", False),
        ("a", "", False),
    ],
)
def test_triggers_match_whole_words_in_any_case(trigger, text, matches):
    assert mentions(text, trigger) is matches
