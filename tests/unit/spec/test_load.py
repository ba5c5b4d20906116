"""The loader: line numbers, overlays, relative paths, cycles and error rendering."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field

from flows.errors import MultipleSpecError, SpecError
from flows.spec.base import Problem, SpecContext, SpecModel, SpecPath
from flows.spec.load import load_document, load_model


class Inner(SpecModel):
    """Nested model used to exercise key paths."""

    count: int = Field(default=1, ge=0, description="a count")
    tags: list[str] = Field(default=[], description="tags")
    file: SpecPath | None = Field(default=None, description="a local file")


class Sample(SpecModel):
    """Top-level model used by these tests."""

    kind: Literal["sample"] = Field(description="kind")
    name: str = Field(description="name")
    inner: Inner = Field(default=Inner(), description="inner")
    items: list[Inner] = Field(default=[], description="items")

    def problems(self, context: SpecContext | None) -> list[Problem]:
        """Names starting with x are refused, pointing at items[0].count for the test."""
        if self.name.startswith("x"):
            return [Problem(("items", 0, "count"), "x names are refused", "another name")]
        return []


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def error_of(path: Path) -> str:
    with pytest.raises(SpecError) as caught:
        load_model(path, Sample)
    return caught.value.render()


def test_valid_file_loads(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "kind: sample\nname: a\ninner: {count: 3, tags: [x]}\n")
    sample = load_model(path, Sample)
    assert sample.inner.count == 3
    assert sample.inner.tags == ["x"]


def test_wrong_type_names_file_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "kind: sample\nname: a\ninner:\n  count: many\n")
    assert error_of(path) == (
        f"{path}:4: inner.count: wrong type, got 'many' (expected an integer)"
    )


def test_unknown_key_lists_allowed_keys(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "kind: sample\nname: a\ninner:\n  cuont: 2\n")
    assert error_of(path) == (
        f"{path}:4: inner.cuont: unknown key (expected one of count, file, tags)"
    )


def test_list_items_are_indexed(tmp_path: Path) -> None:
    text = "kind: sample\nname: a\nitems:\n  - count: 1\n  - count: -1\n"
    path = write(tmp_path / "a.yaml", text)
    assert error_of(path) == f"{path}:5: items[1].count: got -1 (expected a value >= 0)"


def test_missing_key_points_at_parent(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "kind: sample\n")
    assert error_of(path) == f"{path}:1: name: required key is missing"


def test_several_errors_are_all_reported(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "kind: sample\nname: [1]\nextra: 1\n")
    with pytest.raises(MultipleSpecError) as caught:
        load_model(path, Sample)
    assert len(caught.value.errors) == 2
    assert caught.value.render().splitlines()[1].startswith(f"{path}:3: extra: unknown key")


def test_problem_locations_are_exact(tmp_path: Path) -> None:
    text = "kind: sample\nname: xyz\nitems:\n  - count: 1\n"
    path = write(tmp_path / "a.yaml", text)
    assert (
        error_of(path) == f"{path}:4: items[0].count: x names are refused (expected another name)"
    )


def test_yaml_syntax_error_has_line(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "kind: sample\nname: [a\n")
    assert error_of(path).startswith(f"{path}:3: (top level): invalid YAML:")


def test_duplicate_key_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "kind: sample\nname: a\nname: b\n")
    assert error_of(path) == f"{path}:3: name: duplicate key (expected each key once per mapping)"


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "kind: sample\nname: &a [*a]\n")
    assert "recursive alias" in error_of(path)


def test_overlay_deep_merges_and_keeps_origins(tmp_path: Path) -> None:
    write(tmp_path / "base.yaml", "kind: sample\nname: base\ninner:\n  count: 1\n  tags: [a]\n")
    child = write(
        tmp_path / "child.yaml",
        "extends: base.yaml\nset:\n  inner:\n    tags: [b, c]\n",
    )
    sample = load_model(child, Sample)
    assert (sample.name, sample.inner.count, sample.inner.tags) == ("base", 1, ["b", "c"])
    document = load_document(child)
    assert document.origin_of(("inner", "count")).file == tmp_path / "base.yaml"
    assert document.origin_of(("inner", "tags", 1)).line == 4


def test_unset_removes_keys_of_the_base_before_set_merges(tmp_path: Path) -> None:
    """A TP3 overlay of a TP4 profile drops a variable the ring sets and the triangle must not."""
    base = "kind: sample\nname: base\ninner:\n  count: 4\n  tags: [ring]\n  file: x.txt\n"
    write(tmp_path / "base.yaml", base)
    child = write(
        tmp_path / "child.yaml",
        "extends: base.yaml\nunset: [inner.file, inner.tags]\nset:\n  inner: {count: 3}\n",
    )
    sample = load_model(child, Sample)
    assert (sample.inner.count, sample.inner.tags, sample.inner.file) == (3, [], None)
    assert load_model(tmp_path / "base.yaml", Sample).inner.tags == ["ring"]  # base untouched
    assert load_document(child).origin_of(("inner", "count")).file == child


def test_unset_of_a_key_the_base_lacks_names_the_overlay_line(tmp_path: Path) -> None:
    write(tmp_path / "base.yaml", "kind: sample\nname: base\n")
    child = write(tmp_path / "child.yaml", "extends: base.yaml\nunset:\n  - inner.nope\n")
    assert error_of(child) == (
        f"{child}:3: unset[0]: inner.nope names no key of {tmp_path / 'base.yaml'} "
        "(expected a dotted key path of the extended file)"
    )
    bad = write(tmp_path / "bad.yaml", "extends: base.yaml\nunset: inner.nope\n")
    assert "unset: must be a list of dotted key paths" in error_of(bad)


def test_error_in_overlay_points_at_overlay_line(tmp_path: Path) -> None:
    write(tmp_path / "base.yaml", "kind: sample\nname: base\n")
    child = write(tmp_path / "child.yaml", "extends: base.yaml\nset:\n  inner: {count: no}\n")
    assert error_of(child).startswith(f"{child}:3: inner.count: wrong type")


def test_error_in_base_points_at_base(tmp_path: Path) -> None:
    base = write(tmp_path / "base.yaml", "kind: sample\nname: base\nbogus: 1\n")
    child = write(tmp_path / "child.yaml", "extends: base.yaml\n")
    assert error_of(child).startswith(f"{base}:3: bogus: unknown key")


def test_nested_extends_includes_a_mapping(tmp_path: Path) -> None:
    write(tmp_path / "parts" / "inner.yaml", "kind: inner\ncount: 7\nfile: data.txt\n")
    path = write(
        tmp_path / "a.yaml",
        "kind: sample\nname: a\ninner:\n  extends: parts/inner.yaml\n  set: {tags: [t]}\n",
    )
    sample = load_model(path, Sample)
    assert sample.inner.count == 7
    assert sample.inner.file == tmp_path / "parts" / "data.txt"


def test_relative_paths_resolve_against_declaring_file(tmp_path: Path) -> None:
    write(tmp_path / "base" / "b.yaml", "kind: sample\nname: b\ninner: {file: x.txt}\n")
    child = write(tmp_path / "c.yaml", "extends: base/b.yaml\nset: {items: [{file: y.txt}]}\n")
    sample = load_model(child, Sample)
    assert sample.inner.file == tmp_path / "base" / "x.txt"
    assert sample.items[0].file == tmp_path / "y.txt"


def test_extends_cycle_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", "extends: b.yaml\n")
    write(tmp_path / "b.yaml", "kind: sample\nextends: a.yaml\n")
    message = error_of(tmp_path / "a.yaml")
    assert message.startswith(f"{tmp_path / 'b.yaml'}:2: extends: extends cycle:")


def test_missing_extends_target_names_the_declaring_line(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "kind: sample\nextends: nope.yaml\n")
    assert error_of(path) == f"{path}:2: extends: file not found: {tmp_path / 'nope.yaml'}"


def test_keys_beside_extends_are_refused(tmp_path: Path) -> None:
    write(tmp_path / "b.yaml", "kind: sample\nname: b\n")
    path = write(tmp_path / "a.yaml", "extends: b.yaml\nname: c\n")
    assert error_of(path) == (
        f"{path}:2: name: only `set` and `unset` may accompany `extends` "
        "(expected extends, kind, set, unset)"
    )


def test_kind_mismatch_with_base_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "b.yaml", "kind: other\nname: b\n")
    path = write(tmp_path / "a.yaml", "kind: sample\nextends: b.yaml\n")
    assert "differs from the kind of" in error_of(path)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "none.yaml"
    assert error_of(path) == f"{path}: (top level): file not found (expected an existing YAML file)"


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path / "a.yaml", "- 1\n- 2\n")
    assert error_of(path).startswith(f"{path}:1: (top level): the file must be a mapping")


def test_undescribed_field_is_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="without a description"):

        class Bad(SpecModel):
            value: int = 0


def test_a_home_of_a_user_this_machine_lacks_is_a_spec_error(tmp_path: Path) -> None:
    """`~nosuchuser` made pathlib raise RuntimeError (a crash, found by the fuzz test)."""
    child = write(tmp_path / "child.yaml", "extends: ~nosuchuser-sparkgate/base.yaml\n")
    with pytest.raises(SpecError, match=r"child\.yaml:1: extends: .*no home directory"):
        load_document(child)
