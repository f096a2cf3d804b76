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
from PIL import Image, ImageDraw, ImageFilter

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
    frames = [_sunset_frame(t, size) for t in range(12)]
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


def _sunset_frame(t: int, size: int) -> Image.Image:
    """Frame ``t`` of a sun sinking into the sea: a sky graded from dusk blue to orange at the horizon, the sun's
    glow and disc, a dark sea with the sun's broken reflection and small waves. A flat orange square with a yellow
    disc (the first version) was recognised as a ping-pong ball by every model, and "sunset over the sea" never
    found it; drawn like a photograph, it is the first result for "sunset", "the sea" and the full sentence."""
    rng = np.random.default_rng(t)
    horizon = int(0.58 * size)
    y = np.linspace(0.0, 1.0, size)[:, None]
    dusk, orange, gold = np.array([40, 40, 110]), np.array([230, 110, 60]), np.array([255, 200, 90])
    upper = 0.58 * 0.6
    sky = np.where(y < upper, dusk + (orange - dusk) * (y / upper),
                   orange + (gold - orange) * ((y - upper) / (0.58 - upper)))
    pixels = np.repeat(sky[:, None, :], size, axis=1)
    depth = (1 - (np.arange(horizon, size) - horizon) / (size - horizon))[:, None, None]
    sea = np.array([20, 40, 80]) + np.array([40, 20, 10]) * depth
    sun_y, radius = horizon - 28 + 3 * t, 20
    glow = Image.new("RGB", (size, size))
    ImageDraw.Draw(glow).ellipse([size // 2 - 40, sun_y - 40, size // 2 + 40, sun_y + 40], fill=(120, 70, 20))
    pixels = pixels + np.asarray(glow.filter(ImageFilter.GaussianBlur(14)), dtype=np.float64)
    img = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    ImageDraw.Draw(img).ellipse([size // 2 - radius, sun_y - radius, size // 2 + radius, sun_y + radius],
                                fill=(255, 225, 120))
    pixels = np.asarray(img).copy()
    pixels[horizon:] = np.clip(np.repeat(sea, size, axis=1), 0, 255).astype(np.uint8)  # hides the sun's lower part
    img = Image.fromarray(pixels)
    draw = ImageDraw.Draw(img)
    for k in range(14):  # the reflection: golden streaks narrowing toward the viewer
        row = horizon + 3 + 5 * k + int(rng.integers(0, 3))
        half = max(4, 30 - 2 * k + int(rng.integers(-4, 5)))
        draw.line([size // 2 - half, row, size // 2 + half, row], fill=(250, 180, 90), width=2)
    for _ in range(30):  # small waves
        x, row = int(rng.integers(0, size)), int(rng.integers(horizon + 2, size))
        draw.line([x, row, x + int(rng.integers(4, 12)), row], fill=(90, 100, 140), width=1)
    return img
