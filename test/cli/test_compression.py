"""Automatic compression of large inputs, with and without Pillow, and the --raw / --compress overrides."""

import os
import re

import pytest

from conftest import corpus

try:
    import PIL.Image as PIL
except ImportError:  # pragma: no cover - Pillow is a test dependency; in CI its absence is a failure
    if os.environ.get("CI"):
        raise
    pytest.skip("Pillow is needed to generate the large test images (pip install pillow)", allow_module_level=True)

MIB = 1024 * 1024
EXIT_BY_DECISION = {"allow": 0, "review": 10, "block": 20}


def assert_decided(result):
    """Noise images score wherever the model puts them: any decision, with the matching exit code."""
    assert result.code in EXIT_BY_DECISION.values(), result
    if result.stdout.startswith("{"):
        assert EXIT_BY_DECISION[result.json()["data"]["decision"]] == result.code, result
    else:
        assert EXIT_BY_DECISION[result.stdout.split(" ")[0]] == result.code, result


def _noise_png(path, width, height):
    """An RGB PNG of random noise: incompressible, so its file size is about width * height * 3."""
    image = PIL.frombytes("RGB", (width, height), os.urandom(width * height * 3))
    image.save(path, format="PNG", compress_level=0)
    return path


@pytest.fixture(scope="session")
def big_png(tmp_path_factory):
    """About 5.8 MB, 1600x1200: above the 4 MB size threshold, below the 4096 px edge threshold."""
    path = _noise_png(tmp_path_factory.mktemp("big") / "noise.png", 1600, 1200)
    assert 4 * MIB < path.stat().st_size < 50 * MIB
    return path


@pytest.fixture(scope="session")
def huge_png(tmp_path_factory):
    """About 55 MB: over the service's 50 MB limit."""
    path = _noise_png(tmp_path_factory.mktemp("huge") / "noise.png", 4300, 4300)
    assert path.stat().st_size > 50 * MIB
    return path


# --- with Pillow ------------------------------------------------------------------------------------


def test_size_triggers_compression(run, big_png):
    result = run("detect", big_png, "--json")
    assert_decided(result)
    doc = result.json()
    c = doc["compression"]
    assert c["applied"] is True and c["reason"] == "size" and c["pillow"] is True and c["mode"] == "auto"
    assert c["original"] == {"format": "png", "width": 1600, "height": 1200}
    assert c["sent"] == {"format": "jpeg", "width": 1600, "height": 1200}  # never upscaled
    assert doc["original_bytes"] == big_png.stat().st_size
    assert doc["sent_bytes"] < doc["original_bytes"]
    assert doc["data"]["image"]["format"] == "jpeg"
    assert doc["data"]["image"]["bytes"] == doc["sent_bytes"]
    assert any(note.startswith("compressed ") for note in doc["notes"])


def test_compression_note_in_human_mode(run, big_png):
    result = run("detect", big_png)
    assert_decided(result)
    assert result.stderr.startswith("nsfwdetector: note: compressed ")
    assert len(result.stdout.strip().split("\n")) == 1


def test_dimensions_trigger_compression(run):
    """20000x14000 JPEG: over the service's pixel limit raw (4004), fine once compressed."""
    result = run("detect", corpus("giant-image.jpg"), "--json")
    assert result.code == 0, result
    doc = result.json()
    c = doc["compression"]
    assert c["applied"] is True and c["reason"] == "dimensions"
    assert c["original"]["width"] == 20000 and c["original"]["height"] == 14000
    assert max(c["sent"]["width"], c["sent"]["height"]) == 2048
    image = doc["data"]["image"]
    assert (image["width"], image["height"]) == (c["sent"]["width"], c["sent"]["height"])


def test_over_50_mb_is_compressed_below_the_limit(run, huge_png):
    result = run("detect", huge_png, "--json")
    assert_decided(result)
    doc = result.json()
    assert doc["compression"]["applied"] is True and doc["compression"]["reason"] == "size"
    assert doc["sent_bytes"] < 50 * MIB < doc["original_bytes"]


def test_raw_never_compresses(run, big_png):
    result = run("detect", big_png, "--raw", "--json")
    assert_decided(result)
    doc = result.json()
    assert doc["compression"]["applied"] is False and doc["compression"]["reason"] == "raw"
    assert doc["sent_bytes"] == doc["original_bytes"]
    assert doc["data"]["image"]["format"] == "png"


def test_raw_over_50_mb_is_refused_locally(run, huge_png):
    result = run("detect", huge_png, "--raw", "--json")
    assert result.code == 2, result
    doc = result.json()
    assert doc["error"]["code"] == 4003 and doc["error"]["http_status"] is None
    assert doc["attempts"] == 0  # nothing was uploaded
    assert "drop --raw" in result.stderr


def test_compress_forces_compression_of_a_small_file(run):
    result = run("detect", corpus("320x240.jpg"), "--compress", "--json")
    assert result.code == 0, result
    doc = result.json()
    assert doc["compression"]["applied"] is True and doc["compression"]["reason"] == "forced"
    assert doc["compression"]["sent"] == {"format": "jpeg", "width": 320, "height": 240}


def test_compress_keeps_only_the_first_frame(run):
    result = run("detect", corpus("animated-loop-3.gif"), "--compress", "--json")
    assert result.code == 0, result
    image = result.json()["data"]["image"]
    assert image["format"] == "jpeg" and image["frames"] == 1


def test_compress_applies_exif_orientation(run):
    # Landscape_6.jpg is stored rotated (EXIF orientation 6): after compression it must be upright.
    path = corpus("Landscape_6.jpg")
    with PIL.open(path) as image:
        stored = image.size
    result = run("detect", path, "--compress", "--json")
    assert result.code == 0, result
    sent = result.json()["compression"]["sent"]
    assert (sent["width"], sent["height"]) == (stored[1], stored[0])


def test_undecodable_input_is_sent_as_is_for_the_service_to_judge(run):
    result = run("detect", corpus("circle.svg"), "--compress", "--json")
    assert result.code == 2, result
    doc = result.json()
    assert doc["compression"]["applied"] is False and doc["compression"]["reason"] == "not-decodable"
    assert doc["error"]["code"] == 4002


# --- without Pillow ----------------------------------------------------------------------------------


def test_without_pillow_the_original_is_sent_and_the_client_says_so(run, big_png):
    result = run("detect", big_png, "--json", pillow=False)
    assert_decided(result)
    doc = result.json()
    c = doc["compression"]
    assert c["applied"] is False and c["pillow"] is False and c["reason"] == "pillow-missing"
    assert doc["sent_bytes"] == doc["original_bytes"] == big_png.stat().st_size
    assert doc["data"]["image"]["format"] == "png"
    assert any("Pillow is not installed" in note for note in doc["notes"])


def test_without_pillow_human_mode_notes_it_on_stderr(run, big_png):
    result = run("detect", big_png, pillow=False)
    assert_decided(result)
    assert "Pillow is not installed; sending the original" in result.stderr
    assert re.fullmatch(r"(allow|review|block) nsfw=\S+ \(allow<0\.1000 block>=0\.9000\) model=mobilenet_v2( \w+=\S+){5}\n", result.stdout)


def test_without_pillow_small_files_need_nothing(run):
    result = run("detect", corpus("320x240.jpg"), "--json", pillow=False)
    assert result.code == 0, result
    c = result.json()["compression"]
    assert c["pillow"] is False and c["reason"] == "below-threshold"
    assert result.stderr == ""


def test_without_pillow_over_50_mb_is_refused_locally(run, huge_png):
    result = run("detect", huge_png, "--json", pillow=False)
    assert result.code == 2, result
    doc = result.json()
    assert doc["error"]["code"] == 4003 and doc["attempts"] == 0
    assert "pip install pillow" in result.stderr


def test_without_pillow_dimensions_are_left_to_the_service(run):
    result = run("detect", corpus("giant-image.jpg"), "--json", pillow=False)
    assert result.code == 2, result
    assert result.json()["error"]["code"] == 4004


def test_without_pillow_compress_is_a_usage_error(run):
    result = run("detect", corpus("320x240.jpg"), "--compress", pillow=False)
    assert result.code == 2, result
    assert "--compress needs Pillow" in result.stderr
