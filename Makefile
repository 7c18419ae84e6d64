.PHONY: cluster-tools

# Builds kube-apiserver, kube-controller-manager and etcd for the cluster tests (cached).
cluster-tools:
	scripts/build-cluster-tools.sh

.PHONY: e2e-kind

# The kind end-to-end suite (needs a Docker engine): pinned kind/helm/kubectl (cached), both
# images, the chart, PostgreSQL, two driver pod deletions mid-stream, the exactly-once audit.
# Flags go through E2E_KIND_ARGS, e.g. `make e2e-kind E2E_KIND_ARGS=--keep`.
e2e-kind:
	tests/e2e/kind/install-tools.sh
	tests/e2e/kind/run.sh $(E2E_KIND_ARGS)
