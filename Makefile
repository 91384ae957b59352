# csi-pv-controller — the two commands a newcomer needs are `make demo` and `make test`.
#
# Real peers (etcd, kube-apiserver, csi-sanity) are built from the Go modules pinned in peers/
# into a cache outside the clone, keyed by version: the first `make peers` takes minutes, later
# ones are no-ops.

SHELL := /bin/bash
PEERS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/csi-pv-controller/peers
export PEERS_CACHE
export PEERS_BIN := $(PEERS_CACHE)/bin
CARGO ?= cargo

.PHONY: all build peers peers-bench peers-hostpath lint unit integration sanity test bench demo demo-ci clean-peers

all: build

build:
	$(CARGO) build --locked

peers:
	./peers/build.sh test

peers-bench:
	./peers/build.sh bench

# Blocked on these machines (the Go module proxy refuses csi-driver-host-path); see README.
peers-hostpath:
	./peers/build.sh hostpath

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

unit:
	$(CARGO) test --locked --lib --bins

# csi-sanity (Identity + Controller specs) against our fake driver; prints the counts.
sanity: peers
	$(CARGO) test --locked --test sanity -- --nocapture

# Everything else against the real kube-apiserver and the fake driver.
integration: peers
	$(CARGO) test --locked --test csi_client --test control_plane --test sidecar --test provisioning --test crash_safety --test binding --test bind_all --test expansion --test leader_election

test: peers lint unit sanity integration demo-ci

# The demo's whole narrated lifecycle, non-interactively; fails if any step does not happen.
demo-ci: peers
	$(CARGO) build --locked --bin csi-pv-controller --example demo
	DEMO_EXIT=1 SIDECAR_BIN=$(CURDIR)/target/debug/csi-pv-controller $(CURDIR)/target/debug/examples/demo

# Numbers, not pass/fail: binder matching, 10,000 PVs x 1,000 claims, index vs full scan.
bench:
	$(CARGO) bench --locked --bench matching

demo: peers
	$(CARGO) build --locked --bin csi-pv-controller --example demo
	SIDECAR_BIN=$(CURDIR)/target/debug/csi-pv-controller $(CURDIR)/target/debug/examples/demo

clean-peers:
	rm -rf "$(PEERS_CACHE)"
