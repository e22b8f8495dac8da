"""AWS Signature Version 4, checked on the server: the canonical request as AWS defines it, recomputed from
what arrived, signed with the access key's secret, compared in constant time.

Pure functions of the request's parts (no Django), so the tests can hold them against botocore's own signer.
The canonical URI is the path as the client encoded it, normalised and percent-encoded once more (AWS's rule
for every service but S3); the canonical query sorts the raw `name=value` pairs as sent; the payload hash is
SHA-256 of the body (or `X-Amz-Content-SHA256`, which must then be that hash).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "batch"
TERMINATOR = "aws4_request"


class SignatureError(Exception):
    """A refused signature: `code` is the error AWS answers with, `status` its HTTP status."""

    def __init__(self, code: str, message: str, status: int = 403):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


@dataclass(frozen=True)
class Authorization:
    access_key_id: str
    date: str  # YYYYMMDD of the credential scope
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/{TERMINATOR}"


def authorization_parse(header: str | None) -> Authorization:
    """The Authorization header's parts; a missing or malformed header is refused as AWS refuses it."""
    if not header:
        raise SignatureError("MissingAuthenticationTokenException", "Missing Authentication Token")
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise SignatureError(
            "IncompleteSignatureException", f"Unsupported signature algorithm; use {ALGORITHM}", status=400
        )
    parts: dict[str, str] = {}
    for item in rest.split(","):
        name, equals, value = item.strip().partition("=")
        if equals:
            parts[name] = value
    missing = [name for name in ("Credential", "SignedHeaders", "Signature") if not parts.get(name)]
    if missing:
        raise SignatureError(
            "IncompleteSignatureException",
            f"Authorization header requires {', '.join(missing)}",
            status=400,
        )
    credential = parts["Credential"].split("/")
    if len(credential) != 5 or not all(credential):
        raise SignatureError(
            "IncompleteSignatureException",
            "Credential must be <access key id>/<date>/<region>/<service>/aws4_request",
            status=400,
        )
    key_id, date, region, service, terminator = credential
    if terminator != TERMINATOR:
        raise SignatureError(
            "InvalidSignatureException",
            f"Credential should be scoped with a valid terminator: '{TERMINATOR}'",
        )
    if service != SERVICE:
        raise SignatureError(
            "InvalidSignatureException", f"Credential should be scoped to correct service: '{SERVICE}'"
        )
    return Authorization(
        access_key_id=key_id,
        date=date,
        region=region,
        service=service,
        signed_headers=tuple(parts["SignedHeaders"].split(";")),
        signature=parts["Signature"].lower(),
    )


def request_time_check(
    *, auth: Authorization, amz_date: str | None, now: datetime, max_skew_seconds: int
) -> None:
    """X-Amz-Date is present, matches the credential's date and is within the allowed clock skew."""
    if not amz_date:
        raise SignatureError(
            "IncompleteSignatureException", "Authorization requires the X-Amz-Date header", status=400
        )
    try:
        signed_at = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        raise SignatureError(
            "IncompleteSignatureException", "X-Amz-Date must look like 20261204T234549Z", status=400
        ) from None
    if amz_date[:8] != auth.date:
        raise SignatureError(
            "InvalidSignatureException", f"Credential date {auth.date} does not match X-Amz-Date {amz_date}"
        )
    skew = abs((now - signed_at).total_seconds())
    if skew > max_skew_seconds:
        raise SignatureError(
            "InvalidSignatureException",
            f"Signature expired: X-Amz-Date {amz_date} is {int(skew)} s from the server's time "
            f"{now:%Y%m%dT%H%M%SZ} (at most {max_skew_seconds // 60} min allowed); check the client's clock",
        )


def canonical_uri(raw_path: str) -> str:
    """The path as sent (still percent-encoded), dot segments and repeated slashes removed (RFC 3986 5.2.4,
    as AWS does), then encoded once more."""
    if not raw_path:
        return "/"
    segments: list[str] = []
    for segment in raw_path.split("/"):
        if segment == "..":
            if segments:
                segments.pop()
        elif segment and segment != ".":
            segments.append(segment)
    first = "/" if raw_path.startswith("/") else ""
    last = "/" if raw_path.endswith("/") and segments else ""
    return quote(first + "/".join(segments) + last, safe="/~")


def canonical_query(raw_query: str) -> str:
    if not raw_query:
        return ""
    pairs = []
    for pair in raw_query.split("&"):
        name, _, value = pair.partition("=")
        pairs.append((name, value))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def canonical_request(
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Mapping[str, str],
    signed_headers: tuple[str, ...],
    payload_hash: str,
) -> str:
    lines = [f"{name}:{' '.join(headers.get(name, '').split())}" for name in signed_headers]
    return "\n".join(
        [
            method.upper(),
            canonical_uri(raw_path),
            canonical_query(raw_query),
            "\n".join(lines) + "\n",
            ";".join(signed_headers),
            payload_hash,
        ]
    )


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signature(*, secret: str, auth: Authorization, amz_date: str, canonical: str) -> str:
    to_sign = "\n".join([ALGORITHM, amz_date, auth.scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(f"AWS4{secret}".encode(), auth.date)
    for part in (auth.region, auth.service, TERMINATOR):
        key = _hmac(key, part)
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def payload_hash(*, body: bytes, headers: Mapping[str, str]) -> str:
    digest = hashlib.sha256(body).hexdigest()
    declared = headers.get("x-amz-content-sha256")
    if declared is not None and declared != digest:
        raise SignatureError(
            "InvalidSignatureException", "X-Amz-Content-SHA256 is not the SHA-256 of the request body"
        )
    return digest


def signature_check(
    *,
    auth: Authorization,
    secret: str,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Mapping[str, str],
    body: bytes,
) -> None:
    """Recompute the signature over what arrived; `headers` has lower-case names. Raises SignatureError."""
    if "host" not in auth.signed_headers:
        raise SignatureError("InvalidSignatureException", "the host header must be signed")
    canonical = canonical_request(
        method=method,
        raw_path=raw_path,
        raw_query=raw_query,
        headers=headers,
        signed_headers=auth.signed_headers,
        payload_hash=payload_hash(body=body, headers=headers),
    )
    expected = signature(
        secret=secret, auth=auth, amz_date=headers.get("x-amz-date", ""), canonical=canonical
    )
    if not hmac.compare_digest(expected, auth.signature):
        raise SignatureError(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method.",
        )
