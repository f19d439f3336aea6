# publisher: Kubernetes objects -> etcd records.
# Build from the repository root (BuildKit reads publisher.Dockerfile.dockerignore):
#   docker build -f deploy/docker/publisher.Dockerfile --build-arg VERSION=$(git describe --tags --always) -t etcdns/publisher .
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
    -o /out/publisher ./cmd/publisher

# No shell, no package manager: only the binary, CA certificates and tzdata.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/publisher /publisher
# Numeric, so the kubelet can check runAsNonRoot; the manifests run as 65532 too.
USER 65532:65532
EXPOSE 9154/tcp
ENTRYPOINT ["/publisher"]
