# graftd (gRPC optimization service) and the graft CLI on Debian 12.
#   docker build -t graftd:0.1.0 .
#   docker run --rm -p 50051:50051 -p 9464:9464 graftd:0.1.0
# graftd drains for grace_period_seconds (25) after SIGTERM, longer than docker stop's default
# 10 s: stop it with `docker stop -t 30` (compose: stop_grace_period: 30s).
# scripts/image-check.sh builds this file with podman and smoke-tests the image.

# Where graftd and graft come from: "source" (the default) builds them in build-source below;
# "prebuilt" takes binaries already built on Debian 12 from the context's
# prebuilt/server/graftd and prebuilt/client/graft (build/'s layout), as they are: strip them
# first (`strip --strip-debug`; scripts/image-check.sh --prebuilt does). The runtime stage is
# the same for both.
#   docker build --build-arg GRAFT_BINARIES=prebuilt -t graftd:0.1.0 .
# No default here but `:-source` where it is used: buildah 1.28 (Debian 12's podman) does not
# find a stage named through an ARG's default value.
ARG GRAFT_BINARIES

# --- build-source: the same dependency script and CMake build as a developer machine --------
FROM debian:bookworm AS build-source
# Only the install script first, so the dependency layer survives source changes.
COPY scripts/install-deps.sh /src/scripts/install-deps.sh
RUN /src/scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . /src
WORKDIR /src
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DGRAFT_BUILD_TESTS=OFF -DGRAFT_BUILD_BENCH=OFF \
 && cmake --build build --target graftd graft

# --- build-prebuilt: binaries from the context, where build-source would have left them -----
# prebuil[t] next to a file that always exists: Docker's legacy builder (docker build without
# BuildKit, as Debian 12's docker.io) builds every stage, whichever is used, and there a pattern
# that matches nothing is no error when another source exists. The folder's contents land in
# /src/build.
FROM scratch AS build-prebuilt
COPY deploy/docker/graftd.yaml prebuil[t] /src/build/

FROM build-${GRAFT_BINARIES:-source} AS build
# An instruction, so that this stage is an image of its own: without one, buildah 1.28's
# --layers=false build fails at the end ("identifier is not an image").
WORKDIR /src

# --- runtime: shared libraries only, no compiler, no headers ---------------------------------
FROM debian:bookworm-slim
ARG DEBIAN_FRONTEND=noninteractive
# The runtime halves of the -dev packages in scripts/install-deps.sh (their dependencies, such
# as libgrpc29 and libfmt9, come along; libcivetweb1 is named as graftd links it itself: its
# HTTP listener; libopenblas0-serial is libopenblas-serial-dev's runtime half, the evaluator's
# dgemm). Boost.Asio, CLI11 and nlohmann-json are header-only.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libabsl20220623 \
      libcivetweb1 \
      libgrpc++1.51 \
      libhiredis0.14 \
      libonnx1 \
      libopenblas0-serial \
      libprometheus-cpp-core1.0 \
      libprometheus-cpp-pull1.0 \
      libprotobuf32 \
      libspdlog1.10 \
      libssl3 \
      libyaml-cpp0.7 \
 && rm -rf /var/lib/apt/lists/*
# A fixed UID/GID: deploy/base/deployment.yaml runs the pod as 10001 with runAsNonRoot.
RUN groupadd --gid 10001 graftd \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin graftd
COPY --from=build /src/build/server/graftd /src/build/client/graft /usr/local/bin/
COPY deploy/docker/graftd.yaml /etc/graftd/graftd.yaml
# Fail the image build, not the first container start, if a shared library is missing.
RUN ! ldd /usr/local/bin/graftd /usr/local/bin/graft | grep 'not found' \
 && /usr/local/bin/graftd --help >/dev/null \
 && /usr/local/bin/graft --help >/dev/null
# The spool (deploy/docker/graftd.yaml spool.dir: external-data uploads, on disk), writable by
# graftd; mount a volume there for multi-GB models.
RUN mkdir -p /var/lib/graftd/spool && chown 10001:10001 /var/lib/graftd/spool
VOLUME /var/lib/graftd/spool
USER 10001:10001
# gRPC (listen) and Prometheus /metrics (metrics_listen), as in deploy/docker/graftd.yaml.
EXPOSE 50051 9464
ENTRYPOINT ["/usr/local/bin/graftd"]
CMD ["--config", "/etc/graftd/graftd.yaml"]
