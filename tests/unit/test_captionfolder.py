"""The caption folder format: reading, writing, importers and exporter, on tiny generated folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.library.captionfolder import (
    CaptionFolderError,
    load_caption_folder,
    normalize_caption,
    write_caption_folder,
)
from engine.library.importers import export_coco_captions, import_coco_captions, import_flickr_tokens


def make_folder(root: Path, files: list[str], captions: str, splits: str | None = None,
                media: str = "images") -> Path:
    """A caption folder with placeholder media files (the loader never decodes them)."""
    for name in files:
        path = root / media / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"not really an image: " + name.encode())
    (root / "captions.tsv").write_text(captions, encoding="utf-8")
    if splits is not None:
        (root / "splits.tsv").write_text(splits, encoding="utf-8")
    return root


def media_files(root: Path, names: list[str]) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / name).write_bytes(name.encode())
    return [root / name for name in names]


# ---------------------------------------------------------------- reading


def test_load_groups_captions_and_defaults_to_one_split(tmp_path):
    folder = load_caption_folder(make_folder(
        tmp_path, ["b.jpg", "a.gif", "sub/c.mp4"],
        "file\tcaption\nb.jpg\t  A  dog\u00a0runs .\na.gif\tcat\nb.jpg\tsecond one\nsub/c.mp4\tclip\n"))
    assert [item.file for item in folder.items] == ["a.gif", "b.jpg", "sub/c.mp4"]
    assert folder.items[2].path == tmp_path.resolve() / "images" / "sub" / "c.mp4"
    (tmp_path / "images" / "sub" / "loop").symlink_to(tmp_path / "images")  # a link cycle is walked once
    assert len(load_caption_folder(tmp_path).items) == 3  # sub/loop/ is images/ again: not re-entered
    assert folder.splits() == ["all"]
    assert folder.captions == [(1, "A dog runs ."), (0, "cat"), (1, "second one"), (2, "clip")]
    assert folder.captions_of(1) == ["A dog runs .", "second one"]
    assert folder.caption_item_indices() == [1, 0, 1, 2]
    assert folder.warnings == []


def test_splits_view_reindexes_and_unlisted_files_are_unassigned(tmp_path):
    folder = load_caption_folder(make_folder(
        tmp_path, ["a.jpg", "b.jpg", "c.jpg", "d.jpg"],
        "file\tcaption\na.jpg\tone\nc.jpg\tthree\nb.jpg\ttwo\nc.jpg\tthree again\n",
        "file\tsplit\na.jpg\ttrain\nb.jpg\tdev\nc.jpg\tdev\n", media="media"))
    assert folder.media_dir.name == "media"
    assert folder.splits() == ["dev", "train", "unassigned"]
    dev = folder.split("dev")
    assert [item.file for item in dev.items] == ["b.jpg", "c.jpg"]
    assert dev.captions == [(1, "three"), (0, "two"), (1, "three again")]
    assert [(item.file, caps) for item, caps in dev.item_captions()] == [
        ("b.jpg", ["two"]), ("c.jpg", ["three", "three again"])]
    assert [item.file for item in folder.split("unassigned").items] == ["d.jpg"]
    with pytest.raises(CaptionFolderError, match="no split named 'test'"):
        folder.split("test")


def test_rows_naming_missing_files_are_warnings(tmp_path):
    folder = load_caption_folder(make_folder(
        tmp_path, ["a.jpg", "clip.heic", "notes.txt"],
        "file\tcaption\na.jpg\tok\nghost.jpg\tlost\nclip.heic\tunusual extension, but named\n",
        "file\tsplit\na.jpg\ttrain\nghost.jpg\ttrain\n"))
    assert [item.file for item in folder.items] == ["a.jpg", "clip.heic"]  # notes.txt: not media, not named
    assert [item.split for item in folder.items] == ["train", "unassigned"]
    assert folder.captions == [(0, "ok"), (1, "unusual extension, but named")]
    assert len(folder.warnings) == 2
    assert any("captions.tsv:3" in w and "ghost.jpg" in w for w in folder.warnings)
    assert any("splits.tsv:3" in w for w in folder.warnings)


def test_crlf_bom_blank_lines_quotes_and_unicode(tmp_path):
    root = make_folder(tmp_path, ["a.jpg"], "")
    (root / "captions.tsv").write_bytes(
        "\ufefffile\tcaption\r\na.jpg\t\"Quoted\" caf\u00e9 \u2014 \u732b\r\n\r\n".encode())
    assert load_caption_folder(root).captions == [(0, "\"Quoted\" caf\u00e9 \u2014 \u732b")]


@pytest.mark.parametrize("captions,message", [
    ("file\tcaption\na.jpg\tok\na.jpg\ttoo\tmany\n", r"captions.tsv:3: expected 2 .* found 3"),
    ("file\tcaption\na.jpg\n", r"captions.tsv:2: expected 2"),
    ("file\ttext\na.jpg\tok\n", r"captions.tsv:1: header"),
    ("file\tcaption\na.jpg\t   \n", r"captions.tsv:2: empty caption"),
    ("file\tcaption\n../a.jpg\tup\n", r"captions.tsv:2: file name '../a.jpg'"),
    ("file\tcaption\n/etc/a.jpg\tabs\n", r"captions.tsv:2: file name '/etc/a.jpg'"),
    ("file\tcaption\nC:\\a.jpg\twin\n", r"captions.tsv:2: file name"),
])
def test_malformed_captions_name_file_and_line(tmp_path, captions, message):
    with pytest.raises(CaptionFolderError, match=message):
        load_caption_folder(make_folder(tmp_path, ["a.jpg"], captions))


def test_malformed_splits_and_layout_errors(tmp_path):
    root = make_folder(tmp_path / "x", ["a.jpg"], "file\tcaption\na.jpg\tok\n",
                       "file\tsplit\na.jpg\ttrain\na.jpg\tdev\n")
    with pytest.raises(CaptionFolderError, match=r"splits.tsv:3: 'a.jpg' is in 'train' and 'dev'"):
        load_caption_folder(root)
    (root / "splits.tsv").write_bytes(b"file\tsplit\na.jpg\t\xff\n")
    with pytest.raises(CaptionFolderError, match="splits.tsv: not UTF-8"):
        load_caption_folder(root)
    (root / "splits.tsv").unlink()
    (root / "media").mkdir()
    with pytest.raises(CaptionFolderError, match="both images/ and media/"):
        load_caption_folder(root)
    with pytest.raises(CaptionFolderError, match="no media folder"):
        load_caption_folder(tmp_path)
    (tmp_path / "y" / "images").mkdir(parents=True)
    with pytest.raises(CaptionFolderError, match="captions.tsv: missing"):
        load_caption_folder(tmp_path / "y")


def test_normalize_caption():
    assert normalize_caption("  a\tb\n\nc\u3000d  ") == "a b c d"
    assert normalize_caption("\u00e9\u00e8 \U0001f600") == "\u00e9\u00e8 \U0001f600"


# ---------------------------------------------------------------- writing


def test_write_round_trip_copies_and_normalises(tmp_path):
    sources = media_files(tmp_path / "src", ["x.jpg", "y.gif"])
    folder = write_caption_folder(tmp_path / "out", sources,
                                  [(1, "a\tgif\nwith lines"), (0, " photo "), (1, "again")], ["dev", "train"])
    assert (tmp_path / "out" / "images" / "x.jpg").read_bytes() == b"x.jpg"
    assert not (tmp_path / "out" / "images" / "x.jpg").is_symlink()
    assert folder.captions == [(1, "a gif with lines"), (0, "photo"), (1, "again")]
    assert [(i.file, i.split) for i in folder.items] == [("x.jpg", "dev"), ("y.gif", "train")]
    assert (tmp_path / "out" / "captions.tsv").read_text().splitlines()[0] == "file\tcaption"
    assert not list((tmp_path / "out").glob(".*"))  # no temporary files left behind


def test_write_links_or_uses_files_in_place(tmp_path):
    sources = media_files(tmp_path / "src", ["x.jpg"])
    linked = write_caption_folder(tmp_path / "linked", sources, [(0, "cap")], copy_media="link")
    assert linked.items[0].path.is_symlink() and linked.items[0].path.read_bytes() == b"x.jpg"
    in_place = media_files(tmp_path / "own" / "media" / "deep", ["z.png"])
    folder = write_caption_folder(tmp_path / "own", in_place, [(0, "z")], copy_media=False)
    assert [item.file for item in folder.items] == ["deep/z.png"]
    assert not (tmp_path / "own" / "splits.tsv").exists()
    outside = media_files(tmp_path / "elsewhere", ["l.jpg"])[0]
    link = tmp_path / "own" / "media" / "l.jpg"
    link.symlink_to(outside)
    with_link = write_caption_folder(tmp_path / "own", [link], [(0, "linked")], copy_media=False,
                                     overwrite=True)
    assert [item.file for item in with_link.items] == ["deep/z.png", "l.jpg"]  # z.png stays, uncaptioned
    assert with_link.captions == [(1, "linked")]
    copied_into_media = write_caption_folder(tmp_path / "own", sources, [(0, "x")], overwrite=True)
    assert copied_into_media.media_dir.name == "media"
    assert [item.file for item in copied_into_media.items] == ["deep/z.png", "l.jpg", "x.jpg"]
    with pytest.raises(CaptionFolderError, match="is not inside"):
        write_caption_folder(tmp_path / "own", sources, [(0, "x")], copy_media=False, overwrite=True)


def test_write_rejects_bad_input(tmp_path):
    sources = media_files(tmp_path / "src", ["x.jpg", "bad\tname.jpg"])
    other = media_files(tmp_path / "other", ["x.jpg"])
    with pytest.raises(CaptionFolderError, match="tab, newline"):
        write_caption_folder(tmp_path / "o1", sources, [])
    with pytest.raises(CaptionFolderError, match="share the name 'x.jpg'"):
        write_caption_folder(tmp_path / "o2", [sources[0], other[0]], [])
    with pytest.raises(CaptionFolderError, match="media index 3"):
        write_caption_folder(tmp_path / "o3", sources[:1], [(3, "x")])
    with pytest.raises(CaptionFolderError, match="empty caption"):
        write_caption_folder(tmp_path / "o4", sources[:1], [(0, " \n ")])
    with pytest.raises(CaptionFolderError, match="1 split names for 2"):
        write_caption_folder(tmp_path / "o5", [sources[0], tmp_path / "missing.jpg"], [], ["train"])
    write_caption_folder(tmp_path / "o6", sources[:1], [(0, "first")])
    with pytest.raises(CaptionFolderError, match="overwrite=True"):
        write_caption_folder(tmp_path / "o6", sources[:1], [(0, "second")])
    again = write_caption_folder(tmp_path / "o6", sources[:1], [(0, "second")], overwrite=True)
    assert again.captions == [(0, "second")]


# ---------------------------------------------------------------- importers and exporter


def test_import_coco_and_export_round_trip(tmp_path):
    media_files(tmp_path / "coco", ["COCO_1.jpg", "COCO_2.jpg"])
    data = {"images": [{"id": 11, "file_name": "COCO_1.jpg"}, {"id": 12, "file_name": "COCO_2.jpg"},
                       {"id": 13, "file_name": "COCO_missing.jpg"}],
            "annotations": [{"image_id": 12, "caption": "Two\ndogs."}, {"image_id": 11, "caption": "A cat."},
                            {"image_id": 13, "caption": "lost"}, {"image_id": 99, "caption": "orphan"},
                            {"image_id": 12, "caption": "Dogs again."}]}
    (tmp_path / "captions.json").write_text(json.dumps(data))
    folder = import_coco_captions(tmp_path / "captions.json", tmp_path / "coco", tmp_path / "out")
    assert [i.file for i in folder.items] == ["COCO_1.jpg", "COCO_2.jpg"]
    assert folder.captions == [(0, "A cat."), (1, "Two dogs."), (1, "Dogs again.")]
    assert any("99" in w for w in folder.warnings) and any("COCO_missing.jpg" in w for w in folder.warnings)

    export_coco_captions(folder, tmp_path / "export" / "again.json")
    again = import_coco_captions(tmp_path / "export" / "again.json", folder.media_dir, tmp_path / "again")
    assert again.captions == folder.captions and again.warnings == []
    with pytest.raises(CaptionFolderError, match="annotations\\[0\\]"):
        (tmp_path / "bad.json").write_text(json.dumps({"images": [], "annotations": [{"caption": "x"}]}))
        import_coco_captions(tmp_path / "bad.json", tmp_path / "coco", tmp_path / "bad")


def test_import_flickr_tokens_with_split_lists(tmp_path):
    media_files(tmp_path / "flickr", ["1_a.jpg", "2_b.jpg", "3_c.jpg"])
    (tmp_path / "token.txt").write_text(
        "1_a.jpg#0\tA child climbs stairs .\n1_a.jpg#1\tA girl  in pink .\n2_b.jpg#0\tA dog .\n"
        "3_c.jpg#0\tSnow .\n2258277193_586949ec62.jpg.1#0\tnot an image\n\n")
    (tmp_path / "train.txt").write_text("1_a.jpg\n3_c.jpg\n")
    (tmp_path / "dev.txt").write_text("2_b.jpg\nnot_here.jpg\n")
    folder = import_flickr_tokens(tmp_path / "token.txt", tmp_path / "flickr", tmp_path / "out",
                                  {"train": tmp_path / "train.txt", "dev": tmp_path / "dev.txt"})
    assert [(i.file, i.split) for i in folder.items] == [("1_a.jpg", "train"), ("2_b.jpg", "dev"),
                                                         ("3_c.jpg", "train")]
    assert folder.captions_of(0) == ["A child climbs stairs .", "A girl in pink ."]
    assert any("2258277193_586949ec62.jpg.1" in w for w in folder.warnings)
    (tmp_path / "dev.txt").write_text("1_a.jpg\n")
    with pytest.raises(CaptionFolderError, match=r"dev.txt:1: '1_a.jpg' is in 'train' and 'dev'"):
        import_flickr_tokens(tmp_path / "token.txt", tmp_path / "flickr", tmp_path / "out2",
                             {"train": tmp_path / "train.txt", "dev": tmp_path / "dev.txt"})
    (tmp_path / "bad.txt").write_text("1_a.jpg#0 no tab here\n")
    with pytest.raises(CaptionFolderError, match="bad.txt:1"):
        import_flickr_tokens(tmp_path / "bad.txt", tmp_path / "flickr", tmp_path / "out3")
    unsplit = import_flickr_tokens(tmp_path / "token.txt", tmp_path / "flickr", tmp_path / "out4")
    assert unsplit.splits() == ["all"]
