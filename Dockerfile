# A static csi-pv-controller on a distroless base (no shell, non-root).
#   docker build -t csi-pv-controller:latest .
FROM docker.io/library/rust:1.91-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --locked --release --target x86_64-unknown-linux-musl --bin csi-pv-controller

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/target/x86_64-unknown-linux-musl/release/csi-pv-controller /csi-pv-controller
USER 65532:65532
ENTRYPOINT ["/csi-pv-controller"]
