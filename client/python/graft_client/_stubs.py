"""The protobuf and gRPC modules generated from proto/ at build time (graft_client/_gen)."""

try:
    from graft_client._gen.graft.v1 import graft_pb2, graft_pb2_grpc
    from graft_client._gen.health.v1 import health_pb2, health_pb2_grpc
except ImportError as e:  # pragma: no cover - depends on how the package was installed
    raise ImportError(
        "graft_client's generated modules are missing: build the graft_python_client target "
        "(ninja -C build graft_python_client) and put build/client/python on PYTHONPATH, "
        f"not client/python ({e})"
    ) from e

__all__ = ["graft_pb2", "graft_pb2_grpc", "health_pb2", "health_pb2_grpc"]
