"""detect --url: the CLI downloads the image itself (http/https only, size cap, time-out) and uploads it."""

import hashlib
import time

import pytest

from conftest import LocalServer, corpus


@pytest.fixture
def host():
    """A local web server hosting images and misbehaving URLs."""
    server = LocalServer()
    jpeg = corpus("320x240.jpg").read_bytes()
    svg = corpus("circle.svg").read_bytes()
    server.routes["/photo.jpg"] = lambda h: h.reply(200, jpeg, content_type="image/jpeg")
    server.routes["/drawing.svg"] = lambda h: h.reply(200, svg, content_type="image/svg+xml")
    server.routes["/empty"] = lambda h: h.reply(200, b"", content_type="image/jpeg")
    server.routes["/moved"] = lambda h: h.reply(302, b"", headers={"Location": "/photo.jpg"})
    server.routes["/to-file"] = lambda h: h.reply(302, b"", headers={"Location": "file:///etc/passwd"})

    def announced_huge(handler):
        handler.send_response(200)
        handler.send_header("Content-Type", "image/png")
        handler.send_header("Content-Length", str(200 * 1024 * 1024))
        handler.end_headers()
        handler.wfile.write(b"\x89PNG\r\n\x1a\n")

    def endless(handler):
        # No Content-Length: the cap must hold while streaming.
        handler.send_response(200)
        handler.send_header("Content-Type", "image/png")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        chunk = b"\0" * (1024 * 1024)
        try:
            for _ in range(200):
                handler.wfile.write(chunk)
        except OSError:
            pass

    def slow(handler):
        time.sleep(4)
        handler.reply(200, jpeg, content_type="image/jpeg")

    server.routes["/huge"] = announced_huge
    server.routes["/endless"] = endless
    server.routes["/slow"] = slow
    yield server
    server.close()


def test_url_is_downloaded_and_uploaded(run, host):
    url = host.base_url + "/photo.jpg"
    result = run("detect", "--url", url, "--json")
    assert result.code == 0, result
    doc = result.json()
    assert doc["source"] == {"kind": "url", "url": url}
    data = corpus("320x240.jpg").read_bytes()
    assert doc["original_bytes"] == len(data)
    assert doc["data"]["image"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert host.requests[0]["headers"]["User-Agent"].startswith("nsfwdetector-cli/")


def test_url_human_output(run, host):
    result = run("detect", "--url", host.base_url + "/photo.jpg")
    assert result.code == 0, result
    assert result.stdout.startswith("allow nsfw=")


def test_url_redirects_are_followed(run, host):
    result = run("detect", "--url", host.base_url + "/moved", "--json")
    assert result.code == 0, result


def test_url_content_is_judged_by_the_service(run, host):
    result = run("detect", "--url", host.base_url + "/drawing.svg", "--json")
    assert result.code == 2, result
    assert result.json()["error"]["code"] == 4002


@pytest.mark.parametrize("path, message", [
    ("/missing.jpg", "HTTP 404"),
    ("/empty", "is empty"),
    ("/to-file", "file:///etc/passwd"),
    ("/huge", "downloads over 100.0 MB are refused"),
    ("/endless", "larger than 100.0 MB"),
])
def test_url_download_failures_exit_2(run, host, path, message):
    result = run("detect", "--url", host.base_url + path, "--json")
    assert result.code == 2, result
    assert message in result.stderr
    if path == "/to-file":
        assert "not allowed" in result.stderr
    assert len(result.stderr.strip().split("\n")) == 1
    assert result.json()["outcome"] == "input_error"


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/a.jpg", "data:image/png;base64,AAAA"])
def test_url_schemes_other_than_http_are_refused(run, url):
    result = run("detect", "--url", url)
    assert result.code == 2, result
    assert "must be an http or https URL" in result.stderr


def test_url_download_has_a_time_out(run, host):
    result = run("detect", "--url", host.base_url + "/slow", "--timeout", "1")
    assert result.code == 2, result
    assert result.elapsed < 3.5
    assert "cannot download" in result.stderr


def test_url_host_unreachable(run):
    result = run("detect", "--url", "http://127.0.0.1:9/photo.jpg")
    assert result.code == 2, result
    assert "cannot download" in result.stderr
