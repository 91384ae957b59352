# csi-pv-controller — the two commands a newcomer needs are `make demo` and `make test`.
#
# Real peers (etcd, kube-apiserver, kube-controller-manager, csi-sanity, hostpathplugin, the
# snapshot stack, csi-provisioner and csi-resizer) are built from the Go modules pinned in peers/
# (hostpathplugin from its source archive, see peers/hostpath/source) into a cache outside the
# clone, keyed by version: the first `make peers` takes minutes, later ones are no-ops.

SHELL := /bin/bash
PEERS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/csi-pv-controller/peers
export PEERS_CACHE
export PEERS_BIN := $(PEERS_CACHE)/bin
CARGO ?= cargo
# The tests' binary carries the crash points (src/runtime/crash_point.rs); releases never do.
TEST_FEATURES := --features failpoints

VERSION := v$(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
IMAGE := csi-pv-controller:$(VERSION)
# The image's architectures. `make test` checks amd64's alone, to stay within its time: the
# arm64 binary is a second release build of about six minutes.
ARCHES ?= amd64 arm64
export ARCHES

.PHONY: e2e-age range msrv image image-from-source image-check swap-check e2e-gate peers-gate image-scan all build peers peers-bench peers-e2e lint deny unit integration sanity test e2e bench bench-stacks bench-pods bench-journal bench-matching bench-storm demo demo-ci clean-peers fuzz fuzz-binder

all: build

build:
	$(CARGO) build --locked

peers:
	./peers/build.sh test

# The same set: kept for the scripts that name it.
peers-bench: peers

# The test set plus what Kubernetes' storage e2e suite needs: its test binary and ginkgo (the
# gate's set), and the agnhost, nginx and glibc-dns-testing images (the whole suite's).
peers-gate:
	./peers/build.sh gate

peers-e2e:
	./peers/build.sh e2e

# The oldest supported Kubernetes minor (peers/k8s-1.35): its peers in their own bin folder of the
# cache, then the integration suite and the e2e gate on them, results in tests/range/results/
# (committed). Beside .ci/run, which runs the newest.
RANGE_KUBE ?= k8s-1.35
range:
	PEERS_KUBE=$(RANGE_KUBE) ./peers/build.sh gate
	./tests/range/run.sh $(RANGE_KUBE)

lint: deny
	$(CARGO) fmt --all --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings

# The minimum Rust version Cargo.toml pins (rust-version), checked by building the product with
# that compiler (rustup's minimal profile, from static.rust-lang.org). Beside `make test`: a
# second compile of every crate, about six minutes.
MSRV := $(shell sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
msrv:
	rustup toolchain list | grep -q "^$(MSRV)" || rustup toolchain install $(MSRV) --profile minimal
	CARGO_TARGET_DIR=target/msrv cargo +$(MSRV) check --locked -p csi-pv-controller --all-targets --features failpoints
	@echo "msrv: csi-pv-controller builds with Rust $(MSRV)"

# cargo-deny (deny.toml): licences, crate sources, wildcard versions; the RustSec advisories too
# when their database can be fetched from GitHub, and a line saying so when it cannot.
DENY_VERSION := 0.20.2
deny:
	command -v cargo-deny >/dev/null || $(CARGO) install --locked cargo-deny --version $(DENY_VERSION)
	cargo deny --log-level error check licenses bans sources
	if timeout 20 git ls-remote https://github.com/rustsec/advisory-db HEAD >/dev/null 2>&1; then \
		cargo deny --log-level error check advisories; \
	else \
		echo "deny: advisories NOT checked: the RustSec database (github.com/rustsec/advisory-db) cannot be fetched from this machine"; \
	fi

# The benchmark's tests link the library with the tests' features, so that the integration
# tests reuse that build instead of compiling the library once more.
unit:
	$(CARGO) test --locked $(TEST_FEATURES) --lib --bins
	$(CARGO) test --locked -p csi-pv-bench --features csi-pv-controller/failpoints

# csi-sanity against our fake driver (Identity + Controller specs) and against hostpathplugin
# (Node specs too); prints the counts.
sanity: peers
	$(CARGO) test --locked $(TEST_FEATURES) --test sanity -- --nocapture

# Everything else against the real kube-apiserver: with the fake driver on the shared plane
# (no kube-controller-manager, the sidecar binds), then hostpathplugin beside
# kube-controller-manager's storage controllers, one fresh plane per test, one at a time; then
# the shipped mode's fault, flag and crash-point suites, two at a time. A failing binary does not
# stop the others: every failure is reported.
integration: peers
	failed=0; \
	$(CARGO) test --locked --no-fail-fast $(TEST_FEATURES) --test csi_client --test control_plane --test sidecar --test provisioning --test crash_safety --test binding --test bind_all --test at_rest --test expansion --test leader_election --test leader_fencing --test api_faults --test apiserver_restart --test watch_expiry --test secrets --test uninstall --test end_intent --test deploy --test metrics --test data_safety --test binder_rows --test upstream_flags || failed=1; \
	BINDER_DIFF_SEED=$${BINDER_DIFF_SEED:-1} $(CARGO) test --locked --no-fail-fast $(TEST_FEATURES) --test beside_kcm --test migration --test migration_side_by_side --test hostpath_e2e --test pod_on_node --test data_sources --test attributes_class --test capacity --test provisioning_differential --test binder_differential --test writes_pinned -- --test-threads=1 --nocapture || failed=1; \
	$(CARGO) test --locked --no-fail-fast $(TEST_FEATURES) --test faults_default_mode --test flags_default_mode --test flag_effects --test merged_args --test crash_points --test uninstall_default_mode --test cut_over --test inventory --test waiting --test hostile_input --test hostile_driver --test metrics_golden --test claim_metadata --test reads_per_claim --test backend_limits --test foreign_conditions -- --test-threads=2 || failed=1; \
	exit $$failed

# Kubernetes' storage e2e suite ("External Storage") on one real node, against csi-driver-host-path's
# plugin pod as users deploy it: from its own manifest (upstream's stack) and through deploy/swap/
# with our image (intents on finalizers, and in deploy/'s journal), each with csi-driver-host-path's
# driver definition and ours; E2E_ARGS narrows it (`storage-e2e --help`). Results, with the commit
# and the image's digest, in tests/e2e/results/<date>-e2e/.
E2E_RUN = $(CURDIR)/target/debug/storage-e2e --image $(CURDIR)/target/csi-pv-controller-image.tar --out $(CURDIR)/tests/e2e/results
e2e: peers-e2e target/csi-pv-controller-image.tar
	$(CARGO) build --locked -p csi-pv-bench --bin storage-e2e
	$(E2E_RUN) $(E2E_ARGS)

# How many commits touching src/ the newest committed full `make e2e` is behind HEAD.
e2e-age:
	@tests/e2e/age.sh

# The gate `.ci/run` runs on every commit: every spec that exercises our code (provisioning with
# its data sources, volume-expand, volume-modify, capacity, topology) against deploy/swap/ with our
# driver definition. It fails on a failed spec, a ginkgo run that does not succeed, a missing or
# unreadable report, or fewer passed specs than tests/e2e/gate-floor. Results in
# target/e2e-gate/ (not committed).
E2E_GATE_FOCUS := provisioning|volume-expand|volume-modify|capacity|topology
# The library as `make test` built it for the benchmark's tests, so that it is not compiled again.
GATE_FEATURES := --features csi-pv-controller/failpoints
e2e-gate: peers-gate target/csi-pv-controller-image.tar
	$(CARGO) build --locked $(GATE_FEATURES) -p csi-pv-bench --bin storage-e2e
	rm -rf target/e2e-gate
	$(CURDIR)/target/debug/storage-e2e --image $(CURDIR)/target/csi-pv-controller-image.tar --out $(CURDIR)/target \
	  --name e2e-gate --stacks ours --driver-files ours --runs parallel,features \
	  --focus '$(E2E_GATE_FOCUS)' --floor $$(grep -v '^#' tests/e2e/gate-floor)

# Every fuzz target of src/fuzz/ under libFuzzer (cargo-fuzz, nightly Rust), all at once, each
# for FUZZ_SECONDS (30 minutes): the corpus in fuzz/corpus/ grows, is minimized, and is committed
# by hand; a finding is a file in fuzz/artifacts/<target>/ and fails the run. `make test` runs
# the same targets over the committed corpus and seconds of random input (src/fuzz/tests.rs).
FUZZ_SECONDS ?= 1800
CARGO_FUZZ_VERSION := 0.13.2
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install --locked cargo-fuzz --version $(CARGO_FUZZ_VERSION)
	mkdir -p target/fuzz-logs
	cd fuzz && targets=$$(cargo +nightly fuzz list) && cargo +nightly fuzz build && \
	for t in $$targets; do \
	  cargo +nightly fuzz run $$t corpus/$$t -- -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 -print_final_stats=1 \
	    > ../target/fuzz-logs/$$t.log 2>&1 & \
	done; wait; status=0; \
	for t in $$targets; do \
	  echo "$$t: $$(grep -h 'stat::number_of_executed_units' ../target/fuzz-logs/$$t.log | tail -1 | tr -s ' ') executions"; \
	  cargo +nightly fuzz cmin $$t corpus/$$t >/dev/null 2>&1 || status=1; \
	  if ls artifacts/$$t/* >/dev/null 2>&1; then echo "$$t: FINDINGS in fuzz/artifacts/$$t/"; status=1; fi; \
	done; exit $$status

# The binder against kube-controller-manager's on 500 generated states from a new seed each run
# (BINDER_DIFF_SEED replays one); `make test` runs 40 of them, seed 1, and the hand-written ones.
fuzz-binder: peers
	BINDER_DIFF_STATES=$${BINDER_DIFF_STATES:-500} $(CARGO) test --locked --test binder_differential -- --nocapture

# The image's static release build (the longest single step) runs at the lowest CPU priority
# beside the suites, on the cores they leave idle while they wait on their peers; it cannot
# slow them, and its log follows theirs.
test: peers lint unit
	nice -n 19 ./deploy/build-static.sh amd64 > target/build-static.log 2>&1 & build=$$!; \
	status=0; $(MAKE) sanity integration demo-ci || status=$$?; \
	wait $$build || { echo "the image's static build failed"; status=1; }; \
	cat target/build-static.log; \
	[ $$status = 0 ] || exit $$status; \
	$(MAKE) image-check ARCHES=amd64 && $(MAKE) swap-check

# What users apply, as they apply it: deploy/swap/ with `kubectl apply -k` on csi-driver-host-path's
# plugin manifest, our image (`make image`) in its pod on a real node, wrong manifests, and
# rollouts during a 200-claim burst and its deletion in both intent modes (docs/testing.md,
# "The driver's pod").
swap-check: peers target/csi-pv-controller-image.tar
	$(CARGO) test --locked --no-fail-fast $(TEST_FEATURES) --test swap_on_node --test rollout_on_node -- --test-threads=1

# The demo's whole narrated lifecycle, non-interactively; fails if any step does not happen.
# Built with the tests' features, so that the library is not compiled a second time.
demo-ci: peers
	$(CARGO) build --locked $(TEST_FEATURES) --bin csi-pv-controller --example demo
	DEMO_EXIT=1 SIDECAR_BIN=$(CURDIR)/target/debug/csi-pv-controller $(CURDIR)/target/debug/examples/demo

# Numbers, not pass/fail. `bench-stacks` runs csi-pv-controller and the upstream stack side by
# side (BENCH_ARGS, e.g. `--runs 1 --scenarios burst`, narrows it; see `bench-stacks --help`) and
# writes bench/results/; `bench-pods` starts pods on new volumes on a real node with each stack
# (it needs csi-attacher, so the e2e set of peers; PODS_ARGS narrows it, see `bench-pods --help`);
# `bench-journal` is the intent journal's CPU per claim, alone in a process, in a row named
# JOURNAL_LABEL (the commit by default) beside the rows of earlier builds; `bench-matching` is
# the binder's index against a full scan.
bench: bench-stacks bench-pods bench-journal bench-matching bench-storm

JOURNAL_LABEL ?= $(shell git rev-parse --short HEAD)
bench-journal:
	$(CARGO) build --locked --release -p csi-pv-bench --bin bench-journal
	$(CURDIR)/target/release/bench-journal --label $(JOURNAL_LABEL) --out $(CURDIR)/bench/results $(JOURNAL_ARGS)

bench-pods: peers-e2e
	$(CARGO) build --locked --release --bin csi-pv-controller -p csi-pv-controller
	$(CARGO) build --locked --release -p csi-pv-bench --bin bench-pods
	$(CURDIR)/target/release/bench-pods --sidecar $(CURDIR)/target/release/csi-pv-controller --out $(CURDIR)/bench/results $(PODS_ARGS)

bench-stacks: peers
	$(CARGO) build --locked --release --bin csi-pv-controller -p csi-pv-controller
	$(CARGO) build --locked --release -p csi-pv-bench
	$(CURDIR)/target/release/bench-stacks --sidecar $(CURDIR)/target/release/csi-pv-controller --out $(CURDIR)/bench/results $(BENCH_ARGS)

# A burst against a backend with limits (the test relay in front of hostpathplugin), ours beside
# kube-controller-manager and csi-provisioner + csi-resizer at default and hand-tuned workers;
# STORM_ARGS narrows it (`bench-storm --help`).
bench-storm: peers
	$(CARGO) build --locked --release
	$(CARGO) build --locked --release -p csi-pv-bench --bin bench-storm
	$(CURDIR)/target/release/bench-storm --sidecar $(CURDIR)/target/release/csi-pv-controller --out $(CURDIR)/bench/results $(STORM_ARGS)

bench-matching:
	$(CARGO) bench --locked --bench matching

# The demo builds only the peers it runs (etcd, kube-apiserver, kube-controller-manager,
# hostpathplugin), not the whole test set.
demo:
	./peers/build.sh demo
	$(CARGO) build --locked --bin csi-pv-controller --example demo
	SIDECAR_BIN=$(CURDIR)/target/debug/csi-pv-controller $(CURDIR)/target/debug/examples/demo

# The image for $(ARCHES), built without a daemon or a registry: the Dockerfile's last stage,
# given the root staged here (static musl binaries compiled on this machine) in place of its
# compile stage; one image per architecture under one manifest list, saved as an OCI archive.
# `image-from-source` runs the whole Dockerfile, compile stage included.
image:
	./deploy/build-static.sh $(ARCHES)
	command -v buildah >/dev/null || { apt-get update -qq && apt-get install -y -qq buildah; }
	-buildah --storage-driver vfs manifest rm $(IMAGE) >/dev/null 2>&1
	-buildah --storage-driver vfs rmi -f $(IMAGE) >/dev/null 2>&1
	buildah --storage-driver vfs manifest create $(IMAGE)
	for arch in $(ARCHES); do \
	  ./deploy/image-root.sh $$arch && \
	  buildah --storage-driver vfs bud --isolation chroot --platform linux/$$arch --build-arg VERSION=$(VERSION) \
	    --build-context root=target/image-root/$$arch -t $(IMAGE)-$$arch . && \
	  buildah --storage-driver vfs manifest add $(IMAGE) $(IMAGE)-$$arch || exit 1; \
	done
	rm -f target/csi-pv-controller-image.tar
	buildah --storage-driver vfs manifest push --all $(IMAGE) oci-archive:target/csi-pv-controller-image.tar:$(IMAGE)
	@echo "$(IMAGE) ($(ARCHES)): $$(du -h target/csi-pv-controller-image.tar | cut -f1) as an OCI archive"

# The image archive the node's tests import: built again when a file it is made from is newer,
# so that swap-check and e2e-gate never test a stale image.
IMAGE_SOURCES := $(shell git ls-files src proto build.rs Cargo.toml Cargo.lock Dockerfile deploy/build-static.sh deploy/image-root.sh 2>/dev/null)
target/csi-pv-controller-image.tar: $(IMAGE_SOURCES)
	$(MAKE) image ARCHES=amd64

# The whole Dockerfile from this checkout, its compile stage included, for amd64, then the same
# checks as image-check's first part. RUST_IMAGE is the Rust build image: the official one by
# default; where no registry is reachable, `./deploy/rust-image.sh 1.95` makes a local stand-in
# (RUST_IMAGE=localhost/rust:1.95-bookworm).
RUST_IMAGE ?= docker.io/library/rust:1.95-bookworm
image-from-source:
	command -v buildah >/dev/null && command -v jq >/dev/null || { apt-get update -qq && apt-get install -y -qq buildah jq; }
	-buildah --storage-driver vfs rmi -f $(IMAGE)-source >/dev/null 2>&1
	buildah --storage-driver vfs bud --isolation chroot --platform linux/amd64 --build-arg RUST_IMAGE=$(RUST_IMAGE) \
	  --build-arg VERSION=$(VERSION) --build-arg SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct) -t $(IMAGE)-source .
	rm -f target/csi-pv-controller-source.tar
	buildah --storage-driver vfs push $(IMAGE)-source oci-archive:target/csi-pv-controller-source.tar:$(IMAGE)
	ARCHES=amd64 ./deploy/image-check.sh $(IMAGE) target/csi-pv-controller-source.tar

# Both images' configs and SBOMs, then the amd64 image run as a container by runc (an OCI
# runtime) through the demo's whole lifecycle beside kube-controller-manager and hostpathplugin.
image-check: image peers
	command -v jq >/dev/null && command -v runc >/dev/null || { apt-get update -qq && apt-get install -y -qq jq runc; }
	./deploy/image-check.sh $(IMAGE) target/csi-pv-controller-image.tar
	$(CARGO) build --locked $(TEST_FEATURES) --example demo
	status=0; DEMO_EXIT=1 SIDECAR_BIN=$(CURDIR)/deploy/runc-sidecar.sh $(CURDIR)/target/debug/examples/demo || status=$$?; \
	runc list -q | grep '^csi-pv-controller-run-' | xargs -r -n1 runc delete -f; \
	rm -rf target/runc-bundles; exit $$status

# The image read by a real scanner (syft, built from the Go module proxy: five minutes the first
# time, so not part of `make test`, whose image-check checks the crate list and SBOM are there).
image-scan: image
	command -v jq >/dev/null || { apt-get update -qq && apt-get install -y -qq jq; }
	mkdir -p $(PEERS_BIN)
	./deploy/image-scan.sh target/csi-pv-controller-image.tar $(PEERS_BIN)

clean-peers:
	rm -rf "$(PEERS_CACHE)"
