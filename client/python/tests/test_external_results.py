"""Models with external data under the input-digest protocol: the digest, hashing in blocks,
lookup-first, from_input files, what Result.save writes, and the checks of an answer. These run
against the in-process fake server (fakes.py) and need no graftd; the end-to-end tests at the
end need a graftd that reports external files' sha256, and are skipped by a server without."""

import errno
import hashlib
import os

import grpc
import onnx
import pytest

import graft_client
import graft_client.client as client_module
import graft_client.external as external_module
from fakes import as_lookup, chunk, report, sha
from graft_client import graft_pb2
from models import conv_bn_model, external_model

# tests/cache/digest_test.cc, InputDigestTest: the same text, the same value.
REFERENCE = "b70c09e704dc7b406b6751ce810f18300a7ecc291ee4788492089b130b35d453"


def test_input_digest_matches_the_cpp_reference():
    model = sha(b"abc")
    files = [("w/b.bin", 3, sha(b"xyz")), ("a.bin", 2, sha(b"hi"))]
    assert graft_client.input_digest(model, files) == REFERENCE
    assert graft_client.input_digest(model, list(reversed(files))) == REFERENCE
    protos = [graft_pb2.ExternalFile(name=n, size=s, sha256=d) for n, s, d in files]
    assert graft_client.input_digest(model, protos) == REFERENCE
    # The documented text, spelt out.
    text = (f"graft-input-v1\n{model}\n5:a.bin 2 {sha(b'hi')}\n"
            f"7:w/b.bin 3 {sha(b'xyz')}\n").encode()
    assert hashlib.sha256(text).hexdigest() == REFERENCE


def test_input_digest_without_files_is_the_model_digest_and_covers_every_field():
    model = sha(b"abc")
    assert graft_client.input_digest(model, []) == model
    base = graft_client.input_digest(model, [("a.bin", 2, sha(b"hi"))])
    for changed in ([("b.bin", 2, sha(b"hi"))], [("a.bin", 3, sha(b"hi"))],
                    [("a.bin", 2, sha(b"ho"))]):
        assert graft_client.input_digest(model, changed) != base
    assert graft_client.input_digest(sha(b"abd"), [("a.bin", 2, sha(b"hi"))]) != base


def test_input_digest_counts_utf8_bytes_and_sorts_by_bytes():
    model = sha(b"abc")
    files = [("\u00e9.bin", 1, sha(b"1")), ("z.bin", 1, sha(b"2")), ("Z.bin", 1, sha(b"3"))]
    # "é" is two bytes (0xc3 0xa9): the name is 6 bytes long and sorts after "z" and "Z".
    text = (f"graft-input-v1\n{model}\n5:Z.bin 1 {sha(b'3')}\n5:z.bin 1 {sha(b'2')}\n"
            f"6:\u00e9.bin 1 {sha(b'1')}\n").encode("utf-8")
    assert graft_client.input_digest(model, files) == hashlib.sha256(text).hexdigest()


class Reads:
    """Wraps open_beneath: records every read's size, refuses unbounded reads."""

    def __init__(self, monkeypatch):
        self.sizes = []
        real = client_module.open_beneath
        reads = self

        class Recording:
            def __init__(self, f):
                self.f = f

            def fileno(self):
                return self.f.fileno()

            def read(self, n=-1):
                assert n is not None and n >= 0, "an external file was read whole"
                reads.sizes.append(n)
                return self.f.read(n)

            def readinto(self, buffer):
                reads.sizes.append(len(buffer))
                return self.f.readinto(buffer)

            def close(self):
                self.f.close()

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

        monkeypatch.setattr(client_module, "open_beneath",
                            lambda folder, name: Recording(real(folder, name)))


def test_model_digest_hashes_each_file_in_blocks(tmp_path, monkeypatch):
    path, model, weights = external_model(tmp_path, seed=501, location="w/weights.bin")
    expected = graft_client.input_digest(sha(model), [("w/weights.bin", len(weights),
                                                       sha(weights))])
    reads = Reads(monkeypatch)
    source = client_module._Model(path, None)
    assert source.hash_files(block_bytes=100) == expected
    assert reads.sizes and max(reads.sizes) == 100
    assert graft_client.model_digest(path) == expected
    assert graft_client.model_digest(model, external_data_dir=tmp_path) == expected
    with pytest.raises(graft_client.InvalidArgumentError, match="external_data_dir"):
        graft_client.model_digest(model)
    plain = conv_bn_model(seed=502).SerializeToString()
    assert graft_client.model_digest(plain) == sha(plain)


def test_upload_sends_digests_and_streams_files_in_chunks(tmp_path, fake_server, monkeypatch):
    path, model, weights = external_model(tmp_path, seed=503)
    out = b"optimized"
    digest = graft_client.input_digest(sha(model), [("weights.bin", len(weights), sha(weights))])
    fake, target = fake_server(lambda: [chunk(out), report(out, input_sha256=digest,
                                                           external_files=[graft_pb2.ExternalFile(
                                                               name="weights.bin",
                                                               size=len(weights),
                                                               sha256=sha(weights),
                                                               from_input=True)])])
    reads = Reads(monkeypatch)
    with graft_client.Client(target, timeout=10) as c:
        result = c.optimize(path, chunk_bytes=64)
    # Lookup first, under the input digest; then the upload with each file's sha256.
    assert [r.model_sha256 for r in fake.lookups] == [digest]
    assert fake.metadata["Lookup"][graft_client.SHA256_METADATA] == digest
    assert fake.metadata["Optimize"][graft_client.SHA256_METADATA] == digest
    [start] = fake.starts
    assert start.expected_sha256 == sha(model)
    assert [(f.name, f.size, f.sha256) for f in start.external_files] == [
        ("weights.bin", len(weights), sha(weights))]
    assert fake.uploads == [{"": model, "weights.bin": weights}]
    # Hashed in CHUNK_BYTES blocks, sent in 64-byte reads: never a whole file.
    assert max(reads.sizes) <= graft_client.CHUNK_BYTES
    assert 64 in reads.sizes
    assert result.input_sha256 == digest and result.uploaded_bytes == len(model) + len(weights)
    [f] = result.external_files
    assert f.from_input and not f.received and f.kept


def new_file_answer(model, weights, new=b"new weights!", out=b"optimized model", **overrides):
    """A new-protocol answer: the model, then one file the server wrote ("new.bin"); the
    input's "weights.bin" listed as from_input. `overrides` replace report entries."""
    digest = graft_client.input_digest(sha(model), [("weights.bin", len(weights), sha(weights))])
    files = [graft_pb2.ExternalFile(name="weights.bin", size=len(weights), sha256=sha(weights),
                                    from_input=True),
             graft_pb2.ExternalFile(name="new.bin", size=len(new), sha256=sha(new))]
    return [chunk(out), chunk(new[:5], "new.bin"), chunk(new[5:], "new.bin"),
            report(out, input_sha256=digest, cache_hit=True,
                   external_files=overrides.get("files", files))]


def test_lookup_hit_with_external_data_downloads_only_the_result(tmp_path, fake_server):
    path, model, weights = external_model(tmp_path / "src", seed=504)
    answer = new_file_answer(model, weights)
    fake, target = fake_server(lambda: pytest.fail("uploaded despite a lookup hit"),
                               lambda: as_lookup(answer))
    with graft_client.Client(target, timeout=10) as c:
        result = c.optimize(path)
    assert result.lookup_hit and result.uploaded_bytes == 0 and fake.starts == []
    assert result.model_bytes == b"optimized model"
    got = {f.name: f for f in result.external_files}
    assert got["weights.bin"].from_input and not got["weights.bin"].received
    assert not got["new.bin"].from_input and got["new.bin"].received
    assert got["new.bin"].read() == b"new weights!"
    assert got["new.bin"].sha256 == sha(b"new weights!")

    # Saved elsewhere: the input's file is copied, the new one written, the model last.
    out = tmp_path / "out" / "model.onnx"
    out.parent.mkdir()
    result.save(out)
    assert out.read_bytes() == b"optimized model"
    assert (out.parent / "weights.bin").read_bytes() == weights
    assert (out.parent / "new.bin").read_bytes() == b"new weights!"
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.onnx", "new.bin",
                                                            "weights.bin"]

    # Saved beside the input: its file is that very file, left alone.
    before = os.stat(tmp_path / "src" / "weights.bin")
    result.save(tmp_path / "src" / "model.optimized.onnx")
    after = os.stat(tmp_path / "src" / "weights.bin")
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert (tmp_path / "src" / "new.bin").read_bytes() == b"new weights!"

    # By digest alone the input's files are unknown: only the model (and new files) can be saved.
    with graft_client.Client(target, timeout=10) as c:
        by_digest = c.lookup(sha256=result.input_sha256)
    assert by_digest.lookup_hit
    with pytest.raises(graft_client.InvalidArgumentError, match="weights.bin"):
        by_digest.save(tmp_path / "elsewhere.onnx")
    assert not (tmp_path / "elsewhere.onnx").exists() and not (tmp_path / "new.bin").exists()
    by_digest.save(tmp_path / "elsewhere.onnx", external_files=False)
    assert (tmp_path / "elsewhere.onnx").read_bytes() == b"optimized model"


def test_the_input_file_is_copied_by_the_kernel_or_in_blocks(tmp_path, monkeypatch):
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 << 20 | 123))
    data = src.read_bytes()
    for broken in (None, "copy_file_range", "sendfile"):
        if broken:
            def refuse(*args, **kwargs):
                raise OSError(errno.EXDEV, "not here")
            monkeypatch.setattr(os, broken, refuse)
        dst = tmp_path / f"dst-{broken}.bin"
        with open(src, "rb") as f, open(dst, "wb") as g:
            assert external_module.copy_fd(f.fileno(), g.fileno(), len(data)) == len(data)
        assert dst.read_bytes() == data
    with open(src, "rb") as f, open(tmp_path / "short.bin", "wb") as g:
        assert external_module.copy_fd(f.fileno(), g.fileno(), len(data) + 10) == len(data)


def test_large_received_files_are_spooled_to_a_temporary_file(tmp_path, fake_server,
                                                              monkeypatch):
    monkeypatch.setattr(client_module, "KEEP_IN_MEMORY_BYTES", 8)
    path, model, weights = external_model(tmp_path / "src", seed=505)
    new = os.urandom(100_000)
    answer = new_file_answer(model, weights, new=new)
    _, target = fake_server(lambda: answer)
    with graft_client.Client(target, timeout=10) as c:
        with c.optimize(path, lookup_first=False) as result:
            [f] = [f for f in result.external_files if f.name == "new.bin"]
            assert f._data is None and f._spool is not None  # not in memory
            assert f.read() == new
            (tmp_path / "out").mkdir()
            result.save(tmp_path / "out" / "model.onnx")
            assert (tmp_path / "out" / "new.bin").read_bytes() == new
        assert f._spool is None  # closed with the result


def test_keep_external_files_false_drops_received_bytes(tmp_path, fake_server):
    path, model, weights = external_model(tmp_path / "src", seed=506)
    answer = new_file_answer(model, weights)
    _, target = fake_server(lambda: answer)
    with graft_client.Client(target, timeout=10) as c:
        result = c.optimize(path, lookup_first=False, keep_external_files=False)
    kept = {f.name: f.kept for f in result.external_files}
    assert kept == {"weights.bin": True, "new.bin": False}  # checked, but not kept
    out = tmp_path / "out.onnx"
    with pytest.raises(graft_client.InvalidArgumentError, match="not kept"):
        result.save(out)
    assert not out.exists() and not (tmp_path / "weights.bin").exists()
    result.save(out, external_files=False)
    assert out.read_bytes() == b"optimized model"


def test_files_an_older_server_sends_back_unchanged_count_as_the_inputs(tmp_path, fake_server):
    """A server from before from_input sends every file back, without sha256, and keys the
    result by the model's sha256: accepted, and identical files are not written again."""
    path, model, weights = external_model(tmp_path, seed=507)
    out = b"optimized"
    _, target = fake_server(lambda: [
        chunk(out), chunk(weights, "weights.bin"),
        report(out, input_sha256=sha(model),
               external_files=[graft_pb2.ExternalFile(name="weights.bin", size=len(weights))])])
    with graft_client.Client(target, timeout=10) as c:
        result = c.optimize(path)
    [f] = result.external_files
    assert f.from_input and f.received and f.sha256 == sha(weights)
    before = os.stat(tmp_path / "weights.bin")
    result.save(tmp_path / "model.optimized.onnx")
    assert os.stat(tmp_path / "weights.bin").st_ino == before.st_ino
    # Another model's digest is still refused.
    _, target = fake_server(lambda: [
        chunk(out), chunk(weights, "weights.bin"),
        report(out, input_sha256=sha(b"another model"),
               external_files=[graft_pb2.ExternalFile(name="weights.bin", size=len(weights))])])
    with graft_client.Client(target, timeout=10) as c:
        with pytest.raises(graft_client.DataLossError, match="another model"):
            c.optimize(path)


def test_a_file_the_server_wrote_never_replaces_an_input_file(tmp_path, fake_server):
    path, model, weights = external_model(tmp_path / "src", seed=508)
    rewritten = b"x" * len(weights)
    out = b"optimized"
    digest = graft_client.input_digest(sha(model), [("weights.bin", len(weights), sha(weights))])
    _, target = fake_server(lambda: [
        chunk(out), chunk(rewritten, "weights.bin"),
        report(out, input_sha256=digest, external_files=[graft_pb2.ExternalFile(
            name="weights.bin", size=len(rewritten), sha256=sha(rewritten))])])
    with graft_client.Client(target, timeout=10) as c:
        result = c.optimize(path)
    [f] = result.external_files
    assert not f.from_input and f.read() == rewritten
    with pytest.raises(graft_client.ExternalDataError, match="input model"):
        result.save(tmp_path / "src" / "model.optimized.onnx")
    assert (tmp_path / "src" / "weights.bin").read_bytes() == weights
    assert not (tmp_path / "src" / "model.optimized.onnx").exists()
    result.save(tmp_path / "model.onnx")
    assert (tmp_path / "weights.bin").read_bytes() == rewritten


def test_an_input_file_changed_after_optimizing_is_not_copied(tmp_path, fake_server):
    path, model, weights = external_model(tmp_path / "src", seed=509)
    answer = new_file_answer(model, weights)
    _, target = fake_server(lambda: answer)
    with graft_client.Client(target, timeout=10) as c:
        result = c.optimize(path, lookup_first=False)
    (tmp_path / "src" / "weights.bin").write_bytes(b"changed")
    (tmp_path / "out").mkdir()
    with pytest.raises(graft_client.DataLossError, match="changed since"):
        result.save(tmp_path / "out" / "model.onnx")
    assert list((tmp_path / "out").iterdir()) == []  # checked before anything is written


def test_every_name_is_checked_before_anything_is_written(tmp_path):
    files = [client_module.ResultFile("good.bin", 1, sha(b"g"), False, True, data=b"g"),
             client_module.ResultFile("../evil.bin", 1, sha(b"e"), False, True, data=b"e")]
    result = client_module.Result(b"model", graft_pb2.OptimizeReport(), files, 0, False, "")
    (tmp_path / "out").mkdir()
    with pytest.raises(graft_client.ExternalDataError, match="may not leave"):
        result.save(tmp_path / "out" / "model.onnx")
    assert list((tmp_path / "out").iterdir()) == []
    assert not (tmp_path / "evil.bin").exists()


def ef(name, size, digest="", from_input=False):
    return graft_pb2.ExternalFile(name=name, size=size, sha256=digest, from_input=from_input)


NEW = b"new weights!"


@pytest.mark.parametrize("case, error, text", [
    ("size", graft_client.DataLossError, "received 12 bytes, the report announces 13"),
    ("sha256", graft_client.DataLossError, "sha256 differs"),
    ("not sent", graft_client.DataLossError, "did not send it"),
    ("not listed", graft_client.DataLossError, "does not list"),
    ("twice", graft_client.DataLossError, "twice"),
    ("bad chunk name", graft_client.ExternalDataError, "may not leave"),
    ("bad report name", graft_client.ExternalDataError, "absolute path"),
    ("from_input unknown", graft_client.DataLossError, "no such file"),
    ("from_input differs", graft_client.DataLossError, "size or sha256 differs"),
    ("from_input sent", graft_client.DataLossError, "although"),
])
def test_answers_inconsistent_with_the_report_are_refused(tmp_path, fake_server, case, error,
                                                          text):
    path, model, weights = external_model(tmp_path, seed=510)
    out = b"optimized"
    digest = graft_client.input_digest(sha(model), [("weights.bin", len(weights), sha(weights))])
    mine = ef("weights.bin", len(weights), sha(weights), True)
    new = ef("new.bin", len(NEW), sha(NEW))
    chunks, files = [chunk(NEW, "new.bin")], [mine, new]
    if case == "size":
        files = [mine, ef("new.bin", len(NEW) + 1, sha(NEW))]
    elif case == "sha256":
        files = [mine, ef("new.bin", len(NEW), sha(b"other"))]
    elif case == "not sent":
        chunks = []
    elif case == "not listed":
        files = [mine]
    elif case == "twice":
        chunks = [chunk(NEW, "new.bin"), chunk(b"x", "other.bin"), chunk(NEW, "new.bin")]
    elif case == "bad chunk name":
        chunks = [chunk(NEW, "../new.bin")]
    elif case == "bad report name":
        files = [mine, new, ef("/etc/passwd", 1, sha(b"x"))]
    elif case == "from_input unknown":
        files = [mine, new, ef("nowhere.bin", 1, sha(b"x"), True)]
    elif case == "from_input differs":
        files = [ef("weights.bin", len(weights), sha(b"other"), True), new]
    elif case == "from_input sent":
        chunks = [chunk(NEW, "new.bin"), chunk(weights, "weights.bin")]
    _, target = fake_server(lambda: [chunk(out), *chunks,
                                     report(out, input_sha256=digest, external_files=files)])
    with graft_client.Client(target, timeout=10) as c:
        with pytest.raises(error, match=text):
            c.optimize(path, lookup_first=False)
        # The same answer from Lookup is refused the same way.
        _, lookup_target = fake_server(
            lambda: pytest.fail("uploaded"),
            lambda: as_lookup([chunk(out), *chunks,
                               report(out, input_sha256=digest, external_files=files)]))
    with graft_client.Client(lookup_target, timeout=10) as c:
        with pytest.raises(error, match=text):
            c.optimize(path)


# --- End to end: needs a graftd with the input-digest protocol -------------------------------


def test_e2e_external_data_report_and_lookup_hit(input_digest_server, client, tmp_path):
    path, model, weights = external_model(tmp_path / "src", seed=511, pinned=True)
    first = client.optimize(path)
    assert not first.lookup_hit
    digest = graft_client.input_digest(sha(model), [("weights.bin", len(weights), sha(weights))])
    assert first.input_sha256 == digest == first.report.input_sha256
    # The pinned tensor keeps the input's file referenced, unchanged: listed, not sent back.
    # Whatever else the report lists (weights the passes rewrote) was sent, with its sha256.
    listed = {f.name: f for f in first.report.external_files}
    f = listed["weights.bin"]
    assert (f.size, f.sha256, f.from_input) == (len(weights), sha(weights), True)
    assert all(f.sha256 for f in listed.values())
    for rf in first.external_files:
        assert rf.received == (not rf.from_input) and rf.sha256 == listed[rf.name].sha256

    second = client.optimize(path)
    assert second.lookup_hit and second.cache_hit and second.uploaded_bytes == 0
    assert second.model_bytes == first.model_bytes
    assert client.is_cached(path)
    out = tmp_path / "out" / "model.onnx"
    out.parent.mkdir()
    second.save(out)
    assert (out.parent / "weights.bin").read_bytes() == weights
    for rf in second.external_files:
        assert sha((out.parent / rf.name).read_bytes()) == rf.sha256
    onnx.checker.check_model(str(out))
    loaded = onnx.load(str(out))  # reads every external file back
    assert "pinned" in [t.name for t in loaded.graph.initializer]

    # Other weights are another input: a miss.
    changed = bytearray(weights)
    changed[-1] ^= 1
    (tmp_path / "src" / "weights.bin").write_bytes(bytes(changed))
    assert not client.is_cached(path)


def test_e2e_the_server_checks_the_files_sha256(input_digest_server, client, tmp_path):
    path, model, weights = external_model(tmp_path, seed=512)

    def change_after_hashing(upload, done, total):
        if upload and done == len(model):  # the model is sent, its file not yet
            changed = bytearray(weights)
            changed[0] ^= 1
            (tmp_path / "weights.bin").write_bytes(bytes(changed))

    with pytest.raises(graft_client.InvalidArgumentError) as e:
        client.optimize(path, lookup_first=False, progress=change_after_hashing)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
