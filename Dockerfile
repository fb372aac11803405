# Multi-stage build of a static etcd-pilot binary on a distroless, non-root base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# The flags of `make build` for bin/etcd-pilot (OPERATOR_LDFLAGS): test/packaging keeps them equal.
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/etcd-pilot/etcd-pilot/internal/cli.Version=${VERSION}" \
      -o /out/etcd-pilot .

FROM gcr.io/distroless/static:nonroot
# The binary lives where the local cluster runs the operator image from, so a pod spec that
# names the command (the backup pods do) works in both.
COPY --from=build /out/etcd-pilot /usr/local/bin/etcd-pilot
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/etcd-pilot"]
CMD ["manager"]
