#!/usr/bin/env python3
"""nsfwdetector - command-line client of the nsfwdetector image-moderation service.

One image in, the probability that it is NSFW and a suggested decision out, as a line of text or a
JSON document, with an exit code an AI agent (or a shell script) can act on:

    0 allow   10 review   20 block
    2 usage or input error (bad arguments, unreadable file or URL, codes 4001-4005)
    3 unknown: service unavailable (503/5001), network failure or unexpected answer.
      Treat the image as "needs review", NEVER as safe.
    4 rate limited (4290/4291) after the allowed retries
    5 authentication error (4011: API key missing, malformed, revoked or unknown)
    1 a bug in this client

Python 3.9+ standard library only. Pillow is optional and only used to compress large inputs.
Run `python3 nsfwdetector.py --help` for the options. Images are sent to the service, analysed in
memory and discarded; the service stores nothing.
"""

import argparse
import email.utils
import http.client
import io
import json
import math
import os
import sys
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
import uuid
import warnings

__version__ = "1.1.0"

# The service that published this file. When the service serves this file it rewrites this one
# line with its own base URL; everything else is served byte for byte.
DEFAULT_BASE_URL = "http://localhost:8080"  # replaced when served

PROG = "nsfwdetector"
USER_AGENT = "nsfwdetector-cli/" + __version__

MIB = 1024 * 1024
# The service refuses files larger than this (spec part 8: 50 MB, code 4003).
MAX_UPLOAD_BYTES = 50 * MIB
# Automatic compression is applied to inputs above either threshold (when Pillow is present).
COMPRESS_ABOVE_BYTES = 4 * MIB
COMPRESS_ABOVE_EDGE = 4096
# What compression produces: the first frame, as a JPEG whose longest edge is at most this.
COMPRESS_MAX_EDGE = 2048
COMPRESS_JPEG_QUALITY = 90
# Pillow never decodes more pixels than this (JPEGs are decoded at a reduced scale first).
COMPRESS_MAX_DECODE_PIXELS = 100_000_000
# Inputs (files, stdin, --url downloads) larger than this are refused before any upload.
MAX_INPUT_BYTES = 100 * MIB

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_WAIT = 60.0
DEFAULT_RETRIES = 3

ENV_API_KEY = "NSFWDETECTOR_API_KEY"
ENV_BASE_URL = "NSFWDETECTOR_BASE_URL"
ENV_MAX_WAIT = "NSFWDETECTOR_MAX_WAIT"
ENV_TIMEOUT = "NSFWDETECTOR_TIMEOUT"

EXIT_ALLOW = 0
EXIT_BUG = 1
EXIT_USAGE = 2
EXIT_UNKNOWN = 3
EXIT_RATE_LIMITED = 4
EXIT_AUTH = 5
EXIT_REVIEW = 10
EXIT_BLOCK = 20

DECISION_EXIT = {"allow": EXIT_ALLOW, "review": EXIT_REVIEW, "block": EXIT_BLOCK}

OUTCOME_BY_EXIT = {
    EXIT_BUG: "client_error",
    EXIT_USAGE: "input_error",
    EXIT_UNKNOWN: "unknown",
    EXIT_RATE_LIMITED: "rate_limited",
    EXIT_AUTH: "auth_error",
}

# Spec part 7: one line per code, what it means for the caller.
CODE_TEXT = {
    4001: "bad request",
    4002: "unsupported format",
    4003: "file too large",
    4004: "dimensions exceeded",
    4005: "undecodable image",
    4011: "invalid API key",
    4290: "rate limited",
    4291: "daily quota used",
    5001: "service unavailable",
}

# Used when the service sends no message of its own.
CODE_DETAIL = {
    4001: "the request was malformed",
    4002: "send JPEG, PNG, WebP, BMP, TIFF or GIF",
    4003: "the limit is 50 MB",
    4004: "the image is larger than the per-format pixel limits",
    4005: "the file is corrupt, truncated or not what it claims to be",
    4011: "the key is missing, malformed, revoked or unknown",
    4290: "too many requests this minute",
    4291: "the daily quota is used up",
    5001: "the service is temporarily unavailable",
}

CODE_EXIT = {
    4001: EXIT_USAGE,
    4002: EXIT_USAGE,
    4003: EXIT_USAGE,
    4004: EXIT_USAGE,
    4005: EXIT_USAGE,
    4011: EXIT_AUTH,
    4290: EXIT_RATE_LIMITED,
    4291: EXIT_RATE_LIMITED,
    5001: EXIT_UNKNOWN,
}

UNKNOWN_HINT = "result UNKNOWN, treat as needs review, not as safe"


class CliError(Exception):
    """A failure that ends the run with an exit code and a one-line message on stderr."""

    def __init__(self, exit_code, message, code=None, http_status=None):
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message
        self.code = code
        self.http_status = http_status


# ---------------------------------------------------------------------------------------------
# Command line


def _add_common_options(parser, suppress):
    """Options accepted both before and after the command (`--json detect x` and `detect x --json`)."""

    def default(value):
        return argparse.SUPPRESS if suppress else value

    parser.add_argument("--json", action="store_true", default=default(False),
                        help="print one JSON document on stdout (also on errors)")
    parser.add_argument("--api-key", metavar="KEY", default=default(None),
                        help="API key: use the key endpoint /api/open/detect "
                             "(default: $%s; without a key /api/public/detect is used)" % ENV_API_KEY)
    parser.add_argument("--base-url", metavar="URL", default=default(None),
                        help="service base URL (default: $%s, else %s)" % (ENV_BASE_URL, DEFAULT_BASE_URL))
    parser.add_argument("--timeout", metavar="SECONDS", type=float, default=default(None),
                        help="time-out of each network call (default: $%s, else %g)" % (ENV_TIMEOUT, DEFAULT_TIMEOUT))
    parser.add_argument("--max-wait", metavar="SECONDS", type=float, default=default(None),
                        help="most seconds to wait in total for Retry-After on 429/503 "
                             "(default: $%s, else %g; 0 = never retry)" % (ENV_MAX_WAIT, DEFAULT_MAX_WAIT))
    parser.add_argument("--retries", metavar="N", type=int, default=default(None),
                        help="most retries after 429/503 (default %d)" % DEFAULT_RETRIES)
    parser.add_argument("-q", "--quiet", action="store_true", default=default(False),
                        help="no notes on stderr (errors are still printed)")


class _Parser(argparse.ArgumentParser):
    """Argument errors end like every other error: one line on stderr, exit 2, a JSON document with --json."""

    def error(self, message):
        raise CliError(EXIT_USAGE, "%s (see %s --help)" % (message, self.prog))


def build_parser():
    parser = _Parser(
        prog=PROG,
        description="Ask an nsfwdetector service whether an image is NSFW. "
                    "Exit codes: 0 allow, 10 review, 20 block, 2 usage/input error, "
                    "3 unknown (service unavailable or network failure: never safe), "
                    "4 rate limited, 5 invalid API key, 1 client bug.",
    )
    parser.add_argument("--version", action="store_true", help="print the client version and exit")
    _add_common_options(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    detect = commands.add_parser("detect", help="classify one image (a file, - for stdin, or --url)",
                                 description="Classify one image: a file, - for stdin, or --url URL.")
    detect.add_argument("file", nargs="?", metavar="FILE", help="image file, or - to read stdin")
    detect.add_argument("--url", metavar="URL",
                        help="download the image from this http(s) URL (the client downloads it "
                             "and uploads the bytes; the service never fetches URLs)")
    mode = detect.add_mutually_exclusive_group()
    mode.add_argument("--raw", action="store_true", help="never compress: send the bytes as they are")
    mode.add_argument("--compress", action="store_true",
                      help="always compress (first frame, JPEG, longest edge %d px; needs Pillow)"
                           % COMPRESS_MAX_EDGE)
    _add_common_options(detect, suppress=True)
    return parser


def _env_float(name, fallback):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return fallback
    try:
        value = float(raw)
    except ValueError:
        raise CliError(EXIT_USAGE, "%s must be a number of seconds, got %r" % (name, raw))
    if not math.isfinite(value) or value < 0:
        raise CliError(EXIT_USAGE, "%s must be a non-negative number, got %r" % (name, raw))
    return value


class Settings:
    def __init__(self, args):
        base_url = args.base_url or os.environ.get(ENV_BASE_URL, "").strip() or DEFAULT_BASE_URL
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise CliError(EXIT_USAGE, "base URL must be an http(s) URL, got %r" % base_url)
        self.base_url = base_url.rstrip("/")

        if args.api_key is not None:
            if not args.api_key.strip():
                raise CliError(EXIT_USAGE, "--api-key is empty")
            self.api_key = args.api_key.strip()
        else:
            self.api_key = os.environ.get(ENV_API_KEY, "").strip() or None

        self.timeout = args.timeout if args.timeout is not None else _env_float(ENV_TIMEOUT, DEFAULT_TIMEOUT)
        self.max_wait = args.max_wait if args.max_wait is not None else _env_float(ENV_MAX_WAIT, DEFAULT_MAX_WAIT)
        self.retries = args.retries if args.retries is not None else DEFAULT_RETRIES
        if not math.isfinite(self.timeout) or self.timeout <= 0:
            raise CliError(EXIT_USAGE, "--timeout must be a positive number of seconds")
        if not math.isfinite(self.max_wait) or self.max_wait < 0:
            raise CliError(EXIT_USAGE, "--max-wait must be a non-negative number of seconds")
        if self.retries < 0:
            raise CliError(EXIT_USAGE, "--retries must not be negative")

        self.json = args.json
        self.quiet = args.quiet
        self.endpoint = "open" if self.api_key else "public"
        self.detect_url = self.base_url + ("/api/open/detect" if self.api_key else "/api/public/detect")


# ---------------------------------------------------------------------------------------------
# Input: a file, stdin, or a download


def read_file(path):
    if path == "-":
        data = _read_capped(sys.stdin.buffer, MAX_INPUT_BYTES, "stdin", None)
        return data, {"kind": "stdin"}
    try:
        size = os.path.getsize(path)
        if size > MAX_INPUT_BYTES:
            raise CliError(EXIT_USAGE, "%s is %s; files over %s are refused"
                           % (path, _size(size), _size(MAX_INPUT_BYTES)), code=4003)
        with open(path, "rb") as handle:
            data = handle.read()
    except CliError:
        raise
    except IsADirectoryError:
        raise CliError(EXIT_USAGE, "%s is a directory, not an image file" % path)
    except FileNotFoundError:
        raise CliError(EXIT_USAGE, "no such file: %s" % path)
    except OSError as err:
        raise CliError(EXIT_USAGE, "cannot read %s: %s" % (path, err.strerror or err))
    return data, {"kind": "file", "path": path}


def _read_capped(stream, cap, what, deadline):
    chunks = []
    total = 0
    while True:
        if deadline is not None and time.monotonic() > deadline:
            raise CliError(EXIT_USAGE, "download of %s took too long" % what)
        chunk = stream.read(256 * 1024)
        if not chunk:
            break
        total += len(chunk)
        if total > cap:
            raise CliError(EXIT_USAGE, "%s is larger than %s; refused" % (what, _size(cap)), code=4003)
        chunks.append(chunk)
    return b"".join(chunks)


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects only to http(s) URLs."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        scheme = urllib.parse.urlsplit(newurl).scheme.lower()
        if scheme not in ("http", "https"):
            raise CliError(EXIT_USAGE, "the URL redirects to a %s: URL; only http and https are allowed"
                           % (scheme or "relative"))
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def download(url, timeout):
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise CliError(EXIT_USAGE, "--url must be an http or https URL, got %r" % url)
    opener = urllib.request.build_opener(_HttpOnlyRedirects)
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, "Accept": "image/*,*/*;q=0.5"})
    deadline = time.monotonic() + max(timeout * 4, timeout + 30)
    try:
        with opener.open(request, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            if length and length.strip().isdigit() and int(length) > MAX_INPUT_BYTES:
                raise CliError(EXIT_USAGE, "the URL announces %s; downloads over %s are refused"
                               % (_size(int(length)), _size(MAX_INPUT_BYTES)), code=4003)
            data = _read_capped(response, MAX_INPUT_BYTES, "the download", deadline)
    except CliError:
        raise
    except urllib.error.HTTPError as err:
        raise CliError(EXIT_USAGE, "cannot download %s: HTTP %d %s" % (url, err.code, err.reason))
    except urllib.error.URLError as err:
        raise CliError(EXIT_USAGE, "cannot download %s: %s" % (url, _reason(err.reason)))
    except (OSError, ValueError) as err:
        raise CliError(EXIT_USAGE, "cannot download %s: %s" % (url, _reason(err)))
    if not data:
        raise CliError(EXIT_USAGE, "the download from %s is empty" % url, code=4001)
    return data, {"kind": "url", "url": url}


# ---------------------------------------------------------------------------------------------
# Compression


def _load_pillow():
    try:
        from PIL import Image, ImageOps  # noqa: PLC0415 - optional dependency
    except ImportError:
        return None
    return Image, ImageOps


def _without_pixel_limit(Image, action):
    """Runs action with Pillow's decompression-bomb check off: this client applies its own limits."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        previous = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            return action()
        finally:
            Image.MAX_IMAGE_PIXELS = previous


def compress(data, mode, pil):
    """Decides whether to compress and does it. Returns (bytes_to_send, report)."""
    report = {"applied": False, "reason": None, "pillow": pil is not None, "mode": mode,
              "threshold_bytes": COMPRESS_ABOVE_BYTES, "threshold_edge": COMPRESS_ABOVE_EDGE,
              "max_edge": COMPRESS_MAX_EDGE, "original": None, "sent": None, "note": None}
    if mode == "raw":
        report["reason"] = "raw"
        return data, report
    if pil is None:
        if mode == "compress":
            raise CliError(EXIT_USAGE, "--compress needs Pillow: pip install pillow")
        if len(data) > COMPRESS_ABOVE_BYTES:
            report["reason"] = "pillow-missing"
            if len(data) <= MAX_UPLOAD_BYTES:
                report["note"] = ("%s is above the %s compression threshold but Pillow is not installed; "
                                  "sending the original (pip install pillow to compress)"
                                  % (_size(len(data)), _size(COMPRESS_ABOVE_BYTES)))
        else:
            report["reason"] = "below-threshold"
        return data, report

    Image = pil[0]
    try:
        image = _without_pixel_limit(Image, lambda: Image.open(io.BytesIO(data)))  # reads the header only
        width, height = image.size
        report["original"] = {"format": (image.format or "").lower() or None, "width": width, "height": height}
    except Exception:  # noqa: BLE001 - any decoder failure: the service gives the verdict
        report["reason"] = "not-decodable"
        if mode == "compress" or len(data) > COMPRESS_ABOVE_BYTES:
            report["note"] = "Pillow cannot read this image, so it is not compressed; sending the original"
        return data, report

    too_big = len(data) > COMPRESS_ABOVE_BYTES
    too_wide = max(width, height) > COMPRESS_ABOVE_EDGE
    if mode != "compress" and not too_big and not too_wide:
        report["reason"] = "below-threshold"
        return data, report
    report["reason"] = "forced" if mode == "compress" else ("size" if too_big else "dimensions")

    try:
        sent, info = _reencode(Image, pil[1], image)
    except Exception as err:  # noqa: BLE001
        report["note"] = "compression failed (%s); sending the original" % _reason(err)[:200]
        report["reason"] = "failed"
        return data, report
    report["applied"] = True
    report["sent"] = info
    return sent, report


def _reencode(Image, ImageOps, image):
    width, height = image.size
    is_jpeg = (image.format or "").upper() == "JPEG"
    if is_jpeg:
        # Decode at 1/2, 1/4 or 1/8 scale when that still covers the target: cheap even for 20000 px.
        image.draft("RGB", (COMPRESS_MAX_EDGE, COMPRESS_MAX_EDGE))
    elif width * height > COMPRESS_MAX_DECODE_PIXELS:
        raise ValueError("%dx%d is too many pixels to decode here" % (width, height))
    image.seek(0)  # first frame of an animation
    _without_pixel_limit(Image, image.load)
    try:
        image = ImageOps.exif_transpose(image)
    except Exception:  # noqa: BLE001 - a broken EXIF block must not stop compression
        pass
    image = _to_srgb(image)
    image = _to_rgb(Image, image)
    image.thumbnail((COMPRESS_MAX_EDGE, COMPRESS_MAX_EDGE), Image.LANCZOS)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=COMPRESS_JPEG_QUALITY, optimize=True)
    return out.getvalue(), {"format": "jpeg", "width": image.size[0], "height": image.size[1]}


def _to_srgb(image):
    """Applies an embedded ICC profile (CMYK, wide-gamut RGB, grey), as the service does; else unchanged."""
    icc = image.info.get("icc_profile")
    if not icc or image.mode not in ("RGB", "CMYK", "L"):
        return image
    try:
        from PIL import ImageCms  # noqa: PLC0415 - needs Pillow built with LittleCMS, as the wheels are

        source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        return ImageCms.profileToProfile(image, source, ImageCms.createProfile("sRGB"), outputMode="RGB")
    except Exception:  # noqa: BLE001 - a broken or unsupported profile: convert without it
        return image


def _to_rgb(Image, image):
    if image.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        image = image.point(lambda value: value * (1 / 256.0)).convert("L")
    elif image.mode == "F":
        image = image.convert("L")
    if image.mode == "P":
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "La", "RGBa", "PA"):
        image = image.convert("RGBA")
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image, mask=image.getchannel("A"))
        return background
    return image.convert("RGB")


# ---------------------------------------------------------------------------------------------
# The call to the service


def _multipart(data):
    boundary = "----nsfwdetector" + uuid.uuid4().hex
    head = ('--%s\r\nContent-Disposition: form-data; name="file"; filename="image"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n" % boundary).encode("ascii")
    tail = ("\r\n--%s--\r\n" % boundary).encode("ascii")
    return head + data + tail, "multipart/form-data; boundary=" + boundary


def _retry_after(headers):
    raw = (headers.get("Retry-After") or "").strip() if headers is not None else ""
    if not raw:
        return None
    if raw.isdigit():
        return float(raw)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def _parse_body(raw):
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def _post(settings, body, content_type):
    headers = {"Content-Type": content_type, "User-Agent": USER_AGENT, "Accept": "application/json"}
    if settings.api_key:
        headers["Authorization"] = "Bearer " + settings.api_key
    request = urllib.request.Request(settings.detect_url, data=body, headers=headers, method="POST")
    opener = urllib.request.build_opener(_NoRedirects)
    try:
        with opener.open(request, timeout=settings.timeout) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as err:
        try:
            raw = err.read()
        except Exception:  # noqa: BLE001
            raw = b""
        return err.code, err.headers, raw


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirected POST would lose its body: report it instead of following it."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def call_service(settings, data, document):
    """POSTs the image, honouring Retry-After on 429 (and 503) within the wait budget."""
    body, content_type = _multipart(data)
    while True:
        document["attempts"] += 1
        try:
            status, headers, raw = _post(settings, body, content_type)
        except urllib.error.URLError as err:
            raise CliError(EXIT_UNKNOWN, "cannot reach %s: %s - %s"
                           % (settings.detect_url, _reason(err.reason), UNKNOWN_HINT))
        except (OSError, ValueError, http.client.HTTPException) as err:  # time-outs, resets
            raise CliError(EXIT_UNKNOWN, "network failure talking to %s: %s - %s"
                           % (settings.detect_url, _reason(err), UNKNOWN_HINT))
        envelope = _parse_body(raw)
        code = envelope.get("code") if envelope else None
        if status in (429, 503) and document["attempts"] <= settings.retries:
            delay = _retry_after(headers)
            if delay is None:
                delay = float(2 ** (document["attempts"] - 1))  # 1, 2, 4 ... when no time is named
            if document["waited_seconds"] + delay <= settings.max_wait:
                note(settings, document, "HTTP %d (code %s): retrying in %gs as Retry-After asks"
                     % (status, code, delay))
                time.sleep(delay)
                document["waited_seconds"] = round(document["waited_seconds"] + delay, 3)
                continue
        return status, headers, envelope


def note(settings, document, text):
    """A note goes into the JSON document, and to stderr at once unless --quiet or --json."""
    document["notes"].append(text)
    if not settings.quiet and not settings.json:
        print("%s: note: %s" % (PROG, text), file=sys.stderr)


def interpret(status, headers, envelope, settings, waited):
    """Turns an HTTP answer into (exit_code, data) or raises CliError."""
    code = envelope.get("code") if envelope else None
    message = envelope.get("message") if envelope and isinstance(envelope.get("message"), str) else None
    if status == 200 and code == 0:
        data = envelope.get("data")
        decision = data.get("decision") if isinstance(data, dict) else None
        if decision not in DECISION_EXIT:
            raise CliError(EXIT_UNKNOWN, "unexpected answer from the service (no valid decision) - "
                           + UNKNOWN_HINT, code=code, http_status=status)
        return DECISION_EXIT[decision], data
    if isinstance(code, int) and code in CODE_EXIT:
        exit_code = CODE_EXIT[code]
        text = "error %d (%s): %s" % (code, CODE_TEXT[code], message or CODE_DETAIL[code])
        if code == 5001:
            text += " - " + UNKNOWN_HINT
        if code in (4290, 4291):
            delay = _retry_after(headers)
            if delay is not None:
                text += "; Retry-After %gs" % delay
            text += "; waited %gs of the --max-wait budget of %gs" % (waited, settings.max_wait)
        if code == 4011 and not settings.api_key:
            text += " (no API key given: use --api-key or $%s)" % ENV_API_KEY
        raise CliError(exit_code, text, code=code, http_status=status)
    if status in (404, 405):
        raise CliError(EXIT_UNKNOWN, "HTTP %d from %s: is --base-url the nsfwdetector service? - %s"
                       % (status, settings.detect_url, UNKNOWN_HINT), code=code, http_status=status)
    if status == 503 or status >= 500:
        raise CliError(EXIT_UNKNOWN, "HTTP %d from the service - %s" % (status, UNKNOWN_HINT),
                       code=code, http_status=status)
    if status == 429:
        raise CliError(EXIT_RATE_LIMITED, "rate limited (HTTP 429)", code=code, http_status=status)
    if status == 401:
        raise CliError(EXIT_AUTH, "authentication refused (HTTP 401)", code=code, http_status=status)
    if 400 <= status < 500:
        raise CliError(EXIT_USAGE, "HTTP %d: %s" % (status, message or "request refused"),
                       code=code, http_status=status)
    raise CliError(EXIT_UNKNOWN, "unexpected answer from the service (HTTP %d, code %r) - %s"
                   % (status, code, UNKNOWN_HINT), code=code, http_status=status)


# ---------------------------------------------------------------------------------------------
# Output


def _size(n):
    if n >= MIB:
        return "%.1f MB" % (n / MIB)
    if n >= 1024:
        return "%.1f kB" % (n / 1024)
    return "%d bytes" % n


def _reason(err):
    text = str(err) or err.__class__.__name__
    return text.splitlines()[0] if text else err.__class__.__name__


def _num(value):
    return ("%.4f" % value) if isinstance(value, (int, float)) else "?"


def _class_list(classes, prefix=""):
    """name=score pairs of one model's classes, highest first; an ensemble's per member (member.name)."""
    if not isinstance(classes, dict):
        return []
    pairs = []
    nested = [(k, v) for k, v in classes.items() if isinstance(v, dict)]
    for member, own in nested:
        pairs.extend(_class_list(own, prefix + member + "."))
    flat = [(k, v) for k, v in classes.items() if isinstance(v, (int, float))]
    for name, value in sorted(flat, key=lambda kv: -kv[1]):
        pairs.append("%s%s=%s" % (prefix, name, _num(value)))
    return pairs


def human_line(data):
    scores = data.get("scores") or {}
    thresholds = data.get("thresholds") or {}
    line = "%s nsfw=%s (allow<%s block>=%s)" % (
        data.get("decision"), _num(scores.get("nsfw")),
        _num(thresholds.get("allow")), _num(thresholds.get("block")))
    # The model that scored and its own classes (scores do not carry over between models); a server
    # that does not name them gets the line without.
    if isinstance(data.get("model"), str):
        line += " model=%s" % data["model"]
    pairs = _class_list(data.get("classes"))
    if pairs:
        line += " " + " ".join(pairs)
    return line


def run_detect(args, document):
    settings = Settings(args)
    document["endpoint"] = settings.endpoint
    document["url"] = settings.detect_url

    if args.url and args.file:
        raise CliError(EXIT_USAGE, "give either FILE or --url, not both")
    if not args.url and not args.file:
        raise CliError(EXIT_USAGE, "give an image: detect FILE, detect - (stdin) or detect --url URL")

    if args.url:
        data, source = download(args.url, settings.timeout)
    else:
        data, source = read_file(args.file)
    document["source"] = source
    document["original_bytes"] = len(data)

    mode = "raw" if args.raw else ("compress" if args.compress else "auto")
    pil = None if mode == "raw" else _load_pillow()
    sent, report = compress(data, mode, pil)
    document["compression"] = report
    document["sent_bytes"] = len(sent)
    if report["note"]:
        note(settings, document, report["note"])
    if report["applied"]:
        original = report["original"] or {}
        note(settings, document, "compressed %s %s %sx%s to %s JPEG %dx%d (--raw sends the original)" % (
            _size(len(data)), original.get("format") or "image", original.get("width"), original.get("height"),
            _size(len(sent)), report["sent"]["width"], report["sent"]["height"]))
    if len(sent) > MAX_UPLOAD_BYTES:
        if mode == "raw":
            hint = "; drop --raw to let the client compress it"
        elif not report["pillow"]:
            hint = "; pip install pillow to let the client compress it"
        else:
            hint = ""
        raise CliError(EXIT_USAGE, "error 4003 (%s): %s to send%s" % (CODE_TEXT[4003], _size(len(sent)), hint),
                       code=4003)

    status, headers, envelope = call_service(settings, sent, document)
    document["http_status"] = status
    if headers is not None and headers.get("X-Quota-Tier"):
        document["quota"] = {
            "tier": headers.get("X-Quota-Tier"),
            "limit": _int_or_none(headers.get("X-RateLimit-Limit")),
            "remaining": _int_or_none(headers.get("X-RateLimit-Remaining")),
            "reset": _int_or_none(headers.get("X-RateLimit-Reset")),
        }
    exit_code, result = interpret(status, headers, envelope, settings, document["waited_seconds"])
    document["data"] = result
    return exit_code, result


def _int_or_none(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def new_document():
    return {
        "schema": "nsfwdetector-cli/1",
        "cli_version": __version__,
        "ok": False,
        "exit_code": None,
        "outcome": None,
        "endpoint": None,
        "url": None,
        "source": None,
        "original_bytes": None,
        "sent_bytes": None,
        "compression": None,
        "attempts": 0,
        "waited_seconds": 0,
        "http_status": None,
        "quota": None,
        "data": None,
        "error": None,
        "notes": [],
    }


def _fail(err, as_json, document):
    document["exit_code"] = err.exit_code
    document["outcome"] = OUTCOME_BY_EXIT.get(err.exit_code, "unknown")
    document["error"] = {"code": err.code, "http_status": err.http_status, "message": err.message}
    print("%s: %s" % (PROG, err.message), file=sys.stderr)
    if as_json:
        print(json.dumps(document, indent=2))
    return err.exit_code


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except CliError as err:
        return _fail(err, "--json" in argv, new_document())
    if args.version:
        print(__version__)
        return 0
    if args.command != "detect":
        error = CliError(EXIT_USAGE, "a command is required: detect FILE | detect --url URL | --version "
                                     "(see %s --help)" % PROG)
        return _fail(error, args.json, new_document())

    document = new_document()
    try:
        exit_code, data = run_detect(args, document)
    except Exception as err:  # noqa: BLE001 - a client bug still ends in one line and exit 1
        if not isinstance(err, CliError):
            traceback.print_exc()
            err = CliError(EXIT_BUG, "internal error in the client (%s: %s) - %s"
                           % (err.__class__.__name__, _reason(err), UNKNOWN_HINT))
        return _fail(err, args.json, document)
    document["ok"] = True
    document["exit_code"] = exit_code
    document["outcome"] = data["decision"]
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print(human_line(data))
    return exit_code


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("%s: interrupted - %s" % (PROG, UNKNOWN_HINT), file=sys.stderr)
        sys.exit(130)
