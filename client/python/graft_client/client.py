"""graft_client.Client: optimize ONNX models with a graftd server."""

import hashlib
import json
import os
import tempfile
import threading
import time

import grpc
from google.protobuf import json_format

from ._stubs import graft_pb2, graft_pb2_grpc, health_pb2, health_pb2_grpc
from .config import pipeline_config
from .errors import (DataLossError, DeadlineExceededError, ExternalDataError, GraftError,
                     InvalidArgumentError, from_rpc_error)
from .external import check_location, external_locations, open_beneath, write_beneath
from .tls import TlsConfig, channel_credentials

# The C++ client's chunk size (GraftClient::optimize's default) and message limits
# (tls::default_channel_args): 1 MiB chunks under an 8 MiB message cap.
CHUNK_BYTES = 1 << 20
MAX_MESSAGE_BYTES = 8 << 20
# Sent with every Optimize and Lookup call: load balancers route a model to the replica that
# is likely to have its result cached.
SHA256_METADATA = "graft-model-sha256"
# protobuf cannot represent a larger model; a server sending more is broken or hostile.
_MAX_MODEL_BYTES = (2 << 30) - 1


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def write_atomically(path, data):
    """Writes `data` through a temporary file in `path`'s folder renamed over `path`: readers see
    the old file or the new one, never a part, and a failed write leaves no temporary file."""
    folder = os.path.dirname(os.fspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(os.fspath(path))}.", suffix=".tmp",
                               dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class Result:
    """An optimized model. `model_bytes`: the ONNX model; `report`: the OptimizeReport proto;
    `external_files`: [(location, bytes)] sent back after the model (the files the model
    references, unchanged); `cache_hit`: the server answered from its cache; `lookup_hit`: the
    result came from Lookup, without an upload; `uploaded_bytes`: bytes of model and files sent."""

    def __init__(self, model_bytes, report, external_files, uploaded_bytes, lookup_hit,
                 input_sha256):
        self.model_bytes = model_bytes
        self.report = report
        self.external_files = external_files
        self.uploaded_bytes = uploaded_bytes
        self.lookup_hit = lookup_hit
        self.input_sha256 = input_sha256

    @property
    def cache_hit(self):
        return self.report.cache_hit

    def report_dict(self):
        """The report as a dict of JSON types (proto field names, defaults included)."""
        return json_format.MessageToDict(self.report, preserving_proto_field_name=True,
                                         including_default_value_fields=True)

    def report_json(self, indent=2):
        return json.dumps(self.report_dict(), indent=indent, sort_keys=True)

    def save(self, path, external_files=True):
        """Writes the model to `path` (atomically: a temporary file renamed over it) and, unless
        told not to, its external-data files beside it by their locations."""
        folder = os.path.dirname(os.fspath(path)) or "."
        if external_files:
            # Files first: a refused location leaves no model referring to missing files.
            for name, data in self.external_files:
                write_beneath(folder, name, data)
        write_atomically(path, self.model_bytes)

    def __repr__(self):
        return (f"Result({len(self.model_bytes)} bytes, cache_hit={self.cache_hit}, "
                f"lookup_hit={self.lookup_hit}, uploaded_bytes={self.uploaded_bytes})")


class _Model:
    """A model to send: its bytes, digest, and open external-data files [(name, file, size)]."""

    def __init__(self, model, external_data_dir):
        if isinstance(model, (bytes, bytearray, memoryview)):
            self.data = bytes(model)
            self.folder = os.fspath(external_data_dir) if external_data_dir is not None else None
            self.shown = "the model"
        elif isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            with open(path, "rb") as f:
                if os.fstat(f.fileno()).st_size > _MAX_MODEL_BYTES:
                    raise InvalidArgumentError(
                        f"'{path}' is larger than protobuf's 2 GB limit: keep large weights in "
                        "external-data files")
                self.data = f.read()
            self.folder = (os.fspath(external_data_dir) if external_data_dir is not None
                           else os.path.dirname(path) or ".")
            self.shown = f"'{path}'"
        else:
            raise TypeError(f"model must be a path or bytes, not {type(model).__name__}")
        if len(self.data) > _MAX_MODEL_BYTES:
            raise InvalidArgumentError(
                f"{self.shown} is larger than protobuf's 2 GB limit: keep large weights in "
                "external-data files")
        self.sha256 = sha256_hex(self.data)
        self.locations = external_locations(self.data)
        self.files = []

    def open_files(self):
        if self.locations and self.folder is None:
            raise InvalidArgumentError(
                f"{self.shown} references external-data files ({', '.join(self.locations[:3])}"
                f"{'...' if len(self.locations) > 3 else ''}): pass its path, or bytes with "
                "external_data_dir=")
        try:
            for name in self.locations:
                f = open_beneath(self.folder, name)
                self.files.append((name, f, os.fstat(f.fileno()).st_size))
        except BaseException:
            self.close()
            raise

    def close(self):
        for _, f, _ in self.files:
            f.close()
        self.files = []


class _Upload:
    """The request stream of one Optimize call. An error while reading a file cancels the call
    and is kept, so the caller raises it instead of the CANCELLED status it causes."""

    def __init__(self, start, model, chunk_bytes, progress):
        self.start = start
        self.model = model
        self.chunk_bytes = chunk_bytes
        self.progress = progress
        self.total = len(model.data) + sum(size for _, _, size in model.files)
        self.sent = 0
        self.error = None
        self.call = None
        self.call_ready = threading.Event()

    def _sent(self, n):
        self.sent += n
        if self.progress:
            self.progress(True, self.sent, self.total)

    def __iter__(self):
        try:
            yield from self._requests()
        except Exception as e:  # noqa: BLE001 - kept and raised by the caller
            self.error = e
            self.call_ready.wait(5)
            if self.call is not None:
                self.call.cancel()

    def _requests(self):
        yield graft_pb2.OptimizeRequest(start=self.start)
        view = memoryview(self.model.data)
        for off in range(0, len(view), self.chunk_bytes):
            piece = view[off:off + self.chunk_bytes]
            yield graft_pb2.OptimizeRequest(chunk=graft_pb2.Chunk(data=bytes(piece)))
            self._sent(len(piece))
        for name, f, size in self.model.files:
            left = size
            while left > 0:
                data = f.read(min(self.chunk_bytes, left))
                if not data:
                    raise DataLossError(
                        f"external-data file '{name}' ended after {size - left} of its {size} "
                        "bytes while it was uploaded (did it change?)")
                left -= len(data)
                yield graft_pb2.OptimizeRequest(chunk=graft_pb2.Chunk(data=data, file=name))
                self._sent(len(data))


class Client:
    """A connection to graftd. `target` is "host:port"; `tls` a TlsConfig (None: plaintext);
    `timeout` the default deadline in seconds of every call (None: none from the client; the
    server then applies its own default to Optimize). Use as a context manager, or call close()."""

    def __init__(self, target, tls=None, timeout=None):
        if not isinstance(target, str) or not target:
            raise InvalidArgumentError("target must be a non-empty 'host:port' string")
        if tls is not None and not isinstance(tls, TlsConfig):
            raise TypeError("tls must be a graft_client.TlsConfig or None")
        if timeout is not None and not timeout > 0:
            raise InvalidArgumentError(f"timeout must be a positive number of seconds, got {timeout}")
        self.target = target
        self.timeout = timeout
        self._tls = tls is not None
        options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
        if tls is None:
            self._channel = grpc.insecure_channel(target, options=options)
        else:
            creds, extra = channel_credentials(tls)
            self._channel = grpc.secure_channel(target, creds, options=options + extra)
        self._stub = graft_pb2_grpc.GraftStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    # -- lifetime ---------------------------------------------------------------------------
    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- helpers ----------------------------------------------------------------------------
    def _deadline(self, timeout):
        seconds = self.timeout if timeout is None else timeout
        if seconds is not None and not seconds > 0:
            raise InvalidArgumentError(f"timeout must be a positive number of seconds, got {seconds}")
        return None if seconds is None else time.monotonic() + seconds

    @staticmethod
    def _remaining(deadline):
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceededError("the deadline passed before the call could start")
        return left

    def _error(self, e):
        return from_rpc_error(e, self._tls)

    @staticmethod
    def _digest(model=None, sha256=None):
        if sha256 is not None:
            if not isinstance(sha256, str):
                raise InvalidArgumentError("sha256 must be a hex string")
            digest = sha256.lower()
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise InvalidArgumentError("sha256 must be 64 hex characters")
            return digest
        if isinstance(model, (bytes, bytearray, memoryview)):
            return sha256_hex(model)
        if isinstance(model, (str, os.PathLike)):
            h = hashlib.sha256()
            with open(model, "rb") as f:
                for block in iter(lambda: f.read(CHUNK_BYTES), b""):
                    h.update(block)
            return h.hexdigest()
        raise TypeError("give a model (path or bytes) or sha256=")

    def _check_result(self, model_bytes, report, digest):
        if len(model_bytes) != report.output_bytes:
            raise DataLossError(f"received {len(model_bytes)} model bytes, the report announces "
                                f"{report.output_bytes}")
        if report.output_sha256 and sha256_hex(model_bytes) != report.output_sha256:
            raise DataLossError("the received model's sha256 differs from the report's")
        if report.input_sha256 and report.input_sha256 != digest:
            raise DataLossError("the server answered for another model (input_sha256 differs)")

    # -- calls ------------------------------------------------------------------------------
    def optimize(self, model, level="O2", passes=None, verify=None, pass_options=None,
                 lookup_first=True, timeout=None, *, max_rounds=10, check=False,
                 external_data_dir=None, keep_external_files=True, progress=None,
                 chunk_bytes=CHUNK_BYTES):
        """Optimizes `model` (a path, or bytes) and returns a Result.

        With `lookup_first`, the model's sha256 is computed here and Lookup asked for a cached
        result first; on a hit it is downloaded and nothing is uploaded (result.lookup_hit,
        result.uploaded_bytes == 0). Models with external-data files are never cached by the
        server, so they skip the lookup. External-data files are found in the model's tensors
        and read from its folder (or `external_data_dir`); a location leaving that folder is
        ExternalDataError. `timeout` (default: the client's) bounds the whole operation.
        `progress(upload: bool, done, total)` is called per chunk."""
        if not 0 < chunk_bytes <= MAX_MESSAGE_BYTES - 4096:
            raise InvalidArgumentError(f"chunk_bytes must be in (0, {MAX_MESSAGE_BYTES - 4096}]")
        deadline = self._deadline(timeout)
        config = pipeline_config(level=level, passes=passes, pass_options=pass_options,
                                 verify=verify, max_rounds=max_rounds, check=check)
        source = _Model(model, external_data_dir)
        if lookup_first and not source.locations:
            found = self._lookup(source.sha256, config, True, deadline)
            if found is not None:
                return found
        source.open_files()
        try:
            return self._optimize(source, config, deadline, keep_external_files, progress,
                                  chunk_bytes)
        finally:
            source.close()

    def _optimize(self, source, config, deadline, keep_external_files, progress, chunk_bytes):
        start = graft_pb2.OptimizeStart(config=config, model_size=len(source.data),
                                        expected_sha256=source.sha256)
        sizes = {}
        for name, _, size in source.files:
            start.external_files.add(name=name, size=size)
            sizes[name] = size
        upload = _Upload(start, source, chunk_bytes, progress)
        call = self._stub.Optimize(iter(upload), timeout=self._remaining(deadline),
                                   metadata=((SHA256_METADATA, source.sha256),))
        upload.call = call
        upload.call_ready.set()
        parts = []
        received = 0
        files = []  # [name, [parts], size]
        report = None
        bad = None
        try:
            for msg in call:
                kind = msg.WhichOneof("kind")
                if kind == "report":
                    report = msg.report
                    continue
                if kind != "chunk":
                    continue
                data, name = msg.chunk.data, msg.chunk.file
                if not name:
                    received += len(data)
                    if received > _MAX_MODEL_BYTES:
                        bad = DataLossError("the server sent more than 2 GB of model bytes")
                    else:
                        parts.append(data)
                        if progress:
                            progress(False, received, 0)
                else:
                    # Names the server sends back are checked before anyone can use them as
                    # paths; each file comes in one run of chunks, never larger than what we sent.
                    if not files or files[-1][0] != name:
                        try:
                            check_location(name)
                        except InvalidArgumentError as e:
                            bad = ExternalDataError(f"the server returned an {e.details}")
                        else:
                            if name not in sizes:
                                bad = DataLossError(f"the server returned external file "
                                                    f"'{name}' it was not sent")
                            elif any(f[0] == name for f in files):
                                bad = DataLossError(f"the server returned external file "
                                                    f"'{name}' twice")
                            else:
                                files.append([name, [], 0])
                    if bad is None:
                        files[-1][2] += len(data)
                        if files[-1][2] > sizes[name]:
                            bad = DataLossError(f"the server returned more bytes of external "
                                                f"file '{name}' than were sent")
                        elif keep_external_files:
                            files[-1][1].append(data)
                if bad is not None:
                    call.cancel()
                    break
        except grpc.RpcError as e:
            if upload.error is not None:
                raise upload.error from None
            if bad is None:
                raise self._error(e) from None
        except BaseException:
            call.cancel()  # e.g. KeyboardInterrupt, or a progress callback that raised
            raise
        if upload.error is not None:
            raise upload.error
        if bad is not None:
            raise bad
        if report is None:
            raise DataLossError("the server sent no report")
        model_bytes = b"".join(parts)
        self._check_result(model_bytes, report, source.sha256)
        returned = {f.name: f.size for f in report.external_files}
        for name, _, size in files:
            if returned.get(name) != size:
                raise DataLossError(f"external file '{name}': received {size} bytes, the report "
                                    f"announces {returned.get(name)}")
        kept = [(name, b"".join(chunks)) for name, chunks, _ in files] if keep_external_files \
            else []
        return Result(model_bytes, report, kept, upload.sent, False, source.sha256)

    def _lookup(self, digest, config, return_result, deadline):
        request = graft_pb2.LookupRequest(model_sha256=digest, config=config,
                                          return_result=return_result)
        cached = False
        parts = []
        received = 0
        report = None
        try:
            call = self._stub.Lookup(request, timeout=self._remaining(deadline),
                                     metadata=((SHA256_METADATA, digest),))
            for msg in call:
                kind = msg.WhichOneof("kind")
                if kind == "cached":
                    cached = msg.cached
                elif kind == "chunk":
                    received += len(msg.chunk.data)
                    if msg.chunk.file or received > _MAX_MODEL_BYTES:
                        call.cancel()
                        raise DataLossError("the server's Lookup answer is malformed")
                    parts.append(msg.chunk.data)
                elif kind == "report":
                    report = msg.report
        except grpc.RpcError as e:
            raise self._error(e) from None
        if not return_result:
            return cached
        if not cached:
            return None
        if report is None:
            raise DataLossError("the server said the result is cached but sent no report")
        model_bytes = b"".join(parts)
        self._check_result(model_bytes, report, digest)
        return Result(model_bytes, report, [], 0, True, digest)

    def lookup(self, model=None, level="O2", passes=None, verify=None, pass_options=None,
               timeout=None, *, sha256=None, max_rounds=10, check=False):
        """The cached Result for `model` (path or bytes) or `sha256=` under this configuration,
        downloaded without an upload; None when the server has none."""
        digest = self._digest(model, sha256)
        config = pipeline_config(level=level, passes=passes, pass_options=pass_options,
                                 verify=verify, max_rounds=max_rounds, check=check)
        return self._lookup(digest, config, True, self._deadline(timeout))

    def is_cached(self, model=None, level="O2", passes=None, verify=None, pass_options=None,
                  timeout=None, *, sha256=None, max_rounds=10, check=False):
        """Whether the server has a cached result for the model and configuration."""
        digest = self._digest(model, sha256)
        config = pipeline_config(level=level, passes=passes, pass_options=pass_options,
                                 verify=verify, max_rounds=max_rounds, check=check)
        return self._lookup(digest, config, False, self._deadline(timeout))

    def passes(self, timeout=None):
        """Every pass the server has (graft_pb2.PassInfo: name, level, description, options)."""
        try:
            response = self._stub.ListPasses(graft_pb2.ListPassesRequest(),
                                             timeout=self._remaining(self._deadline(timeout)))
        except grpc.RpcError as e:
            raise self._error(e) from None
        return list(response.passes)

    def health(self, service="", timeout=None):
        """The grpc.health.v1 status of the server ("" service) or of one service: "SERVING",
        "NOT_SERVING", "SERVICE_UNKNOWN" or "UNKNOWN"."""
        try:
            response = self._health.Check(health_pb2.HealthCheckRequest(service=service),
                                          timeout=self._remaining(self._deadline(timeout)))
        except grpc.RpcError as e:
            raise self._error(e) from None
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


__all__ = ["Client", "Result", "TlsConfig", "GraftError", "CHUNK_BYTES", "SHA256_METADATA"]
