"""The demo library the app opens on first start.

Its media are made on the user's machine, never downloaded: public-domain sample photos that ship inside the
``scikit-image`` package (a cat, a cup of coffee, an astronaut, a rocket, a motorcycle, coins, ...), plus a few
animated GIFs and a short video drawn here, so search by sentence, by example and the GIF/video paths all have
something to show.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from engine import paths

DEMO_VERSION = 1
_PHOTOS = {
    "chelsea": "cat-on-a-rug.jpg",
    "coffee": "cup-of-coffee.jpg",
    "astronaut": "astronaut-portrait.jpg",
    "rocket": "rocket-on-launch-pad.jpg",
    "motorcycle_left": "motorcycle.jpg",
    "coins": "old-coins.jpg",
    "camera": "cameraman.jpg",
    "hubble_deep_field": "deep-field-galaxies.jpg",
    "retina": "retina.jpg",
    "immunohistochemistry": "stained-tissue.jpg",
}


def demo_dir() -> Path:
    return paths.home() / "demo-library"


def ensure_demo_library() -> Path:
    """The demo media folder, written on first call (atomically: a half-written demo is never used)."""
    target = demo_dir()
    marker = target / ".polyseek-demo.json"
    if marker.is_file() and json.loads(marker.read_text()).get("version") == DEMO_VERSION:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".demo-", dir=target.parent))
    _write_photos(work)
    _write_animations(work)
    (work / ".polyseek-demo.json").write_text(json.dumps({"version": DEMO_VERSION}))
    if target.exists():
        import shutil

        shutil.rmtree(target)
    os.replace(work, target)
    return target


def _write_photos(folder: Path) -> None:
    import skimage.data

    for name, filename in _PHOTOS.items():
        try:
            pixels = getattr(skimage.data, name)()
        except Exception:  # a sample that needs a download in this scikit-image version is simply left out
            continue
        Image.fromarray(np.asarray(pixels)).convert("RGB").save(folder / filename, quality=92)


def _write_animations(folder: Path) -> None:
    size = 160
    frames = []
    for t in range(16):  # a red ball bouncing across a blue sky over green grass
        img = Image.new("RGB", (size, size), (120, 170, 235))
        draw = ImageDraw.Draw(img)
        draw.rectangle([0, 120, size, size], fill=(60, 150, 60))
        x = 10 + t * 8
        y = 100 - int(60 * abs(np.sin(t * np.pi / 6)))
        draw.ellipse([x, y, x + 24, y + 24], fill=(220, 30, 30))
        frames.append(img)
    frames[0].save(folder / "bouncing-red-ball.gif", save_all=True, append_images=frames[1:], duration=80, loop=0)
    frames = []
    for t in range(12):  # a sunset: the sun sinks and the sky turns orange
        img = Image.new("RGB", (size, size), (255 - t * 5, 140 - t * 6, 60 + t * 2))
        draw = ImageDraw.Draw(img)
        y = 30 + t * 7
        draw.ellipse([60, y, 100, y + 40], fill=(255, 220, 90))
        draw.rectangle([0, 120, size, size], fill=(20, 40, 90))
        frames.append(img)
    frames[0].save(folder / "sunset-over-the-sea.gif", save_all=True, append_images=frames[1:], duration=120, loop=0)
    _write_video(folder / "spinning-wheel.mp4")


def _write_video(path: Path) -> None:
    import cv2

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 12, (160, 160))
    try:
        for t in range(36):
            img = np.full((160, 160, 3), 245, np.uint8)
            angle = t * 10
            cv2.ellipse(img, (80, 80), (60, 60), angle, 0, 300, (40, 90, 200), -1)  # BGR
            cv2.circle(img, (80, 80), 12, (30, 30, 30), -1)
            writer.write(img)
    finally:
        writer.release()
