"""Network manners against a stub of the service: Retry-After on 429, bounded retries, time-outs, 503/5001
handling, one-line messages for every part-7 code, and what the CLI sends."""

import email.utils
import re
import time

import pytest

from conftest import clean_env, corpus, detection

PUBLIC = "/api/public/detect"
OPEN = "/api/open/detect"
KEY = "nsk_live_0123456789abcdef0123456789abcdef"


def error(status, code, message=None, headers=None):
    return status, {"code": code, "message": message or "refused"}, headers or {}


def ok(decision="allow", nsfw=0.01):
    return 200, detection(decision, nsfw), {}


def photo():
    return corpus("320x240.jpg")


# --- what is sent --------------------------------------------------------------------------------------


def test_anonymous_upload_is_one_multipart_file_part(run, stub):
    stub.sequence(PUBLIC, [ok()])
    result = run("detect", photo(), "--base-url", stub.base_url)
    assert result.code == 0, result
    (request,) = stub.requests
    assert request["path"] == PUBLIC and request["method"] == "POST"
    assert "Authorization" not in request["headers"]
    assert request["headers"]["Content-Type"].startswith("multipart/form-data; boundary=")
    body = request["body"]
    assert body.count(b'name="file"') == 1
    assert photo().read_bytes() in body


def test_api_key_is_sent_as_bearer_to_the_key_endpoint(run, stub):
    stub.sequence(OPEN, [ok()])
    result = run("detect", photo(), "--base-url", stub.base_url, "--api-key", KEY)
    assert result.code == 0, result
    assert stub.requests[0]["path"] == OPEN
    assert stub.requests[0]["headers"]["Authorization"] == "Bearer " + KEY


def test_api_key_flag_beats_the_environment(run, stub):
    stub.sequence(OPEN, [ok()])
    result = run("detect", photo(), "--base-url", stub.base_url, "--api-key", KEY,
                 env=clean_env(NSFWDETECTOR_API_KEY="nsk_live_" + "f" * 32))
    assert result.code == 0, result
    assert stub.requests[0]["headers"]["Authorization"] == "Bearer " + KEY


def test_base_url_from_the_environment(run, stub):
    stub.sequence(PUBLIC, [ok()])
    result = run("detect", photo(), env=clean_env(NSFWDETECTOR_BASE_URL=stub.base_url))
    assert result.code == 0, result
    assert len(stub.requests) == 1


@pytest.mark.parametrize("decision, nsfw, exit_code", [("allow", 0.01, 0), ("review", 0.5, 10), ("block", 0.97, 20)])
def test_decision_exit_codes(run, stub, decision, nsfw, exit_code):
    stub.sequence(PUBLIC, [ok(decision, nsfw)])
    result = run("detect", photo(), "--base-url", stub.base_url)
    assert result.code == exit_code, result
    assert result.stdout == "%s nsfw=%.4f (allow<0.1000 block>=0.9000)\n" % (decision, nsfw)


def test_human_line_names_the_model_and_its_classes_highest_first(run, stub):
    answer = detection("allow", 0.02)
    answer["data"]["model"] = "mobilenet_v2"
    answer["data"]["classes"] = {"drawing": 0.1, "hentai": 0.005, "neutral": 0.88, "porn": 0.01, "sexy": 0.005}
    stub.sequence(PUBLIC, [(200, answer, {})])
    result = run("detect", photo(), "--base-url", stub.base_url)
    assert result.code == 0, result
    assert result.stdout == ("allow nsfw=0.0200 (allow<0.1000 block>=0.9000) model=mobilenet_v2 "
                             "neutral=0.8800 drawing=0.1000 porn=0.0100 hentai=0.0050 sexy=0.0050\n")


def test_human_line_gives_an_ensembles_classes_per_member(run, stub):
    answer = detection("review", 0.3)
    answer["data"]["model"] = "mobilenet_v2+open_nsfw"
    answer["data"]["classes"] = {
        "mobilenet_v2": {"drawing": 0.0, "hentai": 0.0, "neutral": 0.6, "porn": 0.1, "sexy": 0.3},
        "open_nsfw": {"nsfw": 0.2, "sfw": 0.8},
    }
    stub.sequence(PUBLIC, [(200, answer, {})])
    result = run("detect", photo(), "--base-url", stub.base_url)
    assert result.code == 10, result
    assert result.stdout == (
        "review nsfw=0.3000 (allow<0.1000 block>=0.9000) model=mobilenet_v2+open_nsfw "
        "mobilenet_v2.neutral=0.6000 mobilenet_v2.sexy=0.3000 mobilenet_v2.porn=0.1000 "
        "mobilenet_v2.drawing=0.0000 mobilenet_v2.hentai=0.0000 open_nsfw.sfw=0.8000 open_nsfw.nsfw=0.2000\n")


def test_quota_headers_are_reported(run, stub):
    headers = {"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "41", "X-RateLimit-Reset": "1767225600",
               "X-Quota-Tier": "free"}
    stub.sequence(OPEN, [(200, detection(), headers)])
    result = run("detect", photo(), "--base-url", stub.base_url, "--api-key", KEY, "--json")
    assert result.code == 0, result
    assert result.json()["quota"] == {"tier": "free", "limit": 100, "remaining": 41, "reset": 1767225600}


# --- every part-7 code: exit code and one line on stderr ---------------------------------------------


@pytest.mark.parametrize("status, code, exit_code, label", [
    (400, 4001, 2, "bad request"),
    (400, 4002, 2, "unsupported format"),
    (400, 4003, 2, "file too large"),
    (400, 4004, 2, "dimensions exceeded"),
    (400, 4005, 2, "undecodable image"),
    (401, 4011, 5, "invalid API key"),
    (429, 4290, 4, "rate limited"),
    (429, 4291, 4, "daily quota used"),
    (503, 5001, 3, "service unavailable"),
])
def test_every_error_code(run, stub, status, code, exit_code, label):
    stub.sequence(PUBLIC, [error(status, code, "server says %d" % code, {"Retry-After": "30"})])
    result = run("detect", photo(), "--base-url", stub.base_url, "--max-wait", "0", "--json")
    assert result.code == exit_code, result
    lines = result.stderr.strip().split("\n")
    assert lines == [lines[0]] and lines[0].startswith("nsfwdetector: error %d (%s): server says %d" % (code, label, code))
    doc = result.json()
    assert doc["ok"] is False and doc["data"] is None
    assert doc["error"] == {"code": code, "http_status": status, "message": lines[0][len("nsfwdetector: "):]}
    assert len(stub.requests) == 1


def test_error_without_a_message_gets_a_default_text(run, stub):
    stub.sequence(PUBLIC, [(400, {"code": 4002}, {})])
    result = run("detect", photo(), "--base-url", stub.base_url)
    assert result.code == 2
    assert "error 4002 (unsupported format): send JPEG, PNG, WebP, BMP, TIFF or GIF" in result.stderr


# --- 429 and Retry-After ----------------------------------------------------------------------------------


def test_429_waits_the_announced_time_then_succeeds(run, stub):
    stub.sequence(PUBLIC, [error(429, 4290, headers={"Retry-After": "1"}), ok("review", 0.4)])
    result = run("detect", photo(), "--base-url", stub.base_url, "--json")
    assert result.code == 10, result
    doc = result.json()
    assert doc["attempts"] == 2 and doc["waited_seconds"] == 1
    first, second = stub.requests
    assert second["time"] - first["time"] >= 1.0
    assert result.elapsed >= 1.0


def test_retry_notes_in_human_mode(run, stub):
    stub.sequence(PUBLIC, [error(429, 4290, headers={"Retry-After": "1"}), ok()])
    result = run("detect", photo(), "--base-url", stub.base_url)
    assert result.code == 0, result
    assert re.match(r"nsfwdetector: note: HTTP 429 \(code 4290\): retrying in 1s", result.stderr)


def test_429_with_an_http_date_retry_after(run, stub):
    when = email.utils.formatdate(time.time() + 1, usegmt=True)
    stub.sequence(PUBLIC, [error(429, 4290, headers={"Retry-After": when}), ok()])
    result = run("detect", photo(), "--base-url", stub.base_url, "--max-wait", "5")
    assert result.code == 0, result
    assert len(stub.requests) == 2


def test_429_longer_than_the_budget_stops_at_once(run, stub):
    stub.sequence(PUBLIC, [error(429, 4290, headers={"Retry-After": "30"})])
    result = run("detect", photo(), "--base-url", stub.base_url, "--max-wait", "5", "--json")
    assert result.code == 4, result
    assert result.elapsed < 3
    assert len(stub.requests) == 1
    assert "Retry-After 30s" in result.stderr
    assert result.json()["outcome"] == "rate_limited"


def test_daily_quota_does_not_wait_for_midnight(run, stub):
    stub.sequence(PUBLIC, [error(429, 4291, "Daily quota of 30 requests used", {"Retry-After": "40000"})])
    result = run("detect", photo(), "--base-url", stub.base_url)
    assert result.code == 4, result
    assert result.elapsed < 3
    assert "error 4291 (daily quota used): Daily quota of 30 requests used; Retry-After 40000s" in result.stderr


def test_retries_are_bounded(run, stub):
    stub.sequence(PUBLIC, [error(429, 4290, headers={"Retry-After": "0"})])
    result = run("detect", photo(), "--base-url", stub.base_url, "--retries", "2", "--json")
    assert result.code == 4, result
    assert len(stub.requests) == 3
    assert result.json()["attempts"] == 3


def test_max_wait_from_the_environment(run, stub):
    stub.sequence(PUBLIC, [error(429, 4290, headers={"Retry-After": "1"}), ok()])
    result = run("detect", photo(), "--base-url", stub.base_url, env=clean_env(NSFWDETECTOR_MAX_WAIT="0"))
    assert result.code == 4, result
    assert len(stub.requests) == 1


# --- 503: unknown, never safe ----------------------------------------------------------------------------


def test_503_is_unknown_never_safe(run, stub):
    stub.sequence(PUBLIC, [error(503, 5001, "Service temporarily unavailable", {"Retry-After": "1"})])
    result = run("detect", photo(), "--base-url", stub.base_url, "--max-wait", "1", "--json")
    assert result.code == 3, result
    doc = result.json()
    assert doc["ok"] is False and doc["outcome"] == "unknown" and doc["data"] is None
    assert doc["error"]["code"] == 5001 and doc["error"]["http_status"] == 503
    assert doc["attempts"] == 2  # one bounded retry within --max-wait 1
    assert "not as safe" in result.stderr
    assert '"decision"' not in result.stdout
    human = run("detect", photo(), "--base-url", stub.base_url, "--max-wait", "0")
    assert human.code == 3 and human.stdout == ""
    assert "safe" not in human.stdout


def test_503_then_answer_after_retry_after(run, stub):
    stub.sequence(PUBLIC, [error(503, 5001, headers={"Retry-After": "1"}), ok("block", 0.95)])
    result = run("detect", photo(), "--base-url", stub.base_url)
    assert result.code == 20, result
    assert len(stub.requests) == 2


@pytest.mark.parametrize("status, body", [
    (502, b"<html>Bad gateway</html>"),
    (500, b'{"code": 9999, "message": "?"}'),
    (200, b'{"code": 0, "message": "ok", "data": {"decision": "maybe"}}'),
    (200, b"not json"),
])
def test_unexpected_answers_are_unknown(run, stub, status, body):
    stub.routes[PUBLIC] = lambda h: h.reply(status, body, content_type="text/html")
    result = run("detect", photo(), "--base-url", stub.base_url, "--max-wait", "0")
    assert result.code == 3, result
    assert result.stdout == ""
    assert "not as safe" in result.stderr


def test_service_time_out_is_unknown(run, stub):
    def slow(handler):
        time.sleep(4)
        handler.reply(200, detection())

    stub.routes[PUBLIC] = slow
    result = run("detect", photo(), "--base-url", stub.base_url, "--timeout", "1")
    assert result.code == 3, result
    assert result.elapsed < 3.5
    assert "not as safe" in result.stderr
    assert result.stdout == ""


def test_service_time_out_from_the_environment(run, stub):
    def slow(handler):
        time.sleep(4)
        handler.reply(200, detection())

    stub.routes[PUBLIC] = slow
    result = run("detect", photo(), "--base-url", stub.base_url, env=clean_env(NSFWDETECTOR_TIMEOUT="1"))
    assert result.code == 3, result
    assert result.elapsed < 3.5


def test_connection_dropped_is_unknown(run, stub):
    def drop(handler):
        handler.close_connection = True
        handler.connection.close()

    stub.routes[PUBLIC] = drop
    result = run("detect", photo(), "--base-url", stub.base_url, "--json")
    assert result.code == 3, result
    assert result.json()["outcome"] == "unknown"
