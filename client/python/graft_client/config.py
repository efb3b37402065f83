"""The PipelineConfig a request carries, built as the C++ client builds it.

The server's cache key is (model sha256, canonical config, Graft version), where the canonical
config is the resolved pass list with every option's parsed value, the rounds, the checks and,
when verification is on, its settings. Building the message the way `graft optimize` does
(api::to_proto of the CLI's defaults) keeps Lookup keys equal to what Optimize caches, whichever
client produced the entry.
"""

import math
import numbers
import textwrap

from ._stubs import graft_pb2
from .errors import InvalidArgumentError

DEFAULT_MAX_ROUNDS = 10
# eval::VerifyOptions' defaults, which the C++ CLI always sends.
VERIFY_DEFAULTS = {"seed": 1, "trials": 2, "rtol": 1e-3, "atol": 1e-4, "default_dim": 0}
_VERIFY_KEYS = {"dims", "default_dim", "shapes", "values", "ranges", "seed", "trials", "rtol",
                "atol", "input_sets"}
# eval::kMaxInputSets: recorded input sets one verification runs at most.
MAX_INPUT_SETS = 16
MAX_PASS_LIST = 256
# The most rules a request may ask to explain (PipelineConfig.explain).
MAX_EXPLAIN = 64
# core/pipeline/fix_dims.h: the sizes an input dim may be fixed to, the most entries each of
# fix_dims and fix_shapes may hold, and the longest shape.
MIN_FIXED_DIM = 1
MAX_FIXED_DIM = 2**31
MAX_FIX_ENTRIES = 4096
MAX_FIX_RANK = 1024
# core/pipeline/io_layout.h: the layouts PipelineConfig.io_layout may name (each served for its
# counterpart: NHWC <-> NCHW, NWC <-> NCW, NDHWC <-> NCDHW) and the most entries it may hold.
IO_LAYOUTS = ("NHWC", "NCHW", "NWC", "NCW", "NDHWC", "NCDHW")
MAX_IO_LAYOUTS = 4096


def _plain_options():
    """{name: (FieldDescriptor, FieldSpec)}: PipelineConfig's plain options, the fields declared
    with a (graft.v1.field) spec in graft.proto, in field order."""
    options = {}
    for field in graft_pb2.PipelineConfig.DESCRIPTOR.fields:
        field_options = field.GetOptions()
        if field_options.HasExtension(graft_pb2.field):
            options[field.name] = (field, field_options.Extensions[graft_pb2.field])
    return options


PLAIN_OPTIONS = _plain_options()

_FD = type(graft_pb2.PipelineConfig.DESCRIPTOR.fields[0])
_INT_BOUNDS = {_FD.CPPTYPE_INT32: (-2**31, 2**31 - 1), _FD.CPPTYPE_INT64: (-2**63, 2**63 - 1),
               _FD.CPPTYPE_UINT32: (0, 2**32 - 1), _FD.CPPTYPE_UINT64: (0, 2**64 - 1)}


def _bound_text(bound):
    """A bound as graftd's errors show it (api::bound_text): integral values as integers."""
    if float(bound).is_integer() and abs(bound) < 2**63:
        return str(int(bound))
    return f"{bound:g}"


def _bounds(field, spec):
    """(min, max) of a number option: its spec's, within its type's."""
    lo, hi = _INT_BOUNDS.get(field.cpp_type, (-math.inf, math.inf))
    if spec.HasField("min"):
        lo = max(lo, spec.min)
    if spec.HasField("max"):
        hi = min(hi, spec.max)
    return lo, hi


def plain_option_value(name, value):
    """`value` checked for the plain option `name` as its spec says (type and bounds), as the
    message field takes it; InvalidArgumentError naming the option otherwise."""
    field, spec = PLAIN_OPTIONS[name]
    if field.cpp_type == _FD.CPPTYPE_BOOL:
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"{name} must be a bool, got {value!r}")
        return value
    if field.cpp_type == _FD.CPPTYPE_STRING:
        if not isinstance(value, str):
            raise InvalidArgumentError(f"{name} must be a string, got {value!r}")
        return value
    integer = field.cpp_type in _INT_BOUNDS
    kind = numbers.Integral if integer else numbers.Real
    lo, hi = _bounds(field, spec)
    if isinstance(value, bool) or not isinstance(value, kind) \
            or not (lo <= value <= hi):  # NaN fails too
        raise InvalidArgumentError(
            f"{name} must be {'an int' if integer else 'a number'} in "
            f"[{_bound_text(lo)}, {_bound_text(hi)}], got {value!r}")
    return int(value) if integer else float(value)


def plain_options_doc():
    """The plain options as the Python client's docstrings list them: one line each."""
    return "\n".join(textwrap.fill(f"`{name}`: {spec.help}.", width=96, initial_indent=" " * 8,
                                    subsequent_indent=" " * 10)
                      for name, (_, spec) in PLAIN_OPTIONS.items())


def _set_plain_options(config, options, caller):
    for name, value in options.items():
        if name not in PLAIN_OPTIONS:
            raise TypeError(f"{caller}() got an unexpected keyword argument '{name}'")
        if value is not None:  # None: the option's default
            setattr(config, name, plain_option_value(name, value))


def normalize_level(level):
    """"O0".."O3" (also "o2", "2" or 2) as "O<n>"; InvalidArgumentError otherwise."""
    text = str(level) if isinstance(level, int) and not isinstance(level, bool) else level
    if isinstance(text, str):
        if len(text) == 2 and text[0] in "Oo" and text[1] in "0123":
            return "O" + text[1]
        if len(text) == 1 and text in "0123":
            return "O" + text
    raise InvalidArgumentError(f"level must be O0, O1, O2 or O3, got {level!r}")


def _option_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, str)):
        return str(value)
    raise InvalidArgumentError(
        f"pass option values must be str, int or bool, got {type(value).__name__}")


def _tensor_bytes(name, value):
    """A serialized onnx.TensorProto from bytes (already serialized), an onnx.TensorProto (or any
    message with SerializeToString), or a numpy array (through onnx.numpy_helper)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if hasattr(value, "SerializeToString"):
        return value.SerializeToString()
    if type(value).__module__ == "numpy":
        try:
            from onnx import numpy_helper
        except ImportError as e:
            raise InvalidArgumentError(
                f"verify input '{name}': a numpy array needs the onnx package to be serialized; "
                "give an onnx.TensorProto or its bytes instead") from e
        return numpy_helper.from_array(value, str(name)).SerializeToString()
    raise InvalidArgumentError(
        f"verify input '{name}' must be bytes (a serialized onnx.TensorProto), an "
        f"onnx.TensorProto or a numpy array, got {type(value).__name__}")


def _add_input_sets(target, input_sets, what="verify"):
    """Recorded inputs: a list of {input name: tensor} dicts, one per input set, added to
    `target` (a repeated InputSet field); `what` names them in errors ("verify",
    "calibration")."""
    label = "verify input set" if what == "verify" else f"{what} set"
    if isinstance(input_sets, dict) or not hasattr(input_sets, "__iter__"):
        raise InvalidArgumentError(
            f"{what} input sets must be a list of {{input name: tensor}} dicts")
    sets = list(input_sets)
    if len(sets) > MAX_INPUT_SETS:
        raise InvalidArgumentError(
            f"{what}: at most {MAX_INPUT_SETS} input sets, got {len(sets)}")
    for number, tensors in enumerate(sets, start=1):
        if not isinstance(tensors, dict) or not tensors:
            raise InvalidArgumentError(
                f"{label} {number} must be a non-empty dict of input name -> tensor")
        message = target.add()
        for name, value in tensors.items():
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(
                    f"{label} {number}: input names must be non-empty strings")
            message.tensors[name] = _tensor_bytes(name, value)


def _fixed_size(what, value):
    """An int in [MIN_FIXED_DIM, MAX_FIXED_DIM] (not a bool), else InvalidArgumentError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(f"{what} must be an int, got {value!r}")
    value = int(value)  # numpy integers too
    if not MIN_FIXED_DIM <= value <= MAX_FIXED_DIM:
        raise InvalidArgumentError(
            f"{what} must be {MIN_FIXED_DIM}..{MAX_FIXED_DIM}, got {value}")
    return value


def _add_fixed(config, fix_dims, fix_shapes):
    """fix_dims ({dim name: size}) and fix_shapes ({input name: [sizes]}) into `config`."""
    if fix_dims is not None:
        if not isinstance(fix_dims, dict):
            raise InvalidArgumentError(
                f"fix_dims must be a dict of dim name -> size, got {type(fix_dims).__name__}")
        if len(fix_dims) > MAX_FIX_ENTRIES:
            raise InvalidArgumentError(
                f"fix_dims: at most {MAX_FIX_ENTRIES} names, got {len(fix_dims)}")
        for name, size in fix_dims.items():
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(f"fix_dims: names must be non-empty strings, got {name!r}")
            config.fix_dims[name] = _fixed_size(f"fix_dims: the size of '{name[:200]}'", size)
    if fix_shapes is not None:
        if not isinstance(fix_shapes, dict):
            raise InvalidArgumentError(
                f"fix_shapes must be a dict of input name -> list of sizes, got "
                f"{type(fix_shapes).__name__}")
        if len(fix_shapes) > MAX_FIX_ENTRIES:
            raise InvalidArgumentError(
                f"fix_shapes: at most {MAX_FIX_ENTRIES} inputs, got {len(fix_shapes)}")
        for name, dims in fix_shapes.items():
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(
                    f"fix_shapes: input names must be non-empty strings, got {name!r}")
            if isinstance(dims, (str, bytes, dict)) or not hasattr(dims, "__iter__"):
                raise InvalidArgumentError(
                    f"fix_shapes: the shape of '{name[:200]}' must be a list of ints, got "
                    f"{type(dims).__name__}")
            dims = list(dims)
            if len(dims) > MAX_FIX_RANK:
                raise InvalidArgumentError(
                    f"fix_shapes: the shape of '{name[:200]}' has {len(dims)} dims, at most "
                    f"{MAX_FIX_RANK}")
            shape = config.fix_shapes[name]
            for k, d in enumerate(dims):
                shape.dims.append(_fixed_size(f"fix_shapes: dim {k} of '{name[:200]}'", d))


def _add_io_layout(config, io_layout):
    """io_layout ({input or output name: layout}) into `config`, each layout upper-cased (as
    the C++ CLI's --io-layout does) and checked as graftd checks it."""
    if io_layout is None:
        return
    if not isinstance(io_layout, dict):
        raise InvalidArgumentError(
            f"io_layout must be a dict of input or output name -> layout, got "
            f"{type(io_layout).__name__}")
    if len(io_layout) > MAX_IO_LAYOUTS:
        raise InvalidArgumentError(
            f"io_layout: at most {MAX_IO_LAYOUTS} names, got {len(io_layout)}")
    for name, layout in io_layout.items():
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"io_layout: names must be non-empty strings, got {name!r}")
        if not isinstance(layout, str):
            raise InvalidArgumentError(
                f"io_layout: the layout of '{name[:200]}' must be a string, one of "
                f"{', '.join(IO_LAYOUTS)}, got {layout!r}")
        # ASCII letters only: str.upper() would turn some other letters into ASCII ones.
        upper = layout.upper() if layout.isascii() else layout
        if upper not in IO_LAYOUTS:
            raise InvalidArgumentError(
                f"io_layout: '{name[:200]}' is given {layout[:200]!r}; layouts: "
                f"{', '.join(IO_LAYOUTS)}")
        config.io_layout[name] = upper


def _verify_config(verify):
    """A VerifyConfig from None/False (off), True (defaults), a dict or a VerifyConfig."""
    v = graft_pb2.VerifyConfig()
    if isinstance(verify, graft_pb2.VerifyConfig):
        v.CopyFrom(verify)
        return v
    settings = dict(VERIFY_DEFAULTS)
    enabled = False
    if verify is True:
        enabled = True
    elif isinstance(verify, dict):
        unknown = set(verify) - _VERIFY_KEYS
        if unknown:
            raise InvalidArgumentError(
                f"unknown verify setting(s) {sorted(unknown)}; known: {sorted(_VERIFY_KEYS)}")
        enabled = True
        settings.update({k: verify[k] for k in verify if k in VERIFY_DEFAULTS})
        for name, d in (verify.get("dims") or {}).items():
            v.dims[str(name)] = int(d)
        for name, dims in (verify.get("shapes") or {}).items():
            v.shapes[str(name)].dims.extend(int(d) for d in dims)
        for name, value in (verify.get("values") or {}).items():
            value = float(value)
            if not math.isfinite(value) or abs(value) >= 9223372036854775807.0:
                raise InvalidArgumentError(
                    f"verify: the value of '{name}' must be a finite number of magnitude "
                    f"below 2^63, got {value}")
            v.values[str(name)] = value
        for name, bounds in (verify.get("ranges") or {}).items():
            try:
                low, high = (float(b) for b in bounds)
            except (TypeError, ValueError):
                raise InvalidArgumentError(
                    f"verify: the range of '{str(name)[:200]}' must be (low, high), got "
                    f"{bounds!r}") from None
            if not (math.isfinite(low) and math.isfinite(high) and low <= high
                    and max(abs(low), abs(high)) < 9223372036854775807.0):
                raise InvalidArgumentError(
                    f"verify: the range of '{str(name)[:200]}' must be LOW <= HIGH, finite "
                    f"numbers of magnitude below 2^63, got [{low}, {high}]")
            v.ranges[str(name)].low = low
            v.ranges[str(name)].high = high
        if verify.get("input_sets") is not None:
            _add_input_sets(v.input_sets, verify["input_sets"])
    elif verify not in (None, False):
        raise InvalidArgumentError(
            "verify must be None, a bool, a dict of settings or a graft_pb2.VerifyConfig")
    v.enabled = enabled
    v.default_dim = int(settings["default_dim"])
    v.seed = int(settings["seed"])
    v.trials = int(settings["trials"])
    v.rtol = float(settings["rtol"])
    v.atol = float(settings["atol"])
    return v


def pipeline_config(level="O2", passes=None, pass_options=None, verify=None,
                    max_rounds=DEFAULT_MAX_ROUNDS, check=False, explain=None,
                    calibration_data=None, target=None, fix_dims=None, fix_shapes=None,
                    gates=None, io_layout=None, **options):
    """A graft_pb2.PipelineConfig: `passes` (a list of names, or a comma-separated string)
    replaces the level's set; `pass_options` maps pass -> {option: value}; `verify` is None/False,
    True, a dict (dims, default_dim, shapes, values, ranges, seed, trials, rtol, atol) or a VerifyConfig;
    `check` runs the ONNX checker and strict shape inference after each changing pass; `explain`
    (a list of "PASS" or "PASS/RULE", or one such string) asks why those rules did not rewrite
    (report.passes[i].explanations). `calibration_data` (a list of {input name: tensor} dicts,
    as verify's input_sets) is what lossy passes learn value ranges from (quantize_static_int8's
    scales); without it they use random inputs (report.passes[i].calibration says which).
    `target` is the runtime the result is for: "onnx" (the default: standard ops only),
    "onnxruntime" or "onnxruntime:MAJOR.MINOR" (ONNX Runtime's com.microsoft fused ops too);
    the server checks it. `fix_dims` ({dim name: size}, e.g. {"batch": 1}) and `fix_shapes`
    ({input name: [sizes]}, e.g. {"x": [1, 3, 224, 224]}) make symbolic input dims static before
    the passes run, so what follows from them folds (report.fixed_inputs lists the inputs
    changed); sizes are ints in 1..2^31. `io_layout` ({input or output name: layout}, e.g.
    {"x": "NHWC"}; layouts NHWC, NCHW, NWC, NCW, NDHWC, NCDHW, any case) serves those values of
    the main graph in that layout, the model computing in its counterpart (NHWC <-> NCHW, NWC
    <-> NCW, NDHWC <-> NCDHW): declared dims permuted, Transposes at the boundary moved inward
    by the passes (report.layout_changes, report.transposes_before/after). `gates` ({output name: "KIND" or "KIND:THRESHOLD"},
    KIND one of detection, top1, top5, mask, values) sets how a lossy pass is judged on an
    output beyond its value gate; graft infers detectors (NonMaxSuppression), classifiers and
    segmenters itself, and reports each judgment (lossy_trials[i].tasks). `options` are the plain options (PLAIN_OPTIONS, from
    graft.proto's field specs; None leaves one at its default):
{plain}"""
    config = graft_pb2.PipelineConfig()
    config.level = normalize_level(level)
    if target is not None:
        if not isinstance(target, str) or len(target) > 64:
            raise InvalidArgumentError(f"target must be a string such as 'onnxruntime', got {target!r}")
        config.target = target
    if passes is not None:
        if isinstance(passes, str):
            passes = [p for p in passes.split(",") if p]
        passes = list(passes)
        if len(passes) > MAX_PASS_LIST:
            raise InvalidArgumentError(
                f"at most {MAX_PASS_LIST} passes may be listed, got {len(passes)}")
        for p in passes:
            if not isinstance(p, str):
                raise InvalidArgumentError(f"pass names must be strings, got {p!r}")
        config.passes.extend(passes)
    for pass_name, values_given in (pass_options or {}).items():
        if not isinstance(values_given, dict):
            raise InvalidArgumentError(
                f"pass_options['{pass_name}'] must be a dict of option -> value")
        values = config.pass_options[str(pass_name)].values
        for key, value in values_given.items():
            values[str(key)] = _option_text(value)
    if not isinstance(max_rounds, int) or isinstance(max_rounds, bool) or max_rounds < 0 \
            or max_rounds >= 2**31:
        raise InvalidArgumentError(f"max_rounds must be a non-negative int, got {max_rounds!r}")
    config.max_rounds = max_rounds
    config.onnx_checker = bool(check)
    config.shape_inference = bool(check)
    config.verify.CopyFrom(_verify_config(verify))
    if calibration_data is not None:
        _add_input_sets(config.calibration_sets, calibration_data, "calibration")
    if explain is not None:
        if isinstance(explain, str):
            explain = [explain]
        explain = list(explain)
        if len(explain) > MAX_EXPLAIN:
            raise InvalidArgumentError(
                f"at most {MAX_EXPLAIN} rules may be explained, got {len(explain)}")
        for e in explain:
            if not isinstance(e, str) or not e:
                raise InvalidArgumentError(f"explain entries must be 'PASS' or 'PASS/RULE', got {e!r}")
        config.explain.extend(explain)
    _set_plain_options(config, options, "pipeline_config")
    _add_fixed(config, fix_dims, fix_shapes)
    _add_io_layout(config, io_layout)
    _add_gates(config, gates)
    return config


GATE_KINDS = ("values", "detection", "top1", "top5", "mask")
MAX_OUTPUT_GATES = 64


def _add_gates(config, gates):
    """PipelineConfig.output_gates from {output: "KIND[:THRESHOLD]"}, checked as graftd does."""
    if gates is None:
        return
    if not isinstance(gates, dict):
        raise InvalidArgumentError("gates must be a dict of output name -> 'KIND[:THRESHOLD]'")
    if len(gates) > MAX_OUTPUT_GATES:
        raise InvalidArgumentError(f"at most {MAX_OUTPUT_GATES} output_gates, got {len(gates)}")
    for output, text in gates.items():
        if not isinstance(output, str) or not 0 < len(output.encode()) <= 4096:
            raise InvalidArgumentError("gate: the output name must be 1..4096 bytes")
        if not isinstance(text, str):
            raise InvalidArgumentError(f"gate for {output!r}: expected 'KIND[:THRESHOLD]', got {text!r}")
        kind, _, threshold = text.partition(":")
        if kind not in GATE_KINDS:
            raise InvalidArgumentError(
                f"gate for {output!r}: unknown kind {kind!r} ({', '.join(GATE_KINDS)})")
        gate = config.output_gates.add()
        gate.output = output
        gate.kind = kind
        if threshold:
            try:
                value = float(threshold)
            except ValueError:
                raise InvalidArgumentError(
                    f"gate for {output!r}: threshold {threshold!r} is not a number") from None
            if not 0 <= value <= 1:
                raise InvalidArgumentError(f"gate for {output!r}: threshold {value} is not in [0, 1]")
            gate.threshold = value


pipeline_config.__doc__ = pipeline_config.__doc__.replace("{plain}", plain_options_doc())
