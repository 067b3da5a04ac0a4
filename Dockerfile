# One image per process: the gateway's, or one service's of services.txt, holding only its
# executable, its resources and the Debian libraries it links.
#   docker build --build-arg SERVICE=auth --build-arg VERSION="$(git describe --tags --always --dirty)" -t foodbackend-auth .
# The build stage compiles every executable once and is shared by the images (its layers do not
# depend on SERVICE). VERSION is what `<executable> --version` prints and the image's OCI labels say;
# docs/DEPLOY.md has the release steps. The base images are build arguments, defaulting to the
# public ones; both must be the same Debian release (the libraries found in the first are installed
# in the second by package name).
ARG SWIFT_IMAGE=swift:6.3-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim
# The executables may also come from a release build made elsewhere (on a Debian host of
# RUNTIME_IMAGE's release, with the flags below): a folder whose out/ scripts/lib/image-binaries
# wrote, given as the build context named `build`, takes the build stage's place, which is then
# not built (scripts/compose-test does this):
#   scripts/lib/image-binaries .build/release /tmp/images/out
#   docker build --build-context build=/tmp/images --build-arg SERVICE=auth -t foodbackend-auth .

FROM ${SWIFT_IMAGE} AS build
RUN apt-get update && apt-get install -y --no-install-recommends libhiredis-dev libcurl4-openssl-dev libidn2-dev libvips-dev libcairo2-dev libpango1.0-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Resolve first so that dependency fetching is cached apart from our sources (resolving needs only
# the manifest, not the target folders; a failure stops the build here).
COPY Package.swift ./
RUN swift package resolve
# The services to ship: the first word of each line of services.txt that is not a comment.
COPY services.txt ./
COPY Shared Shared
COPY Services Services
# The manifest names the tests' and the Swift client's folders too: they must be there for it to load.
COPY Tests Tests
COPY Clients Clients
COPY scripts/lib/build-executables scripts/lib/image-binaries scripts/lib/
# The same flags as scripts/lib/infra.sh's RELEASE_BUILD (the binaries the benchmarks measure).
# Each executable gets a folder /out/<name>: the binary, its resource bundle, and `packages`, the
# Debian packages (not -dev) that hold the shared libraries it links.
RUN scripts/lib/build-executables -c release --static-swift-stdlib -Xlinker --no-export-dynamic \
 && scripts/lib/image-binaries "$(swift build -c release --static-swift-stdlib -Xlinker --no-export-dynamic --show-bin-path)" /out

FROM ${RUNTIME_IMAGE}
# gateway, or a name in services.txt.
ARG SERVICE=gateway
COPY --from=build /out/${SERVICE}/packages /tmp/packages
# Its libraries; fonts where it draws text (Pango: nutrition's share cards); curl for the
# compose healthchecks; openssl for the compose stack's signing key, which /keys holds: the
# image's user owns it, so a named volume mounted there (Docker copies the directory's owner into
# a new volume) is the user's to write.
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(cat /tmp/packages) \
      $(grep -q '^libpango' /tmp/packages && echo fontconfig fonts-dejavu-core) ca-certificates curl openssl tzdata \
 && rm -rf /var/lib/apt/lists/* /tmp/packages \
 && groupadd --system --gid 10001 app && useradd --system --uid 10001 --gid 10001 app \
 && mkdir /keys && chown 10001:10001 /keys
COPY --from=build /out/${SERVICE} /app
# Declared after the packages are installed: a build argument is part of the cache key of every RUN
# after it, and a new version should not install them again.
ARG VERSION=unversioned
ARG REVISION=unknown
# The version `--version` reads beside the executable; /app/service is the entry point whatever the
# image holds, so that Kubernetes' `args` and compose's `command` are subcommands (serve, migrate).
RUN rm /app/packages && printf '%s\n' "$VERSION" > /app/VERSION && ln -s "$SERVICE" /app/service
LABEL org.opencontainers.image.title="foodbackend-${SERVICE}" \
      org.opencontainers.image.description="Food Backend: ${SERVICE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
# By number, so that Kubernetes can see it is not root (runAsNonRoot).
USER 10001:10001
WORKDIR /app
# The root file system may be read-only (Kubernetes): caches (fontconfig's) go to /tmp.
ENV HTTP_HOST=0.0.0.0 APP_ENV=production XDG_CACHE_HOME=/tmp/.cache
EXPOSE 8080
ENTRYPOINT ["/app/service"]
CMD ["serve"]
