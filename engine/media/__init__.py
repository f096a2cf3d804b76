"""The media layer: find, recognise, probe and decode photos, animations and videos (no Qt, no torch).

Everything here treats files as untrusted. A file is recognised by its content (magic bytes), never its
name, and every failure (truncated, corrupt, mislabelled, empty, gigantic, vanished, unreadable) is a
:class:`MediaError` whose message is a short reason; no other exception type escapes the public
functions for a bad file (``ValueError`` is kept for bad arguments), and nothing is unbounded.

Limits (``engine.media.limits``; tests may lower them):

- ``MAX_FILE_BYTES`` (4 GiB) for any file; ``MAX_IMAGE_FILE_BYTES`` (512 MiB) for images/animations.
- ``MAX_IMAGE_PIXELS`` (100 MP) decoded pixels per picture, animation canvas or video frame, checked on
  the declared size before pixels are allocated (for JPEG: on the reduced draft size). A header declaring
  50,000 x 50,000 is refused at once, by this check or by Pillow's own bomb check.
- ``MAX_ANIMATION_FRAMES`` (5,000) frames counted/decoded per animation, further lowered by
  ``MAX_ANIMATION_DECODED_PIXELS`` (2 G canvas pixels); longer animations are sampled among their first
  frames.
- ``MAX_VIDEO_SEQUENTIAL_FRAMES`` (3,000) frames read in order when a video cannot be seeked or its frame
  count is missing/implausible (``MAX_VIDEO_REPORTED_FRAMES``); seeking reads only the sampled frames.

Choices: transparency is composited on white; EXIF orientation is applied to still images; GIF frames
are composited as browsers show them (``engine.media.gif``: disposal 1/2/3, transparency, local
palettes), WebP/APNG frames by libwebp/Pillow; a broken animation frame ends the animation (the frames
before it are used; a broken first frame is an error); JPEGs are decoded in draft mode at the smallest
scale that still covers the requested size; video frames are fetched by seeking, falling back to a
bounded sequential read; a rotated video (phone held upright) is decoded upright. HEIF/HEIC (pillow-heif) and
AVIF (Pillow's own plugin) decode like JPEGs: orientation applied, and a HEIF's embedded thumbnail stands in
for the full picture when it is large enough (like JPEG draft mode). Pillow's ``LOAD_TRUNCATED_IMAGES`` is never
set: a truncated file is an error, not a grey picture. Global state touched, and only that: the HEIF opener is
registered with Pillow on the first HEIF file, and OpenCV's and FFmpeg's stderr logging is turned off before the
first video is opened (``engine.media.video.quiet_decoders``; a bad file is reported once, as a MediaError).

Public API: :func:`sniff_format`, :func:`iter_media_files`, :func:`probe` / :class:`MediaInfo`,
:func:`load_image`, :func:`decode_image`, :func:`decode_frames`, :func:`probe_and_decode`,
:func:`frame_indices`, :func:`thumbnail`, :func:`read_capture`, :class:`MediaError`.
"""

from engine.media import limits
from engine.media.decode import MediaInfo, decode_frames, decode_image, load_image, probe, probe_and_decode
from engine.media.discover import iter_media_files
from engine.media.errors import MediaError
from engine.media.exif import read_capture
from engine.media.sampling import FRAMES_PER_ITEM, SAMPLE_FPS, frame_indices, stride_for_fps
from engine.media.sniff import ANIMATABLE_FORMATS, IMAGE_FORMATS, VIDEO_FORMATS, sniff_format
from engine.media.stills import BACKGROUND
from engine.media.thumbs import prune_thumbnails, thumbnail

__all__ = [
    "ANIMATABLE_FORMATS",
    "BACKGROUND",
    "FRAMES_PER_ITEM",
    "IMAGE_FORMATS",
    "SAMPLE_FPS",
    "VIDEO_FORMATS",
    "MediaError",
    "MediaInfo",
    "decode_frames",
    "decode_image",
    "frame_indices",
    "iter_media_files",
    "limits",
    "load_image",
    "probe",
    "probe_and_decode",
    "read_capture",
    "sniff_format",
    "stride_for_fps",
    "prune_thumbnails",
    "thumbnail",
]
