"""graft_client.Client: optimize ONNX models with a graftd server."""

import hashlib
import io
import json
import os
import tempfile
import threading
import time

import grpc

from ._stubs import graft_pb2, graft_pb2_grpc, health_pb2, health_pb2_grpc
from .config import pipeline_config, plain_options_doc
from .errors import (DataLossError, DeadlineExceededError, ExternalDataError, GraftError,
                     InvalidArgumentError, from_rpc_error)
from .external import (check_location, copy_fd, external_locations, open_beneath,
                       write_beneath)
from .report import report_html, report_to_dict
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
# External-data files received in one answer are kept in memory up to this many bytes in all;
# beyond, each file goes to an anonymous temporary file (in tempfile.gettempdir(), i.e. $TMPDIR).
KEEP_IN_MEMORY_BYTES = 64 << 20


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def input_digest(model_sha256, files):
    """The input digest that keys a model's result in graftd's cache (cache::input_digest): the
    model's sha256 when `files` is empty; otherwise the sha256 of "graft-input-v1\n", the
    model's sha256 and "\n", then per file in byte order of names
    "<bytes in name>:<name> <size> <sha256>\n". `files`: (name, size, sha256) tuples, or
    objects with those attributes (graft_pb2.ExternalFile, ResultFile)."""
    entries = []
    for f in files:
        name, size, digest = (f.name, f.size, f.sha256) if hasattr(f, "sha256") else f
        entries.append((name.encode("utf-8", "surrogateescape"), int(size), digest))
    if not entries:
        return model_sha256
    entries.sort(key=lambda e: e[0])
    h = hashlib.sha256()
    h.update(b"graft-input-v1\n" + model_sha256.encode("ascii") + b"\n")
    for name, size, digest in entries:
        h.update(b"%d:%s %d %s\n" % (len(name), name, size, digest.encode("ascii")))
    return h.hexdigest()


def model_digest(model, external_data_dir=None):
    """The input digest (see input_digest) of a model, a path or bytes, with the external-data
    files its tensors reference, read from its folder (or `external_data_dir`) in blocks: the
    value Lookup takes and report.input_sha256 carries."""
    return _Model(model, external_data_dir).hash_files()


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


def _signature(st):
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class _InputFile:
    """An external-data file of the input as it was hashed: name, size, sha256, and the stat
    signature that later copies check (a changed file is not copied as the input's)."""

    def __init__(self, name, size, sha256, signature):
        self.name = name
        self.size = size
        self.sha256 = sha256
        self.signature = signature


class _FdReader(io.RawIOBase):
    def __init__(self, fd, size):
        super().__init__()
        self._fd, self._size, self._pos = fd, size, 0

    def readable(self):
        return True

    def readinto(self, buffer):
        n = min(len(buffer), self._size - self._pos)
        if n <= 0:
            return 0
        data = os.pread(self._fd, n, self._pos)
        buffer[:len(data)] = data
        self._pos += len(data)
        return len(data)


class ResultFile:
    """One external-data file the optimized model references (report.external_files).

    `name` (its location), `size`, `sha256`; `from_input`: the file is the input's file of that
    name, unchanged, so the server did not send it (or, from a server that sends every file
    back, the bytes received equal it) and save() copies it from the input's folder;
    `received`: the server sent its bytes; `kept`: its content is available to save()
    and read() (False for a received file with keep_external_files=False, or an input file a
    Result of lookup(sha256=...) cannot know)."""

    def __init__(self, name, size, sha256, from_input, received, data=None, spool=None,
                 source=None):
        self.name = name
        self.size = size
        self.sha256 = sha256
        self.from_input = from_input
        self.received = received
        self._data = data     # bytes kept in memory
        self._spool = spool   # or an anonymous temporary file holding them
        self._source = source  # (folder, _InputFile) for from_input files

    @property
    def kept(self):
        return self._data is not None or self._spool is not None or self._source is not None

    def _open_source(self):
        folder, original = self._source
        f = open_beneath(folder, self.name)
        try:
            if _signature(os.fstat(f.fileno())) != original.signature:
                raise DataLossError(
                    f"the input's external-data file '{os.path.join(folder, self.name)}' changed "
                    "since the model was optimized: optimize it again")
        except BaseException:
            f.close()
            raise
        return f

    def open(self):
        """A binary file object reading the content (from memory, the spool file, or the
        input's file)."""
        if self._data is not None:
            return io.BytesIO(self._data)
        if self._spool is not None:
            return io.BufferedReader(_FdReader(self._spool.fileno(), self.size))
        if self._source is not None:
            return self._open_source()
        raise InvalidArgumentError(f"external-data file '{self.name}' was not kept "
                                   "(keep_external_files=False, or the input is unknown)")

    def read(self):
        """The whole content as bytes (mind the size of large files: see open())."""
        with self.open() as f:
            return f.read()

    def _write(self, folder, protect):
        if self._data is not None:
            write_beneath(folder, self.name, self._data, protect=protect)
            return
        if self._spool is not None:
            self._spool.flush()
            src_fd, size, same_as = self._spool.fileno(), self.size, None
            src = None
        else:
            src = self._open_source()
            src_fd, size, same_as = src.fileno(), self.size, os.fstat(src.fileno())
        try:
            def fill(out):
                copied = copy_fd(src_fd, out.fileno(), size)
                if copied != size:
                    raise DataLossError(f"external-data file '{self.name}' ended after {copied} of "
                                        f"its {size} bytes while it was copied")

            write_beneath(folder, self.name, fill=fill, same_as=same_as,
                          protect=() if src is not None else protect)
        finally:
            if src is not None:
                src.close()

    def close(self):
        if self._spool is not None:
            self._spool.close()
            self._spool = None

    def __repr__(self):
        how = "from the input" if self.from_input else "received" if self.received else "listed"
        return f"ResultFile({self.name!r}, {self.size} bytes, {how}, kept={self.kept})"


class Result:
    """An optimized model. `model_bytes`: the ONNX model; `report`: the OptimizeReport proto;
    `external_files`: [ResultFile] every external-data file the model references; `cache_hit`:
    the server answered from its cache; `lookup_hit`: the result came from Lookup, without an
    upload; `uploaded_bytes`: bytes of model and files sent; `input_sha256`: the input digest.
    Received files larger than memory allows are kept in temporary files until close() (a
    Result is a context manager too)."""

    def __init__(self, model_bytes, report, external_files, uploaded_bytes, lookup_hit,
                 input_sha256, input_files=()):
        self.model_bytes = model_bytes
        self.report = report
        self.external_files = external_files
        self.uploaded_bytes = uploaded_bytes
        self.lookup_hit = lookup_hit
        self.input_sha256 = input_sha256
        # The input's files, which a server-written file of the same name must not replace.
        self._protect = {(f.signature[0], f.signature[1]) for f in input_files}

    @property
    def cache_hit(self):
        return self.report.cache_hit

    def report_dict(self):
        """The report as a dict of JSON types (proto field names, defaults included)."""
        return report_to_dict(self.report)

    def report_html(self):
        """The report as a self-contained HTML page (str): the package's report_template.html
        with the report embedded as JSON (graft_client.report)."""
        return report_html(self.report_dict())

    def explanations(self):
        """Why the explained rules did not rewrite (optimize(explain=...)): a list of dicts with
        pass, rule, node, op, graph and reason, in report order."""
        out = []
        for p in self.report.passes:
            for e in p.explanations:
                out.append({"pass": p.name, "rule": e.rule, "node": e.node, "op": e.op,
                            "graph": e.graph, "reason": e.reason})
        return out

    def fixed_inputs(self):
        """The inputs fix_dims/fix_shapes made static: a list of lines
        "'x': [batch,3,H,W] -> [1,3,224,224]", in input order."""
        return list(self.report.fixed_inputs)

    def layout_changes(self):
        """The inputs and outputs io_layout served in another layout: a list of lines
        "input 'x': NCHW [1,3,224,224] -> NHWC [1,224,224,3]", inputs first."""
        return list(self.report.layout_changes)

    def transposes(self):
        """(before, after): the Transpose nodes of the model as given and of the result, in
        every graph; both 0 without io_layout."""
        return (self.report.transposes_before, self.report.transposes_after)

    def lossy_trials(self):
        """Each lossy pass tried: a list of dicts with pass, kept, measured, gate (max_rel,
        min_cosine), errors (output, max_abs, rel, cosine) and verdict, in order."""
        out = []
        for t in self.report.verification.lossy_trials:
            out.append({"pass": getattr(t, "pass"), "kept": t.kept, "measured": t.measured,
                        "gate": {"max_rel": t.gate_max_rel, "min_cosine": t.gate_min_cosine},
                        "errors": [{"output": e.name, "max_abs": e.max_abs, "rel": e.rel,
                                    "cosine": e.cosine} for e in t.errors],
                        "verdict": t.verdict})
        return out

    def report_json(self, indent=2):
        return json.dumps(self.report_dict(), indent=indent, sort_keys=True)

    def save(self, path, external_files=True):
        """Writes the model to `path` (atomically: a temporary file renamed over it) and, unless
        told not to, every external-data file it references beside it by location: the bytes
        received, and for from_input files a kernel copy of the input's file (skipped when the
        destination is that very file). Every name is checked before anything is written; a
        file not kept is InvalidArgumentError, and an input file is never replaced by one the
        server wrote (ExternalDataError)."""
        folder = os.path.dirname(os.fspath(path)) or "."
        if external_files:
            for f in self.external_files:
                check_location(f.name)
            missing = [f.name for f in self.external_files if not f.kept]
            if missing:
                raise InvalidArgumentError(
                    f"cannot save the external-data files {', '.join(missing[:3])}"
                    f"{'...' if len(missing) > 3 else ''}: not kept (optimize with "
                    "keep_external_files=True and the input's folder), or save(path, "
                    "external_files=False)")
            # Every input file to copy must still be the one hashed, before anything is written.
            for f in self.external_files:
                if f._data is None and f._spool is None:
                    f._open_source().close()
            # Files first: a refused location leaves no model referring to missing files.
            for f in self.external_files:
                f._write(folder, self._protect)
        write_atomically(path, self.model_bytes)

    def close(self):
        """Deletes the temporary files of received external files."""
        for f in self.external_files:
            f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return (f"Result({len(self.model_bytes)} bytes, cache_hit={self.cache_hit}, "
                f"lookup_hit={self.lookup_hit}, uploaded_bytes={self.uploaded_bytes}, "
                f"external_files={len(self.external_files)})")


class _Model:
    """A model to send: its bytes, sha256, folder and external-data locations; hash_files()
    adds each file's size and sha256 (read in blocks) and the input digest."""

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
        self.files = []  # [_InputFile], in the order of self.locations
        self.digest = self.sha256 if not self.locations else None

    def hash_files(self, block_bytes=CHUNK_BYTES):
        """Hashes every external-data file in blocks of `block_bytes` (one file open at a time)
        and returns the input digest."""
        if self.digest is not None:
            return self.digest
        if self.folder is None:
            raise InvalidArgumentError(
                f"{self.shown} references external-data files ({', '.join(self.locations[:3])}"
                f"{'...' if len(self.locations) > 3 else ''}): pass its path, or bytes with "
                "external_data_dir=")
        block = bytearray(block_bytes)
        view = memoryview(block)
        files = []
        for name in self.locations:
            with open_beneath(self.folder, name) as f:
                st = os.fstat(f.fileno())
                h = hashlib.sha256()
                size = 0
                while True:
                    n = f.readinto(block)
                    if not n:
                        break
                    h.update(view[:n])
                    size += n
                if size != st.st_size:
                    raise DataLossError(f"external-data file '{name}' changed size while it was "
                                        "hashed")
                files.append(_InputFile(name, size, h.hexdigest(), _signature(st)))
        self.files = files
        self.digest = input_digest(self.sha256, files)
        return self.digest


class _Upload:
    """The request stream of one Optimize call. An error while reading a file cancels the call
    and is kept, so the caller raises it instead of the CANCELLED status it causes. Each file is
    opened when its turn comes and read chunk by chunk."""

    def __init__(self, start, model, chunk_bytes, progress):
        self.start = start
        self.model = model
        self.chunk_bytes = chunk_bytes
        self.progress = progress
        self.total = len(model.data) + sum(f.size for f in model.files)
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
        for file in self.model.files:
            name, size = file.name, file.size
            with open_beneath(self.model.folder, name) as f:
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


class _Incoming:
    """An external-data file arriving in chunks: counted and hashed as it comes, kept in memory
    while the answer's kept bytes stay within KEEP_IN_MEMORY_BYTES, then in an anonymous
    temporary file."""

    def __init__(self, name, keep):
        self.name = name
        self.keep = keep
        self.size = 0
        self.sha = hashlib.sha256()
        self.parts = []
        self.spool = None

    def add(self, data, receiver):
        self.size += len(data)
        self.sha.update(data)
        if not self.keep:
            return
        if self.spool is None and receiver.in_memory + len(data) > KEEP_IN_MEMORY_BYTES:
            self.spool = tempfile.TemporaryFile(prefix="graft-result-")
            for part in self.parts:
                self.spool.write(part)
            receiver.in_memory -= sum(len(p) for p in self.parts)
            self.parts = []
        if self.spool is not None:
            self.spool.write(data)
        else:
            self.parts.append(data)
            receiver.in_memory += len(data)

    def close(self):
        if self.spool is not None:
            self.spool.close()
            self.spool = None
        self.parts = []


class _Receiver:
    """Reassembles one answer (Optimize or Lookup): the model's chunks, then the chunks of the
    external files the server sends, each in one run; result() checks them against the
    report."""

    def __init__(self, keep_files, progress=None):
        self.keep_files = keep_files
        self.progress = progress
        self.parts = []
        self.received = 0
        self.files = {}
        self.current = None
        self.in_memory = 0

    def chunk(self, chunk):
        """Takes one Chunk; raises DataLossError or ExternalDataError for a malformed answer."""
        data, name = chunk.data, chunk.file
        if not name:
            if self.files:
                raise DataLossError("the server sent model bytes after external files")
            self.received += len(data)
            if self.received > _MAX_MODEL_BYTES:
                raise DataLossError("the server sent more than 2 GB of model bytes")
            self.parts.append(data)
            if self.progress:
                self.progress(False, self.received, 0)
            return
        # Names the server sends are checked before anyone can use them as paths; each file
        # comes in one run of chunks.
        if self.current is None or self.current.name != name:
            try:
                check_location(name)
            except InvalidArgumentError as e:
                raise ExternalDataError(f"the server returned an {e.details}") from None
            if name in self.files:
                raise DataLossError(f"the server returned external file '{name}' twice")
            self.current = _Incoming(name, self.keep_files)
            self.files[name] = self.current
        self.current.add(data, self)

    def close(self):
        for f in self.files.values():
            f.close()

    def result_files(self, report, model):
        """The ResultFiles of `report.external_files`, checked against what arrived and against
        the input's files (`model`: the _Model, hashed, or None when unknown)."""
        inputs = {f.name: f for f in model.files} if model is not None else {}
        folder = model.folder if model is not None else None
        listed = {}
        for f in report.external_files:
            try:
                check_location(f.name)
            except InvalidArgumentError as e:
                raise ExternalDataError(f"the server's report names an {e.details}") from None
            if f.name in listed:
                raise DataLossError(f"the server's report lists external file '{f.name}' twice")
            listed[f.name] = f
        for name in self.files:
            if name not in listed:
                raise DataLossError(f"the server returned external file '{name}', which its "
                                    "report does not list (it was not sent)")
        out = []
        for f in report.external_files:
            original = inputs.get(f.name)
            got = self.files.get(f.name)
            if f.from_input:
                if got is not None:
                    raise DataLossError(f"the server sent external file '{f.name}' although its "
                                        "report says it is the input's")
                if model is not None and original is None:
                    raise DataLossError(f"the server's report says external file '{f.name}' is "
                                        "the input's, but the input has no such file")
                if original is not None and (f.size != original.size or
                                             (f.sha256 and f.sha256 != original.sha256)):
                    raise DataLossError(f"the server's report says external file '{f.name}' is "
                                        "the input's, but its size or sha256 differs")
                out.append(ResultFile(f.name, f.size, f.sha256 or (original and original.sha256)
                                      or "", True, False,
                                      source=(folder, original) if original else None))
                continue
            if got is None:
                raise DataLossError(f"external file '{f.name}': the report lists it, the server "
                                    "did not send it")
            digest = got.sha.hexdigest()
            if got.size != f.size:
                raise DataLossError(f"external file '{f.name}': received {got.size} bytes, the "
                                    f"report announces {f.size}")
            if f.sha256 and digest != f.sha256:
                raise DataLossError(f"external file '{f.name}': the received bytes' sha256 "
                                    "differs from the report's")
            if original is not None and (original.size, original.sha256) == (got.size, digest):
                # A server that sends every file back: this one is the input's, unchanged.
                got.close()
                out.append(ResultFile(f.name, got.size, digest, True, True,
                                      source=(folder, original)))
                continue
            data = b"".join(got.parts) if self.keep_files and got.spool is None else None
            out.append(ResultFile(f.name, got.size, digest, False, True, data=data,
                                  spool=got.spool))
            got.spool = None  # owned by the ResultFile now
            got.parts = []
        return out

    def model_bytes(self):
        data = b"".join(self.parts)
        self.parts = []
        return data


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
    def _source(model=None, sha256=None, external_data_dir=None):
        """(input digest, hashed _Model or None) for lookup() and is_cached()."""
        if sha256 is not None:
            if not isinstance(sha256, str):
                raise InvalidArgumentError("sha256 must be a hex string")
            digest = sha256.lower()
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise InvalidArgumentError("sha256 must be 64 hex characters")
            return digest, None
        if model is None:
            raise TypeError("give a model (path or bytes) or sha256=")
        source = _Model(model, external_data_dir)
        return source.hash_files(), source

    @staticmethod
    def _check_result(model_bytes, report, source, digest):
        if len(model_bytes) != report.output_bytes:
            raise DataLossError(f"received {len(model_bytes)} model bytes, the report announces "
                                f"{report.output_bytes}")
        if report.output_sha256 and sha256_hex(model_bytes) != report.output_sha256:
            raise DataLossError("the received model's sha256 differs from the report's")
        if report.input_sha256 and report.input_sha256 != digest:
            # A server from before input digests keys a model with files by the model's own
            # sha256, and reports its files without sha256.
            older = (source is not None and report.external_files
                     and not report.external_files[0].sha256
                     and report.input_sha256 == source.sha256)
            if not older:
                raise DataLossError("the server answered for another model (input_sha256 differs)")

    # -- calls ------------------------------------------------------------------------------
    def optimize(self, model, level="O2", passes=None, verify=None, pass_options=None,
                 lookup_first=True, timeout=None, *, max_rounds=10, check=False,
                 external_data_dir=None, keep_external_files=True, progress=None,
                 chunk_bytes=CHUNK_BYTES, explain=None, calibration_data=None, target=None,
                 fix_dims=None, fix_shapes=None, gates=None, io_layout=None, **options):
        """Optimizes `model` (a path, or bytes) and returns a Result.

        External-data files are found in the model's tensors and read from its folder (or
        `external_data_dir`); a location leaving that folder is ExternalDataError. Each is
        hashed in blocks first: the input digest (model and files) keys the server's cache.
        With `lookup_first`, Lookup is asked for a cached result under that digest first; on a
        hit it is downloaded and nothing is uploaded (result.lookup_hit, result.uploaded_bytes
        == 0). Otherwise the model and its files are uploaded, streamed from disk in chunks.
        The answer holds the files the server wrote; the input's files it kept unchanged are
        not sent back (ResultFile.from_input), and Result.save copies them. With
        `keep_external_files=False` received files are checked and dropped. `timeout`
        (default: the client's) bounds the whole operation. `progress(upload: bool, done,
        total)` is called per chunk. `explain` ("PASS" or "PASS/RULE", or a list) asks why those
        rules did not rewrite: Result.explanations(). Lossy passes are kept only within their
        error gate (`passes()`: gate_max_rel, gate_min_cosine; Result.lossy_trials()).
        `calibration_data`: input sets ({input name: numpy array or TensorProto} dicts) lossy
        passes learn value ranges from. `target`: the runtime the result is for, "onnx"
        (default) or "onnxruntime[:X.Y]" (report.target says which it was optimized for).
        `fix_dims` ({"batch": 1}) and `fix_shapes` ({"x": [1, 3, 224, 224]}) make symbolic input
        dims static before the passes run, so the shape arithmetic that follows folds
        (Result.fixed_inputs()). `io_layout` ({"x": "NHWC"}: input or output name -> NHWC, NCHW,
        NWC, NCW, NDHWC or NCDHW) serves those values in that layout, the model computing in the
        counterpart; the Transposes this adds are moved inward by the passes (with the plain
        option layout_sensitive_ops=True also through Resize and global pools)
        (Result.layout_changes(), Result.transposes()). `gates` ({output: "KIND[:THRESHOLD]"}:
        detection, top1, top5, mask, values) sets how lossy passes are judged per output
        (pipeline_config). `options` are the plain options (None leaves one at its default), as
        the server's schema declares them:
{plain}"""
        if not 0 < chunk_bytes <= MAX_MESSAGE_BYTES - 4096:
            raise InvalidArgumentError(f"chunk_bytes must be in (0, {MAX_MESSAGE_BYTES - 4096}]")
        deadline = self._deadline(timeout)
        config = pipeline_config(level=level, passes=passes, pass_options=pass_options,
                                 verify=verify, max_rounds=max_rounds, check=check,
                                 explain=explain, calibration_data=calibration_data,
                                 target=target, fix_dims=fix_dims, fix_shapes=fix_shapes,
                                 gates=gates, io_layout=io_layout, **options)
        source = _Model(model, external_data_dir)
        source.hash_files()
        if lookup_first:
            found = self._lookup(source.digest, config, True, deadline, source,
                                 keep_external_files)
            if found is not None:
                return found
        return self._optimize(source, config, deadline, keep_external_files, progress,
                              chunk_bytes)

    def _optimize(self, source, config, deadline, keep_external_files, progress, chunk_bytes):
        start = graft_pb2.OptimizeStart(config=config, model_size=len(source.data),
                                        expected_sha256=source.sha256)
        for f in source.files:
            start.external_files.add(name=f.name, size=f.size, sha256=f.sha256)
        upload = _Upload(start, source, chunk_bytes, progress)
        call = self._stub.Optimize(iter(upload), timeout=self._remaining(deadline),
                                   metadata=((SHA256_METADATA, source.digest),))
        upload.call = call
        upload.call_ready.set()
        receiver = _Receiver(keep_external_files, progress)
        report = None
        bad = None
        try:
            try:
                for msg in call:
                    kind = msg.WhichOneof("kind")
                    if kind == "report":
                        report = msg.report
                    elif kind == "chunk":
                        try:
                            receiver.chunk(msg.chunk)
                        except GraftError as e:
                            bad = e
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
            model_bytes = receiver.model_bytes()
            self._check_result(model_bytes, report, source, source.digest)
            files = receiver.result_files(report, source)
        finally:
            receiver.close()
        return Result(model_bytes, report, files, upload.sent, False, source.digest, source.files)

    def _lookup(self, digest, config, return_result, deadline, source=None, keep_files=True):
        request = graft_pb2.LookupRequest(model_sha256=digest, config=config,
                                          return_result=return_result)
        cached = False
        receiver = _Receiver(keep_files)
        report = None
        try:
            try:
                call = self._stub.Lookup(request, timeout=self._remaining(deadline),
                                         metadata=((SHA256_METADATA, digest),))
                for msg in call:
                    kind = msg.WhichOneof("kind")
                    if kind == "cached":
                        cached = msg.cached
                    elif kind == "chunk":
                        try:
                            receiver.chunk(msg.chunk)
                        except GraftError:
                            call.cancel()
                            raise
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
            model_bytes = receiver.model_bytes()
            self._check_result(model_bytes, report, source, digest)
            files = receiver.result_files(report, source)
        finally:
            receiver.close()
        return Result(model_bytes, report, files, 0, True, digest,
                      source.files if source is not None else ())

    def lookup(self, model=None, level="O2", passes=None, verify=None, pass_options=None,
               timeout=None, *, sha256=None, max_rounds=10, check=False, external_data_dir=None,
               keep_external_files=True, target=None, fix_dims=None, fix_shapes=None,
               explain=None, gates=None, io_layout=None, **options):
        """The cached Result for `model` (path or bytes; its external-data files are hashed from
        its folder or `external_data_dir`) or for an input digest `sha256=` under this
        configuration (fix_dims, fix_shapes, io_layout, explain, gates and the plain options as
        optimize's), downloaded without an upload; None when the server has none. A Result found by `sha256=` knows no input files: its
        from_input files cannot be saved."""
        config = pipeline_config(level=level, passes=passes, pass_options=pass_options,
                                 verify=verify, max_rounds=max_rounds, check=check,
                                 target=target, fix_dims=fix_dims, fix_shapes=fix_shapes,
                                 explain=explain, gates=gates, io_layout=io_layout, **options)
        digest, source = self._source(model, sha256, external_data_dir)
        return self._lookup(digest, config, True, self._deadline(timeout), source,
                            keep_external_files)

    def is_cached(self, model=None, level="O2", passes=None, verify=None, pass_options=None,
                  timeout=None, *, sha256=None, max_rounds=10, check=False,
                  external_data_dir=None, target=None, fix_dims=None, fix_shapes=None,
                  explain=None, gates=None, io_layout=None, **options):
        """Whether the server has a cached result for the model (or input digest) and
        configuration (fix_dims, fix_shapes, io_layout, explain, gates and the plain options as
        optimize's)."""
        config = pipeline_config(level=level, passes=passes, pass_options=pass_options,
                                 verify=verify, max_rounds=max_rounds, check=check,
                                 target=target, fix_dims=fix_dims, fix_shapes=fix_shapes,
                                 explain=explain, gates=gates, io_layout=io_layout, **options)
        digest, _ = self._source(model, sha256, external_data_dir)
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


Client.optimize.__doc__ = Client.optimize.__doc__.replace("{plain}", plain_options_doc())

__all__ = ["Client", "Result", "ResultFile", "TlsConfig", "GraftError", "CHUNK_BYTES",
           "KEEP_IN_MEMORY_BYTES", "SHA256_METADATA", "input_digest", "model_digest",
           "sha256_hex", "write_atomically"]
