#!/usr/bin/env bash
# Builds the Dockerfile with podman and smoke-tests the image it makes (deploy/README.md,
# "Checking the image"):
#   scripts/image-check.sh                   graftd and graft built from source in the image's
#                                            build stage, as a release would (tag graftd:check)
#   scripts/image-check.sh --prebuilt build  build/server/graftd and build/client/graft, already
#                                            built on this Debian 12, stripped, in the same
#                                            runtime stage (tag graftd:check-prebuilt; the
#                                            scripts/test.sh phase `image`)
# Options: --tag NAME (the image's name), --rebuild-base (make the base images again),
# --probe (only say whether podman can run a container here: exit 0, else the reason and 1).
#
# No registry is needed: the Dockerfile's bases, debian:bookworm and debian:bookworm-slim, are
# made here with debootstrap from the mirror this machine's apt uses (and its
# bookworm-updates/-security suites, as apt has them), imported under those names
# (docker.io/library/debian:...), labelled with the mirror, and reused while the label matches.
# Builds never pull. Rootful podman, host network.
#
# The checks, against a container of the image (host network, free loopback ports), each print
# one line: `graft health` says SERVING; `graft optimize --verify` of the example model
# verifies; the same request again is a cache hit; over mTLS (a throwaway CA, certificates
# mounted, the config file mounted over the image's) the CLI with the CA and a client
# certificate is served, a plaintext client and a TLS client without a certificate are
# refused, and the plaintext health port says SERVING; SIGTERM during a request of several
# seconds: the request still succeeds and graftd exits 0. The clients are the image's own
# graft (podman run --entrypoint graft), so nothing built on the host is needed in source mode.
# A failed check prints the reason and graftd's log and exits 1. Containers and the temporary
# folder go on exit; the images stay (the next run reuses the bases).
#
# Needs root, podman (with buildah's runc), debootstrap, openssl, strip, and /usr/bin/python3
# with grpcio (scripts/install-deps.sh --test installs them all).
set -euo pipefail
cd "$(dirname "$0")/.."
# One block to the end, so that bash has read the whole script before it runs any of it: a source
# build takes many minutes, and the file may change meanwhile (a checkout, an edit).
{

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; }
prebuilt="" tag="" rebuild_base=0 probe_only=0
while (($#)); do
  case $1 in
    --prebuilt) prebuilt=${2:?--prebuilt needs the build folder}; shift 2 ;;
    --tag) tag=${2:?--tag needs a name}; shift 2 ;;
    --rebuild-base) rebuild_base=1; shift ;;
    --probe) probe_only=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "image-check: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[[ -n $tag ]] || tag=graftd:check${prebuilt:+-prebuilt}

readonly release=bookworm
readonly base_full=docker.io/library/debian:$release
readonly base_slim=docker.io/library/debian:$release-slim
readonly mirror_label=org.graft.apt-sources
readonly example=models/ppocr_mobile_v2_cls.onnx
start=$SECONDS
run_id=graft-check-$$

server=""  # the graftd container whose log a failure prints
die() { echo "image-check: $*" >&2; exit 1; }
fail() {
  echo "FAILED  $*" >&2
  if [[ -n $server ]]; then
    echo "---- log of container $server:" >&2
    podman logs "$server" >&2 2>&1 || true
    echo "----" >&2
  fi
  exit 1
}
ok() { echo "ok      $*"; }

tmp=$(mktemp -d /tmp/graft-image-check.XXXXXX)
cleanup() {
  local c m
  for c in $(podman ps -a --filter "name=^$run_id-" --format '{{.Names}}' 2>/dev/null); do
    podman rm -f -t 0 "$c" >/dev/null 2>&1 || true
  done
  # debootstrap (or the upgrade below) may leave proc, sys or dev mounted in the rootfs.
  if [[ -d $tmp/rootfs ]]; then
    for m in $(findmnt -rn -o TARGET | grep "^$tmp/rootfs/" | sort -r); do umount -l "$m" || true; done
  fi
  rm -rf --one-file-system "$tmp"
}
trap cleanup EXIT

# --- helpers in Python: ports, gRPC health, metrics, reports, apt sources, a slow model ------
cat >"$tmp/helper.py" <<'PY'
import glob, json, os, re, socket, subprocess, sys, time, urllib.request

def varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)

def health(addr, timeout=2.0):
    """grpc.health.v1.Health/Check for the whole server, with hand-encoded messages (an empty
    request; the answer's field 1 is the status): no generated stubs needed."""
    import grpc
    with grpc.insecure_channel(addr) as ch:
        check = ch.unary_unary("/grpc.health.v1.Health/Check")
        answer = check(b"", timeout=timeout)
    status = answer[1] if len(answer) >= 2 and answer[0] == 0x08 else 0
    return {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}.get(status, str(status))

def running(container):
    r = subprocess.run(["podman", "container", "inspect", "-f", "{{.State.Running}}", container],
                       capture_output=True, text=True)
    return r.stdout.strip() == "true"

def metric(url, name):
    text = urllib.request.urlopen(url, timeout=2).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None

def apt_sources(out):
    """The Debian bookworm entries of this machine's apt sources (one-line and deb822), written
    as OUT/debian.sources (for the image), OUT/mirror and OUT/keyring (for debootstrap) and
    OUT/summary (one line per entry, what the base images are labelled with)."""
    release = sys.argv[3]
    debian_components = {"main", "contrib", "non-free", "non-free-firmware"}
    entries = []
    def add(types, uris, suites, components, signed_by, enabled=True):
        suites = [s for s in suites if re.fullmatch(re.escape(release) + r"(-[a-z]+)?", s)]
        components = [c for c in components if c in debian_components]
        if enabled and "deb" in types and uris and suites and components:
            entries.append((uris, suites, components, signed_by))
    one_line = ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
    for path in filter(os.path.isfile, one_line):
        for line in open(path):
            line = line.split("#", 1)[0].strip()
            m = re.match(r"(deb|deb-src)\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)\s*(.*)", line)
            if m:
                opts = dict(o.split("=", 1) for o in (m.group(2) or "").split() if "=" in o)
                add([m.group(1)], [m.group(3)], [m.group(4)], m.group(5).split(),
                    opts.get("signed-by", ""))
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        for stanza in re.split(r"\n\s*\n", open(path).read()):
            fields, key = {}, None
            for line in stanza.splitlines():
                if line.startswith("#"):
                    continue
                if line[:1] in (" ", "\t") and key:
                    fields[key] += "\n" + line.strip()
                elif ":" in line:
                    key, value = line.split(":", 1)
                    key = key.strip().lower()
                    fields[key] = value.strip()
            if fields:
                add(fields.get("types", "").split(), fields.get("uris", "").split(),
                    fields.get("suites", "").split(), fields.get("components", "").split(),
                    fields.get("signed-by", ""),
                    fields.get("enabled", "yes").lower() not in ("no", "false", "0"))
    main = [e for e in entries if release in e[1]]
    if not main:
        sys.exit(f"no deb entry for suite {release} in /etc/apt/sources.list(.d)")
    os.makedirs(out, exist_ok=True)
    keyring = main[0][3] if os.path.isfile(main[0][3]) else ""
    open(os.path.join(out, "mirror"), "w").write(main[0][0][0].rstrip("/") + "\n")
    open(os.path.join(out, "keyring"), "w").write(keyring + "\n")
    stanzas, summary = [], []
    for uris, suites, components, signed_by in entries:
        s = f"Types: deb\nURIs: {' '.join(uris)}\nSuites: {' '.join(suites)}\nComponents: {' '.join(components)}\n"
        if os.path.isfile(signed_by):  # an inline key or none: the image's own keyring decides
            s += f"Signed-By: {signed_by}\n"
        stanzas.append(s)
        summary.append(f"{' '.join(uris)} {' '.join(suites)} {' '.join(components)}")
    open(os.path.join(out, "debian.sources"), "w").write("\n".join(stanzas))
    open(os.path.join(out, "summary"), "w").write("\n".join(summary) + "\n")
    open(os.path.join(out, "keyrings"), "w").write(
        "".join(e[3] + "\n" for e in entries if os.path.isfile(e[3])))

def chain(pairs, tag):
    """An ONNX model of `pairs` Identity-Relu pairs (tests/chain_model.h's): a request that takes
    seconds at O2, hand-encoded protobuf so that no onnx package is needed."""
    def field(num, payload):
        payload = payload.encode() if isinstance(payload, str) else payload
        return varint(num << 3 | 2) + varint(len(payload)) + payload
    def vint(num, v):
        return varint(num << 3) + varint(v)
    float_type = field(2, field(1, vint(1, 1)))  # TypeProto.tensor_type.elem_type = FLOAT
    nodes, prev = [], "x"
    for i in range(pairs):
        for op in ("Identity", "Relu"):
            out = f"{op}{i}"
            nodes.append(field(1, field(1, prev) + field(2, out) + field(4, op)))
            prev = out
    graph = (b"".join(nodes) + field(2, "chain") + field(11, field(1, "x") + float_type)
             + field(12, field(1, prev) + float_type))
    return vint(1, 8) + field(8, vint(2, 13)) + field(6, tag) + field(7, graph)

cmd = sys.argv[1]
if cmd == "ports":  # N free loopback TCP ports
    socks = [socket.socket() for _ in range(int(sys.argv[2]))]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    print(" ".join(str(s.getsockname()[1]) for s in socks))
elif cmd == "health":  # ADDR: print the status; exit 0 only for SERVING
    try:
        status = health(sys.argv[2])
    except Exception as e:  # grpc.RpcError and the like: say what, briefly
        status = f"error: {getattr(e, 'code', lambda: '')()} {getattr(e, 'details', lambda: e)()}".strip()
    print(status)
    sys.exit(0 if status == "SERVING" else 1)
elif cmd == "wait-serving":  # ADDR CONTAINER SECONDS
    addr, container, deadline = sys.argv[2], sys.argv[3], time.time() + float(sys.argv[4])
    last = ""
    while time.time() < deadline:
        try:
            last = health(addr, 1.0)
            if last == "SERVING":
                sys.exit(0)
        except Exception as e:
            last = str(getattr(e, "details", lambda: e)())
        if not running(container):
            sys.exit(f"container {container} is not running (last health answer: {last})")
        time.sleep(0.2)
    sys.exit(f"{addr} not SERVING after {sys.argv[4]} s (last answer: {last})")
elif cmd == "wait-metric":  # URL NAME MIN SECONDS: until the gauge NAME >= MIN
    url, name, least, deadline = sys.argv[2], sys.argv[3], float(sys.argv[4]), time.time() + float(sys.argv[5])
    while time.time() < deadline:
        try:
            v = metric(url, name)
            if v is not None and v >= least:
                sys.exit(0)
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit(f"{name} never reached {least} at {url} within {sys.argv[5]} s")
elif cmd == "report":  # FILE KEY...: the CLI's --report JSON, dotted keys, one line, tab-separated
    r = json.load(open(sys.argv[2]))
    values = []
    for key in sys.argv[3:]:
        v = r
        for part in key.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        values.append(json.dumps(v) if isinstance(v, bool) or v is None else str(v))
    print("\t".join(values))
elif cmd == "apt-sources":  # OUT RELEASE
    apt_sources(sys.argv[2])
elif cmd == "chain":  # PAIRS TAG: the model on standard output
    sys.stdout.buffer.write(chain(int(sys.argv[2]), sys.argv[3]))
else:
    sys.exit(f"helper: unknown command {cmd}")
PY
# Debian's interpreter, whose python3-grpcio install-deps.sh installs (not a pyenv's first in PATH).
helper() { /usr/bin/python3 "$tmp/helper.py" "$@"; }

# --- can podman run a container here? ----------------------------------------------------------
# podman asks runc for RLIMIT_NOFILE and RLIMIT_NPROC of 1048576 when not told otherwise (buildah
# does the same for RUN steps), and raising a hard limit needs CAP_SYS_RESOURCE, which sandboxes
# like the one this was written in refuse: "error setting rlimit type 7 (nofile) / 6 (nproc):
# operation not permitted". So every `podman run` and `podman build` here passes --ulimit values
# no higher than podman's own hard limits: nofile is `ulimit -Hn`; podman's nproc can be lower
# than the shell's (32768 here against `ulimit -Hu` 96364), so the first of a few candidates that
# runs a container wins. nproc counts a user's processes across the host, so it stays large.
ulimits=()
probe_reason=""
find_ulimits() {
  local hn hu np out
  hn=$(ulimit -Hn) hu=$(ulimit -Hu)
  [[ $hn == unlimited ]] && hn=1048576
  [[ $hu == unlimited ]] && hu=1048576
  # A container of the host's /usr/bin/true and its libraries, run from a folder (--rootfs): no
  # image needed.
  mkdir -p "$tmp/probe"
  cp --parents /usr/bin/true $(ldd /usr/bin/true | grep -o '/[^ ]*') "$tmp/probe/"
  for np in "$hu" 32768 16384 8192 4096; do
    ((np <= hu)) || continue
    if out=$(podman run --rm --network host --ulimit "nofile=$hn:$hn" --ulimit "nproc=$np:$np" \
      --rootfs "$tmp/probe" /usr/bin/true 2>&1); then
      ulimits=(--ulimit "nofile=$hn:$hn" --ulimit "nproc=$np:$np")
      return 0
    fi
    grep -q rlimit <<<"$out" || break  # another reason than the limits: no use trying lower
  done
  probe_reason="podman cannot run a container here: $(tail -1 <<<"$out")"
  return 1
}
probe() {
  [[ $(id -u) == 0 ]] || { probe_reason="needs root (rootful podman, debootstrap)"; return 1; }
  local tool
  for tool in podman debootstrap openssl /usr/bin/python3 strip; do
    command -v "$tool" >/dev/null || { probe_reason="$tool is not installed"; return 1; }
  done
  /usr/bin/python3 -c 'import grpc' 2>/dev/null ||
    { probe_reason="/usr/bin/python3 has no grpc (python3-grpcio)"; return 1; }
  local out
  out=$(podman info 2>&1 >/dev/null) || { probe_reason="podman info fails: $(tail -1 <<<"$out")"; return 1; }
  find_ulimits
}
if ! probe; then
  echo "$probe_reason" >&2
  exit 1
fi
if ((probe_only)); then
  echo "podman can run containers here (${ulimits[*]})"
  exit 0
fi
echo "image-check: podman runs containers with ${ulimits[*]}"

# --- base images: debian:bookworm and debian:bookworm-slim by debootstrap ------------------------
time_base=0
make_base_images() {
  local apt=$tmp/apt rootfs=$tmp/rootfs mirror keyring key have_full have_slim t0=$SECONDS
  helper apt-sources "$apt" "$release" || die "cannot read this machine's apt sources"
  mirror=$(<"$apt/mirror") keyring=$(<"$apt/keyring")
  # apt settings of this machine that a mirror may need (a snapshot's expired Release files, a
  # proxy) go into the images too.
  apt-config dump | grep -E '^Acquire::(Check-Valid-Until|Check-Date|https?::Proxy) ' \
    >"$apt/host.conf" || true
  key=$(cat "$apt/summary" "$apt/host.conf" | sha256sum | cut -c1-16)
  have_full=$(base_label "$base_full") have_slim=$(base_label "$base_slim")
  if ((!rebuild_base)) && [[ $have_full == "$key" && $have_slim == "$key" ]]; then
    echo "image-check: base images $base_full and $base_slim exist for this mirror ($mirror): reused"
    return
  fi
  echo "image-check: making $base_full and $base_slim with debootstrap from $mirror"
  local proxy
  proxy=$(sed -n 's/^Acquire::http::Proxy "\(.*\)";$/\1/p' "$apt/host.conf")
  local args=(--variant=minbase --components=main)
  [[ -n $keyring ]] && args+=(--keyring="$keyring")
  if ! http_proxy=${proxy:-${http_proxy:-}} debootstrap "${args[@]}" "$release" "$rootfs" "$mirror" \
    >"$tmp/debootstrap.log" 2>&1; then
    tail -30 "$tmp/debootstrap.log" >&2
    die "debootstrap failed (above: the end of its log)"
  fi
  local t_debootstrap=$((SECONDS - t0))

  # What the official images have (debuerreotype): the apt sources (deb822), no caches kept
  # after installs, no translations, compressed indexes, no services started by installs.
  rm -f "$rootfs/etc/apt/sources.list"
  cp "$apt/debian.sources" "$rootfs/etc/apt/sources.list.d/debian.sources"
  local k
  while read -r k; do
    [[ -n $k && ! -e $rootfs$k ]] && install -D -m 0644 "$k" "$rootfs$k"
  done <"$apt/keyrings"
  [[ -s $apt/host.conf ]] && cp "$apt/host.conf" "$rootfs/etc/apt/apt.conf.d/99graft-host"
  cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/docker-no-languages"
  echo 'Acquire::GzipIndexes "true";' >"$rootfs/etc/apt/apt.conf.d/docker-gzip-indexes"
  echo 'Apt::AutoRemove::SuggestsImportant "false";' \
    >"$rootfs/etc/apt/apt.conf.d/docker-autoremove-suggests"
  echo 'force-unsafe-io' >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
  printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
  chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
  # The updates and security suites, which debootstrap does not read.
  cp -L /etc/resolv.conf "$rootfs/etc/resolv.conf"
  mount -t proc proc "$rootfs/proc"
  if ! chroot "$rootfs" sh -c \
    'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -y -qq upgrade' \
    >"$tmp/upgrade.log" 2>&1; then
    tail -30 "$tmp/upgrade.log" >&2
    die "apt-get upgrade in the new rootfs failed (above: the end of its log)"
  fi
  umount "$rootfs/proc"
  chroot "$rootfs" apt-get clean
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/log/apt/* \
    "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/lib/dpkg/*-old
  rm -f "$rootfs"/var/log/*.log "$rootfs/etc/resolv.conf" "$rootfs/etc/hostname"

  local old_ids
  old_ids=$(podman image inspect --format '{{.Id}}' "$base_full" "$base_slim" 2>/dev/null || true)
  import_rootfs "$base_full" "$key" "$mirror"
  # slim: what debuerreotype's slimify leaves out, now and in later installs.
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
# The "slim" variant: no documentation, manual pages or translations.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
  find "$rootfs/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$rootfs"/usr/share/{groff,info,linda,lintian/overrides,locale,man}/*
  import_rootfs "$base_slim" "$key" "$mirror"
  rm -rf --one-file-system "$rootfs"
  remove_images $old_ids
  time_base=$((SECONDS - t0))
  echo "image-check: base images made in $time_base s (debootstrap $t_debootstrap s)"
}
base_label() { podman image inspect --format "{{index .Labels \"$mirror_label\"}}" "$1" 2>/dev/null || true; }
# The images that this run's new ones untagged (base images made again, an image built again
# under its tag) go, unless a container uses them (images built on them keep their layers).
remove_images() {
  local id
  for id; do podman rmi "$id" >/dev/null 2>&1 || true; done
}
import_rootfs() {  # NAME KEY MIRROR
  tar -C "$tmp/rootfs" --numeric-owner --xattrs --xattrs-include='*' \
    --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -cf - . |
    podman import --quiet --change 'CMD ["bash"]' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change "LABEL $mirror_label=$2" --change "LABEL org.graft.apt-mirror=$3" - "$1" >/dev/null
}
# One run at a time makes the base images.
exec 9>/run/lock/graft-image-check.lock
flock 9
make_base_images
exec 9>&-

# --- the image ------------------------------------------------------------------------------------
t0=$SECONDS
old_id=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
# --layers=false: no intermediate images (the source build's stage is gigabytes) are kept.
build_args=(--pull=never --network host "${ulimits[@]}" --layers=false -f "$PWD/Dockerfile"
  -t "$tag")
if [[ -n $prebuilt ]]; then
  for b in server/graftd client/graft; do
    [[ -x $prebuilt/$b ]] || die "$prebuilt/$b does not exist (build it first: scripts/build.sh)"
  done
  # A context of only what the Dockerfile reads, with the binaries stripped of their debug
  # information (about 117 MB each with -g1 against 6 MB).
  context=$tmp/context
  mkdir -p "$context/prebuilt/server" "$context/prebuilt/client" "$context/deploy/docker" \
    "$context/scripts"
  strip --strip-debug -o "$context/prebuilt/server/graftd" "$prebuilt/server/graftd"
  strip --strip-debug -o "$context/prebuilt/client/graft" "$prebuilt/client/graft"
  cp deploy/docker/graftd.yaml "$context/deploy/docker/"
  cp scripts/install-deps.sh "$context/scripts/"
  build_args+=(--build-arg GRAFT_BINARIES=prebuilt)
  what="prebuilt binaries from $prebuilt"
else
  context=$PWD  # with .dockerignore, as `docker build .`
  build_args+=(--build-arg GRAFT_BINARIES=source)
  what="graftd and graft built from source in the image"
fi
echo "image-check: building $tag ($what)"
podman build "${build_args[@]}" "$context" || die "podman build failed"
time_build=$((SECONDS - t0))
new_id=$(podman image inspect --format '{{.Id}}' "$tag")
[[ -n $old_id && $old_id != "$new_id" ]] && remove_images "$old_id"
size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "image-check: built $tag in $time_build s: $(numfmt --to=si --suffix=B "$size") ($size bytes)"

# --- the checks -----------------------------------------------------------------------------------
t0=$SECONDS
io=$tmp/io  # mounted at /io in the client containers, which run as the image's user 10001
mkdir -p "$io" && chmod 0777 "$io"
cp "$example" "$io/model.onnx"
chmod 0644 "$io/model.onnx"
cli() {  # the image's graft, on the host network
  podman run --rm --name "$run_id-cli-$RANDOM$RANDOM" --network host "${ulimits[@]}" \
    -v "$io:/io" -w /io -e GRAFT_DIGEST_CACHE=/tmp/digests --entrypoint /usr/local/bin/graft \
    "$tag" "$@"
}
start_server() {  # NAME PODMAN-RUN-ARGS... -- GRAFTD-ARGS...
  server=$1
  shift
  local run=()
  while [[ $1 != -- ]]; do run+=("$1"); shift; done
  shift
  podman run -d --name "$server" --network host "${ulimits[@]}" "${run[@]}" "$tag" "$@" \
    >/dev/null || fail "podman run of $tag failed"
}

read -r port metrics_port tls_port tls_metrics_port health_port <<<"$(helper ports 5)"
addr=127.0.0.1:$port

# graftd as the image runs it (its config file), on loopback ports and with a grace period long
# enough for the SIGTERM check on a loaded machine.
start_server "$run_id-plain" -- --config /etc/graftd/graftd.yaml --listen "$addr" \
  --metrics-listen "127.0.0.1:$metrics_port" --grace-period-seconds 120
helper wait-serving "$addr" "$server" 60 || fail "graftd did not start"
out=$(cli health --server "$addr" 2>&1) && [[ $out == SERVING ]] ||
  fail "health: graft health --server $addr said: $out"
ok "health: graft health --server $addr says SERVING"

# The example of scripts/run.sh, verified.
verify=(--verify --verify-shape x=1,3,48,192)
out=$(cli optimize /io/model.onnx -o /io/out1.onnx --server "$addr" "${verify[@]}" \
  --report /io/report1.json -q 2>&1) || fail "optimize: graft optimize --verify failed: $out"
IFS=$'\t' read -r hit status message nodes_in nodes_out < <(helper report "$io/report1.json" \
  cache_hit verification.status verification.message nodes_before nodes_after)
[[ $status == verified && $hit == false ]] ||
  fail "optimize: expected a verified cache miss, got verification '$status' ($message), cache_hit $hit"
ok "optimize: $example --verify: $nodes_in -> $nodes_out nodes, verified ($message)"

out=$(cli optimize /io/model.onnx -o /io/out2.onnx --server "$addr" "${verify[@]}" \
  --report /io/report2.json -q 2>&1) || fail "cache: the second graft optimize failed: $out"
IFS=$'\t' read -r hit status < <(helper report "$io/report2.json" cache_hit verification.status)
[[ $hit == true ]] || fail "cache: the identical second request was not a cache hit (cache_hit $hit)"
cmp -s "$io/out1.onnx" "$io/out2.onnx" || fail "cache: the cached result differs from the first"
ok "cache: the identical request again is a cache hit (verification '$status'), same model back"

# SIGTERM while a request of several seconds is in flight: graftd drains, the request succeeds,
# graftd exits 0. The request is in flight once graftd's gauge says so (the upload alone can take
# a while on a loaded machine).
pairs=100000
helper chain "$pairs" "image-check $$" >"$io/chain.onnx"
chmod 0644 "$io/chain.onnx"
# --no-lookup: the Optimize call only (a Lookup first could be the call in flight at SIGTERM,
# and the Optimize after it would rightly be refused).
cli optimize /io/chain.onnx -o /io/chain.opt.onnx --server "$addr" --timeout 600 --no-lookup \
  --report /io/report3.json -q >"$tmp/drain-client.log" 2>&1 &
client=$!
helper wait-metric "http://127.0.0.1:$metrics_port/metrics" graft_inflight_requests 1 120 ||
  fail "sigterm: the request never reached graftd; the client said: $(cat "$tmp/drain-client.log")"
t_term=$SECONDS
kill -0 "$client" 2>/dev/null || fail "sigterm: the request ended before SIGTERM was sent"
podman kill --signal TERM "$server" >/dev/null
client_rc=0
wait "$client" || client_rc=$?
((client_rc == 0)) || fail "sigterm: the in-flight request failed (exit $client_rc): $(cat "$tmp/drain-client.log")"
after_term=$((SECONDS - t_term))
exit_code=$(timeout 180 podman wait "$server") || fail "sigterm: graftd did not exit within 180 s"
[[ $exit_code == 0 ]] || fail "sigterm: graftd exited $exit_code after draining"
# The request was answered after the signal, as the log's order shows.
answered=$(podman logs "$server" 2>&1 | awk '/received signal 15/ {t = 1}
  t && /method=Optimize/ && /status=OK/ {sub(/.*duration_ms=/, ""); sub(/ .*/, ""); print; exit}')
[[ -n $answered ]] || fail "sigterm: graftd's log shows no Optimize answered after the signal"
[[ -s $io/chain.opt.onnx ]] || fail "sigterm: no optimized model written"
ok "sigterm: SIGTERM with a request in flight (chain of $((2 * pairs)) nodes, $((${answered%.*} / 1000)) s in graftd): it succeeded (client done ${after_term} s after the signal), graftd drained and exited 0"

# TLS with client certificates (mTLS, as deploy/overlays/production): a throwaway CA signs
# graftd's certificate (for 127.0.0.1 and localhost) and a client's; the config file is the
# image's with the TLS keys set, mounted over it with the certificates.
tls=$tmp/tls
mkdir -p "$tls"
(
  cd "$tls"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 \
    -subj "/CN=graft image-check CA" 2>/dev/null
  for who in server client; do
    openssl req -newkey rsa:2048 -nodes -keyout "$who.key" -out "$who.csr" \
      -subj "/CN=graft image-check $who" 2>/dev/null
  done
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
  printf 'extendedKeyUsage=clientAuth\n' >client.ext
  for who in server client; do
    openssl x509 -req -in "$who.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile "$who.ext" -out "$who.crt" 2>/dev/null
  done
) || fail "tls: openssl could not make the certificates"
chmod 0644 "$tls"/*  # readable by graftd's user 10001 (throwaway keys)
sed -e "s|^listen: .*|listen: \"127.0.0.1:$tls_port\"|" \
  -e "s|^metrics_listen: .*|metrics_listen: \"127.0.0.1:$tls_metrics_port\"|" \
  -e 's|^tls_cert_file: .*|tls_cert_file: "/etc/graftd-tls/server.crt"|' \
  -e 's|^tls_key_file: .*|tls_key_file: "/etc/graftd-tls/server.key"|' \
  -e 's|^tls_client_ca_file: .*|tls_client_ca_file: "/etc/graftd-tls/ca.crt"|' \
  -e 's|^tls_client_auth: .*|tls_client_auth: "require"|' \
  -e "s|^health_listen: .*|health_listen: \"127.0.0.1:$health_port\"|" \
  deploy/docker/graftd.yaml >"$tmp/graftd-tls.yaml"
[[ $(grep -c -E "^(listen|metrics_listen|tls_cert_file|tls_key_file|tls_client_ca_file|tls_client_auth|health_listen): \"(127|/etc/graftd-tls|require)" "$tmp/graftd-tls.yaml") == 7 ]] ||
  fail "tls: deploy/docker/graftd.yaml no longer has the keys this check sets"
chmod 0644 "$tmp/graftd-tls.yaml"
cp -r "$tls" "$io/tls"
tls_addr=127.0.0.1:$tls_port
start_server "$run_id-tls" -v "$tmp/graftd-tls.yaml:/etc/graftd/graftd.yaml:ro" \
  -v "$tls:/etc/graftd-tls:ro" --
helper wait-serving "127.0.0.1:$health_port" "$server" 60 || fail "tls: graftd did not start"
mtls=(--server "$tls_addr" --ca /io/tls/ca.crt --cert /io/tls/client.crt --key /io/tls/client.key)
out=$(cli health "${mtls[@]}" 2>&1) && [[ $out == SERVING ]] ||
  fail "tls: graft health with the CA and a client certificate said: $out"
out=$(cli optimize /io/model.onnx -o /io/out-tls.onnx "${mtls[@]}" "${verify[@]}" \
  --report /io/report-tls.json -q 2>&1) || fail "tls: graft optimize over mTLS failed: $out"
IFS=$'\t' read -r status < <(helper report "$io/report-tls.json" verification.status)
[[ $status == verified ]] || fail "tls: optimize over mTLS: verification '$status'"
ok "tls: graft health and optimize --verify with the CA and a client certificate: SERVING, verified"
if out=$(cli health --server "$tls_addr" 2>&1); then
  fail "tls: a plaintext client was served: $out"
fi
ok "tls: a plaintext client is refused ($(tail -1 <<<"$out" | cut -c1-100))"
if out=$(cli health --server "$tls_addr" --ca /io/tls/ca.crt 2>&1); then
  fail "tls: a TLS client without a certificate was served: $out"
fi
ok "tls: a TLS client without a client certificate is refused ($(tail -1 <<<"$out" | cut -c1-80))"
out=$(helper health "127.0.0.1:$health_port") || fail "tls: the plaintext health port said: $out"
ok "tls: the plaintext health port (health_listen) says SERVING"
podman stop -t 60 "$server" >/dev/null
exit_code=$(podman wait "$server")
[[ $exit_code == 0 ]] || fail "tls: graftd exited $exit_code after podman stop"
server=""
time_checks=$((SECONDS - t0))

echo "image-check: $tag, $(numfmt --to=si --suffix=B "$size"): base images ${time_base} s, build ${time_build} s ($what), checks ${time_checks} s, total $((SECONDS - start)) s"
exit
}
