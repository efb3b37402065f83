#!/usr/bin/python3
"""Model-registry hook: optimizes new model versions with graftd.

For every model given (a .onnx file, or a folder searched recursively for *.onnx), writes
<name>.optimized.onnx and <name>.graft.json (the report, with the input's sha256 and the
configuration) beside it. A model whose outputs exist, whose recorded input digest and
configuration match and whose optimized file is intact is skipped, so the hook can run again on
the same folder (a CI job, a webhook retried): only new or changed models are sent. Models with
external-data files keep referring to the files beside them: the input digest recorded covers
them, the files the result shares with the input stay as they are, and files the server wrote
(new weights) are written beside the model too (never over one of the input's files) and
recorded, so a damaged one is redone.

Exit codes: 0 every model optimized or up to date; 1 at least one model failed (the others were
still processed); 2 bad arguments, a path that does not exist, or unusable TLS files; 3 the
server is unreachable (the run stops at the first such failure).

    registry_hook.py --target graftd:50051 --level O2 /registry/models/resnet/
"""

import argparse
import hashlib
import json
import os
import sys

import graft_client

OPTIMIZED_SUFFIX = ".optimized.onnx"
REPORT_SUFFIX = ".graft.json"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def env_flag(name):
    return os.environ.get(name, "").lower() in ("1", "true", "yes", "on")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", help="model files (.onnx) or folders of model versions")
    p.add_argument("--target", default=os.environ.get("GRAFT_SERVER"),
                   help="graftd address HOST:PORT (default: $GRAFT_SERVER)")
    p.add_argument("--level", default="O2", help="optimization level O0..O3 (default O2)")
    p.add_argument("--passes", help="explicit comma-separated pass list instead of --level")
    p.add_argument("--option", action="append", default=[], metavar="PASS.OPTION=VALUE",
                   help="pass option (repeatable)")
    p.add_argument("--timeout", type=float, default=600,
                   help="deadline per model in seconds (default 600)")
    p.add_argument("--force", action="store_true", help="optimize even up-to-date models")
    p.add_argument("--tls", action="store_true", default=env_flag("GRAFT_TLS"),
                   help="connect with TLS; implied by --ca/--cert/--key/--server-name "
                        "(default: $GRAFT_TLS)")
    p.add_argument("--ca", default=os.environ.get("GRAFT_TLS_CA"),
                   help="PEM CA bundle of the server's certificate (default: $GRAFT_TLS_CA, "
                        "else the system's CAs)")
    p.add_argument("--cert", default=os.environ.get("GRAFT_TLS_CERT"),
                   help="PEM client certificate for mTLS (default: $GRAFT_TLS_CERT)")
    p.add_argument("--key", default=os.environ.get("GRAFT_TLS_KEY"),
                   help="its unencrypted PEM key (default: $GRAFT_TLS_KEY)")
    p.add_argument("--server-name", default=os.environ.get("GRAFT_TLS_SERVER_NAME"),
                   help="name the server's certificate carries (default: $GRAFT_TLS_SERVER_NAME)")
    args = p.parse_args(argv)
    if not args.target:
        p.error("say which server: --target HOST:PORT (or set GRAFT_SERVER)")
    if args.timeout <= 0:
        p.error("--timeout must be positive")
    args.pass_options = {}
    for opt in args.option:
        name, eq, value = opt.partition("=")
        pass_name, dot, key = name.partition(".")
        if not eq or not dot or not pass_name or not key:
            p.error(f"--option must look like PASS.OPTION=VALUE, got '{opt}'")
        args.pass_options.setdefault(pass_name, {})[key] = value
    return args


def is_model(name):
    return name.endswith(".onnx") and not name.endswith(OPTIMIZED_SUFFIX)


def find_models(paths):
    """Model files in the order given (folders: sorted, recursively); a path that does not exist
    is an error. Symbolic links to folders are not followed."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            for folder, dirs, files in os.walk(path):
                dirs.sort()
                found += [os.path.join(folder, f) for f in sorted(files) if is_model(f)]
        elif os.path.isfile(path):
            found.append(path)
        else:
            raise FileNotFoundError(f"no such model or folder: '{path}'")
    return list(dict.fromkeys(found))


def outputs_of(model_path):
    base = model_path[:-len(".onnx")] if model_path.endswith(".onnx") else model_path
    return base + OPTIMIZED_SUFFIX, base + REPORT_SUFFIX


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def written_intact(model_path, written):
    """Whether every external-data file a run wrote beside the model still has its digest."""
    folder = os.path.dirname(model_path) or "."
    for f in written:
        name = graft_client.check_location(f["name"])
        if file_sha256(os.path.join(folder, name)) != f["sha256"]:
            return False
    return True


def up_to_date(record_path, optimized_path, model_path, digest, config):
    """Whether the recorded run is for these input bytes (model and external files) and this
    configuration, and the optimized file and the files it wrote are still the ones written."""
    try:
        with open(record_path, encoding="utf-8") as f:
            record = json.load(f)
        return (isinstance(record, dict) and record.get("input_sha256") == digest
                and record.get("config") == config
                and record.get("output_sha256") == file_sha256(optimized_path)
                and written_intact(model_path, record.get("written_files", [])))
    except (OSError, ValueError, TypeError, KeyError, graft_client.GraftError):
        return False


def process(client, model_path, args, config):
    """Optimizes one model; returns its progress line."""
    optimized_path, record_path = outputs_of(model_path)
    # The input digest: the model's sha256, or with external-data files the digest of the
    # model's and the files' (hashed in blocks), as graftd keys its cache.
    digest = graft_client.model_digest(model_path)
    if not args.force and up_to_date(record_path, optimized_path, model_path, digest, config):
        return f"up-to-date {model_path} (sha256 {digest[:12]})"
    with client.optimize(model_path, level=args.level, passes=args.passes,
                         pass_options=args.pass_options, timeout=args.timeout) as result:
        if result.input_sha256 != digest:
            raise graft_client.DataLossError(f"'{model_path}' changed while it was optimized")
        # The optimized model and the files the server wrote first (beside the input; the
        # input's own files are left as they are), then the record: a record always describes
        # a complete result.
        result.save(optimized_path)
    written = [{"name": f.name, "size": f.size, "sha256": f.sha256}
               for f in result.external_files if not f.from_input]
    record = {
        "input": os.path.basename(model_path),
        "input_sha256": digest,
        "output_sha256": result.report.output_sha256,
        "config": config,
        "written_files": written,
        "report": result.report_dict(),
    }
    graft_client.write_atomically(
        record_path, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    r = result.report
    how = "cached, no upload" if result.lookup_hit else (
        f"cache hit, uploaded {result.uploaded_bytes} bytes" if result.cache_hit
        else f"uploaded {result.uploaded_bytes} bytes")
    files = f", wrote {len(written)} external file(s)" if written else ""
    return (f"optimized {model_path} -> {os.path.basename(optimized_path)} ({r.input_bytes} -> "
            f"{r.output_bytes} bytes, {r.nodes_before} -> {r.nodes_after} nodes; {how}{files})")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        models = find_models(args.paths)
    except FileNotFoundError as e:
        print(f"registry_hook: {e}", file=sys.stderr)
        return EXIT_USAGE
    failed = 0
    try:
        tls = None
        if args.tls or args.ca or args.cert or args.key or args.server_name:
            tls = graft_client.TlsConfig(ca=args.ca, cert=args.cert, key=args.key,
                                         server_name=args.server_name)
        # What the outputs depend on, recorded with them: another configuration re-does them.
        config = {"level": graft_client.pipeline_config(level=args.level).level,
                  "passes": args.passes.split(",") if args.passes else None,
                  "pass_options": args.pass_options}
        client = graft_client.Client(args.target, tls=tls)
    except (OSError, ValueError) as e:
        print(f"registry_hook: {e}", file=sys.stderr)
        return EXIT_USAGE
    with client:
        for model_path in models:
            try:
                line = process(client, model_path, args, config)
            except graft_client.UnavailableError as e:
                print(f"FAILED {model_path}: {e}", flush=True)
                print("registry_hook: the server is unreachable; stopping", file=sys.stderr)
                return EXIT_UNREACHABLE
            except (graft_client.GraftError, OSError) as e:
                failed += 1
                line = f"FAILED {model_path}: {e}"
            print(line, flush=True)
    if not models:
        print("registry_hook: no .onnx models found", file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
