# syntax=docker/dockerfile:1
#
# docker build --build-arg VERSION=$(git describe --tags --always) -t reconciler:$(git describe --tags --always) .
#
# The build stage runs scripts/build.sh, the same command CI runs
# (scripts/check-build.sh), so the binary tested is the binary shipped.

FROM golang:1.26-bookworm AS build
ARG VERSION=dev
WORKDIR /src
# Dependencies first, for the layer cache.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN VERSION="${VERSION}" scripts/build.sh /out/reconciler \
 && /out/reconciler version \
 && echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' > /out/passwd \
 && echo 'nonroot:x:65532:' > /out/group

FROM scratch
ARG VERSION=dev
LABEL org.opencontainers.image.title="reconciler" \
      org.opencontainers.image.description="Reconciles payment-provider state (Stripe) into PostgreSQL" \
      org.opencontainers.image.source="https://github.com/reconciler/reconciler" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="" \
      org.opencontainers.image.documentation="https://github.com/reconciler/reconciler/blob/main/docs/operations.md"
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/passwd /etc/passwd
COPY --from=build /out/group /etc/group
COPY --from=build /out/reconciler /reconciler
USER 65532:65532
# serve mode listens here (RECONCILER_HTTP_ADDR, default :8080).
EXPOSE 8080
ENTRYPOINT ["/reconciler"]
CMD ["run"]
