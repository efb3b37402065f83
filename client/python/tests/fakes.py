"""An in-process fake graftd: records what the client sends and answers as a test says, so the
client's handling of answers (hostile ones too) is tested without the real server."""

import hashlib
from concurrent import futures

import grpc

from graft_client import graft_pb2
from graft_client._stubs import graft_pb2_grpc


class FakeGraft(graft_pb2_grpc.GraftServicer):
    """`answer()`: the OptimizeResponses of every Optimize call; `lookup_answer()`: the
    LookupResponses of every Lookup call (default: not cached)."""

    def __init__(self, answer, lookup_answer=None):
        self.answer = answer
        self.lookup_answer = lookup_answer
        self.metadata = {}
        self.lookups = []   # LookupRequests
        self.starts = []    # OptimizeStarts
        self.uploads = []   # {file name ("" for the model): bytes} per Optimize call

    def Lookup(self, request, context):
        self.metadata["Lookup"] = dict(context.invocation_metadata())
        self.lookups.append(request)
        if self.lookup_answer is None:
            yield graft_pb2.LookupResponse(cached=False)
        else:
            yield from self.lookup_answer()

    def Optimize(self, request_iterator, context):
        self.metadata["Optimize"] = dict(context.invocation_metadata())
        upload = {}
        for request in request_iterator:
            if request.WhichOneof("kind") == "start":
                self.starts.append(request.start)
            else:
                name = request.chunk.file
                upload[name] = upload.get(name, b"") + request.chunk.data
        self.uploads.append(upload)
        yield from self.answer()


def start_fake(answer, lookup_answer=None):
    """(server, FakeGraft, "127.0.0.1:port")."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    fake = FakeGraft(answer, lookup_answer)
    graft_pb2_grpc.add_GraftServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, fake, f"127.0.0.1:{port}"


def sha(data):
    return hashlib.sha256(data).hexdigest()


def chunk(data, file=""):
    return graft_pb2.OptimizeResponse(chunk=graft_pb2.Chunk(data=data, file=file))


def report(data, **fields):
    return graft_pb2.OptimizeResponse(report=graft_pb2.OptimizeReport(
        output_bytes=len(data), output_sha256=sha(data), **fields))


def as_lookup(responses):
    """OptimizeResponses as the LookupResponses of a hit."""
    out = [graft_pb2.LookupResponse(cached=True)]
    for r in responses:
        if r.WhichOneof("kind") == "chunk":
            out.append(graft_pb2.LookupResponse(chunk=r.chunk))
        else:
            out.append(graft_pb2.LookupResponse(report=r.report))
    return out
