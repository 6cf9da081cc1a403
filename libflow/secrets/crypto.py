"""Sealing secrets at rest: AES-256-GCM under a key derived from ``LIBFLOW_SECRET_KEY``.

A sealed value is text, ``enc1:<key id>:<base64url(nonce + ciphertext + tag)>``, bound to
the row it belongs to by AES-GCM's associated data (a secret's project and name, a
webhook's id): copied into another row, it no longer opens. The key id (4 bytes derived
from the key, not the key) says which key sealed a value, so a process with another key
says so instead of failing obscurely, and a key rotation can tell what it already did.

The process's box is installed once at start-up (``use_secret_box``, by
``open_resources`` and the admin commands) and read where a value is sealed or opened:
webhook services are called from handlers that know no settings.
"""

from __future__ import annotations

import base64
import binascii
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from settings import Settings

SEALED_PREFIX = "enc1"
_NONCE_BYTES = 12
# Fixed and public: HKDF's salt only has to differ from other uses of the same key material
# (the same LIBFLOW_SECRET_KEY signs storage URLs with HMAC).
_SALT = b"libflow secrets at rest"
_KEY_INFO = b"libflow secrets: AES-256-GCM key v1"
_KEY_ID_INFO = b"libflow secrets: key id v1"


class SecretUnreadable(Exception):
    """A sealed value does not open with this process's key (another key, or altered).

    Not a LibflowError: the API answers it as any fault of the server (500, logged), and
    tells an unauthenticated webhook sender nothing of the keys.
    """


class SecretBox:
    """Seals and opens values with one key; the key is never kept in clear beside it."""

    __slots__ = ("_aead", "key_id")

    def __init__(self, key_material: bytes) -> None:
        if not key_material:
            raise ValueError("the secret key is empty")
        key = _derive(key_material, _KEY_INFO, 32)
        self._aead = AESGCM(key)
        self.key_id = _derive(key_material, _KEY_ID_INFO, 4).hex()

    def seal(self, value: str, bound_to: str) -> str:
        """``value`` sealed, openable only with this key and the same ``bound_to``."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, value.encode("utf-8"), bound_to.encode("utf-8"))
        text = base64.urlsafe_b64encode(nonce + sealed).rstrip(b"=").decode("ascii")
        return f"{SEALED_PREFIX}:{self.key_id}:{text}"

    def open(self, sealed: str, bound_to: str) -> str:
        """The value ``seal`` sealed; SecretUnreadable if it cannot be opened here."""
        key_id, data = _parts(sealed)
        if key_id != self.key_id:
            raise SecretUnreadable(
                f"sealed under key id {key_id}, and this process's key has id {self.key_id}: "
                "every process needs the same LIBFLOW_SECRET_KEY (after changing it, run "
                "`libflow secrets rotate-key`)"
            )
        try:
            value = self._aead.decrypt(data[:_NONCE_BYTES], data[_NONCE_BYTES:], bound_to.encode())
        except InvalidTag:
            raise SecretUnreadable("the value was altered, or belongs to another row") from None
        return value.decode("utf-8")

    def sealed_here(self, sealed: str) -> bool:
        """Whether ``sealed`` is a sealed value of this key (not whether it opens)."""
        return is_sealed(sealed) and sealed.split(":", 2)[1] == self.key_id


def _derive(key_material: bytes, info: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=_SALT, info=info).derive(
        key_material
    )


def _parts(sealed: str) -> tuple[str, bytes]:
    """The key id and the nonce + ciphertext of a sealed value."""
    prefix, _, rest = sealed.partition(":")
    key_id, _, text = rest.partition(":")
    if prefix != SEALED_PREFIX or not key_id or not text:
        raise SecretUnreadable("the stored value is not a sealed value")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise SecretUnreadable("the stored value is not a sealed value") from None
    if len(data) < _NONCE_BYTES + 16:
        raise SecretUnreadable("the stored value is not a sealed value")
    return key_id, data


def is_sealed(value: str) -> bool:
    """Whether ``value`` has the sealed format (of any key)."""
    return value.startswith(SEALED_PREFIX + ":") and value.count(":") == 2


def box_of(settings: Settings) -> SecretBox:
    """The box of ``settings``' secret key (LIBFLOW_SECRET_KEY, or the data dir's)."""
    return SecretBox(settings.signing_key())


_box: SecretBox | None = None


def use_secret_box(box: SecretBox) -> None:
    """Make ``box`` the process's: every process of a deployment shares one key."""
    global _box
    _box = box


def secret_box() -> SecretBox:
    """The process's box (installed at start-up by ``use_secret_box``)."""
    if _box is None:
        raise RuntimeError("no secret key in use: open_resources() or the admin commands set it")
    return _box


def installed_secret_box() -> SecretBox | None:
    """The process's box, or None before start-up installed one."""
    return _box


def secret_bound_to(project_id: str, name: str) -> str:
    """What a project secret's sealed value is bound to: its project and its name."""
    return f"libflow/secret/{project_id}/{name}"


def webhook_bound_to(webhook_id: str) -> str:
    """What a webhook's sealed signing secrets (current and previous) are bound to."""
    return f"libflow/webhook/{webhook_id}"
