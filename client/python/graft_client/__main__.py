"""python3 -m graft_client: optimize an ONNX model with graftd from a hook that runs no shell.

    python3 -m graft_client optimize model.onnx -o model.optimized.onnx --server graftd:50051 \\
        [--level O2] [--verify] [--tls-ca ca.pem] [--report-json r.json] [--report-html r.html]
    python3 -m graft_client health --server graftd:50051

Installed with pip, the same command is the console script graft-client. Exit codes are those of
the C++ CLI `graft` (client/exit_codes.h), with a server's gRPC status mapped as it maps them;
errors are one line on standard error, "graft_client: CODE: message", with control characters
(which a model's names or a server's message may hold) escaped.
"""

import argparse
import os
import sys

from . import __version__
from ._stubs import graft_pb2
from .client import Client, write_atomically
from .config import PLAIN_OPTIONS
from .errors import ExternalDataError, GraftError, InvalidArgumentError, InvalidModelError
from .tls import TlsConfig

EXIT_OK = 0
EXIT_USAGE = 2      # bad arguments or configuration (INVALID_ARGUMENT but for the model)
EXIT_BAD_MODEL = 3  # the input is not a valid ONNX model, or an external-data location is bad
EXIT_IO = 4         # a file could not be read or written
EXIT_INTERNAL = 5   # any other status (INTERNAL, DATA_LOSS, FAILED_PRECONDITION, ...), a bug
EXIT_SERVER = 6     # UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, CANCELLED
EXIT_INTERRUPTED = 130

# graft's remote_exit_code (client/cli/options.cc): these are the server's "try again" codes.
_SERVER_CODES = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "CANCELLED"}

EXIT_CODES_HELP = """\
exit codes: 0 ok; 2 bad arguments or configuration; 3 invalid input model (or external-data
location); 4 I/O error (a file could not be read or written); 5 internal error (a server status
other than those of 6, e.g. INTERNAL, DATA_LOSS, FAILED_PRECONDITION, PERMISSION_DENIED);
6 server unreachable, busy, out of time or cancelled (UNAVAILABLE, RESOURCE_EXHAUSTED,
DEADLINE_EXCEEDED, CANCELLED); health: 6 when the server is not serving"""

# Bidirectional-text controls: they reorder what a terminal shows.
_BIDI = frozenset([0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])


def terminal_safe(text):
    """`text` with control characters (C0, DEL, C1), line and paragraph separators, bidi controls
    and lone surrogates (undecodable bytes of a file name) written as \\xNN or \\uNNNN: one line
    that cannot move the cursor or change the terminal's state."""
    out = []
    for ch in str(text):
        o = ord(ch)
        if (o < 0x20 or 0x7F <= o < 0xA0 or o in (0x2028, 0x2029) or o in _BIDI
                or 0xD800 <= o < 0xE000):
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")
        else:
            out.append(ch)
    return "".join(out)


class UsageError(Exception):
    """Bad arguments found after parsing: exit 2."""


def exit_code(error):
    """The exit code of a GraftError, as graft maps a gRPC status."""
    if isinstance(error, (InvalidModelError, ExternalDataError)):
        return EXIT_BAD_MODEL
    if isinstance(error, InvalidArgumentError) or error.code.name == "INVALID_ARGUMENT":
        return EXIT_USAGE
    if error.code.name in _SERVER_CODES:
        return EXIT_SERVER
    return EXIT_INTERNAL


def _describe_os_error(e):
    if e.strerror and e.filename is not None:
        where = f"'{os.fsdecode(e.filename)}'"
        if e.filename2 is not None:
            where += f" -> '{os.fsdecode(e.filename2)}'"
        return f"{where}: {e.strerror}"
    return str(e)


def _env_flag(name):
    return os.environ.get(name, "").lower() in ("1", "true", "yes", "on")


def _positive(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive number of seconds")
    return value


def _pairs(flag, items):
    """NAME=VALUE arguments as (name, value) pairs."""
    out = []
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name or not value:
            raise UsageError(f"{flag} must look like NAME=VALUE, got '{item}'")
        out.append((name, value))
    return out


def _integer(flag, text):
    try:
        return int(text, 10)
    except ValueError:
        raise UsageError(f"{flag}: '{text}' is not an integer") from None


def _pass_options(items):
    options = {}
    for opt in items:
        dot, eq = opt.find("."), opt.find("=")
        if dot <= 0 or eq < 0 or dot > eq or eq == dot + 1:
            raise UsageError(f"--option must look like PASS.OPTION=VALUE, got '{opt}'")
        options.setdefault(opt[:dot], {})[opt[dot + 1:eq]] = opt[eq + 1:]
    return options


def _fix_dims(items):
    dims = {}
    for name, value in _pairs("--fix-dim", items):
        size = _integer("--fix-dim", value)
        if dims.setdefault(name, size) != size:
            raise UsageError(f"--fix-dim: '{name}' is given twice, as {dims[name]} and {size}")
    return dims


def _gates(items):
    """--gate OUTPUT=KIND[:THRESHOLD]: the output name is everything before the last '='."""
    gates = {}
    for item in items:
        name, eq, value = item.rpartition("=")
        if not eq or not name or not value:
            raise UsageError(f"--gate must look like OUTPUT=KIND[:THRESHOLD], got '{item}'")
        if name in gates:
            raise UsageError(f"--gate: output '{name}' is given twice")
        gates[name] = value
    return gates


def _fix_shapes(items):
    shapes = {}
    for name, value in _pairs("--fix-shape", items):
        dims = [_integer("--fix-shape", d) for d in value.split(",")]
        if shapes.setdefault(name, dims) != dims:
            raise UsageError(f"--fix-shape: input '{name}' is given two shapes")
    return shapes


def _io_layouts(items):
    """--io-layout NAME=LAYOUT: the layout upper-cased (pipeline_config checks it), as graft
    does."""
    layouts = {}
    for name, value in _pairs("--io-layout", items):
        layout = value.upper() if value.isascii() else value
        if layouts.setdefault(name, layout) != layout:
            raise UsageError(f"--io-layout: '{name[:200]}' is given two layouts")
    return layouts


def _tls(args):
    if args.tls or args.tls_ca or args.tls_cert or args.tls_key or args.tls_server_name:
        return TlsConfig(ca=args.tls_ca or None, cert=args.tls_cert or None,
                         key=args.tls_key or None, server_name=args.tls_server_name or None)
    return None


def _server(args):
    if not args.server:
        raise UsageError("say which server: --server HOST:PORT (or set GRAFT_SERVER)")
    return args.server


def _write(path, data):
    """Writes bytes to a file (atomically) or, for "-", to standard output."""
    if path == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        write_atomically(path, data)


def _human(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _summary(args, result):
    r = result.report
    if result.lookup_hit:
        how = "cached result, nothing uploaded"
    elif result.cache_hit:
        how = f"cache hit, uploaded {_human(result.uploaded_bytes)}"
    else:
        how = f"uploaded {_human(result.uploaded_bytes)}"
    line = (f"{args.input} -> {args.output or '(dry run)'}: {r.nodes_before} -> {r.nodes_after} "
            f"nodes, {_human(r.input_bytes)} -> {_human(r.output_bytes)}; {how}")
    if r.verification.status:
        line += "; verification " + graft_pb2.Verification.Status.Name(r.verification.status)
    return line


def _plain_flags():
    """The plain options (graft.proto's field specs) that have a flag: {name: spec}."""
    return {name: spec for name, (_, spec) in PLAIN_OPTIONS.items() if spec.flag}


def _add_plain_options(parser):
    """A flag per plain option, as graft.proto's spec gives it; absent leaves the default."""
    for name, spec in _plain_flags().items():
        field = PLAIN_OPTIONS[name][0]
        if field.cpp_type == field.CPPTYPE_BOOL:
            parser.add_argument("--" + spec.flag, dest=name, action="store_true", default=None,
                                help=spec.help.replace("%", "%%"))
            continue
        integer = field.cpp_type in (field.CPPTYPE_INT32, field.CPPTYPE_INT64,
                                     field.CPPTYPE_UINT32, field.CPPTYPE_UINT64)
        number = integer or field.cpp_type == field.CPPTYPE_DOUBLE
        parser.add_argument("--" + spec.flag, dest=name,
                            type=int if integer else float if number else str,
                            metavar="N" if integer else "X" if number else "TEXT",
                            help=spec.help.replace("%", "%%"))


def run_optimize(args):
    if args.passes and args.level is not None:
        raise UsageError("--passes replaces --level: give one of them")
    outputs = [p for p in (args.output, args.report_json, args.report_html) if p == "-"]
    if len(outputs) > 1:
        raise UsageError("only one of -o, --report-json and --report-html can be - (standard "
                         "output)")
    server = _server(args)
    config = {
        "level": args.level or "O2",
        "passes": args.passes,
        "pass_options": _pass_options(args.option) or None,
        "verify": True if args.verify else None,
        "max_rounds": args.max_rounds,
        "check": args.check,
        "explain": args.explain or None,
        "target": args.target,
        "fix_dims": _fix_dims(args.fix_dim) or None,
        "fix_shapes": _fix_shapes(args.fix_shape) or None,
        "io_layout": _io_layouts(args.io_layout) or None,
        "gates": _gates(args.gate) or None,
    }
    config.update({name: getattr(args, name) for name in _plain_flags()})
    tls = _tls(args)
    if args.input == "-":
        model, folder = sys.stdin.buffer.read(), os.getcwd()
    else:
        model, folder = args.input, None
    with Client(server, tls=tls, timeout=args.timeout) as client:
        with client.optimize(model, lookup_first=not args.no_lookup, external_data_dir=folder,
                             keep_external_files=bool(args.output), **config) as result:
            if args.output == "-":
                if result.external_files:
                    raise UsageError("the optimized model uses external-data files: write it to "
                                     "a file (-o FILE), not to standard output")
                _write("-", result.model_bytes)
            elif args.output:
                result.save(args.output)
            if args.report_json:
                _write(args.report_json, (result.report_json() + "\n").encode("utf-8"))
            if args.report_html:
                _write(args.report_html, result.report_html().encode("utf-8"))
            if not args.quiet:
                print(f"graft_client: {terminal_safe(_summary(args, result))}", file=sys.stderr)
    return EXIT_OK


def run_health(args):
    with Client(_server(args), tls=_tls(args), timeout=args.timeout) as client:
        status = client.health()
    print(status)
    return EXIT_OK if status == "SERVING" else EXIT_SERVER


def _add_server(cmd):
    cmd.add_argument("--server", default=os.environ.get("GRAFT_SERVER"), metavar="HOST:PORT",
                     help="graftd address (default: $GRAFT_SERVER)")
    cmd.add_argument("--tls", action="store_true", default=_env_flag("GRAFT_TLS"),
                     help="connect with TLS; implied by the four options below "
                          "(default: $GRAFT_TLS)")
    cmd.add_argument("--tls-ca", "--ca", metavar="FILE", default=os.environ.get("GRAFT_TLS_CA"),
                     help="PEM CA bundle that signs the server's certificate (default: "
                          "$GRAFT_TLS_CA, else the system's trusted CAs)")
    cmd.add_argument("--tls-cert", "--cert", metavar="FILE",
                     default=os.environ.get("GRAFT_TLS_CERT"),
                     help="PEM client certificate, for servers that require one (mTLS) "
                          "(default: $GRAFT_TLS_CERT)")
    cmd.add_argument("--tls-key", "--key", metavar="FILE", default=os.environ.get("GRAFT_TLS_KEY"),
                     help="unencrypted PEM private key of --tls-cert (default: $GRAFT_TLS_KEY)")
    cmd.add_argument("--tls-server-name", "--server-name", metavar="NAME",
                     default=os.environ.get("GRAFT_TLS_SERVER_NAME"),
                     help="name the server's certificate must carry, when it differs from the "
                          "host in --server (default: $GRAFT_TLS_SERVER_NAME)")


def build_parser(prog=None):
    p = argparse.ArgumentParser(
        prog=prog, description="Optimize ONNX models with graftd, the Graft service.",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"graft_client {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    o = sub.add_parser("optimize", help="optimize an ONNX model",
                       description="Optimize an ONNX model with graftd (asking its cache first), "
                                   "write the result and its reports.",
                       epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    o.add_argument("input", help="input model (.onnx); its external-data files are read from its "
                                 "folder; - for standard input")
    o.add_argument("-o", "--output", metavar="FILE",
                   help="where to write the optimized model (and beside it the external-data "
                        "files it references), - for standard output; omit for a dry run")
    _add_server(o)
    o.add_argument("--timeout", type=_positive, metavar="SECONDS",
                   help="deadline of the whole run: lookup, upload, optimization, download "
                        "(default: none; the server applies its own)")
    o.add_argument("--level", help="optimization level O0..O3 (default O2)")
    o.add_argument("--passes", help="explicit comma-separated pass list instead of --level")
    o.add_argument("--option", action="append", default=[], metavar="PASS.OPTION=VALUE",
                   help="pass option (repeatable)")
    o.add_argument("--target", help="the runtime the result is for: onnx (default), onnxruntime "
                                     "or onnxruntime:MAJOR.MINOR")
    o.add_argument("--max-rounds", type=int, default=10, metavar="N",
                   help="fixed-point rounds at most (default 10)")
    o.add_argument("--check", action="store_true",
                   help="run the ONNX checker and shape inference after each changing pass")
    o.add_argument("--verify", action="store_true",
                   help="compare the original's and the result's outputs on random inputs; a "
                        "pass that changes them is rolled back")
    _add_plain_options(o)
    o.add_argument("--explain", action="append", metavar="PASS[/RULE]",
                   help="report why these rules did not rewrite (repeatable)")
    o.add_argument("--gate", action="append", default=[], metavar="OUTPUT=KIND[:THRESHOLD]",
                   help="how a lossy pass is judged on one output: detection, top1, top5, mask "
                        "or values (default: inferred from the model) (repeatable)")
    o.add_argument("--fix-dim", action="append", default=[], metavar="NAME=N",
                   help="make a symbolic input dim static first (repeatable)")
    o.add_argument("--fix-shape", action="append", default=[], metavar="INPUT=D,D,...",
                   help="give an input static dims first (repeatable)")
    o.add_argument("--io-layout", action="append", default=[], metavar="NAME=LAYOUT",
                   help="serve an input or output in another memory layout: NHWC (the model "
                        "computes in NCHW), NCHW (from NHWC), NWC/NCW or NDHWC/NCDHW; the "
                        "Transposes at the boundary are moved inward (repeatable)")
    o.add_argument("--no-lookup", action="store_true",
                   help="upload without first asking the server's cache")
    o.add_argument("--report-json", metavar="FILE",
                   help="write the report (graft.v1.OptimizeReport in proto3's JSON mapping) here")
    o.add_argument("--report-html", metavar="FILE",
                   help="write the report as a self-contained HTML page here")
    o.add_argument("-q", "--quiet", action="store_true", help="print no summary line")
    o.set_defaults(run=run_optimize)

    h = sub.add_parser("health", help="ask a server whether it is serving (exit 0) or not (6)")
    _add_server(h)
    h.add_argument("--timeout", type=_positive, default=10, metavar="SECONDS",
                   help="deadline in seconds (default 10)")
    h.set_defaults(run=run_health)
    return p


def _prog():
    base = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "python3 -m graft_client" if base in ("", "-c", "__main__.py") else base


def main(argv=None):
    """Runs the command line `argv` (default sys.argv[1:]); returns the exit code."""
    args = build_parser(_prog()).parse_args(argv)  # exits 2 on bad arguments, 0 for --help
    try:
        return args.run(args)
    except UsageError as e:
        code, message = EXIT_USAGE, str(e)
    except GraftError as e:
        code, message = exit_code(e), str(e)
    except OSError as e:
        code, message = EXIT_IO, _describe_os_error(e)
    except KeyboardInterrupt:
        code, message = EXIT_INTERRUPTED, "interrupted"
    except Exception as e:  # noqa: BLE001 - a bug: one line, as graft reports it
        code, message = EXIT_INTERNAL, f"internal error: {type(e).__name__}: {e}"
    print(f"graft_client: {terminal_safe(message)}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
