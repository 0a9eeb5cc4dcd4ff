"""A throwaway certificate authority for daytona-sim's HTTPS object storage.

Invariant: `make_server_tls(folder, host)` writes a fresh CA and a server certificate for
`host` (and 127.0.0.1, localhost), both valid for 30 days, plus `ca-bundle.pem` (that CA
followed by the system's roots, so trusting the bundle distrusts nothing), and returns an
SSLContext serving the certificate; it writes nothing outside `folder`.

A client trusts the bundle with `rl_daytona.backends.ca_trust.trust_in_this_process(bundle)`.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rl_daytona.backends.ca_trust import CERT_ENV

__all__ = ["BUNDLE", "make_server_tls"]

BUNDLE = "ca-bundle.pem"
_VALID = dt.timedelta(days=30)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _cert(subject: str, issuer: str, key: ec.EllipticCurvePrivateKey, signer: ec.EllipticCurvePrivateKey,
          extensions: list[tuple[x509.ExtensionType, bool]]) -> x509.Certificate:
    now = dt.datetime.now(dt.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + _VALID))
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signer, hashes.SHA256())


def _alt_names(host: str) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    try:
        address = ipaddress.ip_address(host)
        if str(address) != "127.0.0.1":
            names.append(x509.IPAddress(address))
    except ValueError:
        names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _system_roots() -> str:
    paths = ssl.get_default_verify_paths()
    for candidate in (os.environ.get(CERT_ENV), paths.cafile, paths.openssl_cafile):
        if candidate and Path(candidate).is_file():
            return Path(candidate).read_text()
    return ""


def make_server_tls(folder: Path, host: str) -> ssl.SSLContext:
    """A new CA and server certificate under `folder`; the context that serves it."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _cert("daytona-sim CA", "daytona-sim CA", ca_key, ca_key, [
        (x509.BasicConstraints(ca=True, path_length=0), True),
        (x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                       key_encipherment=False, data_encipherment=False, key_agreement=False,
                       encipher_only=False, decipher_only=False), True)])
    server = _cert(host, "daytona-sim CA", key, ca_key, [
        (_alt_names(host), False), (x509.BasicConstraints(ca=False, path_length=None), True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)])
    pem = serialization.Encoding.PEM
    ca_pem = ca.public_bytes(pem).decode()
    (folder / "ca.pem").write_text(ca_pem)
    (folder / "server.pem").write_bytes(server.public_bytes(pem))
    key_path = folder / "server.key"
    key_path.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    key_path.chmod(0o600)
    (folder / BUNDLE).write_text(ca_pem + "\n" + _system_roots())
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(folder / "server.pem", key_path)
    return context
