"""The record artifact carries its plots inline: relative image links become data URIs."""

from __future__ import annotations

import base64
import re
from pathlib import Path

from flows.pipeline.artifacts import embed_images, file_loader, relative_image

RECORD = Path(__file__).resolve().parents[2] / "data" / "records" / "schema-1" / "2026-12-03-r2"
DATA_URI = re.compile(r"!\[(?P<alt>[^\]]*)\]\(data:(?P<media>[^;]+);base64,(?P<data>[^)\s]+)\)")


def test_every_plot_of_a_real_readme_is_inlined_and_the_readme_stays_as_it_was() -> None:
    readme = RECORD / "README.md"
    before = readme.read_bytes()
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme.read_text())
    assert linked, "the test record links no plot"

    text = embed_images(readme.read_text(), file_loader(RECORD))

    assert readme.read_bytes() == before, "the record's own README is never rewritten"
    inlined = list(DATA_URI.finditer(text))
    assert len(inlined) == len(linked)
    for match, path in zip(inlined, linked, strict=True):
        assert match["media"] == "image/png"
        assert base64.b64decode(match["data"]) == (RECORD / path).read_bytes()
    assert not any(f"]({path})" in text for path in linked)


def test_only_files_beside_the_document_are_inlined() -> None:
    files = {"plots/a.png": b"\x89PNG a", "b.svg": b"<svg/>"}
    markdown = "\n".join([
        "![a](plots/a.png)",
        '![b](b.svg "the title")',
        "![missing](plots/none.png)",
        "![web](https://example.org/x.png)",
        "![already](data:image/png;base64,AAAA)",
        "![up](../other/plots/a.png)",
        "![abs](/etc/a.png)",
        "![text](notes.txt)",
        "[a link, not an image](plots/a.png)",
    ])  # fmt: skip

    lines = embed_images(markdown, files.get).splitlines()

    png = base64.b64encode(files["plots/a.png"]).decode()
    svg = base64.b64encode(files["b.svg"]).decode()
    assert lines[0] == f"![a](data:image/png;base64,{png})"
    assert lines[1] == f'![b](data:image/svg+xml;base64,{svg} "the title")'
    assert lines[2:] == markdown.splitlines()[2:]


def test_relative_image_refuses_urls_absolute_paths_and_parents() -> None:
    assert relative_image("plots/boots.png")
    assert relative_image("x.PNG")
    assert not relative_image("http://host/x.png")
    assert not relative_image("/x.png")
    assert not relative_image("a/../../x.png")
    assert not relative_image("plots/x.csv")


def test_the_file_loader_stays_inside_its_folder(tmp_path: Path) -> None:
    (tmp_path / "record" / "plots").mkdir(parents=True)
    (tmp_path / "record" / "plots" / "a.png").write_bytes(b"png")
    (tmp_path / "secret.png").write_bytes(b"secret")
    (tmp_path / "record" / "plots" / "link.png").symlink_to(tmp_path / "secret.png")
    load = file_loader(tmp_path / "record")
    assert load("plots/a.png") == b"png"
    assert load("plots/none.png") is None
    assert load("../secret.png") is None
    assert load("plots/link.png") is None
