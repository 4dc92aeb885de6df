# syntax=docker/dockerfile:1
# resmux: a multi-stage build. The builder compiles the release binary; the runtime image is
# Debian slim with the binary, the CA roots and a non-root user, nothing else.
#   docker build -t resmux .
#   docker run -p 8080:8080 -p 9090:9090 -v $PWD/config/sidecar.toml:/etc/resmux/resmux.toml:ro resmux

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY loadtests/Cargo.toml loadtests/Cargo.toml
COPY src src
COPY loadtests/src loadtests/src
COPY benches benches
RUN cargo build --release --locked -p resmux && strip target/release/resmux

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 resmux \
 && useradd --system --uid 10001 --gid resmux --home-dir /nonexistent --shell /usr/sbin/nologin resmux \
 && mkdir -p /etc/resmux
COPY --from=build /src/target/release/resmux /usr/local/bin/resmux
COPY config/sidecar.toml /etc/resmux/resmux.toml
USER 10001:10001
EXPOSE 8080 9090
# Liveness from the admin listener (the config must set [admin] addr, as config/sidecar.toml does).
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/resmux", "health", "--url", "http://127.0.0.1:9090/healthz"]
ENTRYPOINT ["/usr/local/bin/resmux"]
CMD ["serve", "-c", "/etc/resmux/resmux.toml"]
