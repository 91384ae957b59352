// Package e2e builds Kubernetes' e2e test binary with the storage suites an external CSI driver
// is checked with ("External Storage": one Describe per -storage.testdriver file) and nothing
// else, so that the binary is a fraction of upstream's full e2e.test. Build it with
// `go test -c -o e2e.test ./e2e`; it takes upstream's flags (see peers/build.sh and `make e2e`).
package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	manifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	"k8s.io/kubernetes/test/fixtures"

	// Feature and label names are frozen before any spec is defined.
	_ "k8s.io/kubernetes/test/e2e/feature"
	// The suites: only the external-driver storage tests, defined while flags are parsed.
	_ "k8s.io/kubernetes/test/e2e/storage/external"
	// The framework's hooks that upstream's binary installs too.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/format"
)

// TestMain parses the framework's flags first: each -storage.testdriver defines its specs while
// it is parsed, before ginkgo builds the tree.
func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if flag.CommandLine.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unexpected arguments: %v\n", flag.CommandLine.Args())
		os.Exit(2)
	}
	// The manifests the suites read (storage classes, snapshot classes) are embedded.
	testfiles.AddFileSource(manifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(fixtures.GetTestFixturesFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	// Files a driver definition names (a VolumeAttributesClass, a StorageClass) by path.
	if framework.TestContext.RepoRoot != "" {
		testfiles.AddFileSource(testfiles.RootFileSource{Root: framework.TestContext.RepoRoot})
	}
	os.Exit(m.Run())
}

func TestStorageE2E(t *testing.T) {
	e2e.RunE2ETests(t)
}
