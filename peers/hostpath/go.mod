// Pins csi-driver-host-path's hostpathplugin, the real driver the suite should also run against.
// Blocked on these machines: the Go module proxy answers 403 "This module version is not
// available" for every version of github.com/kubernetes-csi/csi-driver-host-path, so this module
// has no go.sum and `peers/build.sh hostpath` fails with that answer. Kept so that the build works
// as soon as the module can be fetched: `go mod tidy` here, then `make peers-hostpath`.
module peers/hostpath

go 1.26.0

tool github.com/kubernetes-csi/csi-driver-host-path/cmd/hostpathplugin

require github.com/kubernetes-csi/csi-driver-host-path v1.19.0
