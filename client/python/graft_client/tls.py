"""TLS settings of a Client, checked before any connection is made, as the C++ client does: a
file that cannot be read or is not usable PEM is an error naming it, not a failed handshake."""

import dataclasses
import os
import ssl

import grpc

from .errors import InvalidArgumentError

_MAX_PEM_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class TlsConfig:
    """TLS for a Client. `ca`: PEM bundle of the CAs that sign the server's certificate (None:
    the system's trusted CAs); `cert` and `key`: PEM client certificate chain and its unencrypted
    private key, for servers that require one (mTLS); `server_name`: the name the server's
    certificate must carry when it differs from the host of the target. All are file paths."""

    ca: "str | os.PathLike | None" = None
    cert: "str | os.PathLike | None" = None
    key: "str | os.PathLike | None" = None
    server_name: "str | None" = None


def _read_pem(path, what):
    path = os.fspath(path)
    with open(path, "rb") as f:  # OSError (FileNotFoundError, PermissionError) names the path
        data = f.read(_MAX_PEM_BYTES + 1)
    if len(data) > _MAX_PEM_BYTES:
        raise InvalidArgumentError(f"{what} '{path}' is larger than {_MAX_PEM_BYTES} bytes")
    return data


def channel_credentials(tls):
    """(grpc.ChannelCredentials, extra channel options) for a TlsConfig."""
    ca = cert = key = None
    if tls.ca is not None:
        ca = _read_pem(tls.ca, "CA bundle")
        if b"-----BEGIN CERTIFICATE-----" not in ca:
            raise InvalidArgumentError(f"CA bundle '{os.fspath(tls.ca)}' holds no PEM certificate")
    if (tls.cert is None) != (tls.key is None):
        raise InvalidArgumentError("a client certificate needs its key: give both cert and key")
    if tls.cert is not None:
        cert = _read_pem(tls.cert, "client certificate")
        key = _read_pem(tls.key, "client key")
        if b"-----BEGIN CERTIFICATE-----" not in cert:
            raise InvalidArgumentError(
                f"client certificate '{os.fspath(tls.cert)}' holds no PEM certificate")
        if b"PRIVATE KEY-----" not in key:
            raise InvalidArgumentError(f"client key '{os.fspath(tls.key)}' holds no PEM private key")
        if b"ENCRYPTED" in key:
            raise InvalidArgumentError(
                f"client key '{os.fspath(tls.key)}' is encrypted: graft_client needs an "
                "unencrypted key (a passphrase prompt would hang unattended jobs)")

        def no_password():
            raise InvalidArgumentError(f"client key '{os.fspath(tls.key)}' is encrypted")

        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(
                os.fspath(tls.cert), os.fspath(tls.key), password=no_password)
        except ssl.SSLError as e:
            raise InvalidArgumentError(
                f"client key '{os.fspath(tls.key)}' does not match certificate "
                f"'{os.fspath(tls.cert)}' or is not usable PEM ({e.reason or e})") from None
    options = []
    if tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                         certificate_chain=cert)
    return creds, options
