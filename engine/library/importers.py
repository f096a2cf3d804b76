"""Other dataset formats in and out of caption folders: COCO captions JSON, Flickr8k/30k token files, and the COCO
JSON form of a library's annotation backup (:func:`write_coco_annotations`, info ``format`` :data:`COCO_FORMAT`).

The caption folder itself (layout, text rules, reading and writing) is :mod:`engine.library.captionfolder`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from engine.files import atomic_write_text
from engine.library.captionfolder import (
    ACCEPT,
    ANNOTATION_KINDS,
    CAPTION,
    REJECT,
    UNASSIGNED_SPLIT,
    Annotation,
    CaptionFolder,
    CaptionFolderError,
    CopyMode,
    caption_source,
    check_file_key,
    clean_split,
    normalize_caption,
    write_caption_folder,
)
from engine.types import CaptionSource

COCO_FORMAT = "polyseek-annotations"  # ``info.format`` of a COCO JSON written by write_coco_annotations


def import_coco_captions(
    json_path: str | os.PathLike[str],
    images_dir: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    copy_media: CopyMode = True,
) -> CaptionFolder:
    """Convert a COCO captions JSON (``images[{id, file_name}]``, ``annotations[{image_id, caption}]``).

    Images whose file is missing from ``images_dir`` and annotations naming unknown image ids are
    reported in the returned folder's ``warnings`` and skipped.
    """
    grouped, warnings = read_coco_captions(json_path)
    return _write_imported(dest, Path(images_dir), grouped, None, copy_media, warnings)


def read_coco_captions(json_path: str | os.PathLike[str]) -> tuple[dict[str, list[str]], list[str]]:
    """The captions of a COCO captions JSON grouped by ``file_name`` (every image, captioned or not), and the
    warnings (annotations naming unknown image ids, skipped). :class:`CaptionFolderError` for malformed files."""
    json_path = Path(json_path)
    data = _read_coco_json(json_path)
    warnings: list[str] = []
    file_of: dict[object, str] = {}
    for n, image in enumerate(data["images"]):
        if not isinstance(image, dict) or "id" not in image or "file_name" not in image:
            raise CaptionFolderError(f"{json_path}: images[{n}] lacks 'id' or 'file_name'")
        file_of[image["id"]] = str(image["file_name"])
    return _coco_captions(json_path, data["annotations"], file_of, warnings), warnings


def _read_coco_json(json_path: Path) -> dict:
    try:
        data = json.loads(json_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CaptionFolderError(f"{json_path}: not a readable COCO captions JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) \
            or not isinstance(data.get("annotations"), list):
        raise CaptionFolderError(f"{json_path}: needs lists 'images' and 'annotations'")
    return data


def _coco_captions(json_path: Path, annotations: list, file_of: Mapping[object, str],
                   warnings: list[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {file: [] for file in file_of.values()}
    for n, ann in enumerate(annotations):
        if not isinstance(ann, dict) or "image_id" not in ann or not isinstance(ann.get("caption"), str):
            raise CaptionFolderError(f"{json_path}: annotations[{n}] lacks 'image_id' or a string 'caption'")
        if ann["image_id"] not in file_of:
            warnings.append(f"{json_path}: annotations[{n}] names unknown image id {ann['image_id']!r}")
            continue
        grouped[file_of[ann["image_id"]]].append(ann["caption"])
    return grouped


def import_flickr_tokens(
    token_file: str | os.PathLike[str],
    images_dir: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    split_files: Mapping[str, str | os.PathLike[str]] | None = None,
    copy_media: CopyMode = True,
) -> CaptionFolder:
    """Convert Flickr8k/30k captions (``Flickr8k.token.txt``: ``NAME.jpg#K<TAB>caption`` lines).

    ``split_files`` maps a split name to a list of file names, one a line (``Flickr_8k.trainImages.txt``);
    with it, images in no list are in ``"unassigned"``. Names whose file is missing are reported in the
    returned folder's ``warnings`` and skipped; a file in two lists is an error.
    """
    token_file, images_dir = Path(token_file), Path(images_dir)
    grouped: dict[str, list[str]] = {}
    for number, line in _text_lines(token_file):
        name, sep, caption = line.partition("\t")
        if not sep:
            raise CaptionFolderError(f"{token_file}:{number}: expected 'NAME#K<TAB>caption'")
        name = _strip_caption_number(name.strip())
        grouped.setdefault(check_file_key(name, f"{token_file}:{number}"), []).append(caption)
    split_of = _read_split_lists(split_files) if split_files is not None else None
    return _write_imported(dest, images_dir, grouped, split_of, copy_media, [])


def _strip_caption_number(name: str) -> str:
    """``'x.jpg#3'`` -> ``'x.jpg'``; a name without a ``#<digits>`` suffix is kept."""
    stem, sep, number = name.rpartition("#")
    return stem if sep and number.isdigit() else name


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise CaptionFolderError(f"{path}: cannot read as UTF-8 text ({exc})") from exc
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield number, line


def _read_split_lists(split_files: Mapping[str, str | os.PathLike[str]]) -> dict[str, str]:
    split_of: dict[str, str] = {}
    for split, list_path in split_files.items():
        clean = clean_split(split, str(list_path))
        for number, line in _text_lines(Path(list_path)):
            name = check_file_key(line.strip(), f"{list_path}:{number}")
            if split_of.get(name, clean) != clean:
                where = f"{list_path}:{number}"
                raise CaptionFolderError(f"{where}: {name!r} is in {split_of[name]!r} and {clean!r}")
            split_of[name] = clean
    return split_of


def _write_imported(dest: str | os.PathLike[str], images_dir: Path, grouped: Mapping[str, list[str]],
                    split_of: Mapping[str, str] | None, copy_media: CopyMode,
                    warnings: list[str]) -> CaptionFolder:
    """Write the imported ``file -> captions`` groups, skipping (and reporting) files that do not exist."""
    present = [f for f in sorted(grouped) if (images_dir / f).is_file()]
    warnings.extend(f"{images_dir / f}: image not found; its captions are skipped"
                    for f in sorted(set(grouped) - set(present)))
    if not present:
        raise CaptionFolderError(f"{images_dir}: none of the listed images exist")
    captions = [(i, text) for i, f in enumerate(present) for text in grouped[f] if normalize_caption(text)]
    splits = None if split_of is None else [split_of.get(f, UNASSIGNED_SPLIT) for f in present]
    folder = write_caption_folder(dest, [images_dir / f for f in present], captions, splits, copy_media)
    folder.warnings[:0] = warnings
    return folder


def export_coco_captions(folder: CaptionFolder, json_path: str | os.PathLike[str]) -> None:
    """Write ``folder`` (or a split view) as a COCO captions JSON; image ids are item index + 1."""
    data = {
        "images": [{"id": i + 1, "file_name": item.file} for i, item in enumerate(folder.items)],
        "annotations": [{"id": n + 1, "image_id": i + 1, "caption": text}
                        for n, (i, text) in enumerate(folder.captions)],
    }
    json_path = Path(json_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(json_path, json.dumps(data, ensure_ascii=False, indent=1))


def write_coco_annotations(json_path: str | os.PathLike[str], images: Sequence[tuple[str, str | None]],
                           annotations: Iterable[Annotation]) -> None:
    """Write a COCO captions JSON that carries every kind of annotation with its provenance, atomically.

    ``images`` are ``(file, content hash or None)``. The standard keys stay what every COCO reader expects:
    ``images`` (``id``, ``file_name``; here also ``content_hash``) and ``annotations`` (``id``, ``image_id``,
    ``caption``; here also ``kind`` "caption" and ``source``), which hold the user's and imported captions only.
    The rest is in keys other tools ignore: ``machine_captions`` (the model's guesses, same fields, ``source``
    "pseudo") and ``pairs`` (``id``, ``image_id``, ``query``, ``kind`` "accept"/"reject", ``source``); ``info``
    names the format (``format`` "polyseek-annotations", ``version`` 1)."""
    image_id = {file: n + 1 for n, (file, _) in enumerate(images)}
    captions: list[dict] = []
    machine: list[dict] = []
    pairs: list[dict] = []
    for a in annotations:
        text = normalize_caption(a.text)
        if not text:
            continue
        source = (a.source or CaptionSource.IMPORTED).value
        row = {"image_id": image_id[a.file], "kind": a.kind, "source": source}
        if a.kind == CAPTION:
            (machine if source == CaptionSource.PSEUDO else captions).append({**row, "caption": text})
        elif a.kind in (ACCEPT, REJECT):
            pairs.append({**row, "query": text})
        else:
            raise CaptionFolderError(f"annotation kind {a.kind!r} for {a.file!r} is not one of {ANNOTATION_KINDS}")
    numbered = [[{"id": n + 1, **row} for n, row in enumerate(rows)] for rows in (captions, machine, pairs)]
    data = {
        "info": {"description": "Polyseek annotations: captions, accepted and rejected results",
                 "format": COCO_FORMAT, "version": 1},
        "images": [{"id": image_id[file], "file_name": file, **({"content_hash": digest} if digest else {})}
                   for file, digest in images],
        "annotations": numbered[0], "machine_captions": numbered[1], "pairs": numbered[2],
    }
    json_path = Path(json_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(json_path, json.dumps(data, ensure_ascii=False, indent=1))


def read_coco_annotations(json_path: str | os.PathLike[str]) -> tuple[dict[str, str | None], list[Annotation]]:
    """The images (``file_name -> content hash or None``) and annotations of a COCO captions JSON, ours
    (:func:`write_coco_annotations`) or anyone's: a caption without ``source`` has none (None); ``pairs`` and
    ``machine_captions`` are read where present. Annotations naming unknown image ids are skipped;
    :class:`CaptionFolderError` for malformed files."""
    json_path = Path(json_path)
    data = _read_coco_json(json_path)
    images: dict[str, str | None] = {}
    file_of: dict[object, str] = {}
    for n, image in enumerate(data["images"]):
        if not isinstance(image, dict) or "id" not in image or "file_name" not in image:
            raise CaptionFolderError(f"{json_path}: images[{n}] lacks 'id' or 'file_name'")
        file = str(image["file_name"]).replace("\\", "/")
        file_of[image["id"]] = file
        digest = image.get("content_hash")
        images[file] = digest if isinstance(digest, str) and digest else None
    out: list[Annotation] = []
    for key, text_field in (("annotations", "caption"), ("machine_captions", "caption"), ("pairs", "query")):
        rows = data.get(key, [])
        if not isinstance(rows, list):
            raise CaptionFolderError(f"{json_path}: {key!r} is not a list")
        for n, ann in enumerate(rows):
            where = f"{json_path}: {key}[{n}]"
            if not isinstance(ann, dict) or "image_id" not in ann or not isinstance(ann.get(text_field), str):
                raise CaptionFolderError(f"{where} lacks 'image_id' or a string {text_field!r}")
            if ann["image_id"] not in file_of:
                continue
            kind = ann.get("kind", CAPTION if text_field == "caption" else None)
            if kind not in ((CAPTION,) if text_field == "caption" else (ACCEPT, REJECT)):
                raise CaptionFolderError(f"{where}: kind {kind!r} does not belong in {key!r}")
            source = caption_source(ann["source"], where) if "source" in ann else (
                CaptionSource.PSEUDO if key == "machine_captions" else None)
            out.append(Annotation(file_of[ann["image_id"]], kind, normalize_caption(ann[text_field]), source))
    return images, [a for a in out if a.text]
