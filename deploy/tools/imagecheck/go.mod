module github.com/geo-sidecar/geo-sidecar/deploy/tools/imagecheck

go 1.26.8
