"""Access-key secrets at rest: encrypted with a key derived from ACCESS_KEY_ENCRYPTION_KEY (or SECRET_KEY)."""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


class SecretUnreadable(Exception):
    """The stored secret cannot be decrypted: the encryption key changed since the access key was made."""


def _box() -> Fernet:
    material = (settings.ACCESS_KEY_ENCRYPTION_KEY or settings.SECRET_KEY).encode()
    key = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"quotaportal access keys", info=b"sigv4 secret v1"
    ).derive(material)
    return Fernet(base64.urlsafe_b64encode(key))


def secret_seal(secret: str) -> str:
    return _box().encrypt(secret.encode()).decode()


def secret_open(ciphertext: str) -> str:
    try:
        return _box().decrypt(ciphertext.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable("the access key's secret cannot be decrypted with the current key") from None
