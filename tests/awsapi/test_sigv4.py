"""The SigV4 verifier against botocore's own signer: what botocore signs, the verifier accepts; any change
to what was signed (body, path, query, a signed header, the secret) it refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from awsapi import sigv4

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def signed(
    url: str, *, method: str = "POST", body: bytes = b"{}", secret: str = SECRET, region: str = "eu-west-1"
):
    request = AWSRequest(method=method, url=url, data=body, headers={"Content-Type": "application/json"})
    SigV4Auth(Credentials("QPAKEXAMPLE", secret), "batch", region).add_auth(request)
    headers = {name.lower(): value for name, value in request.headers.items()}
    headers["host"] = urlsplit(url).netloc
    return request, headers


def check(url, headers, *, body=b"{}", method="POST", secret=SECRET):
    parts = urlsplit(url)
    auth = sigv4.authorization_parse(headers["authorization"])
    signed_at = datetime.strptime(headers["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    sigv4.request_time_check(auth=auth, amz_date=headers["x-amz-date"], now=signed_at, max_skew_seconds=900)
    sigv4.signature_check(
        auth=auth,
        secret=secret,
        method=method,
        raw_path=parts.path,
        raw_query=parts.query,
        headers=headers,
        body=body,
    )


URLS = [
    "http://127.0.0.1:8000/aws/batch/v1/submitservicejob",
    "https://qp.example.org:8443/v1/describejobqueues",
    "http://localhost/aws/batch/v1/tags/arn%3Aaws%3Abatch%3Aus-east-1%3A000000000000%3Ajob-queue%2Ftraining",
    "http://localhost/aws/batch/v1/tags/arn%3Aaws%3Abatch%3A%3A0%3Ajob-queue%2Fq?tagKeys=a%20b&tagKeys=c%2Fd",
]


@pytest.mark.parametrize("url", URLS)
def test_what_botocore_signs_is_accepted(url):
    body = '{"jobName": "é"}'.encode()
    _, headers = signed(url, body=body)
    check(url, headers, body=body)


def test_a_changed_body_is_refused():
    url = URLS[0]
    _, headers = signed(url, body=b'{"schedulingPriority": 1}')
    with pytest.raises(sigv4.SignatureError) as caught:
        check(url, headers, body=b'{"schedulingPriority": 9}')
    assert caught.value.code == "InvalidSignatureException"


def test_a_changed_path_query_or_host_is_refused():
    url = URLS[3]
    _, headers = signed(url)
    with pytest.raises(sigv4.SignatureError):
        check(url.replace("tagKeys=c", "tagKeys=x"), headers)
    with pytest.raises(sigv4.SignatureError):
        check(url.replace("%2Fq", "%2Fr"), headers)
    with pytest.raises(sigv4.SignatureError):
        check(url, {**headers, "host": "evil.example.org"})


def test_another_secret_is_refused():
    _, headers = signed(URLS[0], secret="not-the-secret")
    with pytest.raises(sigv4.SignatureError) as caught:
        check(URLS[0], headers)
    assert caught.value.code == "InvalidSignatureException"


def test_a_clock_skewed_past_fifteen_minutes_is_refused_and_within_it_accepted():
    headers = signed(URLS[0])[1]
    auth = sigv4.authorization_parse(headers["authorization"])
    stamp = headers["x-amz-date"]
    NOW = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)  # noqa: N806
    sigv4.request_time_check(auth=auth, amz_date=stamp, now=NOW + timedelta(minutes=14), max_skew_seconds=900)
    with pytest.raises(sigv4.SignatureError) as caught:
        sigv4.request_time_check(
            auth=auth, amz_date=stamp, now=NOW + timedelta(minutes=16), max_skew_seconds=900
        )
    assert caught.value.code == "InvalidSignatureException" and "expired" in caught.value.message


def test_a_missing_or_malformed_authorization_names_the_problem():
    with pytest.raises(sigv4.SignatureError) as caught:
        sigv4.authorization_parse(None)
    assert caught.value.code == "MissingAuthenticationTokenException"
    with pytest.raises(sigv4.SignatureError) as caught:
        sigv4.authorization_parse(
            "AWS4-HMAC-SHA256 Credential=QPAK/20261204/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"
        )
    assert "batch" in caught.value.message
    with pytest.raises(sigv4.SignatureError) as caught:
        sigv4.authorization_parse("AWS4-HMAC-SHA256 SignedHeaders=host")
    assert caught.value.code == "IncompleteSignatureException" and caught.value.status == 400


def test_the_canonical_uri_removes_dot_segments_and_encodes_again():
    assert sigv4.canonical_uri("/a/./b/../c//d/") == "/a/c/d/"
    assert sigv4.canonical_uri("/v1/tags/arn%3Aaws") == "/v1/tags/arn%253Aaws"
    assert sigv4.canonical_uri("") == "/"
