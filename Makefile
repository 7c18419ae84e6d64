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

.PHONY: images

# Both images of the Dockerfile without a Docker engine: buildah (chroot isolation) on a local
# Debian base built once by debootstrap (cached), tagged localhost/eo-{operator,job}:local.
# Needs root (it apt-installs buildah and debootstrap when missing). Sizes are printed.
images:
	scripts/build-images.sh
