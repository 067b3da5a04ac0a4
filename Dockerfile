# One image holds the gateway and every service in services.txt; docker-compose.yml picks the
# command per service.
# Build: docker build -t foodbackend .
ARG SWIFT_IMAGE=swift:6.3-bookworm

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
RUN swift build -c release --static-swift-stdlib -Xlinker --no-export-dynamic \
 && mkdir -p /out \
 && bin=$(swift build -c release --static-swift-stdlib -Xlinker --no-export-dynamic --show-bin-path) \
 && cp "$bin"/gateway $(awk -v bin="$bin" '!/^#/ && NF { print bin "/" $1 }' services.txt) /out/ \
 && cp -R "$bin"/*.resources /out/

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libhiredis0.14 libcurl4 libidn2-0 libvips42 libcairo2 libpangocairo-1.0-0 fontconfig fonts-dejavu-core ca-certificates curl openssl tzdata \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 app
COPY --from=build /out /app
USER app
WORKDIR /app
ENV HTTP_HOST=0.0.0.0 APP_ENV=production
EXPOSE 8080
CMD ["/app/gateway"]
