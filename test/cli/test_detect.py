"""Every command, flag and exit code of `detect`, against real servers in embedded mode."""

import hashlib
import re

import pytest

from conftest import clean_env, corpus, free_port

# Decision, score, thresholds, then the model and its five classes highest first (the server runs
# mobilenet_v2 by default).
CLASS = r" (drawing|hentai|neutral|porn|sexy)=[01]\.\d{4}"
HUMAN_LINE = re.compile(r"(allow|review|block) nsfw=[01]\.\d{4} \(allow<[01]\.\d{4} block>=[01]\.\d{4}\)"
                        r" model=mobilenet_v2(%s){5}\n" % CLASS)
KEY = "nsk_live_0123456789abcdef0123456789abcdef"

DOCUMENT_KEYS = {
    "schema", "cli_version", "ok", "exit_code", "outcome", "endpoint", "url", "source", "original_bytes",
    "sent_bytes", "compression", "attempts", "waited_seconds", "http_status", "quota", "data", "error", "notes",
}


# --- decisions and their exit codes ----------------------------------------------------------------


def test_allow_exits_0_with_one_human_line(run):
    result = run("detect", corpus("320x240.jpg"))
    assert result.code == 0, result
    assert HUMAN_LINE.fullmatch(result.stdout)
    assert result.stdout.startswith("allow ")
    assert "(allow<0.1000 block>=0.9000)" in result.stdout
    assert result.stderr == ""


def test_review_exits_10(run, review_server):
    result = run("detect", corpus("320x240.jpg"), "--base-url", review_server.base_url)
    assert result.code == 10, result
    assert HUMAN_LINE.fullmatch(result.stdout)
    assert result.stdout.startswith("review ")
    assert "(allow<0.0000 block>=1.0000)" in result.stdout


def test_block_exits_20_then_rate_limit_exits_4(run, limited_server):
    """One request per minute: the first is answered (block, with thresholds 0/0), a later one gets 429."""
    first = run("detect", corpus("320x240.jpg"), "--base-url", limited_server.base_url, "--max-wait", "0")
    assert first.code == 20, first
    assert first.stdout.startswith("block ")
    # Fixed windows: if the minute rolled over between two calls, the next call is answered again.
    for _ in range(3):
        limited = run("detect", corpus("320x240.jpg"), "--base-url", limited_server.base_url,
                      "--max-wait", "2", "--json")
        if limited.code != 20:
            break
    assert limited.code == 4, limited
    assert limited.elapsed < 10
    assert "error 4290 (rate limited)" in limited.stderr
    assert "Retry-After" in limited.stderr
    doc = limited.json()
    assert doc["outcome"] == "rate_limited"
    assert doc["error"]["code"] == 4290 and doc["error"]["http_status"] == 429
    assert doc["data"] is None


def test_json_document_is_stable(run, server):
    path = corpus("320x240.jpg")
    result = run("detect", path, "--json")
    assert result.code == 0, result
    doc = result.json()
    assert set(doc) == DOCUMENT_KEYS
    assert doc["schema"] == "nsfwdetector-cli/1"
    assert doc["ok"] is True and doc["exit_code"] == 0 and doc["outcome"] == "allow"
    assert doc["endpoint"] == "public"
    assert doc["url"] == server.base_url + "/api/public/detect"
    assert doc["source"] == {"kind": "file", "path": str(path)}
    size = path.stat().st_size
    assert doc["original_bytes"] == size and doc["sent_bytes"] == size
    assert doc["compression"]["applied"] is False
    assert doc["compression"]["reason"] == "below-threshold"
    assert doc["attempts"] == 1 and doc["waited_seconds"] == 0 and doc["http_status"] == 200
    assert doc["quota"]["tier"] == "anonymous"
    data = doc["data"]
    assert data["decision"] == "allow"
    assert set(data["scores"]) == {"nsfw", "sfw"}
    assert data["thresholds"] == {"allow": 0.1, "block": 0.9}
    assert data["model"] == "mobilenet_v2"
    assert set(data["classes"]) == {"drawing", "hentai", "neutral", "porn", "sexy"}
    assert data["image"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert data["image"]["format"] == "jpeg"
    assert (data["image"]["width"], data["image"]["height"]) == (320, 240)
    assert doc["error"] is None and doc["notes"] == []
    assert result.stderr == ""


def test_options_before_the_command(run):
    result = run("--json", "-q", "detect", corpus("320x240.jpg"))
    assert result.code == 0, result
    assert result.json()["outcome"] == "allow"


def test_stdin(run):
    data = corpus("320x240.jpg").read_bytes()
    result = run("detect", "-", "--json", stdin=data)
    assert result.code == 0, result
    doc = result.json()
    assert doc["source"] == {"kind": "stdin"}
    assert doc["data"]["image"]["sha256"] == hashlib.sha256(data).hexdigest()


def test_animated_gif_is_sent_whole_and_scored_on_its_first_frame(run):
    result = run("detect", corpus("animated-loop-3.gif"), "--json")
    assert result.code == 0, result
    image = result.json()["data"]["image"]
    assert image["format"] == "gif" and image["frames"] > 1  # 10 frames in this file


# --- input errors: exit 2 ---------------------------------------------------------------------------


@pytest.mark.parametrize("name, code", [("circle.svg", 4002), ("truncated.jpg", 4005)])
def test_server_input_errors_exit_2(run, name, code):
    result = run("detect", corpus(name), "--json")
    assert result.code == 2, result
    doc = result.json()
    assert doc["ok"] is False and doc["outcome"] == "input_error"
    assert doc["error"]["code"] == code and doc["error"]["http_status"] == 400
    assert doc["data"] is None
    err_lines = result.stderr.strip().split("\n")
    assert len(err_lines) == 1 and err_lines[0].startswith("nsfwdetector: error %d (" % code)


def test_empty_file_is_a_4001(run, tmp_path):
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    result = run("detect", empty)
    assert result.code == 2, result
    assert "error 4001 (bad request)" in result.stderr
    assert result.stdout == ""


def test_dimensions_exceeded_with_raw_is_a_4004(run):
    result = run("detect", corpus("giant-image.jpg"), "--raw", "--json")
    assert result.code == 2, result
    doc = result.json()
    assert doc["error"]["code"] == 4004
    assert doc["compression"]["applied"] is False and doc["compression"]["reason"] == "raw"


@pytest.mark.parametrize("args, message", [
    ([], "a command is required"),
    (["detect"], "give an image"),
    (["detect", "a.jpg", "--url", "http://127.0.0.1:9/x.jpg"], "either FILE or --url"),
    (["detect", "/nonexistent/photo.jpg"], "no such file"),
    (["detect", "."], "is a directory"),
    (["detect", "x.jpg", "--raw", "--compress"], "not allowed with argument"),
    (["detect", "x.jpg", "--timeout", "0"], "--timeout must be"),
    (["detect", "x.jpg", "--max-wait", "-1"], "--max-wait must be"),
    (["detect", "x.jpg", "--base-url", "ftp://example.com"], "base URL must be an http(s) URL"),
    (["detect", "x.jpg", "--api-key", ""], "--api-key is empty"),
    (["detect", "x.jpg", "--bogus"], "unrecognized arguments"),
])
def test_usage_errors_exit_2(run, args, message):
    result = run(*args)
    assert result.code == 2, result
    assert message in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("args", [
    ["detect", "/nonexistent/photo.jpg", "--json"],
    ["detect", "x.jpg", "--raw", "--compress", "--json"],
    ["--json"],
])
def test_usage_error_with_json_still_prints_a_document(run, args):
    result = run(*args)
    assert result.code == 2, result
    doc = result.json()
    assert doc["ok"] is False and doc["outcome"] == "input_error" and doc["error"]["code"] is None
    assert len(result.stderr.strip().split("\n")) == 1


def test_help(run):
    result = run("detect", "--help")
    assert result.code == 0
    for option in ("--url", "--raw", "--compress", "--json", "--api-key", "--base-url", "--max-wait", "--timeout"):
        assert option in result.stdout


# --- authentication: exit 5 --------------------------------------------------------------------------


def test_api_key_flag_uses_the_key_endpoint_and_4011_exits_5(run, server):
    # Until accounts exist every key is unknown: the key endpoint answers 4011, never the anonymous quota.
    result = run("detect", corpus("320x240.jpg"), "--api-key", KEY, "--json")
    assert result.code == 5, result
    doc = result.json()
    assert doc["endpoint"] == "open"
    assert doc["url"] == server.base_url + "/api/open/detect"
    assert doc["outcome"] == "auth_error"
    assert doc["error"]["code"] == 4011 and doc["error"]["http_status"] == 401
    assert "error 4011 (invalid API key)" in result.stderr


def test_api_key_from_the_environment(run):
    result = run("detect", corpus("320x240.jpg"), "--json", env=clean_env(NSFWDETECTOR_API_KEY=KEY))
    assert result.code == 5, result
    assert result.json()["endpoint"] == "open"


# --- base URL, unknown: exit 3 -----------------------------------------------------------------------


def test_base_url_from_the_environment_and_flag_precedence(run, server):
    closed = "http://127.0.0.1:%d" % free_port()
    via_env = run("detect", corpus("320x240.jpg"), env=clean_env(NSFWDETECTOR_BASE_URL=closed))
    assert via_env.code == 3, via_env
    flag_wins = run("detect", corpus("320x240.jpg"), "--base-url", server.base_url + "/",
                    env=clean_env(NSFWDETECTOR_BASE_URL=closed))
    assert flag_wins.code == 0, flag_wins


def test_network_failure_exits_3_and_is_never_safe(run):
    closed = "http://127.0.0.1:%d" % free_port()
    result = run("detect", corpus("320x240.jpg"), "--base-url", closed, "--json")
    assert result.code == 3, result
    doc = result.json()
    assert doc["ok"] is False and doc["outcome"] == "unknown" and doc["data"] is None
    assert "not as safe" in result.stderr
    assert len(result.stderr.strip().split("\n")) == 1


def test_a_base_url_that_is_not_the_service_exits_3(run, server):
    result = run("detect", corpus("320x240.jpg"), "--base-url", server.base_url + "/nothing-here")
    assert result.code == 3, result
    assert "HTTP 404" in result.stderr and "--base-url" in result.stderr
