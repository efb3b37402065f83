"""Python client for Graft, the ONNX graph-optimization service (graftd).

    from graft_client import Client
    with Client("localhost:50051", timeout=60) as graft:
        result = graft.optimize("model.onnx", level="O2")
        result.save("model.optimized.onnx")
        print(result.cache_hit, result.uploaded_bytes, result.report_json())

From a hook without a shell: python3 -m graft_client optimize IN -o OUT --server HOST:PORT.
See docs/python-client.md.
"""

from ._stubs import graft_pb2
from ._version import __version__
from .client import (CHUNK_BYTES, SHA256_METADATA, Client, Result, ResultFile, input_digest,
                     model_digest, sha256_hex, write_atomically)
from .config import pipeline_config
from .errors import (CancelledError, DataLossError, DeadlineExceededError, ExternalDataError,
                     FailedPreconditionError, GraftError, InternalError, InvalidArgumentError,
                     InvalidModelError, NotFoundError, PermissionDeniedError,
                     ResourceExhaustedError, UnauthenticatedError, UnavailableError,
                     UnimplementedError)
from .external import check_location, external_locations
from .report import embedded_report, report_html
from .tls import TlsConfig

__all__ = [
    "report_html", "embedded_report",
    "CHUNK_BYTES", "SHA256_METADATA", "Client", "Result", "ResultFile", "TlsConfig", "graft_pb2",
    "pipeline_config", "sha256_hex", "input_digest", "model_digest", "write_atomically",
    "check_location", "external_locations",
    "GraftError", "InvalidArgumentError", "InvalidModelError", "ExternalDataError",
    "NotFoundError", "FailedPreconditionError", "ResourceExhaustedError", "UnavailableError",
    "DeadlineExceededError", "CancelledError", "UnauthenticatedError", "PermissionDeniedError",
    "UnimplementedError", "InternalError", "DataLossError",
]
