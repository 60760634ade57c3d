# Builds the same binary as `make build` (the e2e suite checks that the
# build command here and in the Makefile agree).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=docker" -o /geo-sidecar ./cmd/geo-sidecar

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /geo-sidecar /geo-sidecar
# Metrics and health bind to loopback by default; set sidecar.listen to
# 0.0.0.0:9750 in the config to expose them from a container.
EXPOSE 9750
ENTRYPOINT ["/geo-sidecar"]
CMD ["run", "--config", "/etc/geo-sidecar/config.yaml"]
