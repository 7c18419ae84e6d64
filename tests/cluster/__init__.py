"""Test support: a real Kubernetes control plane and a process kubelet, without Docker.

``controlplane`` runs etcd, kube-apiserver and kube-controller-manager as plain processes
(built by ``scripts/build-cluster-tools.sh``); ``kubelet`` binds pods to a fake node and runs
their first container as a local process; ``plugin`` exposes both as pytest fixtures.
"""
