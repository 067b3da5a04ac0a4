"""A local stand-in for the App Store's signing, for the end-to-end tests: a root, a WWDR-like
intermediate (Apple's marker OID, a CA) and a receipt-signing leaf (its marker OID), signing payloads
as Apple does (ES256, x5c of leaf, intermediate, root). `python3 appstore.py init DIR` writes the
chain and the leaf's key to DIR; the stack's entitlements service trusts DIR/root.pem."""
import base64
import datetime
import json
import os
import sys
import time
import uuid

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

INTERMEDIATE_MARKER = x509.ObjectIdentifier("1.2.840.113635.100.6.2.1")
LEAF_MARKER = x509.ObjectIdentifier("1.2.840.113635.100.6.11.1")
BUNDLE_ID = "com.researchapp.app"


def _name(common):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "E2E Issuer")])


def _certificate(subject, issuer, key, issuer_key, ca, marker):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
               .not_valid_after(now + datetime.timedelta(days=365))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=not ca, content_commitment=False, key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, key_cert_sign=ca, crl_sign=ca, encipher_only=False, decipher_only=False), critical=True))
    if marker is not None:
        builder = builder.add_extension(x509.UnrecognizedExtension(marker, b"\x05\x00"), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def init(directory):
    os.makedirs(directory, exist_ok=True)
    root_key, intermediate_key, leaf_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    root = _certificate(_name("E2E Root CA"), _name("E2E Root CA"), root_key, root_key, True, None)
    intermediate = _certificate(_name("E2E WWDR CA"), root.subject, intermediate_key, root_key, True, INTERMEDIATE_MARKER)
    leaf = _certificate(_name("E2E Receipt Signing"), intermediate.subject, leaf_key, intermediate_key, False, LEAF_MARKER)
    with open(os.path.join(directory, "root.pem"), "wb") as f:
        f.write(root.public_bytes(serialization.Encoding.PEM))
    with open(os.path.join(directory, "chain.json"), "w") as f:
        json.dump([base64.b64encode(c.public_bytes(serialization.Encoding.DER)).decode() for c in (leaf, intermediate, root)], f)
    with open(os.path.join(directory, "leaf-key.pem"), "wb") as f:
        f.write(leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def _b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Issuer:
    def __init__(self, directory):
        with open(os.path.join(directory, "chain.json")) as f:
            self.chain = json.load(f)
        with open(os.path.join(directory, "leaf-key.pem"), "rb") as f:
            self.key = serialization.load_pem_private_key(f.read(), password=None)

    def sign(self, payload):
        header = _b64url(json.dumps({"alg": "ES256", "x5c": self.chain}).encode())
        body = _b64url(json.dumps(payload).encode())
        r, s = decode_dss_signature(self.key.sign(f"{header}.{body}".encode(), ec.ECDSA(hashes.SHA256())))
        return f"{header}.{body}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    @staticmethod
    def now_ms():
        return int(time.time() * 1000)

    def transaction(self, original, product="com.researchapp.pro.monthly", token=None, expires_ms=None, signed_ms=None, environment="Sandbox"):
        now = self.now_ms()
        payload = {"transactionId": str(uuid.uuid4().int % 10**15), "originalTransactionId": original, "bundleId": BUNDLE_ID, "productId": product,
                   "purchaseDate": now - 60_000, "expiresDate": expires_ms if expires_ms is not None else now + 30 * 86_400_000,
                   "type": "Auto-Renewable Subscription", "inAppOwnershipType": "PURCHASED", "environment": environment,
                   "signedDate": signed_ms if signed_ms is not None else now}
        if token:
            payload["appAccountToken"] = token
        return payload

    def notification(self, notification_type, transaction, subtype=None, renews=True, environment="Sandbox"):
        renewal = {"originalTransactionId": transaction["originalTransactionId"], "productId": transaction["productId"],
                   "autoRenewProductId": transaction["productId"], "autoRenewStatus": 1 if renews else 0, "environment": environment,
                   "signedDate": transaction["signedDate"]}
        payload = {"notificationType": notification_type, "notificationUUID": str(uuid.uuid4()), "version": "2.0", "signedDate": self.now_ms(),
                   "data": {"bundleId": BUNDLE_ID, "environment": environment, "signedTransactionInfo": self.sign(transaction),
                            "signedRenewalInfo": self.sign(renewal)}}
        if subtype:
            payload["subtype"] = subtype
        return self.sign(payload)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "init":
        sys.exit("usage: appstore.py init DIR")
    init(sys.argv[2])
