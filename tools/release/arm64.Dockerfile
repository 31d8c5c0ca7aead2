# The release's linux/arm64 image (tools/release/arm64.sh builds it; docs/releasing.md): what
# services/Dockerfile's production stage makes, for arm64, with as little as possible under emulation.
# BUILD_IMAGE is services/Dockerfile's build stage (amd64: the models converted, dist/ compiled: neither
# depends on the architecture); NODE_BASE_ARM64 the arm64 Node base (.ci/docker-base.sh --arch arm64).
ARG BUILD_IMAGE
ARG NODE_BASE_ARM64

# Natively, on the amd64 build stage: the JPEG addon cross-compiled for arm64 against Debian's arm64
# libjpeg-turbo (multiarch), the production dependencies for arm64 (npm ci --cpu arm64: sharp's arm64
# packages; onnxruntime's arm64 binaries), and the arm64 Node binary stripped.
FROM ${NODE_BASE_ARM64} AS node-arm64
FROM ${BUILD_IMAGE} AS cross
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN cp /etc/ssl/certs/ca-certificates.crt /tmp/base-ca.crt \
    && dpkg --add-architecture arm64 \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu=4:12.2.0-3 \
       libjpeg62-turbo-dev:arm64=1:2.1.5-2 \
    && cp /tmp/base-ca.crt /etc/ssl/certs/ca-certificates.crt \
    && rm -rf /var/lib/apt/lists/* /tmp/base-ca.crt
COPY --from=node-arm64 /usr/local/bin/node /tmp/node-arm64
RUN rm -f services/detect/image/libjpeg/build/jpeg-tensor.node \
    && CC=aarch64-linux-gnu-gcc node --import tsx services/detect/image/libjpeg/build.ts --required \
    && aarch64-linux-gnu-readelf -h services/detect/image/libjpeg/build/jpeg-tensor.node | grep -q 'Machine: *AArch64' \
    && cp services/detect/image/libjpeg/build/jpeg-tensor.node dist/services/detect/image/libjpeg/build/jpeg-tensor.node \
    && bash tools/build/production-modules.sh arm64 \
    && aarch64-linux-gnu-strip --strip-all -o /app/node /tmp/node-arm64 \
    && mkdir /app/libjpeg && cp -L /usr/lib/aarch64-linux-gnu/libjpeg.so.62 /app/libjpeg/

# Under emulation, on the arm64 base: the runtime's root filesystem, the system libraries as the arm64
# loader resolves them (tools/build/runtime-root.sh, as the amd64 image's).
FROM ${NODE_BASE_ARM64} AS production
WORKDIR /app
COPY --from=cross /app/libjpeg/libjpeg.so.62 /usr/lib/aarch64-linux-gnu/libjpeg.so.62
COPY --from=cross /app/node_modules ./node_modules
COPY --from=cross /app/dist ./dist
COPY --from=cross /app/node /tmp/node
COPY tools/build/runtime-root.sh /tmp/runtime-root.sh
RUN bash /tmp/runtime-root.sh /tmp/node \
    && mkdir /runtime/app && mv node_modules dist /runtime/app/

# The files alone: tools/release/arm64.sh imports them as a linux/arm64 image with the amd64 image's
# configuration (environment, user, entry point), so that the two cannot differ.
FROM scratch
COPY --from=production /runtime/ /
