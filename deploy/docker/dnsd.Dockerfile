# dnsd: DNS answered from etcd-loaded memory.
# Build from the repository root (BuildKit reads dnsd.Dockerfile.dockerignore):
#   docker build -f deploy/docker/dnsd.Dockerfile --build-arg VERSION=$(git describe --tags --always) -t etcdns/dnsd .
ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS TARGETARCH VERSION=dev
WORKDIR /src
# Modules first: a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static: no cgo, so no libc needed in the image; -trimpath keeps build paths out.
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X github.com/etcdns/etcdns.Version=${VERSION}" \
    -o /out/dnsd ./cmd/dnsd

# No shell, no package manager: only the binary, CA certificates and tzdata.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/dnsd /dnsd
# Numeric, so the kubelet can check runAsNonRoot; the manifests run as 65532 too.
USER 65532:65532
EXPOSE 1053/udp 1053/tcp 9153/tcp
ENTRYPOINT ["/dnsd"]
