"""TLS and mTLS against a real graftd, with certificates made by the openssl command."""

import subprocess

import pytest

import graft_client
from conftest import Graftd
from models import conv_bn_bytes


def openssl(*args):
    run = subprocess.run(["openssl", *args], capture_output=True, text=True)
    assert run.returncode == 0, f"openssl {' '.join(args)}:\n{run.stderr}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")

    def ca(name):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-days", "2", "-subj", f"/CN={name}-ca", "-keyout", str(d / f"{name}.key"),
                "-out", str(d / f"{name}.pem"))

    def leaf(name, signer, extension):
        (d / f"{name}.ext").write_text(extension + "\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-subj", f"/CN={name}", "-keyout", str(d / f"{name}.key"),
                "-out", str(d / f"{name}.csr"))
        openssl("x509", "-req", "-days", "2", "-in", str(d / f"{name}.csr"), "-CA",
                str(d / f"{signer}.pem"), "-CAkey", str(d / f"{signer}.key"),
                "-CAcreateserial", "-out", str(d / f"{name}.pem"), "-extfile",
                str(d / f"{name}.ext"))

    ca("ca")
    leaf("server", "ca", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
         "extendedKeyUsage=serverAuth")
    leaf("client", "ca", "extendedKeyUsage=clientAuth")
    leaf("other", "ca", "extendedKeyUsage=clientAuth")
    return d


@pytest.fixture(scope="module")
def mtls_graftd(pki):
    server = Graftd("--workers", "1", "--tls-cert-file", str(pki / "server.pem"),
                    "--tls-key-file", str(pki / "server.key"),
                    "--tls-client-ca-file", str(pki / "ca.pem"), "--tls-client-auth", "require")
    yield server
    server.stop()


def test_mtls_client_optimizes(mtls_graftd, pki):
    tls = graft_client.TlsConfig(ca=pki / "ca.pem", cert=pki / "client.pem", key=pki / "client.key")
    with graft_client.Client(mtls_graftd.address, tls=tls, timeout=30) as c:
        mtls_graftd.wait_serving(c)
        model = conv_bn_bytes(seed=301)
        assert c.optimize(model).report.nodes_after < 5
        assert c.optimize(model).lookup_hit


def test_tls_failures_are_clear(mtls_graftd, pki):
    # No client certificate: the server ends the handshake.
    with graft_client.Client(mtls_graftd.address, tls=graft_client.TlsConfig(ca=pki / "ca.pem"),
                             timeout=10) as c:
        with pytest.raises(graft_client.UnavailableError, match="may require a client certificate"):
            c.health()
    # Plaintext to a TLS port.
    with graft_client.Client(mtls_graftd.address, timeout=10) as c:
        with pytest.raises(graft_client.UnavailableError, match="connect with TLS"):
            c.health()
    # Files checked before any connection.
    with pytest.raises(graft_client.InvalidArgumentError, match="needs its key"):
        graft_client.Client("127.0.0.1:1", tls=graft_client.TlsConfig(cert=pki / "client.pem"))
    with pytest.raises(graft_client.InvalidArgumentError, match="does not match"):
        graft_client.Client("127.0.0.1:1", tls=graft_client.TlsConfig(
            ca=pki / "ca.pem", cert=pki / "client.pem", key=pki / "other.key"))
    with pytest.raises(graft_client.InvalidArgumentError, match="no PEM certificate"):
        graft_client.Client("127.0.0.1:1", tls=graft_client.TlsConfig(ca=pki / "client.ext"))
    with pytest.raises(FileNotFoundError):
        graft_client.Client("127.0.0.1:1", tls=graft_client.TlsConfig(ca=pki / "missing.pem"))
