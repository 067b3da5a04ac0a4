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
COPY Tests Tests
# The same flags as scripts/lib/infra.sh's RELEASE_BUILD (the binaries the benchmarks measure).
# Each executable gets a folder /out/<name>: the binary, its resource bundle, and `packages`, the
# Debian packages (not -dev) that hold the shared libraries it links.
RUN swift build -c release --static-swift-stdlib -Xlinker --no-export-dynamic \
 && bin=$(swift build -c release --static-swift-stdlib -Xlinker --no-export-dynamic --show-bin-path) \
 && for name in gateway $(awk '!/^#/ && NF { print $1 }' services.txt); do \
      target=$(printf '%s' "$name" | cut -c1 | tr a-z A-Z)$(printf '%s' "$name" | cut -c2-); \
      mkdir -p "/out/$name" && cp "$bin/$name" "/out/$name/" && cp -R "$bin"/*_"$target".resources "/out/$name/" \
      && ldd "$bin/$name" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' \
         | while read -r library; do dpkg -S "*/$(basename "$library")" 2>/dev/null | cut -d: -f1; done \
         | grep -v -- '-dev$' | sort -u > "/out/$name/packages" \
      && test -s "/out/$name/packages" || exit 1; \
    done

FROM ${RUNTIME_IMAGE}
# gateway, or a name in services.txt.
ARG SERVICE=gateway
ARG VERSION=unversioned
ARG REVISION=unknown
COPY --from=build /out/${SERVICE}/packages /tmp/packages
# Its libraries; fonts where it draws text (Pango: nutrition's share cards); curl for the
# compose healthchecks; openssl for the compose stack's signing key.
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(cat /tmp/packages) \
      $(grep -q '^libpango' /tmp/packages && echo fontconfig fonts-dejavu-core) ca-certificates curl openssl tzdata \
 && rm -rf /var/lib/apt/lists/* /tmp/packages \
 && groupadd --system --gid 10001 app && useradd --system --uid 10001 --gid 10001 app
COPY --from=build /out/${SERVICE} /app
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
