"""ONNX external-data files: which ones a model references, and reading and writing them without
leaving the model's folder.

The rule is Graft's one rule for locations (core/paths/beneath.h), applied by the server, the
C++ CLI and this client alike: a location is a relative, normalised path (no empty, "." or ".."
component, no backslash or control character, at most 4095 bytes, components of at most 255),
and every component below the folder is opened with O_NOFOLLOW, so no symbolic link is followed
and no check can be raced.
"""

import errno
import itertools
import os
import stat
import threading

from .errors import ExternalDataError, InvalidModelError

MAX_LOCATION_BYTES = 4095
MAX_COMPONENT_BYTES = 255
_MAX_SHOWN_BYTES = 200
# protobuf's default recursion limit: the server's parser refuses deeper models too.
_MAX_DEPTH = 100
_counter = itertools.count()


def shown_location(name):
    """`name` (str or bytes) as error messages quote it: escaped, cut after 200 bytes."""
    raw = name.encode("utf-8", "surrogateescape") if isinstance(name, str) else bytes(name)
    head = raw[:_MAX_SHOWN_BYTES]
    out = "".join(chr(b) if 0x20 <= b < 0x7F and b not in (0x22, 0x27, 0x5C) else f"\\{b:03o}"
                  for b in head)
    return out + ("..." if len(raw) > _MAX_SHOWN_BYTES else "")


def _invalid(name, why):
    return ExternalDataError(f"invalid external data location '{shown_location(name)}': {why}")


def check_location(name):
    """Raises ExternalDataError unless `name` (str or bytes) obeys the location rule; returns it
    as str (locations travel in the API as UTF-8 strings)."""
    raw = name.encode("utf-8", "surrogateescape") if isinstance(name, str) else bytes(name)
    if not raw:
        raise _invalid(raw, "empty")
    if len(raw) > MAX_LOCATION_BYTES:
        raise _invalid(raw, f"longer than {MAX_LOCATION_BYTES} bytes")
    if raw.startswith(b"/"):
        raise _invalid(raw, "an absolute path (locations are relative to the model's folder)")
    for b in raw:
        if b < 0x20 or b == 0x7F:
            raise _invalid(raw, "contains a control character")
        if b == 0x5C:
            raise _invalid(raw, "contains a backslash")
    for part in raw.split(b"/"):
        if not part:
            raise _invalid(raw, "an empty path component ('//' or a trailing '/')")
        if part == b".":
            raise _invalid(raw, "a '.' component (not a normalised path)")
        if part == b"..":
            raise _invalid(raw, "a '..' component (locations may not leave the folder)")
        if len(part) > MAX_COMPONENT_BYTES:
            raise _invalid(raw, f"a component longer than {MAX_COMPONENT_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid(raw, "not valid UTF-8") from None


# --- Finding the locations: a scan of the protobuf wire format -------------------------------
# Only the messages that can hold tensors are entered (field numbers from onnx.proto), so the
# client needs neither the onnx package nor a full parse; everything else is skipped by length.


class _Malformed(Exception):
    pass


def _varint(buf, pos, end):
    result = 0
    shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed()
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf, pos, end, depth=0):
    """Yields (field number, wire type, value) of a message; length-delimited values are
    (start, end) ranges, groups are skipped."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise _Malformed()
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield field, wire, value
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            if length > end - pos:
                raise _Malformed()
            yield field, wire, (pos, pos + length)
            pos += length
        elif wire == 3:
            pos = _skip_group(buf, pos, end, field, depth + 1)
        else:
            raise _Malformed()
        if pos > end:
            raise _Malformed()


def _skip_group(buf, pos, end, number, depth):
    if depth > _MAX_DEPTH:
        raise _Malformed()
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if wire == 4:
            if field != number:
                raise _Malformed()
            return pos
        if wire == 0:
            _, pos = _varint(buf, pos, end)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            pos += length
        elif wire == 3:
            pos = _skip_group(buf, pos, end, field, depth + 1)
        else:
            raise _Malformed()
        if pos > end:
            raise _Malformed()
    raise _Malformed()


def _check_depth(depth):
    if depth > _MAX_DEPTH:
        raise _Malformed()


def _tensor(buf, start, end, depth, out):
    _check_depth(depth)
    external = False
    locations = []
    for field, wire, value in _fields(buf, start, end, depth):
        if field == 14 and wire == 0:  # data_location
            external = value == 1  # EXTERNAL
        elif field == 13 and wire == 2:  # external_data: StringStringEntryProto
            key = val = None
            for f, w, v in _fields(buf, value[0], value[1], depth + 1):
                if w == 2 and f == 1:
                    key = bytes(buf[v[0]:v[1]])
                elif w == 2 and f == 2:
                    val = bytes(buf[v[0]:v[1]])
            if key == b"location" and val is not None:
                locations.append(val)
    if external:
        out.extend(locations)


def _sparse_tensor(buf, start, end, depth, out):
    _check_depth(depth)
    for field, wire, value in _fields(buf, start, end, depth):
        if wire == 2 and field in (1, 2):  # values, indices
            _tensor(buf, value[0], value[1], depth + 1, out)


def _graph(buf, start, end, depth, out):
    _check_depth(depth)
    for field, wire, value in _fields(buf, start, end, depth):
        if wire != 2:
            continue
        if field == 1:  # node
            _node(buf, value[0], value[1], depth + 1, out)
        elif field == 5:  # initializer
            _tensor(buf, value[0], value[1], depth + 1, out)
        elif field == 15:  # sparse_initializer
            _sparse_tensor(buf, value[0], value[1], depth + 1, out)


def _node(buf, start, end, depth, out):
    _check_depth(depth)
    for field, wire, value in _fields(buf, start, end, depth):
        if field == 5 and wire == 2:  # attribute
            _attribute(buf, value[0], value[1], depth + 1, out)


def _attribute(buf, start, end, depth, out):
    _check_depth(depth)
    for field, wire, value in _fields(buf, start, end, depth):
        if wire != 2:
            continue
        if field in (5, 10):  # t, tensors
            _tensor(buf, value[0], value[1], depth + 1, out)
        elif field in (6, 11):  # g, graphs
            _graph(buf, value[0], value[1], depth + 1, out)
        elif field in (22, 23):  # sparse_tensor, sparse_tensors
            _sparse_tensor(buf, value[0], value[1], depth + 1, out)


def _function(buf, start, end, depth, out):
    _check_depth(depth)
    for field, wire, value in _fields(buf, start, end, depth):
        if field == 7 and wire == 2:  # node
            _node(buf, value[0], value[1], depth + 1, out)


def external_locations(model):
    """The external-data locations (str, checked, sorted, unique) that the tensors of a
    serialized ModelProto reference: initializers, sparse initializers and tensor attributes in
    the main graph, its subgraphs and model-local functions. Raises InvalidModelError when the
    bytes are not a protobuf message, ExternalDataError for a location that breaks the rule."""
    data = model if isinstance(model, (bytes, bytearray)) else bytes(model)
    # Without the word no tensor can name a location: skip the scan, as the C++ CLI does.
    if data.find(b"location") < 0:
        return []
    buf = memoryview(data)
    found = []
    try:
        for field, wire, value in _fields(buf, 0, len(buf)):
            if wire != 2:
                continue
            if field == 7:  # graph
                _graph(buf, value[0], value[1], 1, found)
            elif field == 25:  # functions
                _function(buf, value[0], value[1], 1, found)
    except _Malformed:
        raise InvalidModelError("invalid model: not a serialized ONNX ModelProto") from None
    return sorted({check_location(name) for name in found})


# --- Reading and writing beneath a folder ----------------------------------------------------


def _open_error(dir_fd, name, component, prefix, folder, err):
    try:
        st = os.stat(component, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            return _invalid(name, f"'{shown_location(prefix)}' is a symbolic link (not followed)")
    except OSError:
        pass
    return OSError(err.errno, f"external data location '{shown_location(name)}': cannot open "
                   f"'{os.path.join(folder, prefix)}': {err.strerror}")


def _open_folders(folder, name, parts, create):
    root = folder or "."
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    prefix = ""
    for i, part in enumerate(parts[:-1]):
        prefix = part if i == 0 else f"{prefix}/{part}"
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            try:
                next_fd = os.open(part, flags, dir_fd=dir_fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o777, dir_fd=dir_fd)
                except FileExistsError:
                    pass
                next_fd = os.open(part, flags, dir_fd=dir_fd)
        except OSError as e:
            error = _open_error(dir_fd, name, part, prefix, root, e)
            os.close(dir_fd)
            raise error from None
        os.close(dir_fd)
        dir_fd = next_fd
    return dir_fd


def open_beneath(folder, name):
    """Opens `folder`/`name` for reading (a binary file object) by the location rule: below
    `folder` no component may be a symbolic link and the last must be a regular file
    (ExternalDataError otherwise); OSError when it cannot be opened."""
    name = check_location(name)
    parts = name.split("/")
    dir_fd = _open_folders(folder, name, parts, create=False)
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=dir_fd)
        except OSError as e:
            raise _open_error(dir_fd, name, parts[-1], name, folder or ".", e) from None
    finally:
        os.close(dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _invalid(name, "not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_beneath(folder, name):
    with open_beneath(folder, name) as f:
        return f.read()


def copy_fd(src_fd, dst_fd, size):
    """Copies the first `size` bytes of `src_fd` to `dst_fd` (at its position) in the kernel:
    copy_file_range, else sendfile, else 1 MiB reads; never the whole file in memory. Returns
    the bytes copied, fewer when the source is shorter."""
    done = 0
    for kernel_copy in (_copy_file_range, _sendfile):
        try:
            while done < size:
                n = kernel_copy(src_fd, dst_fd, size - done, done)
                if n == 0:
                    return done
                done += n
            return done
        except (OSError, AttributeError) as e:
            # Not supported here (another file system, an old kernel): try the next way from
            # where this one stopped. A real I/O error is raised by the last way too.
            if isinstance(e, OSError) and e.errno not in _NO_KERNEL_COPY:
                raise
    while done < size:
        data = os.pread(src_fd, min(1 << 20, size - done), done)
        if not data:
            break
        view = memoryview(data)
        while view:
            view = view[os.write(dst_fd, view):]
        done += len(data)
    return done


_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP,
                   errno.EPERM, errno.EBADF}


def _copy_file_range(src_fd, dst_fd, count, offset):
    return os.copy_file_range(src_fd, dst_fd, min(count, 1 << 30), offset_src=offset)


def _sendfile(src_fd, dst_fd, count, offset):
    return os.sendfile(dst_fd, src_fd, offset, min(count, 1 << 30))


def write_beneath(folder, name, data=None, *, fill=None, same_as=None, protect=()):
    """Writes `folder`/`name` atomically (a temporary file renamed over it), creating folders,
    refusing symbolic links and non-regular files (ExternalDataError). The content is `data`
    (bytes), or what `fill(file)` writes into the open binary file. When the file already there
    is `same_as` (an os.stat_result: same device and inode), nothing is written and False is
    returned; when it is one of `protect` ((st_dev, st_ino) pairs), ExternalDataError.
    Returns True when written."""
    name = check_location(name)
    parts = name.split("/")
    dir_fd = _open_folders(folder, name, parts, create=True)
    try:
        last = parts[-1]
        try:
            st = os.stat(last, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise _invalid(name, f"'{shown_location(name)}' is a symbolic link (not followed)")
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise _invalid(name, "exists and is not a regular file")
        if st is not None and same_as is not None and (st.st_dev, st.st_ino) == (
                same_as.st_dev, same_as.st_ino):
            return False
        if st is not None and (st.st_dev, st.st_ino) in protect:
            raise _invalid(name, "is an external-data file of the input model (not overwritten: "
                           "save the result in another folder)")
        tmp = f".graft-tmp-{os.getpid()}-{threading.get_ident():x}-{next(_counter)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o666, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as f:
                if fill is not None:
                    fill(f)
                else:
                    f.write(data)
            os.rename(tmp, last, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            raise
    finally:
        os.close(dir_fd)
    return True
